"""ppo.py: the 13 core details checked against independent computations, and the script's behaviour as a user sees
it."""

import signal
import subprocess
import sys
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import (
    REPO,
    assert_annealed_lr,
    assert_mlp_init,
    assert_ok,
    assert_usage_error,
    load_script,
    read_every_metric,
    read_scalars,
    run_dirs,
    run_script,
    test_env,
)

ppo = load_script("ppo.py")
# 4 iterations of 64 steps
TINY = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256"]


def reference_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """GAE written as the sum it is: A_t = sum_l (gamma*lam)^l delta_{t+l}, up to the end of the episode or segment."""
    num_steps, num_envs = rewards.shape
    values_ext = np.concatenate([values, next_value[None]])  # value of obs t+1 for every t
    starts_ext = np.concatenate([dones, next_done[None]])  # does obs t+1 start a new episode?
    advantages = np.zeros((num_steps, num_envs))
    for e in range(num_envs):
        for t in range(num_steps):
            total, weight = 0.0, 1.0
            for k in range(t, num_steps):
                ends = starts_ext[k + 1, e] == 1
                delta = rewards[k, e] + gamma * values_ext[k + 1, e] * (0.0 if ends else 1.0) - values[k, e]
                total += weight * delta
                if ends:
                    break
                weight *= gamma * lam
            advantages[t, e] = total
    return advantages


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0), (1.0, 0.8)])
def test_compute_gae_matches_direct_sum(gamma, lam):
    rng = np.random.default_rng(0)
    num_steps, num_envs = 16, 3
    rewards, values = rng.normal(size=(num_steps, num_envs)), rng.normal(size=(num_steps, num_envs))
    next_value = rng.normal(size=num_envs)
    dones = np.zeros((num_steps, num_envs))
    dones[5, 0] = dones[6, 0] = 1  # episode ends in the middle, one of them a single step long
    dones[0, 1] = 1  # the segment starts a new episode
    dones[num_steps - 1, 2] = 1  # the last obs of the segment is a new episode
    next_done = np.array([0.0, 1.0, 0.0])  # env 1's episode ends exactly at the segment boundary
    as_t = lambda a: torch.tensor(a, dtype=torch.float64)
    advantages, returns = ppo.compute_gae(
        as_t(rewards), as_t(values), as_t(dones), as_t(next_value), as_t(next_done), gamma, lam
    )
    expected = reference_gae(rewards, values, dones, next_value, next_done, gamma, lam)
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-10, atol=1e-10)
    # [C5] TD(lambda) target
    np.testing.assert_allclose(returns.numpy(), expected + values, rtol=1e-10, atol=1e-10)


def fake_envs(obs_dim=4, n=2):
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1, 1, (obs_dim,)), single_action_space=gym.spaces.Discrete(n)
    )


def test_layer_init_gains():
    layers = assert_mlp_init(ppo.Agent(fake_envs(obs_dim=8, n=3)))
    assert layers["actor.4"].out_features == 3 and layers["critic.4"].out_features == 1


def test_rollout_sample_is_the_categoricals_own_draw():
    """get_action skips building the distribution: with the same seed it draws exactly what
    Categorical(logits).sample() draws, so runs keep their actions (and returns) per seed."""
    agent = ppo.Agent(fake_envs(obs_dim=8, n=5))
    with torch.no_grad():
        agent.actor[4].weight.mul_(200)  # far from uniform, so that a different draw would show
    x = torch.randn(4000, 8)
    with torch.inference_mode():
        torch.manual_seed(3)
        ours = agent.get_action(x)
        torch.manual_seed(3)
        theirs = torch.distributions.Categorical(logits=agent.actor(x)).sample()
    assert ours.shape == theirs.shape == (4000,) and ours.dtype == theirs.dtype
    assert torch.equal(ours, theirs) and len(ours.unique()) == 5


class RecordingAgent(ppo.Agent):
    """The script's Agent, remembering every call: rollout steps (get_action) and log-prob calls with given actions."""

    calls = []

    def get_action(self, x):
        action = super().get_action(x)
        # what a per-step call would have stored
        _, logprob, _, value = super().get_action_and_value(x, action)
        RecordingAgent.calls.append(
            dict(kind="step", x=x.clone(), action=action.clone(), logprob=logprob.clone(), value=value.clone())
        )
        return action

    def get_action_and_value(self, x, action=None):
        out = super().get_action_and_value(x, action)
        RecordingAgent.calls.append(
            dict(
                kind="given",
                x=x.detach().clone(),
                action=out[0].detach().clone(),
                logprob=out[1].detach().clone(),
                value=out[3].detach().clone(),
            )
        )
        return out


def rows(call):
    """A call's (obs, action) pairs as rows of one tensor."""
    return torch.cat([call["x"], call["action"].reshape(len(call["x"]), -1).float()], 1)


