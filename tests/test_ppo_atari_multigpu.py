"""ppo_atari_multigpu.py: data parallelism over torchrun processes on CPU (gloo). The gradient all-reduce [G3] against
an independent mean, two ranks that train and end with identical weights [G1]-[G3], rank 0 alone writing, one
process equal to ppo_atari.py, and bad launches, crashed and hung ranks ending the run with an error in bounded time."""

import contextlib
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp

from helpers import (
    METRICS,
    REPO,
    TORCHRUN,
    assert_ok,
    assert_usage_error,
    load_script,
    need,
    read_every_metric,
    read_scalars,
    run_dirs,
    run_script,
    test_env,
    torchrun,
)

need("ale_py")
need("cv2")

SCRIPT = "ppo_atari_multigpu.py"
mg = load_script(SCRIPT)
# 2 envs over 2 ranks (1 each) x 128 steps x 3 iterations: enough for random play to end a Breakout game on rank 0
TWO_RANKS = ["--num-envs", "2", "--num-steps", "128", "--total-timesteps", "768", "--seed", "5"]
# the smallest run that reaches a second update: 2 iterations of 2 envs x 16 steps, one mini-batch, one epoch
TINY = [
    "--num-envs",
    "2",
    "--num-steps",
    "16",
    "--total-timesteps",
    "64",
    "--num-minibatches",
    "1",
    "--update-epochs",
    "1",
]


# --- [G3] the all-reduce, in a real 2-process gloo group -----------------------------------------------------------


def _reduce_in_group(rank, world_size, store, grads, out):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.Flatten(), torch.nn.Linear(12, 5))
    # a parameter without a gradient: skipped by every rank alike
    model[0].bias.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p, g in zip(trainable, grads[rank]):
        p.grad = g.clone()
    calls = []
    all_reduce = dist.all_reduce
    # count the collectives
    dist.all_reduce = lambda *a, **k: calls.append(1) or all_reduce(*a, **k)
    mg.all_reduce_gradients(model.parameters(), world_size)
    dist.all_reduce = all_reduce
    torch.save(
        {"grads": [p.grad for p in trainable], "frozen_grad": model[0].bias.grad, "calls": len(calls)},
        f"{out}/rank{rank}.pt",
    )
    dist.destroy_process_group()


def test_g3_all_reduce_gives_every_rank_the_mean_gradient_in_one_collective(tmp_path):
    world_size = 2
    shapes = [(3, 2, 3, 3), (5, 12), (5,)]  # conv weight, linear weight, linear bias
    gen = torch.Generator().manual_seed(0)
    grads = [[torch.randn(s, generator=gen) * (rank + 1) for s in shapes] for rank in range(world_size)]
    # fork: the children start at once, with this module already imported
    mp.start_processes(
        _reduce_in_group, args=(world_size, tmp_path / "store", grads, tmp_path), nprocs=world_size, start_method="fork"
    )
    expected = [torch.stack([grads[r][i] for r in range(world_size)]).mean(0) for i in range(len(shapes))]
    for rank in range(world_size):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result["calls"] == 1  # one batched collective, not one per tensor
        assert result["frozen_grad"] is None
        for got, want in zip(result["grads"], expected):
            torch.testing.assert_close(got, want)


# --- two ranks training together ----------------------------------------------------------------------------------

RECORDER = textwrap.dedent("""
    # Runs the copy of the script in this folder (it imports no repo file) under torchrun, remembering the agent's
    # weights at the start and the end, the seeds its envs were reset with, torch's seed when the rollout began and the
    # approx KL of each of its mini-batches as ppo_loss returned it; each rank saves them to rank<RANK>.pt.
    import os
    import torch
    import ppo_atari_multigpu as mg

    agents, reset_seeds, approx_kls, torch_seeds = [], [], [], []
    ppo_loss = mg.ppo_loss

    def recording_loss(*inputs):
        loss, stats = ppo_loss(*inputs)
        approx_kls.append(stats["approx_kl"].item())
        return loss, stats

    class RecordingAgent(mg.Agent):
        def __init__(self, envs):
            super().__init__(envs)
            self.initial = {k: v.clone() for k, v in self.state_dict().items()}
            agents.append(self)

        def get_action_and_value(self, *args):
            torch_seeds.append(torch.initial_seed())
            return super().get_action_and_value(*args)

    class RecordingVectorEnv(mg.gym.vector.SyncVectorEnv):
        def reset(self, *, seed=None, options=None):
            reset_seeds.append(seed)
            return super().reset(seed=seed, options=options)

    mg.Agent = RecordingAgent
    mg.gym.vector.SyncVectorEnv = RecordingVectorEnv
    mg.ppo_loss = recording_loss
    mg.main(mg.tyro.cli(mg.Args))
    (agent,) = agents
    saved = {"initial": agent.initial, "final": agent.state_dict(), "reset_seeds": reset_seeds}
    saved.update(approx_kls=approx_kls, torch_seed=torch_seeds[0])
    torch.save(saved, f"rank{os.environ['RANK']}.pt")
""")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("two_ranks")
    (cwd / SCRIPT).write_bytes((REPO / SCRIPT).read_bytes())
    (cwd / "recorder.py").write_text(RECORDER)
    # --target-kl far above any KL: no update stops early, but every epoch's KL goes through the ranks' all-reduce
    proc = torchrun("recorder.py", *TWO_RANKS, "--save-model", "--target-kl", "1e9", cwd=cwd)
    assert_ok(proc)
    return cwd, proc, [torch.load(cwd / f"rank{rank}.pt") for rank in range(2)]


