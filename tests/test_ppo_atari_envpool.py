"""ppo_atari_envpool.py: envpool's Atari options [A1]-[A7], the same-step handling of envpool's reset step and the
whole-game statistics [E1], checked against raw envpool envs stepped independently; and the script as a user sees it."""

import numpy as np
import pytest

from helpers import (
    SameStepReference,
    assert_annealed_lr,
    assert_breakout_games,
    assert_ok,
    assert_usage_error,
    load_script,
    need,
    read_every_metric,
    run_dirs,
    run_script,
    test_env,
)

envpool = need("envpool")

atari = load_script("ppo_atari_envpool.py")
BREAKOUT = "Breakout-v5"
# its lives counter reaches 0 with the last life still in play (so does Atlantis's)
BANKHEIST = "BankHeist-v5"
# baselines' Atari preprocessing in envpool's option names, written out here independently of the script
OPTIONS = dict(
    noop_max=30,
    frame_skip=4,
    episodic_life=True,
    use_fire_reset=True,
    img_height=84,
    img_width=84,
    gray_scale=True,
    use_inter_area_resize=True,
    reward_clip=True,
    stack_num=4,
    repeat_action_probability=0.0,
)
# 2 iterations of 2 envs x 128 steps: 256 agent steps per env, enough for random play to end a Breakout game
SHORT = ["--num-envs", "2", "--num-steps", "128", "--total-timesteps", "512", "--num-threads", "1"]
TINY = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "64"]


def reference(seed, num_envs, max_episode_steps=100000, game=BREAKOUT):
    make = lambda s: envpool.make(
        game, env_type="gymnasium", num_envs=1, seed=s, max_episode_steps=max_episode_steps, **OPTIONS
    )
    return SameStepReference(make, seed, num_envs)


def test_a1_a7_envpool_options():
    envs = atari.make_env(BREAKOUT, 2, 1, 1, False, "test")
    config = envs.envs.config
    assert {key: config[key] for key in OPTIONS} == OPTIONS
    # ppo2's: 400,000 frames (the *NoFrameskip-v4 registration of gym)
    assert config["max_episode_steps"] == 100000
    assert envs.single_observation_space.shape == (4, 84, 84) and envs.single_observation_space.dtype == np.uint8
    envs.close()


def test_reset_step_taken_at_once_so_no_transition_crosses_a_reset():
    """A fast-losing policy (mostly NOOP: the served ball is never returned) ends lives and games often. Every step of
    the wrapper must equal the independent same-step reference: at a done, the obs is already the next episode's
    first (after envpool's reset step), and that reset step never shows up as a transition of its own."""
    seed, num_envs = 3, 2
    envs = atari.make_env(BREAKOUT, num_envs, seed, 1, False, "test")
    ref = reference(seed, num_envs)
    obs, _ = envs.reset()
    # the newest frame (the older: test_fidelity.py)
    np.testing.assert_array_equal(obs[:, -1], ref.reset()[:, -1])
    rng = np.random.default_rng(0)
    lives_lost = games_over = 0
    for _ in range(300):
        actions = np.where(rng.random(num_envs) < 0.9, 0, rng.integers(4, size=num_envs))
        obs, reward, terminated, truncated, infos = envs.step(actions)
        ref_obs, ref_reward, ref_terminated, ref_truncated, ref_infos = ref.step(actions)
        # the stack after a done [A7]: test_fidelity.py
        np.testing.assert_array_equal(obs[:, -1], ref_obs[:, -1])
        np.testing.assert_array_equal(reward, ref_reward)
        np.testing.assert_array_equal(terminated, ref_terminated)
        np.testing.assert_array_equal(truncated, ref_truncated)
        for i in np.flatnonzero(terminated):
            game_over = bool(ref_infos[i]["terminated"])
            games_over += game_over
            lives_lost += not game_over
            # whole-game statistics only when the game is over, not at a lost life [A3]
            assert ("final_info" in infos and bool(infos["final_info"]["_episode"][i])) == game_over
    assert lives_lost >= 8 and games_over >= 2, (lives_lost, games_over)
    envs.close()


def test_lives_counter_at_zero_ends_no_episode_while_the_game_goes_on():
    """BankHeist's lives counter drops to 0 when the last life begins, and the game goes on: no life lost there, for
    envpool as for baselines' EpisodicLifeEnv (`lives > 0`). Every step of the wrapper must equal the independent
    same-step reference: dones, rewards, and the stack (envpool's frames, zeros before the last done [A7])."""
    seed, num_envs = 1, 2
    envs = atari.make_env(BANKHEIST, num_envs, seed, 1, False, "test")
    ref = reference(seed, num_envs, game=BANKHEIST)
    envs.reset()
    ref.reset()
    rng = np.random.default_rng(0)
    fresh = np.ones(num_envs, dtype=int)  # frames since each env's last done, the newest included
    steps_at_zero, games_over = np.zeros(num_envs, dtype=int), np.zeros(num_envs, dtype=int)
    for _ in range(700):
        # random play: lives go by step 700
        actions = rng.integers(envs.single_action_space.n, size=num_envs)
        obs, reward, terminated, truncated, _ = envs.step(actions)
        ref_obs, ref_reward, ref_terminated, ref_truncated, ref_infos = ref.step(actions)
        np.testing.assert_array_equal(terminated, ref_terminated)
        np.testing.assert_array_equal(truncated, ref_truncated)
        np.testing.assert_array_equal(reward, ref_reward)
        fresh = np.where(ref_terminated | ref_truncated, 1, np.minimum(fresh + 1, 4))
        for i in range(num_envs):
            np.testing.assert_array_equal(obs[i, -fresh[i] :], ref_obs[i, -fresh[i] :])
            assert not obs[i, : -fresh[i]].any()
        lives = np.array([int(info["lives"]) for info in ref_infos])
        steps_at_zero += (lives == 0) & ~ref_terminated
        games_over += [bool(info["terminated"]) for info in ref_infos]
    # the case arose
    assert (steps_at_zero >= 20).all() and (games_over >= 1).all(), (steps_at_zero, games_over)
    envs.close()


