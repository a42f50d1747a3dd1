"""ppo_atari_lstm.py: the LSTM details [L1]-[L5] checked against independent computations (the rollout's own
log-probabilities among them), and the script's behaviour as a user sees it."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import (
    assert_annealed_lr,
    assert_ok,
    assert_orthogonal,
    assert_usage_error,
    load_script,
    need,
    read_every_metric,
    run_dirs,
    run_script,
)

need("ale_py")
need("cv2")

lstm = load_script("ppo_atari_lstm.py")
BREAKOUT = "BreakoutNoFrameskip-v4"
SHORT = [
    "--num-envs",
    "2",
    "--num-steps",
    "128",
    "--total-timesteps",
    "1024",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
]  # one epoch: the tests check the metrics, not learning
TINY = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128", "--num-minibatches", "2"]


def fake_envs(n=4):
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(0, 255, (1, 84, 84), np.uint8),
        single_action_space=gym.spaces.Discrete(n),
    )


def test_a7_one_frame():
    env = lstm.make_env(BREAKOUT, 0, False, "test")()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1, 84, 84) and obs.dtype == np.uint8
    env.close()


def test_l1_l2_init():
    agent = lstm.Agent(fake_envs())
    assert (agent.lstm.input_size, agent.lstm.hidden_size) == (512, 128)
    for name, param in agent.lstm.named_parameters():
        if "weight" in name:
            assert_orthogonal(param, 1.0, name)
        else:
            assert torch.all(param == 0), name
    h, c = agent.initial_state(3)
    assert h.shape == c.shape == (1, 3, 128) and not h.any() and not c.any()


def test_l3_state_is_zeroed_where_an_episode_starts():
    """The outputs after an episode start equal those of a fresh run from that step on, from a zero state; an env
    without an episode start is unaffected by its neighbour's."""
    torch.manual_seed(0)
    agent = lstm.Agent(fake_envs())
    T, B = 6, 2
    x = torch.randint(0, 256, (T * B, 1, 84, 84), dtype=torch.uint8)
    done = torch.zeros(T, B)
    done[3, 0] = 1  # env 0: obs 3 starts a new episode
    # a state carried from before the segment
    state = tuple(torch.randn(1, B, 128) for _ in range(2))
    with torch.no_grad():
        out, _ = agent.get_states(x, state, done.reshape(-1))
        out = out.reshape(T, B, 128)
        # independent: the LSTM stepped by hand, env 0 restarted at step 3 from zeros
        h, c = state[0][:, 0:1], state[1][:, 0:1]
        feats = agent.network(x.reshape(T, B, 1, 84, 84)[:, 0] / 255.0)
        expected = []
        for t in range(T):
            if t == 3:
                h, c = torch.zeros_like(h), torch.zeros_like(c)
            o, (h, c) = agent.lstm(feats[t].reshape(1, 1, 512), (h, c))
            expected.append(o[0, 0])
        torch.testing.assert_close(out[:, 0], torch.stack(expected))
        no_reset, _ = agent.get_states(x, state, torch.zeros(T * B))
    # env 1 had no episode start
    torch.testing.assert_close(out[:, 1], no_reset.reshape(T, B, 128)[:, 1])
    # the reset changed env 0
    assert not torch.allclose(out[3:, 0], no_reset.reshape(T, B, 128)[3:, 0])


@pytest.mark.parametrize("p_start", [0.0, 0.05, 0.5, 1.0])
def test_one_lstm_call_per_stretch_computes_what_one_call_per_step_computes(p_start):
    """get_states runs the LSTM once per stretch between episode starts; stepping it one step at a time, with the
    state zeroed where an episode starts, must give the same outputs, final state and gradients (to float rounding)."""
    torch.manual_seed(1)
    agent = lstm.Agent(fake_envs())
    T, B = 32, 3
    x = torch.randint(0, 256, (T * B, 1, 84, 84), dtype=torch.uint8)
    done = (torch.rand(T, B) < p_start).float()
    done[[4, 5, 17], [0, 0, 2]] = 1  # starts in two steps in a row, and in another env
    state = tuple(torch.randn(1, B, 128) for _ in range(2))

    def by_step():  # independent: one call per step
        feats = agent.network(agent.pixels(x)).reshape(T, B, 512)
        h, c = state
        outputs = []
        for t in range(T):
            keep = (1 - done[t]).reshape(1, B, 1)
            o, (h, c) = agent.lstm(feats[t : t + 1], (keep * h, keep * c))
            outputs.append(o[0])
        return torch.cat(outputs), (h, c)

    results = []
    for run in (lambda: agent.get_states(x, state, done.reshape(-1)), by_step):
        agent.zero_grad()
        out, (h, c) = run()
        (out.square().sum() + h.sum() + c.sum()).backward()
        results.append([out, h, c] + [p.grad.clone() for p in agent.parameters() if p.grad is not None])
    assert len(results[0]) == len(results[1]) > 3
    # the LSTM's weight gradients sum over the steps in another order: rounding
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())


class RecordingAgent(lstm.Agent):
    """The script's Agent, remembering every call: rollout calls (action=None) and training calls.
    break_l3 / break_l5 make training ignore the episode starts / the saved state: the checks must catch both."""

    calls = []
    break_l3 = break_l5 = False

    def get_action_and_value(self, x, lstm_state, done, action=None):
        training = action is not None
        RecordingAgent.calls.append(dict(training=training, x=x.clone(), done=done.clone()))
        if training and self.break_l3:
            done = torch.zeros_like(done)
        if training and self.break_l5:
            lstm_state = tuple(torch.zeros_like(s) for s in lstm_state)
        out = super().get_action_and_value(x, lstm_state, done, action)
        RecordingAgent.calls[-1]["logprob"] = out[1].detach().clone()
        return out


