"""Long runs: periodic checkpoints (--checkpoint-every), --resume, SIGTERM handled like Ctrl-C (exit code 143)."""

import contextlib
import copy
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
import tyro

from helpers import (
    ENVPOOL_SCRIPTS,
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
    small_disk,
    test_env,
    torchrun,
)

# 4 iterations of 64 steps
TINY = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256"]


def stop_at(module, iteration, num_steps):
    """Make the script's Agent send this process a SIGTERM at the first rollout step of `iteration`, as a scheduler
    would: training then stops after iteration - 1 whole iterations."""
    steps = []

    class StoppedAgent(module.Agent):
        def get_action(self, *args):
            steps.append(1)
            if len(steps) == (iteration - 1) * num_steps + 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().get_action(*args)

    module.Agent = StoppedAgent


def record_loaded_state(module, monkeypatch):
    """Make the script remember its model and optimizer state at the first rollout step: right after --resume loaded
    them, before any update. Returns the dict that will hold them."""
    loaded, optimizers = {}, []

    class RecordingAdam(torch.optim.Adam):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            optimizers.append(self)

    class RecordingAgent(module.Agent):
        def get_action(self, *args):
            if not loaded:
                loaded["model"] = copy.deepcopy(self.state_dict())
                loaded["optimizer"] = copy.deepcopy(optimizers[0].state_dict())
            return super().get_action(*args)

    module.Agent = RecordingAgent
    monkeypatch.setattr(torch.optim, "Adam", RecordingAdam)
    return loaded


