"""Where the scripts follow what openai/baselines ppo2 (and train-procgen) actually run: the gamma of the reward
scaling's return statistics [M8], the IMPALA CNN's init [P1], the frame stack at episode ends [A7] and the place of
the episode statistics (baselines' Monitor), each checked against an independent computation."""

from collections import deque
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import (
    SameStepReference,
    assert_orthogonal,
    load_script,
    need,
    need_procgen,
    scaled_rewards_reference,
    wrappers,
)

BREAKOUT = "BreakoutNoFrameskip-v4"
ALE_SCRIPTS = ["ppo_atari.py", "ppo_atari_lstm.py", "ppo_atari_multigpu.py"]


def spy_on_rewards(module, class_name, inner, monkeypatch):
    """Replace module.<class_name> (a vector env wrapper that scales rewards) by a subclass that logs, step by step, the
    raw rewards and ends of the env it wraps (its attribute `inner`) and the rewards it hands to the agent."""
    raw, ends, seen = [], [], []

    class Spy(getattr(module, class_name)):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            env = getattr(self, inner)
            inner_step = env.step

            def step(actions, *env_ids):
                out = inner_step(actions, *env_ids)
                # envpool's reset steps of the finished envs (procgen) are no transitions
                if not env_ids:
                    raw.append(np.copy(out[1]))
                    ends.append(np.logical_or(out[2], out[3]))
                return out

            env.step = step

        def step(self, actions):
            out = super().step(actions)
            seen.append(np.copy(out[1]))
            return out

    monkeypatch.setattr(module, class_name, Spy)
    return raw, ends, seen


def assert_scaled_with_gamma_099(raw, ends, seen, gamma):
    """The rewards the agent saw are the reference's with gamma 0.99, and measurably not those with --gamma."""
    assert sum(np.count_nonzero(r) for r in raw) >= 3, "too few rewards to tell two gammas apart"
    np.testing.assert_allclose(seen, scaled_rewards_reference(raw, ends, 0.99), rtol=1e-6)
    assert not np.allclose(seen, scaled_rewards_reference(raw, ends, gamma), rtol=1e-3)


def test_m8_procgen_return_statistics_use_gamma_099_not_the_ppo_gamma(tmp_path, monkeypatch):
    need_procgen()
    procgen = load_script("ppo_procgen.py")
    monkeypatch.chdir(tmp_path)
    raw, ends, seen = spy_on_rewards(procgen, "EnvpoolVecEnv", "envs", monkeypatch)
    # fruitbot: random play gets rewards every few dozen steps, enough of them to tell the two gammas apart
    procgen.main(
        procgen.Args(
            env_id="fruitbot",
            num_envs=4,
            num_steps=64,
            num_minibatches=4,
            update_epochs=1,
            total_timesteps=256,
            num_threads=1,
            gamma=0.999,
        )
    )
    assert len(seen) == 64
    assert_scaled_with_gamma_099(raw, ends, seen, 0.999)


def test_m8_continuous_return_statistics_use_gamma_099_not_the_ppo_gamma(tmp_path, monkeypatch):
    pca = load_script("ppo_continuous_action.py")
    monkeypatch.chdir(tmp_path)
    raw, ends, seen = spy_on_rewards(pca, "NormalizeVecEnv", "env", monkeypatch)
    pca.main(
        pca.Args(
            env_id="Pendulum-v1",
            num_envs=2,
            num_steps=64,
            num_minibatches=2,
            update_epochs=1,
            total_timesteps=128,
            gamma=0.9,
        )
    )
    assert len(seen) == 64
    assert_scaled_with_gamma_099(raw, ends, seen, 0.9)