def test_minibatches_and_first_ratio(tmp_path, monkeypatch):
    """[C6] every sample once per epoch; the first mini-batch's ratio is exactly 1 (approx KL 0, clipfrac 0)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ppo, "Agent", RecordingAgent)
    RecordingAgent.calls = []
    args = ppo.Args(num_envs=2, num_steps=32, total_timesteps=64, num_minibatches=4, update_epochs=3)
    ppo.main(args)
    steps = [c for c in RecordingAgent.calls if c["kind"] == "step"]
    segment, *training = [c for c in RecordingAgent.calls if c["kind"] == "given"]
    assert len(steps) == args.num_steps and len(training) == args.update_epochs * args.num_minibatches
    # the segment's log-probs and values, computed in one batched call after the rollout, are those of per-step calls
    # (num_steps * num_envs, obs + action), step-major like the buffer
    samples = torch.cat([rows(c) for c in steps])
    assert torch.equal(rows(segment), samples)
    torch.testing.assert_close(segment["logprob"], torch.cat([c["logprob"] for c in steps]), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        segment["value"].flatten(), torch.cat([c["value"].flatten() for c in steps]), rtol=0, atol=1e-6
    )
    logprob_of = {tuple(row.tolist()): lp for row, lp in zip(samples, segment["logprob"])}
    assert len(logprob_of) == args.batch_size  # rows are distinct, so matching by content is exact
    for epoch in range(args.update_epochs):
        calls = training[epoch * args.num_minibatches : (epoch + 1) * args.num_minibatches]
        assert all(len(c["x"]) == args.minibatch_size for c in calls)
        seen = torch.cat([rows(c) for c in calls])
        assert sorted(map(tuple, seen.tolist())) == sorted(map(tuple, samples.tolist()))
    first = training[0]
    old = torch.stack([logprob_of[tuple(r.tolist())] for r in rows(first)])
    ratio = (first["logprob"] - old).exp()
    assert torch.equal(ratio, torch.ones_like(ratio))


def test_short_run_copied_alone_writes_every_metric_and_anneals_lr(tmp_path):
    proc = run_script("ppo.py", *TINY, "--save-model", cwd=tmp_path, alone=True)
    assert_ok(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ppo.py", "runs"]
    (run_dir,) = run_dirs(tmp_path)
    scalars = read_every_metric(run_dir)
    assert_annealed_lr(scalars, 2.5e-4, 4)
    # [C3] the saved optimizer is Adam with epsilon 1e-5; the model file is complete and loads
    checkpoint = torch.load(run_dir / "ppo.pt", weights_only=True)
    assert checkpoint["optimizer"]["param_groups"][0]["eps"] == 1e-5
    assert not list(run_dir.glob("*.tmp"))
    assert "step" in proc.stdout and "SPS" in proc.stdout and "ETA" in proc.stdout  # progress line


def losses(cwd, *args):
    assert_ok(run_script("ppo.py", *TINY, *args, cwd=cwd))
    scalars = read_scalars(run_dirs(cwd)[-1])
    return {tag: values for tag, values in scalars.items() if tag.startswith("losses/")}


def test_same_seed_same_losses(tmp_path):
    first, second = losses(tmp_path / "a"), losses(tmp_path / "b")
    other_seed = losses(tmp_path / "c", "--seed", "2")
    assert first and first == second
    assert other_seed != first


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--env-id", "Pendulum-v1"], ["Box", "ppo_continuous_action.py"]),
        (["--num-minibatches", "3"], ["does not split", "--num-minibatches 3"]),
        (["--num-envs", "0"], ["--num-envs must be positive"]),
        (["--num-steps", "-5"], ["--num-steps must be positive"]),
        (["--env-id", "NoSuchEnv-v0"], ["NoSuchEnv-v0"]),
        (["--total-timesteps", "100"], ["less than one batch"]),
        (["--eval-checkpoint", "missing.pt"], ["missing.pt"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, args, fragments):
    assert_usage_error(run_script("ppo.py", *args, cwd=tmp_path), *fragments)


# A gymnasium env with MultiDiscrete actions, outside the repo: gymnasium makes an id "module:Name-v0" by importing the
# module first, so the scripts can be pointed at it with PYTHONPATH.
MULTIDISCRETE_ENV = """
import gymnasium as gym
import numpy as np