def assert_same_tensors(a, b):
    """Two nested state dicts hold the same tensors, exactly."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_tensors(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)


def test_a_resumed_run_loads_the_saved_state_and_keeps_the_schedule_and_step_axis(tmp_path, monkeypatch):
    """ppo.py: SIGTERM in iteration 3, which ends before the run stops, then resumed for 1 more, against 4 in one go.
    Not a replay of the whole run (a resume draws new random numbers and resets the envs): what it checks is the loaded
    weights and Adam state, the learning-rate schedule by value and the global_step axis, each step logged once."""
    assert_ok(run_main("ppo.py", *TINY, cwd=tmp_path / "whole"))
    module = load_script("ppo.py")
    stop_at(module, 3, num_steps=32)
    stopped = run_main("ppo.py", *TINY, "--save-model", cwd=tmp_path / "resumed", module=module)
    assert stopped.returncode == 143 and "interrupted at step" in stopped.stderr, stopped.stderr
    (run_dir,) = run_dirs(tmp_path / "resumed")
    saved = torch.load(run_dir / "ppo.pt", weights_only=True)
    # the iteration under way ends first
    assert saved["iteration"] == 3 and saved["global_step"] == 192
    # a crash in the middle of a later save
    (run_dir / "ppo.pt.tmp").write_bytes(b"half a checkpoint")

    module = load_script("ppo.py")
    loaded = record_loaded_state(module, monkeypatch)
    resumed = run_main("ppo.py", "--resume", run_dir / "ppo.pt", cwd=tmp_path / "resumed", module=module)
    assert_ok(resumed)
    assert run_dirs(tmp_path / "resumed") == [run_dir]  # the same run folder, no new one
    # right after loading: exactly the saved state
    assert_same_tensors(loaded["model"], saved["model"])
    assert_same_tensors(loaded["optimizer"]["state"], saved["optimizer"]["state"])
    assert not (run_dir / "ppo.pt.tmp").exists()  # replaced by the resumed run's own save
    assert torch.load(run_dir / "ppo.pt", weights_only=True)["iteration"] == 4

    whole = read_scalars(run_dirs(tmp_path / "whole")[0])
    ours = read_every_metric(run_dir)  # the rest of the run is a valid run: every metric, finite
    # [C4] the same learning rate at every iteration, on the same global_step axis, each step once
    assert ours["charts/learning_rate"] == whole["charts/learning_rate"]
    for tag in ("losses/value_loss", "charts/SPS"):
        assert [step for step, _ in ours[tag]] == [64, 128, 192, 256], tag
    steps = [step for step, _ in ours["charts/episodic_return"]]
    assert steps == sorted(steps)


def test_sigterm_mid_run_saves_a_checkpoint_that_evaluates(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "ppo.py"), *TINY[:4], "--checkpoint-every", "1000"],
        cwd=tmp_path,
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the first progress line: training is under way
    assert proc.stdout.readline().startswith("step")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "interrupted at step" in err and "Traceback" not in err
    (run_dir,) = run_dirs(tmp_path)
    read_every_metric(run_dir)
    # the iterations done when the signal came
    saved = torch.load(run_dir / "ppo.pt", weights_only=True)
    assert saved["global_step"] == saved["iteration"] * 64
    evaluation = run_main("ppo.py", "--eval-checkpoint", run_dir / "ppo.pt", "--eval-episodes", "2", cwd=tmp_path)
    assert_ok(evaluation)
    assert "CartPole-v1: mean return" in evaluation.stdout


def copy_run(checkpoint, cwd):
    """A copy of the checkpoint's run folder in cwd/runs/, to resume without touching the original; its checkpoint."""
    return Path(shutil.copytree(checkpoint.parent, cwd / "runs" / checkpoint.parent.name)) / checkpoint.name


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A ppo.py run of 4 iterations that saved a checkpoint every iteration: runs/<run>/ppo.pt, iteration 4."""
    cwd = tmp_path_factory.mktemp("stopped")
    assert_ok(run_main("ppo.py", *TINY, "--checkpoint-every", "1", cwd=cwd))
    (run_dir,) = run_dirs(cwd)
    return cwd, run_dir / "ppo.pt"


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--env-id", "Acrobot-v1"], ["--env-id Acrobot-v1", "trained with CartPole-v1"]),
        (["--num-envs", "8"], ["--num-envs 8", "trained with 2"]),
        (["--total-timesteps", "256"], ["done all its 4 iterations", "larger --total-timesteps"]),
        (["--eval-checkpoint", "x.pt"], ["give one of them"]),
    ],
)
def test_a_resume_that_contradicts_the_checkpoint_is_one_line(stopped_run, args, fragments):
    cwd, checkpoint = stopped_run
    before = sorted(p.name for p in checkpoint.parent.iterdir())
    assert_usage_error(run_main("ppo.py", "--resume", checkpoint, *args, cwd=cwd), *fragments)
    assert sorted(p.name for p in checkpoint.parent.iterdir()) == before


def test_a_resume_takes_the_checkpoints_settings_and_the_free_flags_given(stopped_run, tmp_path):
    """--resume from code (main(Args) in another program, whose command line is not the script's) of a run trained with
    2 envs and --checkpoint-every 1: num_envs=4 is the default value, so it counts as left out and the checkpoint's 2
    stay; checkpoint_every=2 is off its default and may change, so it wins. args.json records what the run used."""
    _, checkpoint = stopped_run
    copy = copy_run(checkpoint, tmp_path)
    assert_ok(
        run_main(
            "ppo.py", "--resume", copy, "--num-envs", 4, "--checkpoint-every", 2, "--total-timesteps", 384, cwd=tmp_path
        )
    )
    recorded = json.loads((copy.parent / "args.json").read_text())
    assert (recorded["num_envs"], recorded["checkpoint_every"], recorded["total_timesteps"]) == (2, 2, 384)
    assert torch.load(copy, weights_only=True)["iteration"] == 6


def test_total_timesteps_extends_a_finished_run(stopped_run, tmp_path):
    cwd, checkpoint = stopped_run
    checkpoint = copy_run(checkpoint, tmp_path)
    cwd = tmp_path
    assert torch.load(checkpoint, weights_only=True)["iteration"] == 4
    assert_ok(run_main("ppo.py", "--resume", checkpoint, "--total-timesteps", "384", cwd=cwd))
    lrs = read_scalars(checkpoint.parent)["charts/learning_rate"]
    # iterations 1-4 on a schedule for 4; 5 and 6 on one for 6: lr0 * (1 - (i - 1) / 6)
    assert [step for step, _ in lrs] == [64, 128, 192, 256, 320, 384]
    np.testing.assert_allclose([lr for _, lr in lrs[4:]], [2.5e-4 * 2 / 6, 2.5e-4 * 1 / 6], rtol=1e-6)


def test_continuous_normalization_statistics_survive_a_resume(tmp_path, monkeypatch):
    script = "ppo_continuous_action.py"
    run = ["--env-id", "Pendulum-v1", "--num-steps", "32", "--num-minibatches", "1", "--update-epochs", "1"]
    assert_ok(run_main(script, *run, "--total-timesteps", "64", "--save-model", cwd=tmp_path))
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / f"{script[:-3]}.pt", weights_only=True)
    module, at_reset = load_script(script), []

    class RecordingNormalize(module.NormalizeVecEnv):
        def reset(self, **kwargs):  # before the reset's observations move the statistics
            at_reset.append((self.obs_rms.state_dict(), self.return_rms.state_dict()))
            return super().reset(**kwargs)

    module.NormalizeVecEnv = RecordingNormalize
    loaded = record_loaded_state(module, monkeypatch)
    assert_ok(
        run_main(
            script, "--resume", run_dir / f"{script[:-3]}.pt", "--total-timesteps", "96", cwd=tmp_path, module=module
        )
    )
    ((obs_rms, return_rms),) = at_reset
    assert_same_tensors(obs_rms, saved["obs_rms"])
    assert_same_tensors(return_rms, saved["return_rms"])
    assert obs_rms["count"] == saved["obs_rms"]["count"] > 1 and return_rms["count"] == saved["return_rms"]["count"]
    assert_same_tensors(loaded["model"], saved["model"])


MULTIGPU_RECORDER = textwrap.dedent("""
    # the weights each rank continues from after --resume, saved to resumed<RANK>.pt
    import os
    import torch
    import ppo_atari_multigpu as mg

    loaded = {}

    class RecordingAgent(mg.Agent):
        def get_action_and_value(self, x, action=None):
            if not loaded:
                loaded.update({k: v.clone() for k, v in self.state_dict().items()})
            return super().get_action_and_value(x, action)

    mg.Agent = RecordingAgent
    mg.main(mg.tyro.cli(mg.Args))
    torch.save(loaded, f"resumed{os.environ['RANK']}.pt")
""")


def test_multigpu_ranks_resume_from_identical_weights(tmp_path):
    need("ale_py")
    need("cv2")
    script = "ppo_atari_multigpu.py"
    (tmp_path / script).write_bytes((REPO / script).read_bytes())
    (tmp_path / "recorder.py").write_text(MULTIGPU_RECORDER)
    tiny = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "1", "--update-epochs", "1"]
    first = torchrun(script, *tiny, "--total-timesteps", "64", "--save-model", cwd=tmp_path)
    assert_ok(first)
    (run_dir,) = run_dirs(tmp_path)
    checkpoint = run_dir / f"{script[:-3]}.pt"
    saved = torch.load(checkpoint, weights_only=True)
    second = torchrun("recorder.py", "--resume", checkpoint, "--total-timesteps", "96", cwd=tmp_path)
    assert_ok(second)
    rank0, rank1 = (torch.load(tmp_path / f"resumed{rank}.pt") for rank in range(2))
    assert_same_tensors(rank0, saved["model"])
    assert_same_tensors(rank1, saved["model"])
    assert [step for step, _ in read_scalars(run_dir)["charts/learning_rate"]] == [32, 64, 96]


def test_a_full_disk_keeps_the_last_complete_checkpoint(tmp_path):
    """A save that the disk has no room for fails (a traceback: nothing to recover), but the checkpoint on disk stays
    the last whole one: saves write a temporary file and rename it."""
    # room for a tiny run's logs and one ppo.py checkpoint (136 KiB), not for two
    with small_disk(tmp_path / "small", "200k") as disk:
        proc = run_script("ppo.py", *TINY, "--checkpoint-every", "1", cwd=disk)
        assert proc.returncode == 1 and "Traceback" in proc.stderr, proc.stderr[-2000:]
        (run_dir,) = run_dirs(disk)
        # the first save, complete
        assert torch.load(run_dir / "ppo.pt", weights_only=True)["iteration"] == 1


def stop_in_update(monkeypatch, step):
    """Send this process a SIGTERM just before the optimizer's step-th step (counted over the run), in the middle of an
    update, as a scheduler would at any moment (step None: none). Returns the list that counts the steps."""
    steps = []

    class StoppedAdam(torch.optim.Adam):
        def step(self, *args, **kwargs):
            steps.append(1)
            if len(steps) == step:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().step(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", StoppedAdam)
    return steps


def record_saves(module):
    """Make the script's Run.save keep each checkpoint it wrote, as read back from the file, in a list it returns."""
    saves, save = [], module.Run.save

    def recording_save(run, iteration):
        save(run, iteration)
        saves.append(torch.load(f"{run.dir}/{run.args.exp_name}.pt", weights_only=True))

    module.Run.save = recording_save
    return saves


# 4 iterations of 64 steps, 4 optimizer steps each (continuous: Pendulum-v1, whose statistics are saved too)
STOPPED = {
    "ppo.py": [*TINY, "--num-minibatches", 2, "--update-epochs", 2],
    "ppo_continuous_action.py": [*TINY, "--env-id", "Pendulum-v1", "--num-minibatches", 2, "--update-epochs", 2],
}


@pytest.mark.parametrize("script", STOPPED)
def test_a_stop_in_an_update_ends_the_iteration_and_saves_it(tmp_path, monkeypatch, script):
    """SIGTERM at the second optimizer step of iteration 3: the update goes on to its end, and the run stops after
    iteration 3 with a checkpoint equal, to the bit, to the one a twin run's --checkpoint-every 1 wrote after
    iteration 3 (model, Adam, normalization statistics): the signal changed nothing the run computes."""
    twin = load_script(script)
    saves = record_saves(twin)
    assert_ok(run_main(script, *STOPPED[script], "--checkpoint-every", 1, cwd=tmp_path / "twin", module=twin))
    (after_three,) = [saved for saved in saves if saved["iteration"] == 3]

    steps = stop_in_update(monkeypatch, step=2 * 4 + 2)
    stopped = run_main(script, *STOPPED[script], "--save-model", cwd=tmp_path / "stopped")
    assert stopped.returncode == 143 and "Traceback" not in stopped.stderr, stopped.stderr
    # the update of iteration 3 went on to its end, and iteration 4 did not begin
    assert len(steps) == 12
    (run_dir,) = run_dirs(tmp_path / "stopped")
    saved = torch.load(run_dir / f"{script[:-3]}.pt", weights_only=True)
    assert (saved["iteration"], saved["global_step"]) == (3, 192)
    parts = ["model", "optimizer"] + (["obs_rms", "return_rms"] if "obs_rms" in after_three else [])
    assert set(parts) <= set(saved)
    for part in parts:
        assert_same_tensors(saved[part], after_three[part])
    assert saved["optimizer"]["param_groups"] == after_three["optimizer"]["param_groups"]
    # 3 iterations x 4 steps
    assert all(int(state["step"]) == 12 for state in saved["optimizer"]["state"].values())


def test_a_stop_inside_tensorboards_writer_ends_the_run_at_the_end_of_the_iteration(tmp_path, monkeypatch):
    """SIGTERM while the main thread is inside TensorBoard's writer, as iteration 3's losses are logged: the handler
    raises nothing there (an exception between two of its lock operations can leave writer.close() waiting forever),
    iteration 3 ends and the run stops: exit 143, the checkpoint after iteration 3, its losses in the closed logs, and
    iteration 4 not begun."""
    from tensorboard.summary.writer import event_file_writer

    steps, sent, write = stop_in_update(monkeypatch, step=None), [], event_file_writer._AsyncWriter.write

    def stopping_write(writer, data):
        # iteration 3's update is over: the first write logs its losses
        if len(steps) == 3 * 4 and not sent:
            sent.append(1)
            # its handler runs here, with the writer's frames below this one
            os.kill(os.getpid(), signal.SIGTERM)
        return write(writer, data)

    monkeypatch.setattr(event_file_writer._AsyncWriter, "write", stopping_write)
    proc = run_main("ppo.py", *STOPPED["ppo.py"], "--save-model", cwd=tmp_path)
    assert proc.returncode == 143 and "Traceback" not in proc.stderr and sent, proc.stderr
    assert "interrupted at step 192 (after iteration 3" in proc.stderr and len(steps) == 3 * 4
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / "ppo.pt", weights_only=True)
    assert (saved["iteration"], saved["global_step"]) == (3, 192)
    assert [step for step, _ in read_scalars(run_dir)["losses/value_loss"]] == [64, 128, 192]