def test_g2_g3_ranks_start_and_end_with_identical_weights(two_ranks):
    _, _, (rank0, rank1) = two_ranks
    for key in rank0["final"]:
        # [G2] same initial weights
        assert torch.equal(rank0["initial"][key], rank1["initial"][key]), key
        # [G3] same steps all along
        assert torch.equal(rank0["final"][key], rank1["final"][key]), key
    # it did train
    assert any(not torch.equal(rank0["initial"][k], rank0["final"][k]) for k in rank0["final"])
    # [G2] rank r's streams start from seed + 10000 * r, as baselines' make_vec_env: rank 0 draws what ppo_atari.py
    # draws with --seed 5, rank 1 a stream that no rank 0 of a sweep over seeds below 10000 draws (with seed + rank,
    # rank 1 of seed 5 drew the stream of rank 0 of seed 6)
    assert rank0["reset_seeds"] == [5] and rank1["reset_seeds"] == [10005]
    assert rank0["torch_seed"] == 5 and rank1["torch_seed"] not in range(10000)


def test_g1_only_rank_0_writes_and_counts_the_steps_of_all_ranks(two_ranks):
    cwd, proc, (rank0, _) = two_ranks
    (run_dir,) = run_dirs(cwd)  # one run folder, not one per rank
    scalars = read_every_metric(run_dir)
    # [G1] 768 steps of a 2 x 128 global batch: 3 iterations, global_step counts both ranks' envs
    assert [step for step, _ in scalars["charts/learning_rate"]] == [256, 512, 768]
    progress = [line for line in proc.stdout.splitlines() if line.startswith("step")]
    # printed by rank 0 only
    assert len(progress) == 3 and progress[-1].startswith("step       768/768"), proc.stdout
    (model,) = run_dir.glob("*.pt")  # saved by rank 0 only, with the weights every rank ended with
    saved = torch.load(model, weights_only=True)["model"]
    assert all(torch.equal(saved[k], rank0["final"][k]) for k in saved)
    proc = run_script(SCRIPT, "--eval-checkpoint", model, "--eval-episodes", "1", cwd=cwd)
    assert_ok(proc)
    assert "BreakoutNoFrameskip-v4: mean return" in proc.stdout
    # evaluation is one process: no note about launching several
    assert "torchrun" not in proc.stderr


def test_x3_the_kl_all_reduce_leaves_the_logged_kl_this_ranks(two_ranks):
    """[X3] the ranks agree on early stopping through an in-place all-reduce of their last mini-batch KL; rank 0's
    losses/approx_kl stays the mean of its own mini-batches' KL, which differs from rank 1's."""
    cwd, _, (rank0, rank1) = two_ranks
    logged = [value for _, value in read_scalars(run_dirs(cwd)[0])["losses/approx_kl"]]
    per_update = len(rank0["approx_kls"]) // len(logged)  # epochs x mini-batches
    assert per_update == 16 and len(rank1["approx_kls"]) == len(rank0["approx_kls"])
    for i, value in enumerate(logged):
        ours = rank0["approx_kls"][i * per_update : (i + 1) * per_update]
        theirs = rank1["approx_kls"][i * per_update : (i + 1) * per_update]
        assert value == pytest.approx(sum(ours) / per_update, rel=1e-5), i + 1
        # had the all-reduce overwritten an epoch's last KL with the two ranks' mean, the logged mean would move by
        # at least this much
        assert abs(sum(theirs[3::4]) - sum(ours[3::4])) / 2 / per_update > 1e-4 * abs(value), i + 1


