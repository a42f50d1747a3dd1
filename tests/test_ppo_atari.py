"""ppo_atari.py: the Atari preprocessing [A1]-[A7] checked on the real emulator against independent computations,
the network [A8]-[A9], and the script's behaviour as a user sees it."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import (
    assert_annealed_lr,
    assert_breakout_games,
    assert_ok,
    assert_orthogonal,
    assert_usage_error,
    load_script,
    need,
    read_every_metric,
    run_dirs,
    run_script,
    test_env,
    wrappers,
)

ale_py = need("ale_py")
cv2 = need("cv2")
gym.register_envs(ale_py)

atari = load_script("ppo_atari.py")
BREAKOUT = "BreakoutNoFrameskip-v4"
# 4 iterations of 2 envs x 128 steps: 512 agent steps per env, enough for random play to end a few Breakout games
SHORT = [
    "--num-envs",
    "2",
    "--num-steps",
    "128",
    "--total-timesteps",
    "1024",
    "--update-epochs",
    "1",
]  # one epoch: the tests check the metrics, not learning
TINY = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128"]


def make(env_id=BREAKOUT):
    return atari.make_env(env_id, 0, False, "test")()


def test_a3_lost_life_ends_episode_but_reset_continues_the_game():
    env = make()
    ale = env.unwrapped.ale
    env.reset(seed=3)
    assert ale.lives() == 5
    games, lives_seen, clipped_sum, steps = 0, [], 0.0, 0
    while games < 2:
        # NOOP after the FIRE of each reset: the ball is in play and the paddle never moves, so lives go fast
        _, reward, terminated, truncated, info = env.step(0)
        clipped_sum += reward
        steps += 1
        assert steps < 5000, "no life lost in 5000 steps"
        if not (terminated or truncated):
            continue
        assert terminated and not truncated
        lives, frame = ale.lives(), ale.getEpisodeFrameNumber()
        # a lost life: done for learning, no whole-game statistics, and reset() continues the game
        if lives > 0:
            assert "episode" not in info
            env.reset()
            assert ale.lives() == lives  # not back to 5
            # the same game: its frame counter went on (a no-op step, then FIRE and action 2: 3 x 4 frames)
            assert ale.getEpisodeFrameNumber() == frame + 12
            lives_seen.append(lives)
        else:  # the last life: the game is over and the statistics cover the whole game
            assert lives_seen == [4, 3, 2, 1]
            # recorded after [A1, A2], where baselines' Monitor is: steps of 4 frames of the whole game, the [A1]
            # no-op frames (1 to 30) not counted (test_fidelity.py counts the steps exactly)
            assert frame - 30 <= 4 * info["episode"]["l"] <= frame
            # Breakout's raw rewards are >= 1 where the clipped are 1
            assert info["episode"]["r"] >= clipped_sum
            env.reset()
            assert ale.lives() == 5 and ale.getEpisodeFrameNumber() <= 30 + 8  # a new game
            games, lives_seen, clipped_sum = games + 1, [], 0.0
    env.close()


@pytest.mark.parametrize("script", ["ppo_atari.py", "ppo_atari_lstm.py", "ppo_atari_multigpu.py"])
def test_a3_lives_counter_at_zero_ends_no_episode_while_the_game_goes_on(script):
    """BankHeist's lives counter drops to 0 when the last life begins, and the game goes on. Step by step against the
    raw emulator, an episode ends exactly when baselines' EpisodicLifeEnv ends one: the game is over, or the counter
    fell and is still above 0 (`lives < self.lives and lives > 0`): not on the step to 0."""
    env = load_script(script).make_env("BankHeistNoFrameskip-v4", 0, False, "test")()
    ale = env.unwrapped.ale
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    steps_at_zero = games_over = 0
    for _ in range(1500):
        before = ale.lives()
        _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        lives = ale.lives()
        assert not truncated
        assert terminated == (ale.game_over() or 0 < lives < before), (before, lives, ale.game_over())
        steps_at_zero += lives == 0 and not ale.game_over()
        games_over += ale.game_over()
        if terminated:
            env.reset()
    # the case arose, and ended games
    assert steps_at_zero >= 20 and games_over >= 1, (steps_at_zero, games_over)
    env.close()


def test_a1_a4_reset_plays_1_to_30_noops_then_fire():
    frames = []
    for seed in range(8):
        env = make()
        env.reset(seed=seed)
        frames.append(env.unwrapped.ale.getEpisodeFrameNumber())
        env.close()
    # k no-op frames (1 <= k <= 30) [A1], then FIRE and action 2, one agent step (4 frames) each [A4]
    assert all(1 + 8 <= f <= 30 + 8 for f in frames), frames
    assert len(set(frames)) > 1, frames  # random, and drawn from the seeded env


def test_a4_fire_reset_only_for_games_with_fire():
    assert "FIRE" in make(BREAKOUT).unwrapped.get_action_meanings()
    assert any(isinstance(w, atari.FireReset) for w in wrappers(make(BREAKOUT)))
    freeway = make("FreewayNoFrameskip-v4")
    assert "FIRE" not in freeway.unwrapped.get_action_meanings()
    assert not any(isinstance(w, atari.FireReset) for w in wrappers(freeway))


# Breakout loses lives, Pong scores often
@pytest.mark.parametrize("env_id", [BREAKOUT, "PongNoFrameskip-v4"])
def test_a2_a5_a6_a7_step_against_the_raw_emulator(env_id):
    """Each agent step, replayed from a saved emulator state frame by frame: 4 frames of the same action, rewards
    summed then clipped to their sign, the max of the last two RGB frames, grayscale then 84x84 area resize."""
    env = make(env_id)
    raw = env.unwrapped
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and env.observation_space.shape == (4, 84, 84)
    # [A7] a reset stacks 3 zero frames and its own, as VecFrameStack
    assert not obs[:3].any() and obs[3].any()
    rng = np.random.default_rng(0)
    rewards_seen = ends_seen = 0
    for _ in range(300):
        action = int(rng.integers(env.action_space.n))
        state = raw.ale.cloneState()
        lives = raw.ale.lives()
        new_obs, reward, terminated, truncated, _ = env.step(action)
        after = raw.ale.cloneState()
        raw.ale.restoreState(state)
        frames, total = [], 0.0
        for _ in range(4):
            frame, r, game_over, _, _ = raw.step(action)
            frames.append(frame)
            total += r
            if game_over:
                break
        if len(frames) == 4:
            # [A2] max of the last two
            gray = cv2.cvtColor(np.maximum(frames[2], frames[3]), cv2.COLOR_RGB2GRAY)
            expected = cv2.resize(gray, (84, 84), interpolation=cv2.INTER_AREA)  # [A5]
            assert np.array_equal(new_obs[3], expected)
            assert np.array_equal(new_obs[:3], obs[1:])  # [A7] the stack shifts by one frame
        # [A2] summed over the 4 frames, [A6] then clipped to its sign
        assert reward == np.sign(total)
        rewards_seen += total != 0
        raw.ale.restoreState(after)
        obs = new_obs
        if terminated or truncated:
            assert raw.ale.lives() < lives or truncated
            ends_seen += 1
            obs, _ = env.reset()
    # the check covered the steps that matter too: lost lives in Breakout, points in Pong
    assert (ends_seen if env_id == BREAKOUT else rewards_seen) > 0, (ends_seen, rewards_seen)
    env.close()


def test_a6_clips_by_sign_not_by_range():
    (clip,) = [w for w in wrappers(make()) if isinstance(w, gym.wrappers.TransformReward)]
    assert [clip.reward(r) for r in (-7.0, -0.5, 0.0, 0.25, 1.0, 400.0)] == [-1, -1, 0, 1, 1, 1]


def test_a8_a9_shared_cnn_on_uint8_frames():
    envs = SimpleNamespace(
        single_observation_space=gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        single_action_space=gym.spaces.Discrete(6),
    )
    torch.manual_seed(0)
    agent = atari.Agent(envs)
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    _, logprob, entropy, value = agent.get_action_and_value(x)
    assert logprob.shape == (5,) and value.shape == (5, 1)
    # [A9] the network scales uint8 pixels to [0, 1]; [A8] policy and value heads read the same 512 features
    features = agent.network(x.float() / 255.0)
    assert features.shape == (5, 512)
    torch.testing.assert_close(value, agent.critic(features))
    torch.testing.assert_close(agent.get_value(x), agent.critic(features))
    assert_orthogonal(agent.actor.weight, 0.01)
    assert_orthogonal(agent.critic.weight, 1.0)


def test_channels_last_changes_the_memory_layout_not_the_numbers():
    """main() moves the Agent to channels_last and pixels() lays the frames out the same way, for speed only:
    outputs and gradients equal those of the default NCHW layout, up to float rounding."""
    import copy

    envs = SimpleNamespace(
        single_observation_space=gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        single_action_space=gym.spaces.Discrete(6),
    )
    torch.manual_seed(0)
    nchw = atari.Agent(envs)
    nhwc = copy.deepcopy(nchw).to(memory_format=torch.channels_last)
    assert nhwc.network[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert atari.Agent.pixels(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).is_contiguous(
        memory_format=torch.channels_last
    )
    nchw.pixels = lambda x: x / 255.0  # the plain division, default layout
    x = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    action = torch.randint(0, 6, (16,))
    outputs = []
    for agent in (nchw, nhwc):
        _, logprob, entropy, value = agent.get_action_and_value(x, action)
        (logprob.sum() + entropy.sum() + value.sum()).backward()
        outputs.append((logprob, entropy, value, [p.grad for p in agent.parameters()]))
    for a, b in zip(outputs[0][:3], outputs[1][:3]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(outputs[0][3], outputs[1][3]):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)


class RecordingAgent(atari.Agent):
    """The script's Agent, remembering the dtype of the frames the rollout stored and training read back."""

    dtypes = set()

    def get_action_and_value(self, x, action=None):
        RecordingAgent.dtypes.add((action is not None, x.dtype))
        return super().get_action_and_value(x, action)