class Toy(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, True, False, {}

gym.register("MultiDiscreteToy-v0", entry_point=Toy)
"""


@pytest.mark.parametrize("script", ["ppo.py", "ppo_continuous_action.py"])
def test_a_multidiscrete_env_is_sent_to_the_multidiscrete_agent(tmp_path, script):
    """The hint names the Agent to take and says that script makes envpool envs (it can't run a gymnasium id)."""
    (tmp_path / "toy_envs.py").write_text(MULTIDISCRETE_ENV)
    proc = run_script(
        script, "--env-id", "toy_envs:MultiDiscreteToy-v0", cwd=tmp_path, env=test_env(PYTHONPATH=str(tmp_path))
    )
    assert_usage_error(proc, "MultiDiscrete action space", "Agent of ppo_multidiscrete.py", "envpool", "make_env")


def test_save_then_evaluate(tmp_path):
    assert_ok(run_script("ppo.py", *TINY, "--save-model", cwd=tmp_path))
    (model,) = (run_dirs(tmp_path)[0]).glob("*.pt")
    proc = run_script("ppo.py", "--eval-checkpoint", model, "--eval-episodes", "3", cwd=tmp_path)
    assert_ok(proc)
    episodes = [line for line in proc.stdout.splitlines() if line.startswith("eval episode")]
    assert len(episodes) == 3
    returns = [float(line.rsplit(" ", 1)[1]) for line in episodes]
    assert f"mean return {np.mean(returns):.2f}" in proc.stdout


def test_track_works_offline(tmp_path):
    proc = run_script("ppo.py", *TINY, "--track", cwd=tmp_path, env=test_env(WANDB_MODE="offline"))
    assert_ok(proc)
    (offline_run,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(offline_run.glob("*.wandb"))  # the run's data, for a later `wandb sync`


def test_track_without_a_server_falls_back_to_offline(tmp_path):
    """Online mode with a server that refuses connections (a closed local port, so no real network is touched):
    wandb.init gives up after its timeout (WANDB_INIT_TIMEOUT, here 5 s instead of wandb's 90), the run logs
    offline and trains to the end."""
    env = test_env(
        WANDB_MODE="online", WANDB_API_KEY="x" * 40, WANDB_BASE_URL="http://127.0.0.1:9", WANDB_INIT_TIMEOUT="5"
    )
    proc = run_script("ppo.py", *TINY, "--track", cwd=tmp_path, env=env, timeout=300)
    assert_ok(proc)
    assert "cannot reach the server" in proc.stderr and "logging offline" in proc.stderr
    # trained to the end
    assert any(line.startswith("step       256/256") for line in proc.stdout.splitlines())
    (offline_run,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(offline_run.glob("*.wandb"))


def test_capture_video(tmp_path):
    assert_ok(run_script("ppo.py", *TINY, "--capture-video", cwd=tmp_path))
    videos = list((tmp_path / "videos").rglob("*.mp4"))
    assert videos and all(v.stat().st_size > 0 for v in videos)


def test_ctrl_c_flushes_logs_and_saves(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "ppo.py"), "--save-model"],
        cwd=tmp_path,
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first_line = proc.stdout.readline()  # the first progress line: training is under way
    assert first_line.startswith("step")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted at step" in err and "Traceback" not in err
    (run_dir,) = run_dirs(tmp_path)
    assert "losses/value_loss" in read_scalars(run_dir)
    torch.load(run_dir / "ppo.pt", weights_only=True)


def test_learns_cartpole(tmp_path):
    """A fixed-seed short run: the return clearly rises (a learning check, not a benchmark)."""
    assert_ok(run_script("ppo.py", "--total-timesteps", "50000", cwd=tmp_path))
    returns = [v for _, v in read_scalars(run_dirs(tmp_path)[0])["charts/episodic_return"]]
    first, last = np.mean(returns[:20]), np.mean(returns[-20:])
    assert last > 100 and last > 4 * first, (first, last)


@pytest.mark.parametrize("anneal_clip", [False, True])
def test_clip_range_annealing(tmp_path, monkeypatch, anneal_clip):
    """[X1] with --anneal-clip the ratio's clip range shrinks like the learning rate; without it, it stays fixed."""
    monkeypatch.chdir(tmp_path)
    ranges, clamp = [], torch.clamp

    # the ratio's clamp is the one with bounds around 1
    def recording_clamp(x, *bounds, **named_bounds):
        if len(bounds) == 2 and isinstance(bounds[0], float) and bounds[0] > 0:
            ranges.append(bounds[1] - 1)
        return clamp(x, *bounds, **named_bounds)

    monkeypatch.setattr(torch, "clamp", recording_clamp)
    args = ppo.Args(
        num_envs=2, num_steps=32, total_timesteps=256, num_minibatches=2, update_epochs=1, anneal_clip=anneal_clip
    )
    ppo.main(args)
    n = args.num_iterations
    expected = [args.clip_coef * ((1 - i / n) if anneal_clip else 1) for i in range(n) for _ in range(2)]
    np.testing.assert_allclose(ranges, expected, rtol=1e-9)