def test_one_process_without_torchrun_learns_exactly_as_ppo_atari(tmp_path):
    proc = run_script(SCRIPT, *TINY, cwd=tmp_path / "multigpu")
    assert_ok(proc)
    # not an error: a one-line note that says how to start several processes
    notes = [line for line in proc.stderr.splitlines() if "torchrun" in line]
    assert len(notes) == 1 and "torchrun --standalone --nproc_per_node=N" in notes[0], proc.stderr
    assert_ok(run_script("ppo_atari.py", *TINY, cwd=tmp_path / "parent"))
    ours, parent = read_scalars(run_dirs(tmp_path / "multigpu")[0]), read_scalars(run_dirs(tmp_path / "parent")[0])
    # a world of one: the all-reduce of one process changes nothing, the seeds are ppo_atari.py's
    for tag in METRICS:
        # no game ends this soon
        if tag not in ("charts/SPS", "charts/episodic_return", "charts/episodic_length"):
            assert ours[tag] == parent[tag], tag


# --- bad launches and failing ranks ---------------------------------------------------------------------------------


def script_lines(stderr):
    """The lines the ranks printed themselves, without torchrun's own failure report."""
    return [line for line in stderr.splitlines() if line.startswith(SCRIPT)]


def test_world_size_that_does_not_divide_num_envs_is_one_line_error(tmp_path):
    proc = torchrun(REPO / SCRIPT, "--num-envs", "3", cwd=tmp_path)
    assert proc.returncode != 0  # torchrun's own code for a failed rank
    # rank 0 alone says what is wrong (exit code 2; rank 1, pausing before it exits, is stopped by torchrun), and
    # none of them prints a traceback
    assert script_lines(proc.stderr) == [
        f"{SCRIPT}: error: --num-envs 3 does not split evenly over 2 processes "
        f"(torchrun's --nproc_per_node x --nnodes): use a multiple of 2"
    ]
    assert "exitcode  : 2" in proc.stderr and f'{SCRIPT}", line' not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_an_error_of_another_rank_is_said_after_a_pause(tmp_path, monkeypatch, capsys):
    # torchrun stops every rank as soon as one exits: rank 1 waits so that rank 0 says an error all ranks meet first
    # (it stopped rank 0 before its line when rank 1 exited first), then says it too, for an error of its own
    monkeypatch.chdir(tmp_path)
    pauses = []
    monkeypatch.setattr(mg.time, "sleep", pauses.append)
    with pytest.raises(SystemExit) as exit_info:
        mg.Run(mg.tyro.cli(mg.Args, args=[*TINY, "--gamma", "2"]), rank=1)
    assert exit_info.value.code == 2 and pauses == [5]
    assert capsys.readouterr().err == f"{SCRIPT}: error: --gamma must be in [0, 1], got 2.0\n"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "args,env,fragments",
    [
        # half a torchrun launch: WORLD_SIZE without the rest
        ([], {"WORLD_SIZE": "2"}, ["RANK", "MASTER_ADDR", "torchrun --standalone --nproc_per_node=2"]),
        (["--backend", "nccl"], {}, ["nccl", "gloo"]),  # this machine has no GPU
        (["--num-minibatches", "3"], {}, ["batch of each process", "does not split"]),
        (["--dist-timeout", "0"], {}, ["--dist-timeout"]),
    ],
)
def test_bad_launch_is_one_line_error(tmp_path, monkeypatch, capsys, args, env, fragments):
    # in this process (main refuses these before it makes an env or meets other ranks): the checks, not the startup
    if "nccl" in args and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    monkeypatch.chdir(tmp_path)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        mg.main(mg.tyro.cli(mg.Args, args=[*TINY, *args]))
    assert_usage_error(SimpleNamespace(returncode=exit_info.value.code, stderr=capsys.readouterr().err), *fragments)
    assert not (tmp_path / "runs").exists()


# A launcher for torchrun that runs the script with a fault of rank 1 after its first update: FAULT=crash exits, hang
# sleeps for an hour. The script is loaded from its file and its optimizer patched; nothing in it knows about tests.
FAULTY_RANK = """
import importlib.util, os, sys, time
import torch
spec = importlib.util.spec_from_file_location("script", SCRIPT_PATH)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

class FaultyAdam(torch.optim.Adam):
    def step(self, *args, **kwargs):
        result = super().step(*args, **kwargs)
        if os.environ["RANK"] == "1":
            if os.environ["FAULT"] == "crash":
                os._exit(1)
            time.sleep(3600)
        return result

module.optim.Adam = FaultyAdam
module.main(module.tyro.cli(module.Args, args=sys.argv[1:]))
"""


