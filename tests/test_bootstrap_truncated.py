"""--bootstrap-truncated [X5]: the rewards that reach compute_gae are the env's rewards plus gamma * V(final obs)
exactly at the steps that a time limit cut (truncated, not terminated), and the env's rewards alone without the flag.
The final obs is the one the env returned at truncation (not the next episode's first), each script's main() runs
in-process with recorders around make_env, Agent and compute_gae, and V is recomputed here one obs at a time."""

import copy
from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
import torch
import tyro

from helpers import load_script

GAMMA = 0.99
gym.register(id="X5CartPole-v1", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
             max_episode_steps=12)  # a random policy's episodes: some fall (terminated) before 12 steps, some not


class EnvRecorder(gym.Wrapper):
    """Outermost wrapper of one env: logs every step as the env returned it, before the vector env's autoreset."""

    def __init__(self, env, log):
        super().__init__(env)
        self.log = log

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.log.append((np.array(obs), float(reward), bool(terminated), bool(truncated)))
        return obs, reward, terminated, truncated, info


def run_main(monkeypatch, tmp_path, script, argv):
    """Run script's main(argv) in tmp_path; returns (steps, segments, module): steps[i] lists env i's logged steps,
    segments one dict per compute_gae call with the rewards it got and a copy of the agent (and envs) at that time."""
    module = load_script(script)
    tmp_path.mkdir(exist_ok=True)
    monkeypatch.chdir(tmp_path)
    steps, segments, agents, wrappers = defaultdict(list), [], [], []
    make_env, compute_gae = module.make_env, module.compute_gae

    def recorded_make_env(env_id, idx, *rest):
        thunk = make_env(env_id, idx, *rest)
        return lambda: EnvRecorder(thunk(), steps[idx])

    class RecordedAgent(module.Agent):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            agents.append(self)

    def recorded_compute_gae(rewards, *rest):
        segments.append({"rewards": rewards.clone(), "agent": copy.deepcopy(agents[0]),
                         "envs": copy.deepcopy(wrappers[0]) if wrappers else None})
        return compute_gae(rewards, *rest)

    monkeypatch.setattr(module, "make_env", recorded_make_env)
    monkeypatch.setattr(module, "Agent", RecordedAgent)
    monkeypatch.setattr(module, "compute_gae", recorded_compute_gae)
    if hasattr(module, "NormalizeVecEnv"):
        class RecordedNormalizeVecEnv(module.NormalizeVecEnv):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                wrappers.append(self)

        monkeypatch.setattr(module, "NormalizeVecEnv", RecordedNormalizeVecEnv)
    module.main(tyro.cli(module.Args, args=argv))
    return steps, segments, module


def segment_steps(steps, num_steps, k):
    """The logged steps of segment k: (obs, reward, terminated, truncated) arrays of shape (num_steps, num_envs, ...)."""
    columns = [list(zip(*steps[i][k * num_steps : (k + 1) * num_steps])) for i in sorted(steps)]
    return [np.stack([np.asarray(c[j]) for c in columns], axis=1) for j in range(4)]


@pytest.mark.parametrize("flag", [True, False])
def test_ppo_rewards_fed_to_gae(tmp_path, monkeypatch, flag):
    num_steps, num_envs = 64, 2
    argv = ["--env-id", "X5CartPole-v1", "--num-envs", num_envs, "--num-steps", num_steps, "--total-timesteps", 256,
            "--num-minibatches", 2, "--update-epochs", 1, "--gamma", GAMMA] + (["--bootstrap-truncated"] if flag else [])
    steps, segments, _ = run_main(monkeypatch, tmp_path, "ppo.py", list(map(str, argv)))
    assert len(segments) == 2
    seen = {"cut": 0, "fell": 0}
    for k, segment in enumerate(segments):
        final_obs, reward, terminated, truncated = segment_steps(steps, num_steps, k)
        cut = truncated & ~terminated
        seen["cut"], seen["fell"] = seen["cut"] + cut.sum(), seen["fell"] + terminated.sum()
        expected = torch.tensor(reward, dtype=torch.float32)
        for t, i in zip(*np.nonzero(cut)) if flag else []:
            with torch.no_grad():
                value = segment["agent"].get_value(torch.tensor(final_obs[t, i], dtype=torch.float32)[None])
            expected[t, i] += GAMMA * value.item()
        torch.testing.assert_close(segment["rewards"], expected, rtol=0, atol=1e-5)
    assert seen["cut"] >= 2 and seen["fell"] >= 2  # both kinds of ends occurred: the test could tell them apart


def test_continuous_final_obs_normalized_with_frozen_statistics(tmp_path, monkeypatch):
    """Pendulum truncates at step 200; one segment of 200 steps ends exactly there, so the statistics at that step
    are those at compute_gae. With the flag only that one reward changes, by gamma * V(final obs normalized with
    those statistics), and the statistics are the same as without the flag (the final obs did not update them)."""
    argv = ["--env-id", "Pendulum-v1", "--num-steps", "200", "--total-timesteps", "200", "--num-minibatches", "4",
            "--update-epochs", "1", "--gamma", str(GAMMA)]
    runs = {flag: run_main(monkeypatch, tmp_path / str(flag), "ppo_continuous_action.py",
                           argv + (["--bootstrap-truncated"] if flag else []))
            for flag in (False, True)}
    (steps, (on,), _), (_, (off,), _) = runs[True], runs[False]
    final_obs, _, terminated, truncated = segment_steps(steps, 200, 0)
    assert truncated[-1, 0] and not terminated.any() and truncated.sum() == 1
    rms, off_rms = on["envs"].obs_rms, off["envs"].obs_rms
    assert rms.count == off_rms.count == pytest.approx(1e-4 + 201)  # the reset obs and 200 steps, not the final obs
    np.testing.assert_array_equal(rms.mean, off_rms.mean)
    normalized = np.clip((final_obs[-1, 0] - rms.mean) / np.sqrt(rms.var + 1e-8), -10, 10)
    with torch.no_grad():
        value = on["agent"].get_value(torch.tensor(normalized, dtype=torch.float32)[None]).item()
    torch.testing.assert_close(on["rewards"][:-1], off["rewards"][:-1], rtol=0, atol=0)
    assert on["rewards"][-1, 0].item() == pytest.approx(off["rewards"][-1, 0].item() + GAMMA * value, abs=1e-5)
    assert abs(GAMMA * value) > 1e-3  # a bootstrap that the comparison can see
