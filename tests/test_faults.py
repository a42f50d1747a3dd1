"""Bad input and faults in every script: one-line errors (exit 2) instead of tracebacks, a run folder of its own for
every run, saves that never leave a half-written file, the arguments of each run on record."""

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

from helpers import (
    ENVPOOL_SCRIPTS,
    NEEDS,
    REPO,
    SCRIPTS,
    assert_ok,
    assert_usage_error,
    load_script,
    need,
    read_every_metric,
    read_scalars,
    run_dirs,
    run_main,
    run_patched,
    run_script,
    test_env,
)

# 4 iterations of 64 steps
TINY = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256"]


def cartpole_checkpoint(path, **changes):
    """A checkpoint as ppo.py saves it (a fresh CartPole-v1 agent), with some entries changed (None: removed)."""
    ppo = load_script("ppo.py")
    envs = SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1, 1, (4,)), single_action_space=gym.spaces.Discrete(2)
    )
    checkpoint = {
        "script": "ppo.py",
        "args": vars(ppo.Args()),
        "model": ppo.Agent(envs).state_dict(),
        "optimizer": {},
        "global_step": 0,
    }
    checkpoint.update(changes)
    torch.save({key: value for key, value in checkpoint.items() if value is not None}, path)
    return path


def assert_no_run(cwd):
    """A refused run left nothing behind: no runs/, no videos/."""
    assert not (cwd / "runs").exists() and not (cwd / "videos").exists(), list(cwd.iterdir())


@pytest.fixture
def one_second(monkeypatch):
    """A clock that stays in the second 1700000000 for 1000 s of real time; it still moves by more than a float's
    resolution at 1.7e9 (about 2e-7 s) over an iteration, so the speeds the script divides by time stay finite."""
    real, start = time.time, time.time()
    monkeypatch.setattr(time, "time", lambda: 1700000000.0 + (real() - start) * 1e-3)


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, one_second):
    for _ in range(2):
        assert_ok(run_main("ppo.py", *TINY, "--save-model", cwd=tmp_path))
    first, second = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert first == "CartPole-v1__ppo__1__1700000000" and second == first + "-2"
    # each folder holds one whole run: its own steps once, its own model
    for run_dir in run_dirs(tmp_path):
        assert [step for step, _ in read_every_metric(run_dir)["charts/learning_rate"]] == [64, 128, 192, 256]
        assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
        torch.load(run_dir / "ppo.pt", weights_only=True)


def test_evaluations_that_record_get_video_folders_of_their_own(tmp_path, one_second):
    """Two --eval-checkpoint --capture-video runs in the same second record into videos/{run_name}/eval and
    videos/{run_name}-2/eval, and make no run folder; one refused after its envs were made leaves no video folder."""
    model = cartpole_checkpoint(tmp_path / "model.pt")
    for _ in range(2):
        assert_ok(run_main("ppo.py", "--eval-checkpoint", model, "--eval-episodes", 1, "--capture-video", cwd=tmp_path))
    first, second = sorted((tmp_path / "videos").iterdir())
    assert first.name == "CartPole-v1__ppo__1__1700000000" and second.name == first.name + "-2"
    for folder in first, second:
        assert [p.name for p in folder.iterdir()] == ["eval"]
        assert (folder / "eval" / "rl-video-episode-0.mp4").stat().st_size > 0
    assert not (tmp_path / "runs").exists()
    bad = cartpole_checkpoint(tmp_path / "bad.pt", model={"critic.0.weight": torch.zeros(3, 3)})
    assert_usage_error(run_main("ppo.py", "--eval-checkpoint", bad, "--capture-video", cwd=tmp_path), "does not fit")
    assert sorted((tmp_path / "videos").iterdir()) == [first, second]