def test_a_crashed_or_hung_rank_ends_the_run_in_bounded_time(tmp_path):
    # rank 1 exits (crash) or sleeps for an hour (hang) after its first optimizer step, while rank 0 goes on to its
    # next all-reduce: torchrun stops rank 0 when rank 1 dies; rank 0 gives up waiting for a hung rank after
    # --dist-timeout. torchrun then SIGTERMs the sleeping rank, which only notes it (the script's stop flag), and
    # SIGKILLs it after TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds (30 unless set, here 5).
    # Both launches at once; a launch still running after 120 s fails the test (subprocess.TimeoutExpired).
    launcher = tmp_path / "faulty_rank.py"
    launcher.write_text(FAULTY_RANK.replace("SCRIPT_PATH", repr(str(REPO / SCRIPT))))
    launches = {}
    for fault in ("crash", "hang"):
        (tmp_path / fault).mkdir()
        launches[fault] = subprocess.Popen(
            [
                *TORCHRUN,
                str(launcher),
                *TINY,
                "--dist-timeout",
                "5",
            ],
            cwd=tmp_path / fault,
            env=test_env(FAULT=fault, TORCH_ELASTIC_SHUTDOWN_TIMEOUT="5"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        outputs = {fault: launch.communicate(timeout=120) for fault, launch in launches.items()}
    finally:
        for launch in launches.values():
            # only if still running (no-op otherwise): the launcher, which then stops its ranks
            launch.kill()
    assert launches["crash"].returncode != 0 and launches["hang"].returncode != 0
    crash_err, hang_err = outputs["crash"][1], outputs["hang"][1]
    # torchrun's report: rank 1 failed with its own exit code 1 (rank 0 was then stopped by torchrun)
    assert "rank      : 1 (local_rank: 1)\n  exitcode  : 1 " in crash_err, crash_err[-3000:]
    # the collective timed out on rank 0 (gloo's message), then torchrun stopped the sleeping rank 1
    assert "Timed out" in hang_err and "[rank0]" in hang_err, hang_err[-3000:]


def descendants(pid):
    """The pids of a process's children, theirs, and so on (from /proc)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):  # a process that ended meanwhile
            # after the command: state, ppid, ...
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found, todo = found + kids, todo + kids
    return found


@pytest.mark.parametrize("to", ["torchrun", "every process"])
def test_sigterm_stops_every_rank_at_the_same_iteration_boundary(tmp_path, to):
    """SIGTERM to torchrun, which forwards it to both ranks: they finish the iteration under way, agree at its end to
    stop (a rank that stopped alone would leave the other waiting in a collective), and rank 0 saves that iteration.
    Sent to every process of the launch (as a scheduler or a terminal's Ctrl-C does), each rank gets it twice, its own
    and torchrun's forward: the same one stop, not a second stop's exit without a save."""
    launch = subprocess.Popen(
        [
            *TORCHRUN,
            str(REPO / SCRIPT),
            "--num-envs",
            "2",
            "--num-steps",
            "256",
            "--num-minibatches",
            "1",
            "--update-epochs",
            "1",
            "--total-timesteps",
            "100000",
            "--checkpoint-every",
            "1000",
        ],
        cwd=tmp_path,
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # rank 0's first progress line: training is under way
        assert launch.stdout.readline().startswith("step")
        time.sleep(0.3)  # into the next iteration (256 steps: a second or more here)
        # as a scheduler signals every process of a job (Slurm does), the ranks first
        if to == "every process":
            for pid in descendants(launch.pid):
                os.kill(pid, signal.SIGTERM)
            # then torchrun, whose forward is each rank's second SIGTERM, in the same iteration
            time.sleep(0.3)
        launch.send_signal(signal.SIGTERM)
        out, err = launch.communicate(timeout=120)
    finally:
        for pid in [launch.pid] + descendants(launch.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert "interrupted at step" in err and "model saved to" in out, err[-3000:]
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / f"{SCRIPT[:-3]}.pt", weights_only=True)
    assert 1 <= saved["iteration"] < 100000 // 512 and saved["global_step"] == saved["iteration"] * 512
    assert max(step for step, _ in read_scalars(run_dir)["charts/learning_rate"]) == saved["global_step"]
