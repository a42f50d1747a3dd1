"""--bootstrap-truncated [X5]: the rewards that reach compute_gae are the env's rewards plus gamma * V(final obs)
exactly at the steps that a time limit cut (truncated, not terminated), and the env's rewards alone without the flag.
Each script's main() runs in-process, with recorders around its envs, Agent and compute_gae; V is recomputed here
one obs at a time. The envpool adapters' final obs is checked against raw envpool envs: the obs of the done step,
not the next episode's first."""

import copy
import functools
from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
import torch
import tyro

from helpers import SameStepReference, load_script, need, need_procgen

GAMMA = 0.99
gym.register(
    id="X5CartPole-v1",
    entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
    # a random policy's episodes: some fall (terminated) before 12 steps, some not
    max_episode_steps=12,
)


def short_breakout(**kwargs):
    """Breakout with ALE's own time limit cut to 240 frames, about 60 agent steps, whatever limit the script asks for
    (ppo2's 400k frames): random play loses lives (terminated, [A3]) and hits the limit (truncated) within a few hundred
    steps."""
    from ale_py.env import AtariEnv

    return AtariEnv(**{**kwargs, "max_num_frames_per_episode": 240})


gym.register(
    id="X5BreakoutNoFrameskip-v4",
    entry_point=short_breakout,
    kwargs=dict(game="breakout", obs_type="rgb", repeat_action_probability=0.0, full_action_space=False, frameskip=1),
)


class EnvRecorder(gym.Wrapper):
    """Outermost wrapper of one env: logs every step as the env returned it, before the vector env's autoreset."""

    def __init__(self, env, log):
        super().__init__(env)
        self.log = log

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.log.append((np.array(obs), float(reward), bool(terminated), bool(truncated)))
        return obs, reward, terminated, truncated, info


def run_main(monkeypatch, tmp_path, script, argv, before=None):
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

    # envpool: every step of the adapter, with its final obs at the dones
    if hasattr(module, "EnvpoolVecEnv"):

        class RecordedEnvpoolVecEnv(module.EnvpoolVecEnv):
            def step(self, actions):
                obs, reward, terminated, truncated, infos = super().step(actions)
                for i in range(self.num_envs):
                    final_obs = infos["final_obs"][i] if terminated[i] or truncated[i] else obs[i]
                    steps[i].append((np.array(final_obs), float(reward[i]), bool(terminated[i]), bool(truncated[i])))
                return obs, reward, terminated, truncated, infos

        monkeypatch.setattr(module, "EnvpoolVecEnv", RecordedEnvpoolVecEnv)
        recorded_make_env = make_env  # the one above is for gymnasium's vector env

    class RecordedAgent(module.Agent):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            agents.append(self)

    def recorded_compute_gae(rewards, *rest):
        segments.append(
            {
                "rewards": rewards.clone(),
                "agent": copy.deepcopy(agents[0]),
                "envs": copy.deepcopy(wrappers[0]) if wrappers else None,
            }
        )
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
    if before is not None:
        before(module)
    module.main(tyro.cli(module.Args, args=argv))
    return steps, segments, module


def segment_steps(steps, num_steps, k):
    """The logged steps of segment k: obs, reward, terminated, truncated, arrays of shape (num_steps, num_envs, ...)."""
    columns = [list(zip(*steps[i][k * num_steps : (k + 1) * num_steps])) for i in sorted(steps)]
    return [np.stack([np.asarray(c[j]) for c in columns], axis=1) for j in range(4)]


def expected_rewards(steps, segments, num_steps, value_of, flag=True):
    """The rewards each segment should feed to GAE, from the envs' own steps: reward + gamma * value_of(k, t, i, obs)
    where env i's step t of segment k was truncated and not terminated (flag on), the reward alone elsewhere."""
    ends = {"truncated": 0, "terminated": 0}
    for k, segment in enumerate(segments):
        final_obs, reward, terminated, truncated = segment_steps(steps, num_steps, k)
        ends["truncated"] += (truncated & ~terminated).sum()
        ends["terminated"] += terminated.sum()
        expected = torch.tensor(reward, dtype=torch.float32)
        for t, i in zip(*np.nonzero(truncated & ~terminated)) if flag else []:
            with torch.no_grad():
                expected[t, i] += GAMMA * value_of(k, t, i, torch.as_tensor(final_obs[t, i])[None]).item()
        yield segment["rewards"], expected
    # both kinds of ends: the test can tell them apart
    assert ends["truncated"] >= 2 and ends["terminated"] >= 2, ends


