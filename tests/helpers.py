"""What every script's tests share: load a script by path, run it in a subprocess, read its TensorBoard logs."""

import contextlib
import importlib.util
import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

# The metrics every script logs (DEVELOPERS.md: "Same metrics everywhere").
METRICS = [
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/old_approx_kl",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
]


SCRIPTS = [
    "ppo.py",
    "ppo_atari.py",
    "ppo_continuous_action.py",
    "ppo_atari_lstm.py",
    "ppo_multidiscrete.py",
    "ppo_multidiscrete_mask.py",
    "ppo_atari_envpool.py",
    "ppo_procgen.py",
    "ppo_atari_multigpu.py",
]
NEEDS = {
    "ppo_atari.py": "ale_py",
    "ppo_atari_lstm.py": "ale_py",
    "ppo_atari_multigpu.py": "ale_py",
    "ppo_atari_envpool.py": "envpool",
    "ppo_procgen.py": "envpool",
    "ppo_multidiscrete.py": "envpool",
    # what a script checks before it makes its run folder
    "ppo_multidiscrete_mask.py": "envpool",
}
ENVPOOL_SCRIPTS = [script for script, module in NEEDS.items() if module == "envpool"]


def missing(reason):
    """A test cannot run here for want of `reason` (an extra, a system library): skip it on a user's machine, but
    fail it in CI (the variable CI set), where .ci/run installs everything and a skip would hide a broken install."""
    if os.environ.get("CI"):
        pytest.fail(f"CI has everything installed, yet {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def need(module):
    """Import an optional dependency of a test (ale_py, cv2, envpool, ...), or `missing` it with the import error."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing(f"{module} cannot be imported: {e}")


def need_procgen():
    """envpool with its procgen games, which need the Qt 5 runtime on Linux (apt install libqt5gui5)."""
    envpool = need("envpool")
    try:
        envpool.make_spec("StarpilotEasy-v0")
    except ImportError as e:
        missing(f"envpool's procgen cannot load (on Linux: apt install libqt5gui5): {e}")
    return envpool


def load_script(name):
    """Import a top-level script (e.g. "ppo.py") as a module, by its file path; nothing runs but definitions."""
    path = REPO / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_env(**extra):
    """The environment for a script in a subprocess: no network for wandb, no display, few threads."""
    env = dict(os.environ, WANDB_MODE="offline", SDL_VIDEODRIVER="dummy", MUJOCO_GL="egl", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


test_env.__test__ = False  # a helper, not a test, even where a test module imports it by name


def run_script(name, *args, cwd, alone=False, timeout=600, env=None):
    """Run `python <name> <args>` with cwd as working directory; returns the CompletedProcess (text output).

    alone=True first copies the script by itself into cwd and runs that copy: proof that it imports no repo file.
    """
    cwd = Path(cwd)
    cwd.mkdir(parents=True, exist_ok=True)
    script = REPO / name
    if alone:
        script = Path(shutil.copy(script, cwd / name))
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        cwd=cwd,
        env=env or test_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# `torchrun --standalone --nproc_per_node=2` as a user types it (python -m: the same launcher)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def torchrun(*args, cwd, env=None, timeout=300):
    """A torchrun launch of two processes, run to its end."""
    command = [*TORCHRUN, *map(str, args)]
    return subprocess.run(command, cwd=cwd, env=env or test_env(), capture_output=True, text=True, timeout=timeout)


def run_main(name, *args, cwd, module=None):
    """Like run_script, in this process: the script's main(tyro.cli(Args)) with cwd as working directory. Far cheaper
    (no interpreter start, no imports) for runs that stop before training; returns returncode, stdout and stderr.
    module: the script already loaded (load_script), e.g. with parts replaced by a test."""
    import tyro

    module, out, err, here = module or load_script(name), io.StringIO(), io.StringIO(), os.getcwd()
    # main may install its own
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    returncode = 0
    Path(cwd).mkdir(parents=True, exist_ok=True)
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            module.main(tyro.cli(module.Args, args=[str(a) for a in args]))
    except SystemExit as e:
        returncode = e.code
    finally:
        os.chdir(here)
        for s, handler in handlers.items():
            signal.signal(s, handler)
    return SimpleNamespace(returncode=returncode, stdout=out.getvalue(), stderr=err.getvalue())


def run_patched(name, patch, *args, cwd, timeout=300):
    """Run the script's main(tyro.cli(Args)) in a subprocess after `patch`, Python source run with the script loaded as
    `module` (and os, signal, torch imported): for runs that a signal may end, which run_main's process must not be."""
    driver = "\n".join(
        [
            "import importlib.util, os, signal, torch",
            f"spec = importlib.util.spec_from_file_location('script', {str(REPO / name)!r})",
            "module = importlib.util.module_from_spec(spec)",
            "spec.loader.exec_module(module)",
            textwrap.dedent(patch),
            f"module.main(module.tyro.cli(module.Args, args={[str(a) for a in args]!r}))",
        ]
    )
    Path(cwd).mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", driver], cwd=cwd, env=test_env(), capture_output=True, text=True, timeout=timeout
    )


