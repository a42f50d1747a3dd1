"""ppo_procgen.py: the IMPALA CNN [P1], the same-step handling of envpool's reset step, the episode statistics [E1]
and the reward scaling [M8, M9], checked against raw envpool envs stepped independently; the script as a user sees
it."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import (
    SameStepReference,
    assert_ok,
    assert_usage_error,
    load_script,
    need_procgen,
    read_every_metric,
    run_dirs,
    run_script,
    scaled_rewards_reference,
)

envpool = need_procgen()

procgen = load_script("ppo_procgen.py")
# 2 iterations of 4 envs x 64 steps: 128 steps per env, enough for random play to end a few starpilot episodes
SHORT = [
    "--num-envs",
    "4",
    "--num-steps",
    "64",
    "--num-minibatches",
    "4",
    "--total-timesteps",
    "512",
    "--update-epochs",
    "1",
    "--num-threads",
    "1",
]
TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--total-timesteps", "32"]


def test_p1_impala_cnn_on_64x64_rgb():
    envs = SimpleNamespace(
        single_observation_space=gym.spaces.Box(0, 255, (3, 64, 64), np.uint8),
        single_action_space=gym.spaces.Discrete(15),
    )
    torch.manual_seed(0)
    agent = procgen.Agent(envs)
    convs = [m for m in agent.network.modules() if isinstance(m, torch.nn.Conv2d)]
    # 3 stages, each a convolution to its depth and two residual blocks of two convolutions
    assert [c.out_channels for c in convs] == [16] * 5 + [32] * 5 + [32] * 5
    assert all(c.kernel_size == (3, 3) for c in convs)
    (embedding,) = [m for m in agent.network.modules() if isinstance(m, torch.nn.Linear)]
    # 64 -> 32 -> 16 -> 8
    assert (embedding.in_features, embedding.out_features) == (32 * 8 * 8, 256)
    x = torch.randint(0, 256, (5, 3, 64, 64), dtype=torch.uint8)
    _, logprob, entropy, value = agent.get_action_and_value(x)
    assert logprob.shape == (5,) and value.shape == (5, 1)
    features = agent.network(x.float() / 255.0)  # [P1] pixels scaled to [0, 1] inside the network
    torch.testing.assert_close(value, agent.critic(features))
    # a residual block whose last convolution outputs 0 is the identity: the skip connection is there
    block = agent.network[0].res0
    torch.nn.init.zeros_(block.conv1.weight)
    torch.nn.init.zeros_(block.conv1.bias)
    h = torch.randn(2, 16, 32, 32)
    torch.testing.assert_close(block(h), h)


def test_reset_step_statistics_and_reward_scaling_against_raw_envs():
    """Every step must equal the independent same-step reference (at a done the obs is already the next episode's
    first); each reported episode's return is the sum of its own raw rewards and its length its step count; the
    rewards the agent sees are raw rewards divided by the std of all discounted returns (gamma 0.99) so far, clipped
    to 10."""
    # one env: envpool seeds a procgen pool's envs from its seed in a way a single-env pool cannot reproduce (unlike
    # Atari's seed + i), so the reference is one env too; test_ppo_atari_envpool.py covers resetting a subset of envs
    seed, num_envs = 2, 1
    envs = procgen.make_env("BigfishEasy-v0", num_envs, seed, 1, False, "test")
    ref = SameStepReference(
        lambda s: envpool.make("BigfishEasy-v0", env_type="gymnasium", num_envs=1, seed=s), seed, num_envs
    )
    obs, _ = envs.reset()
    np.testing.assert_array_equal(obs, ref.reset())
    rng = np.random.default_rng(0)
    raw_sum, steps = np.zeros(num_envs), np.zeros(num_envs, dtype=int)
    raw_rewards, ends, seen, episodes, rewarded = [], [], [], 0, 0
    for _ in range(600):
        actions = rng.integers(15, size=num_envs)
        obs, reward, terminated, truncated, infos = envs.step(actions)
        ref_obs, ref_reward, ref_terminated, ref_truncated, _ = ref.step(actions)
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(terminated, ref_terminated)
        np.testing.assert_array_equal(truncated, ref_truncated)
        rewarded += (ref_reward != 0).sum()
        raw_rewards.append(ref_reward)
        ends.append(ref_terminated | ref_truncated)
        seen.append(reward)
        raw_sum += ref_reward
        steps += 1
        done = ref_terminated | ref_truncated
        if done.any():
            np.testing.assert_array_equal(infos["final_info"]["_episode"], done)
            for i in np.flatnonzero(done):
                episode = infos["final_info"]["episode"]
                assert (episode["r"][i], episode["l"][i]) == (raw_sum[i], steps[i])
                episodes += 1
            raw_sum[done], steps[done] = 0, 0
        else:
            assert "final_info" not in infos
    assert episodes >= 3 and rewarded >= 3, (episodes, rewarded)
    # [M8, M9] gamma 0.99 for the return statistics (VecNormalize's default; test_fidelity.py checks main passes it)
    np.testing.assert_allclose(seen, scaled_rewards_reference(raw_rewards, ends, 0.99), rtol=1e-6)
    envs.close()


def test_short_run_copied_alone_writes_every_metric_then_evaluates(tmp_path):
    proc = run_script("ppo_procgen.py", *SHORT, "--save-model", cwd=tmp_path, alone=True)
    assert_ok(proc)
    (run_dir,) = run_dirs(tmp_path)
    assert run_dir.name.startswith("starpilot__ppo_procgen__1__")
    scalars = read_every_metric(run_dir)
    # raw returns (starpilot scores whole points), not the scaled rewards the agent trains on
    returns = [v for _, v in scalars["charts/episodic_return"]]
    assert all(r >= 0 and r == int(r) for r in returns), returns
    # [P1] no annealing
    assert [v for _, v in scalars["charts/learning_rate"]] == pytest.approx([5e-4, 5e-4])
    (model,) = run_dir.glob("ppo_procgen.pt")
    assert "step" in proc.stdout and "SPS" in proc.stdout
    proc = run_script("ppo_procgen.py", "--eval-checkpoint", model, "--eval-episodes", "1", cwd=tmp_path, alone=True)
    assert_ok(proc)
    assert len([line for line in proc.stdout.splitlines() if line.startswith("eval episode")]) == 1
    assert "starpilot: mean return" in proc.stdout


def test_defaults_are_train_procgens():
    args = procgen.Args()
    assert (args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs) == (64, 256, 8, 3)
    assert (args.gamma, args.gae_lambda, args.learning_rate, args.anneal_lr) == (0.999, 0.95, 5e-4, False)
    assert (args.clip_coef, args.ent_coef, args.vf_coef, args.total_timesteps) == (0.2, 0.01, 0.5, 25_000_000)


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--env-id", "pong"], ["pong", "bigfish", "bossfight", "starpilot"]),
        (["--env-id", "StarpilotEasy-v0"], ["StarpilotEasy-v0", "starpilot"]),
        (["--env-id", "bigfish", "--distribution-mode", "extreme"], ["extreme", "easy, hard"]),
        (["--num-threads", "0"], ["--num-threads"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, args, fragments):
    assert_usage_error(run_script("ppo_procgen.py", *TINY, *args, cwd=tmp_path), *fragments)