SECOND_STOP_IN_A_SAVE = """
steps, calls, save = [], [], torch.save

class StoppedAdam(torch.optim.Adam):
    def step(self, *args, **kwargs):
        steps.append(1)
        if len(steps) == FIRST:  # the first SIGTERM, in iteration 3's update (FIRST: None for none)
            os.kill(os.getpid(), signal.SIGTERM)
        return super().step(*args, **kwargs)

def interrupted_save(obj, f, *args, **kwargs):
    calls.append(1)
    if len(calls) == SAVE:  # this save is half written when the signal(s) come
        f.write(b"half a checkpoint")
        for _ in range(SIGNALS):
            os.kill(os.getpid(), signal.SIGTERM)
    print(f"torch.save call {len(calls)}", flush=True)
    return save(obj, f, *args, **kwargs)

torch.optim.Adam, torch.save = StoppedAdam, interrupted_save
"""


def test_a_second_stop_during_a_save_ends_the_process_with_the_last_checkpoint_whole(tmp_path):
    """A first SIGTERM in iteration 3's update, a second while --checkpoint-every 1 writes iteration 3's checkpoint:
    the process ends at once, as by the signal's default action (a shell reports 143), and the checkpoint on disk is
    the previous one, iteration 2's, whole (the half-written one is the temporary file beside it)."""
    patch = SECOND_STOP_IN_A_SAVE.replace("FIRST", str(2 * 4 + 2)).replace("SAVE", "3").replace("SIGNALS", "1")
    proc = run_patched("ppo.py", patch, *STOPPED["ppo.py"], "--checkpoint-every", 1, cwd=tmp_path)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr[-2000:])
    assert "torch.save call 3" not in proc.stdout  # the third save never finished
    (run_dir,) = run_dirs(tmp_path)
    assert torch.load(run_dir / "ppo.pt", weights_only=True)["iteration"] == 2
    assert (run_dir / "ppo.pt.tmp").exists()  # what the killed save had begun