def test_time_limit_on_a_lost_life_or_game_over_terminates_but_not_on_lives_reaching_zero():
    """At the time limit envpool reports only a truncation; the wrapper must call the step terminated too exactly
    when, without the limit, envpool ends the episode there: a life lost or the game over, not BankHeist's lives
    counter dropping to 0 as its last life begins [X5, A3]."""
    seed = 1
    rng = np.random.default_rng(0)
    # random play of BankHeist's 18 actions, (steps, envs)
    actions = rng.integers(18, size=(700, 1))
    untimed = reference(seed, 1, game=BANKHEIST)
    untimed.reset()
    # the first step of each kind, in the first game: its index, and whether envpool ended the episode there
    ends = {}
    for t, action in enumerate(actions):
        _, _, (terminated,), _, (info,) = untimed.step(action)
        kind = "over" if info["terminated"] else "life" if terminated else "zero" if info["lives"] == 0 else None
        ends.setdefault(kind, (t, bool(terminated)))
        if kind == "over":
            break
    assert ends["life"][0] < ends["zero"][0] < ends["over"][0], ends
    for kind in ("life", "zero", "over"):
        last, expected = ends[kind]
        envs = atari.make_env(BANKHEIST, 1, seed, 1, False, "test", max_episode_steps=last + 1)
        envs.reset()
        for t, action in enumerate(actions[: last + 1]):
            _, _, terminated, truncated, _ = envs.step(action)
            assert truncated[0] == (t == last)  # the limit, and only there
        assert terminated[0] == expected == (kind != "zero"), (kind, last)
        envs.close()


def test_statistics_are_whole_games_of_raw_score_and_reset_after_a_truncation():
    """A time limit of 40 agent steps truncates random games before they end; each reported game's return must be
    the sum of the raw (unclipped) rewards of its own steps only, and its length the number of its steps."""
    seed, num_envs, limit = 7, 2, 40
    envs = atari.make_env(BREAKOUT, num_envs, seed, 1, False, "test", max_episode_steps=limit)
    ref = reference(seed, num_envs, max_episode_steps=limit)
    envs.reset()
    ref.reset()
    rng = np.random.default_rng(1)
    raw_sum, steps = np.zeros(num_envs), np.zeros(num_envs, dtype=int)
    reported, truncations = [], 0
    for _ in range(200):
        actions = rng.integers(4, size=num_envs)
        _, _, _, truncated, infos = envs.step(actions)
        _, _, _, ref_truncated, ref_infos = ref.step(actions)
        raw_sum += [info["reward"] for info in ref_infos]
        steps += 1
        game_over = np.array([bool(info["terminated"]) for info in ref_infos]) | ref_truncated
        np.testing.assert_array_equal(truncated, ref_truncated)
        truncations += ref_truncated.sum()
        if game_over.any():
            np.testing.assert_array_equal(infos["final_info"]["_episode"], game_over)
            for i in np.flatnonzero(game_over):
                episode = infos["final_info"]["episode"]
                assert (episode["r"][i], episode["l"][i]) == (raw_sum[i], steps[i])
                reported.append((raw_sum[i], steps[i]))
            raw_sum[game_over], steps[game_over] = 0, 0
        else:
            assert "final_info" not in infos
    assert truncations >= 4 and all(length == limit for _, length in reported)
    assert sum(r for r, _ in reported) > 0, reported  # the sums covered real points, not only zeros
    envs.close()


def test_short_run_copied_alone_writes_every_metric_then_evaluates(tmp_path):
    proc = run_script("ppo_atari_envpool.py", *SHORT, "--save-model", cwd=tmp_path, alone=True)
    assert_ok(proc)
    (run_dir,) = run_dirs(tmp_path)
    scalars = read_every_metric(run_dir)
    assert_breakout_games(scalars)
    assert_annealed_lr(scalars, 2.5e-4, 2)
    (model,) = run_dir.glob("ppo_atari_envpool.pt")
    assert "step" in proc.stdout and "SPS" in proc.stdout
    proc = run_script(
        "ppo_atari_envpool.py", "--eval-checkpoint", model, "--eval-episodes", "1", cwd=tmp_path, alone=True
    )
    assert_ok(proc)
    assert len([line for line in proc.stdout.splitlines() if line.startswith("eval episode")]) == 1
    assert f"{BREAKOUT}: mean return" in proc.stdout


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--env-id", "BreakoutNoFrameskip-v4"], ["-v5", "BreakoutNoFrameskip-v4"]),
        (["--env-id", "Ant-v5"], ["Ant-v5", "Atari"]),
        (["--num-threads", "0"], ["--num-threads"]),
        (["--num-minibatches", "3"], ["does not split"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, args, fragments):
    assert_usage_error(run_script("ppo_atari_envpool.py", *TINY, *args, cwd=tmp_path), *fragments)


def test_missing_envpool_is_one_line_error(tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "envpool.py").write_text("raise ModuleNotFoundError(\"No module named 'envpool'\", name='envpool')\n")
    proc = run_script("ppo_atari_envpool.py", *TINY, cwd=tmp_path, env=test_env(PYTHONPATH=str(fake)))
    assert_usage_error(proc, "envpool", "pip install")