def test_p1_impala_convolutions_and_dense_layer_get_glorot_uniform_and_zero_biases():
    """TensorFlow's defaults, as in baselines' build_impala_cnn: weights uniform in +-sqrt(6 / (fan_in + fan_out)),
    so their std is that bound / sqrt(3); biases 0. PyTorch's default (bound 1 / sqrt(fan_in), nonzero biases) must
    not pass. The policy and value heads keep [C2]'s orthogonal init, gains 0.01 and 1."""
    procgen = load_script("ppo_procgen.py")
    envs = SimpleNamespace(
        single_observation_space=gym.spaces.Box(0, 255, (3, 64, 64), np.uint8),
        single_action_space=gym.spaces.Discrete(15),
    )
    torch.manual_seed(0)
    agent = procgen.Agent(envs)
    layers = [m for m in agent.network.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 15 + 1  # 3 stages of 5 convolutions, then the 256-unit dense layer
    pooled, default_spread = [], []
    for layer in layers:
        w = layer.weight.detach().double()
        receptive = w[0, 0].numel()  # kernel height x width (1 for the dense layer)
        fan_in, fan_out = w.shape[1] * receptive, w.shape[0] * receptive
        bound = np.sqrt(6 / (fan_in + fan_out))
        assert torch.all(layer.bias == 0), layer
        assert w.abs().max() <= bound, layer
        np.testing.assert_allclose(w.std(), bound / np.sqrt(3), rtol=0.1, err_msg=str(layer))
        pooled.append((w / bound).flatten())
        default_spread.append(torch.full((w.numel(),), (1 / np.sqrt(fan_in) / bound) ** 2 / 3))
    # all weights in units of their layer's bound: uniform in [-1, 1], std 1/sqrt(3), to 1%; with PyTorch's default
    # bounds the same spread would be far off
    pooled = torch.cat(pooled)
    np.testing.assert_allclose(pooled.std(), 1 / np.sqrt(3), rtol=0.01)
    assert abs(torch.cat(default_spread).mean().sqrt() - 1 / np.sqrt(3)) > 0.1
    assert_orthogonal(agent.actor.weight, 0.01)
    assert_orthogonal(agent.critic.weight, 1.0)
    assert torch.all(agent.actor.bias == 0) and torch.all(agent.critic.bias == 0)


def ale_vector_env(script):
    """The script's env for Breakout, in the vector env main() makes (SAME_STEP autoreset, as baselines' VecEnv)."""
    ale_py = need("ale_py")
    need("cv2")
    gym.register_envs(ale_py)
    return gym.vector.SyncVectorEnv(
        [script.make_env(BREAKOUT, 0, False, "test")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


@pytest.mark.parametrize("name", ["ppo_atari.py", "ppo_atari_multigpu.py"])
def test_a7_stack_restarts_from_zeros_after_a_lost_life_and_a_game_over(name):
    """baselines' VecFrameStack: on every done the env's stack is zeroed, then the new frame added. Compared with a
    stack built here over the single frames of a twin env (same seed, same actions, reset where the script's ends)."""
    script = load_script(name)
    envs = ale_vector_env(script)
    twin = wrappers(script.make_env(BREAKOUT, 0, False, "test")())
    (stacker,) = [w for w in twin if isinstance(w, gym.wrappers.FrameStackObservation)]
    single = stacker.env  # the frames before stacking
    obs, _ = envs.reset(seed=5)
    frame, _ = single.reset(seed=5)
    expected = deque([np.zeros_like(frame)] * 3 + [frame], maxlen=4)
    np.testing.assert_array_equal(obs[0], np.stack(expected))
    lost_lives = games_over = 0
    while games_over < 2:
        # NOOP: the ball FIRE served is never returned, so lives go fast
        obs, _, terminated, truncated, infos = envs.step(np.zeros(1, dtype=np.int64))
        frame, _, t, u, _ = single.step(0)
        assert (t, u) == (terminated[0], truncated[0])
        if terminated[0] or truncated[0]:
            frame, _ = single.reset()
            expected.extend([np.zeros_like(frame)] * 3)
            game_over = "final_info" in infos and "episode" in infos["final_info"]
            games_over += game_over
            lost_lives += not game_over
            assert not obs[0, :3].any() and obs[0, 3].any()  # 3 zero frames + the new one
        expected.append(frame)
        np.testing.assert_array_equal(obs[0], np.stack(expected))
    assert lost_lives >= 8, lost_lives
    envs.close()


@pytest.mark.parametrize("name", ALE_SCRIPTS)
def test_episode_statistics_count_agent_steps_and_raw_score_of_whole_games(name):
    """Statistics where baselines' Monitor sits, after [A1] and [A2]: episodic_length is the number of steps of 4
    frames the whole game took (counted here at MaxAndSkip's step: the agent's steps, and the no-op and FIRE steps
    of the [A3, A4] resets), episodic_return the raw rewards of those steps, summed."""
    script = load_script(name)
    envs = ale_vector_env(script)
    (skip,) = [w for w in wrappers(envs.envs[0]) if isinstance(w, gym.wrappers.MaxAndSkipObservation)]
    counted = {"steps": 0, "raw": 0.0, "last game": None}
    skip_step, skip_reset = skip.step, skip.reset

    def step(action):
        out = skip_step(action)
        counted["steps"] += 1
        counted["raw"] += out[1]
        return out

    # a new game: NoopReset's no-ops are single frames below MaxAndSkip, not steps
    def reset(**kwargs):
        counted.update({"last game": (counted["steps"], counted["raw"]), "steps": 0, "raw": 0.0})
        return skip_reset(**kwargs)

    skip.step, skip.reset = step, reset
    envs.reset(seed=1)
    rng = np.random.default_rng(0)
    games, agent_steps, lost_lives = [], 0, 0
    while len(games) < 2:
        _, _, terminated, truncated, infos = envs.step(rng.integers(4, size=1))
        agent_steps += 1
        if "final_info" in infos and "episode" in infos["final_info"]:
            # the autoreset has begun the next game: "last game" is this one
            episode = infos["final_info"]["episode"]
            games.append((int(episode["l"][0]), float(episode["r"][0]), *counted["last game"], agent_steps, lost_lives))
            agent_steps = lost_lives = 0
        elif terminated[0]:
            lost_lives += 1
    for length, ret, step_count, raw_sum, agent_steps, lost_lives in games:
        assert lost_lives == 4  # Breakout's 5 lives: whole games, not lives
        assert (length, ret) == (step_count, raw_sum)
        # raw points (Breakout's are 1 to 7), not clipped rewards
        assert ret > 0 and ret == int(ret)
        # the agent's own steps, plus FIRE and action 2 at the game's start and a no-op, FIRE, action 2 per lost life
        assert length == agent_steps + 2 + 3 * lost_lives
    envs.close()


def test_a7_envpool_stack_restarts_from_zeros_after_a_lost_life_and_a_game_over():
    """ppo_atari_envpool.py reproduces VecFrameStack too: the frames of envpool's stack that date from before the env's
    last done (a lost life's or a game over's) are zeros, the others are envpool's, compared with a raw envpool env."""
    need("envpool")
    script = load_script("ppo_atari_envpool.py")
    seed = 3
    envs = script.make_env("Breakout-v5", 1, seed, 1, False, "test")
    ref = SameStepReference(lambda s: script.make_env("Breakout-v5", 1, s, 1, False, "test").envs, seed, 1)

    def check(obs, ref_obs, fresh):  # fresh: frames since the last done, the newest included
        np.testing.assert_array_equal(obs[0, -fresh:], ref_obs[0, -fresh:])
        # zeros where envpool has older frames
        assert not obs[0, :-fresh].any() and ref_obs[0, :-fresh].any()

    fresh = 1
    check(envs.reset()[0], ref.reset(), fresh)
    lost_lives = games_over = 0
    while games_over < 2:
        # NOOP: the ball FIRE served is never returned, so lives go fast
        actions = np.zeros(1, dtype=np.int64)
        obs, _, terminated, truncated, _ = envs.step(actions)
        ref_obs, _, _, _, (ref_info,) = ref.step(actions)
        done = terminated[0] or truncated[0]
        games_over += done and bool(ref_info["terminated"])
        lost_lives += done and not ref_info["terminated"]
        fresh = 1 if done else fresh + 1
        if fresh < 4:
            check(obs, ref_obs, fresh)
        else:
            np.testing.assert_array_equal(obs, ref_obs)
    assert lost_lives >= 8, lost_lives
    envs.close()


@pytest.mark.parametrize("name", ALE_SCRIPTS + ["ppo_atari_envpool.py"])
def test_atari_time_limit_is_ppo2s(name):
    """ppo2 made its envs from gym's *NoFrameskip-v4 registration, which truncated a game at 100,000 x its frame skip
    (4; 3 in SpaceInvaders) frames: 400,000 frames, 100,000 agent steps (SpaceInvaders: 300,000 and 75,000), not the
    108,000 frames of ale-py's v4 ids and envpool's default. Read off the env each script builds."""
    script = load_script(name)
    for game, frames in (("Breakout", 400000), ("SpaceInvaders", 300000)):
        if name == "ppo_atari_envpool.py":
            need("envpool")
            envs = script.make_env(f"{game}-v5", 1, 1, 1, False, "test")
            assert envs.envs.config["max_episode_steps"] * envs.envs.config["frame_skip"] == frames
            envs.close()
        else:
            gym.register_envs(need("ale_py"))
            env = script.make_env(f"{game}NoFrameskip-v4", 0, False, "test")()
            assert env.unwrapped.ale.getInt("max_num_frames_per_episode") == frames
            env.close()


def tf_same_max_pool(x, k=3, s=2):
    """TensorFlow's max_pool2d(padding="same") in numpy, from its definition: ceil(n / s) windows per axis, the input
    padded (with -inf) by max((out - 1) * s + k - n, 0) in all, the smaller half before."""
    pads = []
    for n in x.shape[-2:]:
        total = max((-(-n // s) - 1) * s + k - n, 0)
        pads.append((total // 2, total - total // 2))
    padded = np.pad(x, [(0, 0)] * (x.ndim - 2) + pads, constant_values=-np.inf)
    out = np.empty(x.shape[:-2] + tuple(-(-n // s) for n in x.shape[-2:]))
    for i in range(out.shape[-2]):
        for j in range(out.shape[-1]):
            out[..., i, j] = padded[..., i * s : i * s + k, j * s : j * s + k].max(axis=(-2, -1))
    return out


def test_p1_impala_max_pool_pads_as_tensorflow():
    """baselines' IMPALA CNN pools 3x3, stride 2, with TF's "same" padding: on an even size one row and column after
    the frame only (nn.MaxPool2d(padding=1) pads both sides, which shifts every window by a pixel)."""
    stage = load_script("ppo_procgen.py").ConvSequence(4, 4)
    stage.conv = stage.res0 = stage.res1 = torch.nn.Identity()  # the pool alone
    for size in (64, 32, 16, 15, 9):  # the stages' sizes, and odd ones
        x = torch.randn(2, 4, size, size, generator=torch.Generator().manual_seed(size))
        np.testing.assert_array_equal(stage(x).numpy(), tf_same_max_pool(x.numpy()))
    assert not torch.equal(stage(x := torch.randn(1, 4, 64, 64)), torch.nn.MaxPool2d(3, 2, padding=1)(x))


def envpool_breakout_steps(script, seed, limit, actions):
    """Each step of a raw envpool Breakout made with ppo_atari_envpool.py's options and the time limit `limit`: (obs,
    terminated, truncated, info), the reset step after a done taken at once and not listed."""
    env = script.make_env("Breakout-v5", 1, seed, 1, False, "test", max_episode_steps=limit).envs
    env.reset()
    steps = []
    for action in actions:
        obs, _, terminated, truncated, info = env.step(action)
        steps.append(
            (
                obs[0].copy(),
                terminated[0],
                truncated[0],
                {key: int(info[key][0]) for key in ("lives", "terminated", "elapsed_step")},
            )
        )
        if terminated[0] or truncated[0]:
            env.step(action)
    env.close()
    return steps


def test_envpool_at_the_time_limit_ends_as_ppo_atari():
    """A life lost, or the game over, on the last step the time limit allows: envpool calls it a truncation only, so
    --bootstrap-truncated [X5] would bootstrap across a real end; ppo_atari.py's wrappers (EpisodicLife, the ALE) call
    it a termination too, and so must the adapter. And the final obs [X5] is zeroed like any other obs [A7]: frames
    from before the last done are zeros."""
    need("envpool")
    script = load_script("ppo_atari_envpool.py")
    # NOOP: the ball FIRE served is never returned; (steps, envs)
    seed, actions = 3, np.zeros((600, 1), dtype=np.int64)
    untimed = envpool_breakout_steps(script, seed, 100000, actions)
    life = next(info["elapsed_step"] for _, ended, _, info in untimed if ended and not info["terminated"])
    over = next(info["elapsed_step"] for _, ended, _, info in untimed if ended and info["terminated"])
    for limit in (life, over, life + 1):
        raw = envpool_breakout_steps(script, seed, limit, actions)
        envs = script.make_env("Breakout-v5", 1, seed, 1, False, "test", max_episode_steps=limit)
        envs.reset()
        for t, action in enumerate(actions):
            _, _, terminated, truncated, infos = envs.step(action)
            if truncated[0]:
                break
        raw_obs, raw_terminated, raw_truncated, info = raw[t]
        assert raw_truncated and info["elapsed_step"] == limit
        # the end on the last step: envpool says truncated only, the adapter terminated too
        if limit in (life, over):
            assert not raw_terminated and terminated[0], (limit, t)
        # truncated one step after a lost life: the two frames from before it are zeros, as ppo_atari.py's
        else:
            assert not terminated[0] and raw[t - 1][1]
            assert not infos["final_obs"][0, :2].any() and raw_obs[:2].any()
            np.testing.assert_array_equal(infos["final_obs"][0, 2:], raw_obs[2:])
        envs.close()