def test_a_second_stop_while_the_logs_close_ends_the_process_at_once(tmp_path):
    """A second SIGTERM while TensorBoard's writer waits for its queue at close (after the final save): nothing is
    raised in that lock code; the process ends as by the signal's default action, the checkpoint already whole."""
    patch = (
        SECOND_STOP_IN_A_SAVE.replace("FIRST", str(2 * 4 + 2)).replace("SAVE", "0").replace("SIGNALS", "0")
        + """
import queue
join = queue.Queue.join

def stopping_join(self):
    if len(steps) >= FIRST_STEP and not calls[1:]:  # after the stop and the final save: the writer's close
        calls.append("join")
        os.kill(os.getpid(), signal.SIGTERM)
    return join(self)

queue.Queue.join = stopping_join
""".replace("FIRST_STEP", str(2 * 4 + 2))
    )
    proc = run_patched("ppo.py", patch, *STOPPED["ppo.py"], "--save-model", cwd=tmp_path)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr[-2000:])
    assert "interrupted at step 192 (after iteration 3" in proc.stderr and "model saved to" in proc.stdout
    (run_dir,) = run_dirs(tmp_path)
    assert torch.load(run_dir / "ppo.pt", weights_only=True)["iteration"] == 3


def test_a_stop_during_a_save_lets_it_finish_and_ends_the_run_there(tmp_path):
    """SIGINT while --checkpoint-every 1 writes iteration 3's checkpoint: the save goes on to its end, the run stops
    after iteration 3 (exit 130), and its message names the iteration the checkpoint holds."""
    patch = """
calls, save = [], torch.save

def stopping_save(obj, f, *args, **kwargs):
    calls.append(1)
    if len(calls) == 3:  # iteration 3's checkpoint
        os.kill(os.getpid(), signal.SIGINT)
    return save(obj, f, *args, **kwargs)

torch.save = stopping_save
"""
    proc = run_patched("ppo.py", patch, *TINY, "--checkpoint-every", 1, cwd=tmp_path)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert sorted(p.name for p in run_dir.glob("*.pt*")) == ["ppo.pt"]
    saved = torch.load(run_dir / "ppo.pt", weights_only=True)
    assert (saved["iteration"], saved["global_step"]) == (3, 192)
    assert "interrupted at step 192 (after iteration 3)" in proc.stderr