@contextlib.contextmanager
def small_disk(folder, size):
    """A tmpfs of `size` ("64k") mounted on folder for the with-block: a disk that fills up. Skips without root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs (a full disk) needs root")
    Path(folder).mkdir(parents=True, exist_ok=True)
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a tmpfs here (no CAP_SYS_ADMIN in this container?)")
    try:
        yield Path(folder)
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def run_dirs(cwd):
    """The run folders a script wrote under cwd/runs/, oldest first."""
    return sorted((Path(cwd) / "runs").iterdir(), key=lambda p: p.stat().st_mtime)


def read_scalars(run_dir):
    """All scalars of one TensorBoard run folder: {tag: [(step, value), ...]} in logged order. A run stopped and
    resumed has an event file per part: they are read in the order they were started, not by name (two parts started
    in the same second by one process are told apart by a counter that sorts as text: "10" before "9")."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    parts = []
    for path in Path(run_dir).glob("events.out.tfevents.*"):
        part = EventAccumulator(str(path), size_guidance={"scalars": 0})  # 0: keep every point
        part.Reload()
        parts.append(part)
    scalars = {}
    for part in sorted(parts, key=lambda part: part.FirstEventTimestamp()):
        for tag in part.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in part.Scalars(tag))
    return scalars


def read_every_metric(run_dir):
    """The scalars of one run folder, after checking that every metric of METRICS was logged, all finite."""
    scalars = read_scalars(run_dir)
    for tag in METRICS:
        assert tag in scalars and all(np.isfinite(v) for _, v in scalars[tag]), tag
    return scalars


def assert_orthogonal(weight, gain, name=""):
    """[C2] an orthogonal init scaled by gain: every singular value of the weight equals gain."""
    singular_values = torch.linalg.svdvals(weight.detach().double()).numpy()
    np.testing.assert_allclose(singular_values, gain, rtol=1e-5, err_msg=name)


def assert_mlp_init(agent):
    """[C2] the two 2 x 64 tanh MLPs of the vector-observation agents: orthogonal weights, gain sqrt(2) for the hidden
    layers, 0.01 for the policy's output, 1 for the value's; biases 0. Returns the layers by name."""
    expected = {"actor.0": np.sqrt(2), "actor.2": np.sqrt(2), "actor.4": 0.01}
    expected |= {"critic.0": np.sqrt(2), "critic.2": np.sqrt(2), "critic.4": 1.0}
    layers = {name: m for name, m in agent.named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(layers) == set(expected)
    for name, gain in expected.items():
        assert_orthogonal(layers[name].weight, gain, name)
        assert torch.all(layers[name].bias == 0), name
    return layers


def assert_annealed_lr(scalars, learning_rate, iterations):
    """[C4] the logged learning rate of iteration i (of n) is learning_rate * (1 - (i - 1) / n): annealed linearly to
    the 0 it would reach one iteration after the end, checked by value."""
    logged = [value for _, value in scalars["charts/learning_rate"]]
    expected = [learning_rate * (1 - (i - 1) / iterations) for i in range(1, iterations + 1)]
    np.testing.assert_allclose(logged, expected, rtol=1e-6)


def assert_breakout_games(scalars):
    """Whole games of raw Breakout score were logged: its scores are whole points, and a game of 5 lives lasts 100+
    agent steps (a life's score or length would not)."""
    returns = [value for _, value in scalars["charts/episodic_return"]]
    lengths = [value for _, value in scalars["charts/episodic_length"]]
    assert all(r >= 0 and r == int(r) for r in returns) and min(lengths) > 100, (returns, lengths)


def assert_ok(proc):
    """A subprocess run ended with exit code 0; on failure show what it printed."""
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )


def assert_usage_error(proc, *fragments):
    """A bad input was refused like argparse does: exit code 2, one line on stderr naming the problem, no traceback."""
    assert proc.returncode == 2, f"exit {proc.returncode}\nstderr:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "error:" in lines[0], proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


class SameStepReference:
    """An independent same-step view of envpool envs, to check a script's envpool wrapper against.

    One single-env pool per env (envpool seeds env i of a pool made with seed s with s + i), stepped one by one; after
    a done, that env's reset step (envpool's next-step autoreset: action ignored, reward 0) is taken at once and its
    obs replaces the last one, as baselines' same-step VecEnv returns it. make(seed) -> a raw envpool env, num_envs=1.
    """

    def __init__(self, make, seed, num_envs):
        self.envs = [make(seed + i) for i in range(num_envs)]

    def reset(self):
        return np.concatenate([env.reset()[0] for env in self.envs])

    def step(self, actions):
        """-> obs, reward, terminated, truncated (arrays over the envs) and each env's raw info of the transition."""
        out = []
        for env, action in zip(self.envs, actions):
            obs, reward, terminated, truncated, info = env.step(np.asarray([action]))
            info = {key: np.copy(value[0]) for key, value in info.items() if key != "players"}
            if terminated[0] or truncated[0]:
                obs, reset_reward, _, _, _ = env.step(np.asarray([action]))
                assert reset_reward[0] == 0  # the reset step's reward
            out.append((np.copy(obs[0]), reward[0], terminated[0], truncated[0], info))
        obs, reward, terminated, truncated, infos = zip(*out)
        return np.stack(obs), np.array(reward), np.array(terminated), np.array(truncated), infos


def wrappers(env):
    """The chain of gymnasium wrappers around a single env, outermost first."""
    import gymnasium as gym

    chain = []
    while isinstance(env, gym.Wrapper):
        chain.append(env)
        env = env.env
    return chain


def scaled_rewards_reference(rewards, dones, gamma, clip=10.0, epsilon=1e-8):
    """[M8, M9] The rewards baselines' VecNormalize gives the agent, from the definition rather than a running update.

    rewards, dones: (steps, num_envs), dones[t] marking the step that ends an episode. At step t each reward is divided
    by the std of every discounted return so far (all envs, step t's included, the mean not subtracted), pooled with
    baselines' pseudo-sample (mean 0, variance 1, weight 1e-4) that defines it before the first update; then clipped.
    """
    rewards, dones = np.asarray(rewards, np.float64), np.asarray(dones, bool)
    discounted, history, scaled = np.zeros(rewards.shape[1]), [], np.empty_like(rewards)
    for t in range(len(rewards)):
        # the return of each env's current episode, up to step t
        discounted = discounted * gamma + rewards[t]
        history.append(discounted.copy())
        x = np.concatenate(history)
        count = len(x) + 1e-4
        mean = x.sum() / count
        var = (1e-4 * (1 + mean**2) + ((x - mean) ** 2).sum()) / count
        scaled[t] = np.clip(rewards[t] / np.sqrt(var + epsilon), -clip, clip)
        discounted[dones[t]] = 0  # the next episode's return starts from 0
    return scaled