def test_a9_rollout_buffer_keeps_uint8(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(atari, "Agent", RecordingAgent)
    RecordingAgent.dtypes = set()
    atari.main(atari.Args(num_envs=2, num_steps=16, total_timesteps=32, num_minibatches=2, update_epochs=1))
    assert RecordingAgent.dtypes == {(False, torch.uint8), (True, torch.uint8)}


def test_short_run_copied_alone_writes_every_metric(tmp_path):
    proc = run_script("ppo_atari.py", *SHORT, "--save-model", cwd=tmp_path, alone=True)
    assert_ok(proc)
    (run_dir,) = run_dirs(tmp_path)
    scalars = read_every_metric(run_dir)
    assert_breakout_games(scalars)
    assert_annealed_lr(scalars, 2.5e-4, 4)
    assert (run_dir / "ppo_atari.pt").is_file()
    assert "step" in proc.stdout and "SPS" in proc.stdout


def test_save_then_evaluate_plays_whole_games(tmp_path):
    assert_ok(run_script("ppo_atari.py", *TINY, "--save-model", cwd=tmp_path))
    (model,) = run_dirs(tmp_path)[0].glob("*.pt")
    proc = run_script("ppo_atari.py", "--eval-checkpoint", model, "--eval-episodes", "2", cwd=tmp_path)
    assert_ok(proc)
    episodes = [line for line in proc.stdout.splitlines() if line.startswith("eval episode")]
    assert len(episodes) == 2
    assert f"{BREAKOUT}: mean return" in proc.stdout


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--env-id", "CartPole-v1"], ["NoFrameskip-v4", "CartPole-v1"]),
        (["--env-id", "Breakout-v5"], ["NoFrameskip-v4"]),
        (["--env-id", "NoSuchGameNoFrameskip-v4"], ["NoSuchGameNoFrameskip-v4"]),
        (["--num-minibatches", "3"], ["does not split"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, args, fragments):
    assert_usage_error(run_script("ppo_atari.py", *args, cwd=tmp_path), *fragments)


def test_missing_ale_py_is_one_line_error(tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "ale_py.py").write_text("raise ModuleNotFoundError(\"No module named 'ale_py'\", name='ale_py')\n")
    proc = run_script("ppo_atari.py", *TINY, cwd=tmp_path, env=test_env(PYTHONPATH=str(fake)))
    assert_usage_error(proc, "ale_py is missing", 'pip install -e ".[atari]"')