def test_a_stop_inside_a_write_to_stdout_lets_the_line_be_written(tmp_path):
    """SIGTERM inside a write of the progress line to stdout, where wandb's console capture or a logging handler would
    be: nothing is raised inside that code, the line is written whole, and the run stops at that boundary."""
    patch = """
import sys

class Stdout:
    def write(self, text):
        if "step       128/" in text:
            os.kill(os.getpid(), signal.SIGTERM)
        return sys.__stdout__.write(text)

    def flush(self):
        sys.__stdout__.flush()

sys.stdout = Stdout()
"""
    proc = run_patched("ppo.py", patch, *TINY, "--save-model", cwd=tmp_path)
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert any(line.startswith("step       128/256 | SPS") and "| ETA" in line for line in proc.stdout.splitlines())
    (run_dir,) = run_dirs(tmp_path)
    assert torch.load(run_dir / "ppo.pt", weights_only=True)["iteration"] == 2
    assert "interrupted at step 128 (after iteration 2" in proc.stderr


def test_main_leaves_the_signal_handlers_as_it_found_them(tmp_path):
    """A program that calls main() keeps its own handlers: after a finished run, a stopped one, one that failed, one
    whose training raised, one whose envs' first reset raised (after Run.start), and an evaluation, SIGINT and SIGTERM
    have the handlers they had before."""

    def mine(signum, frame):
        raise AssertionError("not for this test")

    def call_main(module, *args):
        here = os.getcwd()
        try:
            os.chdir(tmp_path)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                module.main(tyro.cli(module.Args, args=[str(a) for a in args]))
        except (SystemExit, RuntimeError) as e:
            return e
        finally:
            os.chdir(here)

    class Failing(torch.optim.Adam):
        def step(self, *args, **kwargs):
            raise RuntimeError("a fault in training")

    class FailingReset(gym.Wrapper):
        def reset(self, **kwargs):
            raise RuntimeError("a fault in the first reset")

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for s in before:
            signal.signal(s, mine)
        stopped, failing = load_script("ppo.py"), load_script("ppo.py")
        stop_at(stopped, 2, num_steps=32)
        failing.optim = SimpleNamespace(Adam=Failing)
        failing_reset = load_script("ppo.py")
        make_env = failing_reset.make_env
        failing_reset.make_env = lambda *args: lambda: FailingReset(make_env(*args)())
        outcomes = [
            call_main(load_script("ppo.py"), *TINY, "--save-model"),
            call_main(stopped, *TINY),
            call_main(load_script("ppo.py"), *TINY, "--env-id", "NoSuchEnv-v0"),
            call_main(failing, *TINY),
            call_main(failing_reset, *TINY),
        ]
        (run_dir, *_) = run_dirs(tmp_path)
        outcomes.append(call_main(load_script("ppo.py"), "--eval-checkpoint", run_dir / "ppo.pt", "--eval-episodes", 1))
        handlers = {s: signal.getsignal(s) for s in before}
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert [e if e is None else getattr(e, "code", str(e)) for e in outcomes] == [
        None,
        143,
        2,
        "a fault in training",
        "a fault in the first reset",
        None,
    ]
    assert handlers == {signal.SIGINT: mine, signal.SIGTERM: mine}