def run_recorded(tmp_path, monkeypatch, num_minibatches, update_epochs, break_l3=False, break_l5=False):
    """main() on Breakout, 2 envs x 64 steps x 2 iterations; returns per iteration (rollout calls, training calls)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(lstm, "Agent", RecordingAgent)
    monkeypatch.setattr(RecordingAgent, "break_l3", break_l3)
    monkeypatch.setattr(RecordingAgent, "break_l5", break_l5)
    RecordingAgent.calls = []
    args = lstm.Args(
        num_envs=2,
        num_steps=64,
        total_timesteps=256,
        num_minibatches=num_minibatches,
        update_epochs=update_epochs,
        seed=1,
    )
    lstm.main(args)
    rollout = [c for c in RecordingAgent.calls if not c["training"]]
    training = [c for c in RecordingAgent.calls if c["training"]]
    per_update = num_minibatches * update_epochs
    assert len(rollout) == 2 * 64 and len(training) == 2 * per_update
    return [(rollout[64 * i : 64 * (i + 1)], training[per_update * i : per_update * (i + 1)]) for i in range(2)]


def columns(rollout_calls, training_call):
    """The training call's env sequences matched to the rollout's env columns by their frames: for each training
    column, (rollout env, recomputed log-probs (T,), rollout log-probs (T,), rollout dones (T,))."""
    frames = torch.stack([c["x"] for c in rollout_calls])  # (T, num_envs, 1, 84, 84)
    T = frames.shape[0]
    x = training_call["x"].reshape(T, -1, 1, 84, 84)  # step-major: (T, mb_envs, ...)
    logprob = training_call["logprob"].reshape(T, -1)
    out = []
    for j in range(x.shape[1]):
        (env,) = [e for e in range(frames.shape[1]) if torch.equal(frames[:, e], x[:, j])]
        rollout_logprob = torch.stack([c["logprob"][env] for c in rollout_calls])
        rollout_done = torch.stack([c["done"][env] for c in rollout_calls])
        # the same starts
        torch.testing.assert_close(training_call["done"].reshape(T, -1)[:, j], rollout_done)
        out.append((env, logprob[:, j], rollout_logprob, rollout_done))
    return out


def max_logratio(iterations):
    """Largest |log ratio| of the first training call of each iteration (before any update), and whether an
    episode started inside a segment (not at its first step) in the sequences it covered."""
    worst, ends_inside = 0.0, False
    for rollout, training in iterations:
        for _, new, old, done in columns(rollout, training[0]):
            worst = max(worst, (new - old).abs().max().item())
            ends_inside |= bool(done[1:].any())
    return worst, ends_inside


def test_l5_ratio_is_one_before_the_update(tmp_path, monkeypatch):
    """[L3, L5] Re-running each env's sequence from the saved state, resetting at episode starts, gives back the
    rollout's log-probabilities (ratio 1), across episode ends inside the segment, in both iterations (the second
    starts from a non-zero state carried over from the first)."""
    worst, ends_inside = max_logratio(run_recorded(tmp_path / "ok", monkeypatch, 1, 1))
    assert ends_inside  # lives are lost inside the segments: the resets were exercised
    assert worst < 1e-5, worst
    # the same check catches a training pass that ignores the episode starts, or the saved state
    broken_l3, _ = max_logratio(run_recorded(tmp_path / "l3", monkeypatch, 1, 1, break_l3=True))
    broken_l5, _ = max_logratio(run_recorded(tmp_path / "l5", monkeypatch, 1, 1, break_l5=True))
    assert broken_l3 > 100 * max(worst, 1e-7) and broken_l5 > 100 * max(worst, 1e-7), (worst, broken_l3, broken_l5)


def test_l4_minibatches_are_whole_env_sequences(tmp_path, monkeypatch):
    for rollout, training in run_recorded(tmp_path, monkeypatch, num_minibatches=2, update_epochs=2):
        for epoch in range(2):
            calls = training[2 * epoch : 2 * epoch + 2]
            envs = [env for call in calls for env, *_ in columns(rollout, call)]
            # each env's whole sequence (64 steps, in order) once per epoch
            assert sorted(envs) == [0, 1]


def test_short_run_copied_alone_writes_every_metric(tmp_path):
    proc = run_script("ppo_atari_lstm.py", *SHORT, cwd=tmp_path, alone=True)
    assert_ok(proc)
    (run_dir,) = run_dirs(tmp_path)
    scalars = read_every_metric(run_dir)
    assert_annealed_lr(scalars, 2.5e-4, 4)
    assert "step" in proc.stdout and "SPS" in proc.stdout


def test_save_then_evaluate(tmp_path):
    assert_ok(run_script("ppo_atari_lstm.py", *TINY, "--save-model", cwd=tmp_path))
    (model,) = run_dirs(tmp_path)[0].glob("*.pt")
    proc = run_script("ppo_atari_lstm.py", "--eval-checkpoint", model, "--eval-episodes", "2", cwd=tmp_path)
    assert_ok(proc)
    assert len([line for line in proc.stdout.splitlines() if line.startswith("eval episode")]) == 2


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--num-envs", "6", "--num-minibatches", "4"], ["--num-envs 6", "groups of envs"]),
        (["--env-id", "CartPole-v1"], ["NoFrameskip-v4"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, args, fragments):
    assert_usage_error(run_script("ppo_atari_lstm.py", *args, cwd=tmp_path), *fragments)