@pytest.mark.parametrize("script", SCRIPTS)
def test_eval_checkpoint_plays_on_the_env_of_the_checkpoint(tmp_path, script):
    """--eval-checkpoint of a model trained on Other-v1: left out, --env-id is the checkpoint's (which then fails as an
    env this script cannot make, naming Other-v1); given with another value, it is refused; neither leaves a folder."""
    if script in NEEDS:
        need(NEEDS[script])
    torch.save({"script": script, "args": {"env_id": "Other-v1"}, "model": {}}, tmp_path / "other.pt")
    assert_usage_error(run_main(script, "--eval-checkpoint", "other.pt", cwd=tmp_path), "Other-v1")
    assert_usage_error(
        run_main(script, "--eval-checkpoint", "other.pt", "--env-id", "Another-v2", cwd=tmp_path),
        "--env-id Another-v2",
        "trained with Other-v1",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.pt"]


def test_args_json_records_the_resolved_arguments(tmp_path):
    proc = run_main("ppo.py", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "300", cwd=tmp_path)
    assert_ok(proc)
    # whole batches only; nothing else to read
    assert proc.stderr == "" and "step       256/256 |" in proc.stdout
    (run_dir,) = run_dirs(tmp_path)
    recorded = json.loads((run_dir / "args.json").read_text())
    expected = vars(load_script("ppo.py").Args(num_envs=2, num_steps=32, total_timesteps=300))
    versions = recorded.pop("versions")
    assert recorded == {"script": "ppo.py", **expected}
    assert max(step for step, _ in read_scalars(run_dir)["charts/learning_rate"]) == 256
    # the libraries it ran with, as the modules here say (those installed): the python, torch and gymnasium at least
    expected = {"python": sys.version.split()[0], "torch": torch.__version__, "gymnasium": gym.__version__}
    for package, module in (("envpool", "envpool"), ("ale-py", "ale_py"), ("mujoco", "mujoco")):
        with contextlib.suppress(ImportError):
            expected[package] = importlib.import_module(module).__version__
    assert versions == expected
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = EventAccumulator(str(run_dir))
    logs.Reload()
    text = logs.Tensors("hyperparameters/text_summary")[0].tensor_proto.string_val[0].decode()
    assert f"|versions|{expected}|" in text.splitlines()


def test_a_slash_in_the_env_id_makes_one_folder_level(tmp_path):
    if "toy/Cart-v0" not in gym.registry:  # a namespaced id, as envpool's Jumanji/JobShop-v0
        gym.register("toy/Cart-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    assert_ok(run_main("ppo.py", *TINY, "--env-id", "toy/Cart-v0", cwd=tmp_path))
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("toy_Cart-v0__ppo__1__") and (run_dir / "args.json").is_file()


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_file_named_runs_is_one_line_before_training(tmp_path, script):
    if script in NEEDS:
        need(NEEDS[script])
    (tmp_path / "runs").write_text("not a folder")
    proc = run_main(script, "--total-timesteps", "100000", cwd=tmp_path)
    # ppo_atari_multigpu.py without torchrun says first that one process trains: a note, not an error
    proc.stderr = "\n".join(line for line in proc.stderr.splitlines() if ": note: not started by torchrun" not in line)
    assert_usage_error(proc, "cannot make the folder runs/")
    assert (tmp_path / "runs").read_text() == "not a folder"


def test_a_file_named_videos_is_one_line_and_leaves_no_run_folder(tmp_path):
    (tmp_path / "videos").write_text("not a folder")
    assert_usage_error(run_main("ppo.py", *TINY, "--capture-video", cwd=tmp_path), "cannot make the folder videos")
    assert not (tmp_path / "runs").exists()


def test_capture_video_without_pygame_is_refused_before_training(tmp_path, monkeypatch):
    # pygame missing: its import raises ImportError
    monkeypatch.setitem(sys.modules, "pygame", None)
    assert_usage_error(run_main("ppo.py", *TINY, "--capture-video", cwd=tmp_path), "pygame")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "videos").exists()


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--seed", "-1"], ["--seed", "-1"]),
        (["--target-kl", "-0.01"], ["--target-kl must be positive"]),
        (["--ent-coef", "-0.1"], ["--ent-coef must be >= 0"]),
        # NaN and inf: NaN passes every comparison, so these trained until a traceback (or forever)
        *[
            ([flag, value], [f"{flag} must be", value])
            for flag in ("--learning-rate", "--ent-coef", "--vf-coef", "--max-grad-norm", "--clip-coef", "--target-kl")
            for value in ("nan", "inf")
        ],
    ],
)
def test_bad_arguments_are_one_line(tmp_path, args, fragments):
    assert_usage_error(run_main("ppo.py", *args, cwd=tmp_path), *fragments)
    assert_no_run(tmp_path)


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--total-timesteps", "abc"], ["Error parsing --total-timesteps: invalid literal for int()", "'abc'"]),
        (["--total-timestep", "5"], ["Unrecognized options: --total-timestep, 5"]),
        (["--num-envs"], ["Missing value for argument '--num-envs'"]),
        (["--target-return", "high"], ["Error parsing --target-return", "'high'"]),
    ],
)
def test_values_tyro_cannot_parse_get_tyros_message(tmp_path, args, fragments):
    """What tyro rejects (a value of the wrong type, an unknown flag, a missing value): tyro's own message, which
    names the flag and shows its help, exit code 2, no traceback, nothing made."""
    proc = run_script("ppo.py", *args, cwd=tmp_path, env=test_env(COLUMNS="200"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)
    assert_no_run(tmp_path)
    assert run_script("ppo.py", "--help", cwd=tmp_path).stdout.startswith("usage: ")


def test_a_finished_run_says_where_its_logs_are(tmp_path):
    proc = run_main("ppo.py", *TINY, cwd=tmp_path)
    assert_ok(proc)
    (run_dir,) = run_dirs(tmp_path)
    assert proc.stdout.splitlines()[-1] == f"logs in runs/{run_dir.name}: tensorboard --logdir runs"


def test_a_missing_mujoco_names_the_projects_extra(tmp_path):
    # MuJoCo missing: its import raises ImportError
    patch = "import sys\nsys.modules['mujoco'] = None"
    # the default env, HalfCheetah-v5
    proc = run_patched("ppo_continuous_action.py", patch, cwd=tmp_path)
    assert_usage_error(proc, "'HalfCheetah-v5'", "MuJoCo is not installed", 'pip install -e ".[mujoco]"')
    # a -v5 id, but not an Atari one
    assert "gymnasium[mujoco]" not in proc.stderr and "Atari" not in proc.stderr
    assert_no_run(tmp_path)


# in a process of its own: once a test has imported ale_py in this one, gymnasium knows the Atari ids
@pytest.mark.parametrize(
    "script,env_id,fragments",
    [
        ("ppo.py", "BreakoutNoFrameskip-v4", ["ppo_atari.py", "ppo_atari_envpool.py"]),
        ("ppo_continuous_action.py", "ALE/Pong-v5", ["ppo_atari.py"]),
        # a missing dependency
        ("ppo_continuous_action.py", "HalfCheetah-v3", ["HalfCheetah-v3", "gymnasium-robotics"]),
    ],
)
def test_env_errors_are_one_line(tmp_path, script, env_id, fragments):
    assert_usage_error(run_script(script, "--env-id", env_id, cwd=tmp_path), *fragments)
    assert_no_run(tmp_path)  # the reserved run folder is removed again


@pytest.mark.parametrize(
    "kind,fragments",
    [
        ("empty", ["not a readable checkpoint"]),
        ("truncated", ["not a readable checkpoint"]),
        ("text", ["not a readable checkpoint"]),
        ("bare state dict", ["not a checkpoint saved by --save-model"]),
        ("no args", ["not a checkpoint saved by --save-model"]),
        ("other layer sizes", ["does not fit"]),
        ("other script", ["this checkpoint was written by ppo_atari_lstm.py"]),
        ("other env", ["--env-id Acrobot-v1", "trained with CartPole-v1"]),
    ],
)
def test_eval_checkpoint_that_does_not_fit_is_one_line(tmp_path, kind, fragments):
    path, args = tmp_path / "model.pt", []
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        cartpole_checkpoint(path)
        path.write_bytes(path.read_bytes()[:3000])
    elif kind == "text":
        path.write_text("hello\n")
    elif kind == "bare state dict":
        torch.save(torch.load(cartpole_checkpoint(path), weights_only=True)["model"], path)
    elif kind == "no args":
        cartpole_checkpoint(path, args=None)
    elif kind == "other layer sizes":
        ppo = load_script("ppo.py")
        envs = SimpleNamespace(
            single_observation_space=gym.spaces.Box(-1, 1, (6,)), single_action_space=gym.spaces.Discrete(3)
        )
        cartpole_checkpoint(path, model=ppo.Agent(envs).state_dict())
    elif kind == "other script":
        cartpole_checkpoint(path, script="ppo_atari_lstm.py")
    elif kind == "other env":
        cartpole_checkpoint(path)
        args = ["--env-id", "Acrobot-v1"]
    before = sorted(os.listdir(tmp_path))
    assert_usage_error(run_main("ppo.py", "--eval-checkpoint", path, *args, cwd=tmp_path), *fragments)
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


@pytest.mark.parametrize(
    "script,writer",
    [("ppo_multidiscrete.py", "ppo_multidiscrete_mask.py"), ("ppo_multidiscrete_mask.py", "ppo_multidiscrete.py")],
)
def test_masked_and_unmasked_checkpoints_are_not_mixed(tmp_path, script, writer):
    torch.save({"script": writer, "args": {"env_id": "MicroRTS"}, "model": {}}, tmp_path / "model.pt")
    assert_usage_error(
        run_main(script, "--eval-checkpoint", "model.pt", cwd=tmp_path), f"this checkpoint was written by {writer}"
    )


def test_track_without_wandb_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # wandb missing: its import raises ImportError
    assert_usage_error(run_main("ppo.py", *TINY, "--track", cwd=tmp_path), "--track needs wandb", ".[wandb]")
    assert_no_run(tmp_path)


def test_ctrl_c_during_the_imports_ends_quietly_and_leaves_nothing(tmp_path):
    """SIGINT half a second in, while the interpreter still imports torch (seconds): no traceback, no folder."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "ppo.py"), *TINY],
        cwd=tmp_path,
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # killed by the signal: a shell shows 130
    assert proc.returncode == -signal.SIGINT, (proc.returncode, err)
    assert out == "" and err == ""
    assert sorted(tmp_path.iterdir()) == []


def test_evaluation_is_seeded(tmp_path):
    """The same checkpoint and --seed play the same episodes; another seed, other ones."""
    model = cartpole_checkpoint(tmp_path / "model.pt")
    returns = [
        run_main("ppo.py", "--eval-checkpoint", model, "--eval-episodes", 5, "--seed", seed, cwd=tmp_path).stdout
        for seed in (1, 1, 2)
    ]
    assert "mean return" in returns[0] and returns[0] == returns[1] != returns[2]


@pytest.mark.parametrize("script", ENVPOOL_SCRIPTS)
def test_an_envpool_release_the_script_was_not_made_for_is_named_in_one_line(tmp_path, monkeypatch, script):
    """The results were made with envpool 1.2.5 (1.2.7 changed Jumanji/JobShop): another release trains, with one
    warning line; 1.2.5 trains with none."""
    envpool = need("envpool")
    tiny = ["--num-envs", 2, "--num-steps", 16, "--num-minibatches", 1, "--update-epochs", 1, "--total-timesteps", 32]
    for version in ("1.2.7", "1.2.5"):
        monkeypatch.setattr(envpool, "__version__", version)
        proc = run_main(script, *tiny, cwd=tmp_path / version)
        assert_ok(proc)
        warnings = [line for line in proc.stderr.splitlines() if "envpool" in line]
        expected = (
            [
                f"{script}: warning: made for envpool 1.2.5, found 1.2.7, whose envs may differ: pip install "
                "envpool==1.2.5"
            ]
            if version == "1.2.7"
            else []
        )
        assert warnings == expected, proc.stderr