def record_rollouts(module):
    """Make the script's Agent keep the observations and actions of every rollout step, in the list it returns."""
    steps = []

    class RecordingAgent(module.Agent):
        def get_action(self, x, *args):
            action = super().get_action(x, *args)
            steps.append((x.clone(), action.clone()))
            return action

    module.Agent = RecordingAgent
    return steps


def test_a_resumed_run_draws_new_random_numbers(tmp_path):
    """A run resumed after 2 iterations: its first iteration's observations (the envs' resets) and actions (torch's
    samples) are not those the run started with, and they are the same each time it is resumed from that checkpoint."""
    module = load_script("ppo.py")
    first = record_rollouts(module)
    assert_ok(run_main("ppo.py", *TINY[:4], "--total-timesteps", 128, "--save-model", cwd=tmp_path, module=module))
    (run_dir,) = run_dirs(tmp_path)
    resumed = []
    for n in range(2):
        module = load_script("ppo.py")
        resumed.append(record_rollouts(module))
        copy = copy_run(run_dir / "ppo.pt", tmp_path / str(n))
        assert_ok(run_main("ppo.py", "--resume", copy, "--total-timesteps", 256, cwd=tmp_path / str(n), module=module))
    start, again = (torch.stack([action for _, action in steps[:32]]) for steps in resumed)
    assert torch.equal(start, again)  # deterministic given the checkpoint
    assert not torch.equal(start, torch.stack([action for _, action in first[:32]]))
    assert not torch.equal(resumed[0][0][0], first[0][0])  # the envs were reset with another seed


# --- what --resume takes from the checkpoint and what the flags typed on the command line change ---------------------

OFF_DEFAULT = {
    "total_timesteps": 10**8,
    "target_return": 20.0,
    "wandb_project_name": "other",
    "wandb_entity": "team",
    "checkpoint_every": 3,
    "eval_episodes": 3,
    "num_threads": 1,
    "backend": "nccl",
    "device_ids": (0, 1),
    "dist_timeout": 60.0,
}


def words(name, value):
    """A flag as a user types it for tyro: --cuda / --no-cuda, --device-ids 0 1, --wandb-entity None."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag[2:]]
    return [flag, *map(str, value)] if isinstance(value, tuple) else [flag, str(value)]


def resolve(script, typed, saved, tmp_path, monkeypatch):
    """The Args a --resume of a checkpoint trained with `saved` (changes to the defaults) resolves to, when `typed`
    (name: value) is typed on the script's own command line (sys.argv[0] is the script, as `python <script>` sets)."""
    module = load_script(script)
    path = tmp_path / "runs" / "run" / f"{script[:-3]}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"script": script, "args": {**vars(module.Args()), **saved}, "iteration": 1}, path)
    argv = [str(REPO / script), "--resume", str(path), *[w for name, v in typed.items() for w in words(name, v)]]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.chdir(tmp_path)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        args = tyro.cli(module.Args, args=argv[1:])
        module.Run(args)  # resolves args in place
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    return args


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_free_flag_typed_on_resume_wins_in_both_directions(script, tmp_path, monkeypatch):
    """Every flag a resume may change: typed at its default value it replaces the checkpoint's other value (a CPU run
    moves to the GPU, --track goes off), typed off its default it replaces the default; left out, the checkpoint's."""
    module = load_script(script)
    defaults = {name: getattr(module.Args(), name) for name in module.FREE_ON_RESUME if hasattr(module.Args(), name)}
    off = {name: OFF_DEFAULT.get(name, not value) for name, value in defaults.items()}
    assert set(defaults) >= {"total_timesteps", "cuda", "track", "capture_video", "save_model", "checkpoint_every"}
    for saved, typed in ((off, defaults), (defaults, off)):
        args = resolve(script, typed, saved, tmp_path, monkeypatch)
        assert {name: getattr(args, name) for name in defaults} == typed
        args = resolve(script, {}, saved, tmp_path, monkeypatch)
        assert {name: getattr(args, name) for name in defaults} == saved