CARTPOLE = ["--env-id", "X5CartPole-v1", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256"]
BREAKOUT = ["--env-id", "X5BreakoutNoFrameskip-v4", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256"]


@pytest.mark.parametrize(
    "script, argv, flag",
    [
        ("ppo.py", CARTPOLE, True),
        ("ppo.py", CARTPOLE, False),
        ("ppo_atari.py", BREAKOUT, True),
        ("ppo_atari_multigpu.py", BREAKOUT, True),
    ],
)
def test_rewards_fed_to_gae(tmp_path, monkeypatch, script, argv, flag):
    if script != "ppo.py":
        need("ale_py")
    argv = argv + ["--num-minibatches", "2", "--update-epochs", "1", "--gamma", str(GAMMA)]
    steps, segments, _ = run_main(monkeypatch, tmp_path, script, argv + (["--bootstrap-truncated"] if flag else []))
    assert len(segments) == 2
    value_of = lambda k, t, i, obs: segments[k]["agent"].get_value(obs if obs.dtype == torch.uint8 else obs.float())
    for rewards, expected in expected_rewards(steps, segments, 64, value_of, flag):
        torch.testing.assert_close(rewards, expected, rtol=0, atol=1e-5)


def test_lstm_final_obs_valued_from_the_state_after_its_step(tmp_path, monkeypatch):
    """ppo_atari_lstm.py: V(final obs) continues the episode's LSTM state, the one after the step's forward pass,
    recomputed here from the inputs of each rollout step (obs, state before, done)."""
    need("ale_py")
    inputs = []

    def record_rollout(module):
        get_action_and_value = module.Agent.get_action_and_value

        def recorded(self, x, lstm_state, done, action=None):
            if torch.is_inference_mode_enabled():  # a rollout step, not training
                inputs.append((x.clone(), (lstm_state[0].clone(), lstm_state[1].clone()), done.clone()))
            return get_action_and_value(self, x, lstm_state, done, action)

        monkeypatch.setattr(module.Agent, "get_action_and_value", recorded)

    argv = BREAKOUT + ["--num-minibatches", "2", "--update-epochs", "1", "--gamma", str(GAMMA), "--bootstrap-truncated"]
    steps, segments, _ = run_main(monkeypatch, tmp_path, "ppo_atari_lstm.py", argv, before=record_rollout)

    def value_of(k, t, i, obs):
        agent = segments[k]["agent"]
        x, state, done = inputs[k * 64 + t]
        _, (h, c) = agent.get_states(x, state, done)
        # a state with a history, not zeros
        assert not torch.equal(h[:, i : i + 1], agent.initial_state(1)[0])
        return agent.get_value(obs, (h[:, i : i + 1], c[:, i : i + 1]), torch.zeros(1))

    for rewards, expected in expected_rewards(steps, segments, 64, value_of):
        torch.testing.assert_close(rewards, expected, rtol=0, atol=1e-5)


def test_continuous_final_obs_normalized_with_frozen_statistics(tmp_path, monkeypatch):
    """Pendulum truncates at step 200; one segment of 200 steps ends exactly there, so the statistics at that step
    are those at compute_gae. With the flag only that one reward changes, by gamma * V(final obs normalized with
    those statistics), and the statistics are the same as without the flag (the final obs did not update them)."""
    argv = [
        "--env-id",
        "Pendulum-v1",
        "--num-steps",
        "200",
        "--total-timesteps",
        "200",
        "--num-minibatches",
        "4",
        "--update-epochs",
        "1",
        "--gamma",
        str(GAMMA),
    ]
    runs = {
        flag: run_main(
            monkeypatch,
            tmp_path / str(flag),
            "ppo_continuous_action.py",
            argv + (["--bootstrap-truncated"] if flag else []),
        )
        for flag in (False, True)
    }
    (steps, (on,), _), (_, (off,), _) = runs[True], runs[False]
    final_obs, _, terminated, truncated = segment_steps(steps, 200, 0)
    assert truncated[-1, 0] and not terminated.any() and truncated.sum() == 1
    rms, off_rms = on["envs"].obs_rms, off["envs"].obs_rms
    # the reset obs and 200 steps, not the final obs
    assert rms.count == off_rms.count == pytest.approx(1e-4 + 201)
    np.testing.assert_array_equal(rms.mean, off_rms.mean)
    normalized = np.clip((final_obs[-1, 0] - rms.mean) / np.sqrt(rms.var + 1e-8), -10, 10)
    with torch.no_grad():
        value = on["agent"].get_value(torch.tensor(normalized, dtype=torch.float32)[None]).item()
    torch.testing.assert_close(on["rewards"][:-1], off["rewards"][:-1], rtol=0, atol=0)
    assert on["rewards"][-1, 0].item() == pytest.approx(off["rewards"][-1, 0].item() + GAMMA * value, abs=1e-5)
    assert abs(GAMMA * value) > 1e-3  # a bootstrap that the comparison can see


def test_envpool_rewards_fed_to_gae(tmp_path, monkeypatch):
    """ppo_atari_envpool.py's main with a 30-step time limit: the same loop lines as ppo_atari.py, fed by the adapter's
    final obs (whose pre-reset contents the tests below check against raw envpool envs)."""
    need("envpool")

    def limit(module):
        monkeypatch.setattr(module, "make_env", functools.partial(module.make_env, max_episode_steps=30))

    argv = [
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--total-timesteps",
        "256",
        "--num-threads",
        "1",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        "--gamma",
        str(GAMMA),
        "--bootstrap-truncated",
    ]
    steps, segments, _ = run_main(monkeypatch, tmp_path, "ppo_atari_envpool.py", argv, before=limit)
    value_of = lambda k, t, i, obs: segments[k]["agent"].get_value(obs)
    for rewards, expected in expected_rewards(steps, segments, 64, value_of):
        torch.testing.assert_close(rewards, expected, rtol=0, atol=1e-5)


class StepLog:
    """A raw single-env envpool env that keeps the obs of every step it takes (SameStepReference's reset step
    included), so that the obs of a done step, before the reset step, can be read back after SameStepReference.step."""

    def __init__(self, env):
        self.env, self.obs = env, []

    def reset(self):
        return self.env.reset()

    def step(self, *args):
        out = self.env.step(*args)
        self.obs.append(np.copy(out[0][0]))
        return out


def assert_final_obs_is_pre_reset(envs, make, seed, num_actions, steps, flatten=lambda obs: obs, min_truncations=2):
    """Step an envpool script's adapter and an independent reference side by side with random actions: at each done,
    infos["final_obs"] must be the obs of the done step itself, not the next episode's first (which obs holds)."""
    ref = SameStepReference(lambda s: StepLog(make(s)), seed, envs.num_envs)
    envs.reset()
    ref.reset()
    rng = np.random.default_rng(0)
    truncations = dones = 0
    for _ in range(steps):
        actions = rng.integers(num_actions, size=envs.num_envs)
        obs, _, terminated, truncated, infos = envs.step(actions)
        ref_obs, _, _, ref_truncated, _ = ref.step(actions)
        np.testing.assert_array_equal(truncated, ref_truncated)
        truncations += truncated.sum()
        for i in np.flatnonzero(terminated | truncated):
            dones += 1
            final_obs = flatten(ref.envs[i].obs[-2])  # [-1] is the reset step's
            np.testing.assert_array_equal(infos["final_obs"][i], final_obs)
            assert not np.array_equal(obs[i], final_obs)
    assert truncations >= min_truncations and dones >= 2, (truncations, dones)
    envs.close()


def test_envpool_atari_final_obs_is_pre_reset():
    envpool = need("envpool")
    module = load_script("ppo_atari_envpool.py")
    # the script's own options
    options = module.make_env("Breakout-v5", 1, 0, 1, False, "test").envs.config
    options = {
        k: options[k]
        for k in (
            "noop_max",
            "frame_skip",
            "episodic_life",
            "use_fire_reset",
            "reward_clip",
            "stack_num",
            "repeat_action_probability",
        )
    }
    envs = module.make_env("Breakout-v5", 2, 5, 1, False, "test", max_episode_steps=30)
    make = lambda s: envpool.make(
        "Breakout-v5", env_type="gymnasium", num_envs=1, seed=s, max_episode_steps=30, **options
    )
    assert_final_obs_is_pre_reset(envs, make, 5, 4, 80)


@pytest.mark.parametrize("script", ["ppo_multidiscrete.py", "ppo_multidiscrete_mask.py"])
def test_envpool_multidiscrete_final_obs_is_pre_reset(script):
    """The adapter around envpool's CartPole with a 10-step limit, its Discrete(2) actions seen as MultiDiscrete([2])
    (the adapter's action mask needs nvec; the actions themselves pass through unchanged)."""
    envpool = need("envpool")
    module = load_script(script)
    make = lambda s, n=1: envpool.make("CartPole-v1", env_type="gymnasium", num_envs=n, seed=s, max_episode_steps=10)
    envs = module.EnvpoolVecEnv(make(3, 2), False, "test")
    envs.single_action_space = gym.spaces.MultiDiscrete([2])
    assert_final_obs_is_pre_reset(envs, make, 3, 2, 60, flatten=lambda obs: obs.astype(np.float32))


def test_envpool_procgen_final_obs_is_pre_reset():
    """envpool's procgen games end their episodes themselves (max_episode_steps does not cut them), so here the dones
    are Bigfish's own; the adapter's final obs is the same line for every kind of done. One env: a single-env pool
    cannot reproduce the seeds of a larger procgen pool's envs."""
    envpool = need_procgen()
    module = load_script("ppo_procgen.py")
    make = lambda s: envpool.make("BigfishEasy-v0", env_type="gymnasium", num_envs=1, seed=s)
    envs = module.EnvpoolVecEnv(make(2), False, "test")
    assert_final_obs_is_pre_reset(envs, make, 2, 15, 250, min_truncations=0)