def test_a_setting_typed_at_its_default_that_contradicts_the_checkpoint_is_refused(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as stop:
        resolve("ppo.py", {"num_envs": 4}, {"num_envs": 2}, tmp_path, monkeypatch)
    assert stop.value.code == 2
    assert "--num-envs 4: the checkpoint was trained with 2" in capsys.readouterr().err


def test_resume_flags_from_the_command_line(tmp_path):
    """End to end, as a user runs it: trained with --no-cuda --checkpoint-every 1, resumed with --cuda
    --checkpoint-every 0 (both default values): the resumed run records cuda true and no periodic checkpoints."""
    assert_ok(
        run_script(
            "ppo.py",
            *TINY[:4],
            "--total-timesteps",
            128,
            "--no-cuda",
            "--checkpoint-every",
            1,
            "--save-model",
            cwd=tmp_path,
        )
    )
    (run_dir,) = run_dirs(tmp_path)
    proc = run_script(
        "ppo.py",
        "--resume",
        run_dir / "ppo.pt",
        "--total-timesteps",
        256,
        "--cuda",
        "--checkpoint-every",
        0,
        cwd=tmp_path,
    )
    assert_ok(proc)
    recorded = json.loads((run_dir / "args.json").read_text())
    assert (recorded["cuda"], recorded["checkpoint_every"], recorded["save_model"]) == (True, 0, True)
    # the end's save alone: no periodic one after iteration 3
    assert proc.stdout.count("model saved to") == 1


# --- seeds: every env's seed within envpool's int32 -------------------------------------------------------------------


def test_seed_range_is_checked_in_one_line():
    for script in SCRIPTS:
        args = load_script(script).Args
        assert args(seed=2**30).problem() is None
        for seed in (-1, 2**30 + 1, 2**32):
            assert "--seed must be an integer from 0 to 2**30" in args(seed=seed).problem(), (script, seed)


@pytest.mark.parametrize("script", ENVPOOL_SCRIPTS)
def test_envpool_scripts_resume_where_the_drawn_seed_was_large_and_train_at_the_largest_seed(script, tmp_path):
    """A resume at iteration 3 of seed 1 draws 2**31 or more from SeedSequence([1, 3]), beyond the int32 envpool takes:
    the run resumes all the same (the drawn seed is kept below 2**30). --seed 2**30 trains too."""
    need("envpool")
    assert np.random.SeedSequence([1, 3]).generate_state(1)[0] >= 2**31
    tiny = ["--num-envs", 2, "--num-steps", 16, "--num-minibatches", 1, "--update-epochs", 1]
    assert_ok(run_main(script, *tiny, "--total-timesteps", 32, "--save-model", cwd=tmp_path / "a"))
    (run_dir,) = run_dirs(tmp_path / "a")
    path = run_dir / f"{script[:-3]}.pt"
    checkpoint = torch.load(path, weights_only=True)
    torch.save({**checkpoint, "iteration": 3, "global_step": 96}, path)
    assert_ok(run_main(script, "--resume", path, "--total-timesteps", 128, cwd=tmp_path / "a"))
    assert torch.load(path, weights_only=True)["iteration"] == 4
    assert_ok(run_main(script, *tiny, "--total-timesteps", 32, "--seed", 2**30, cwd=tmp_path / "b"))


# --- a stop as training starts --------------------------------------------------------------------------------------


def stop_after_start(module):
    """Make the script send itself Ctrl-C right after Run.start (args.json and the logs written), before training."""

    class StoppedRun(module.Run):
        def start(self, *args, **kwargs):
            writer = super().start(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)
            return writer

    module.Run = StoppedRun


def test_a_stop_as_training_starts_ends_the_run_after_its_first_iteration(stopped_run, tmp_path):
    """Ctrl-C right after Run.start: the first iteration runs to its end, then the run stops (exit 130) with that
    iteration logged; a resumed run so stopped goes on in its own folder, kept whole, and saves the iteration it did
    (--checkpoint-every 1, the checkpoint's setting)."""
    module = load_script("ppo.py")
    stop_after_start(module)
    proc = run_main("ppo.py", *TINY, cwd=tmp_path / "new", module=module)
    assert proc.returncode == 130 and "interrupted at step 64 (after iteration 1)" in proc.stderr, proc.stderr
    (run_dir,) = run_dirs(tmp_path / "new")
    assert [step for step, _ in read_scalars(run_dir)["charts/learning_rate"]] == [64]
    copy = copy_run(stopped_run[1], tmp_path / "resumed")
    before = sorted(p.name for p in copy.parent.iterdir())
    module = load_script("ppo.py")
    stop_after_start(module)
    proc = run_main("ppo.py", "--resume", copy, "--total-timesteps", 384, cwd=tmp_path / "resumed", module=module)
    # (+ its new log file)
    assert proc.returncode == 130 and set(before) <= {p.name for p in copy.parent.iterdir()}
    assert torch.load(copy, weights_only=True)["iteration"] == 5


# --- --target-return: a run ends once it has learned enough ----------------------------------------------------------


def test_target_return_ends_training_at_the_first_boundary_where_the_last_20_episodes_reach_it(tmp_path):
    """CartPole's random play scores about 20: a target of 30 is reached within a few thousand steps. The run ends
    there as at the end of its budget (exit 0, the checkpoint saved), at the first iteration boundary where the mean
    of the last 20 logged returns reaches the target, computed here from the logs."""
    proc = run_main(
        "ppo.py", *TINY[:4], "--total-timesteps", 64 * 1000, "--target-return", 30, "--save-model", cwd=tmp_path
    )
    assert_ok(proc)
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / "ppo.pt", weights_only=True)
    assert saved["iteration"] < 1000
    returns = read_scalars(run_dir)["charts/episodic_return"]
    means = {
        iteration: np.mean([r for step, r in returns if step <= iteration * 64][-20:])
        for iteration in range(1, saved["iteration"] + 1)
        if sum(step <= iteration * 64 for step, _ in returns) >= 20
    }
    assert [i for i, mean in means.items() if mean >= 30][:1] == [saved["iteration"]]
    assert f"target reached at step {saved['global_step']}: the last 20 episodes' mean return" in proc.stdout
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = EventAccumulator(str(run_dir))
    logs.Reload()
    (event,) = logs.Tensors("target_reached/text_summary")  # what benchmark/report.py reads
    assert event.tensor_proto.string_val[0].decode() == f"step {saved['global_step']}"
    assert max(step for step, _ in read_scalars(run_dir)["charts/learning_rate"]) == saved["global_step"]


def test_a_resumed_run_counts_the_games_before_its_stop(tmp_path):
    """The checkpoint keeps the last 20 returns (as logged), and a resume goes on with them: its first progress line
    averages 20 games, and a --target-return they already reach ends it after its first iteration, as reached; a
    checkpoint without them (saved by an older version) starts counting anew."""
    proc = run_main("ppo.py", *TINY[:4], "--total-timesteps", 64 * 20, "--save-model", cwd=tmp_path)
    assert_ok(proc)
    (run_dir,) = run_dirs(tmp_path)
    path = run_dir / "ppo.pt"
    returns = [r for _, r in read_scalars(run_dir)["charts/episodic_return"]]
    assert len(returns) >= 20 and torch.load(path, weights_only=True)["recent_returns"] == pytest.approx(returns[-20:])
    proc = run_main(
        "ppo.py", "--resume", path, "--total-timesteps", 64 * 1000, "--target-return", min(returns[-20:]), cwd=tmp_path
    )
    assert_ok(proc)
    assert f"target reached at step {64 * 21}: the last 20 episodes' mean return" in proc.stdout
    assert torch.load(path, weights_only=True)["iteration"] == 21
    proc = run_main("ppo.py", "--resume", path, "--total-timesteps", 64 * 22, "--target-return", "None", cwd=tmp_path)
    assert_ok(proc)
    assert "| return (last 20)" in next(line for line in proc.stdout.splitlines() if line.startswith("step"))
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["recent_returns"]
    torch.save(checkpoint, path)
    proc = run_main("ppo.py", "--resume", path, "--total-timesteps", 64 * 23, cwd=tmp_path)
    assert_ok(proc)
    assert "| return (last 20)" not in next(line for line in proc.stdout.splitlines() if line.startswith("step"))
