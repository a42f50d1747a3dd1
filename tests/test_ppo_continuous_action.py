"""ppo_continuous_action.py: the continuous-action details M1-M9 checked against independent computations, and the
script's behaviour as a user sees it (metrics, save -> evaluate with the training normalization, errors, video)."""

import subprocess
import sys
import warnings
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import (
    assert_annealed_lr,
    assert_mlp_init,
    assert_ok,
    assert_usage_error,
    load_script,
    missing,
    need,
    read_every_metric,
    read_scalars,
    run_dirs,
    run_script,
    test_env,
)

SCRIPT = "ppo_continuous_action.py"
pca = load_script(SCRIPT)
EPS = 1e-8  # baselines' VecNormalize epsilon, inside the square root


def pooled_moments(samples, prior_count=1e-4):
    """Mean and variance of all samples at once, together with the prior pseudo-sample (mean 0, variance 1, weight
    prior_count) that RunningMeanStd starts from. samples: (n, *shape). Returns (mean, var, count)."""
    samples = np.asarray(samples, np.float64)
    count = prior_count + len(samples)
    mean = samples.sum(axis=0) / count  # the prior adds weight, not value (its mean is 0)
    var = (prior_count * (1.0 + mean**2) + ((samples - mean) ** 2).sum(axis=0)) / count
    return mean, var, count


def test_running_mean_std_matches_numpy_on_a_stream_of_batches():
    rng = np.random.default_rng(0)
    rms = pca.RunningMeanStd(shape=(3,))
    seen = []
    for size in [1, 7, 1, 64, 3, 200, 1, 1, 50]:  # uneven batches, some of one sample (one env)
        batch = rng.normal(loc=[5.0, -2.0, 0.0], scale=[0.1, 3.0, 100.0], size=(size, 3))
        rms.update(batch)
        seen.append(batch)
        mean, var, count = pooled_moments(np.concatenate(seen))
        np.testing.assert_allclose(rms.mean, mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(rms.var, var, rtol=1e-10)
        assert rms.count == pytest.approx(count)
    # plain numpy agrees up to the prior, which adds about 1e-4 * (1 + mean^2) / 348 to the variance
    everything = np.concatenate(seen)
    np.testing.assert_allclose(rms.mean, everything.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(rms.var, everything.var(axis=0), rtol=1e-3)


class ScriptedVecEnv(gym.vector.VectorEnv):
    """A vector env that replays given observations (T + 1, n, d), rewards (T, n) and episode ends (T, n)."""

    def __init__(self, obs, rewards, terminations, truncations):
        self.num_envs = rewards.shape[1]
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, obs.shape[2:], np.float64)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.script, self.t = (obs, rewards, terminations, truncations), 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return self.script[0][0], {}

    def step(self, actions):
        obs, rewards, terminations, truncations = self.script
        self.t += 1
        return obs[self.t], rewards[self.t - 1], terminations[self.t - 1], truncations[self.t - 1], {}


def replay(obs, rewards, terminations, truncations, gamma=0.99):
    """Run the script's NormalizeVecEnv over a scripted stream; returns (observations, rewards) the agent sees."""
    envs = pca.NormalizeVecEnv(ScriptedVecEnv(obs, rewards, terminations, truncations), gamma)
    seen_obs, _ = envs.reset()
    seen_obs, seen_rewards = [seen_obs], []
    for _ in range(len(rewards)):
        o, r, _, _, _ = envs.step(np.zeros((envs.num_envs, 1), np.float32))
        seen_obs.append(o)
        seen_rewards.append(r)
    return envs, np.array(seen_obs), np.array(seen_rewards)


def test_reward_scaling_divides_by_the_std_of_the_discounted_return():
    """[M8] reward / sqrt(var(discounted returns so far) + eps), no mean subtracted; the return restarts after an end
    (termination or truncation). The expected value is computed from the definition, without recursion."""
    rng = np.random.default_rng(1)
    steps, n, gamma = 300, 3, 0.9
    # a large mean: subtracting it would change every value
    rewards = 5.0 + rng.normal(size=(steps, n))
    terminations = rng.random((steps, n)) < 0.03
    truncations = rng.random((steps, n)) < 0.03
    obs = rng.normal(size=(steps + 1, n, 2))
    _, _, scaled = replay(obs, rewards, terminations, truncations, gamma)
    ends = terminations | truncations
    returns_so_far = []
    for t in range(steps):
        for e in range(n):
            # first step of the current episode
            start = max([s + 1 for s in range(t) if ends[s, e]], default=0)
            returns_so_far.append(sum(gamma ** (t - k) * rewards[k, e] for k in range(start, t + 1)))
        _, var, _ = pooled_moments(returns_so_far)
        expected = np.clip(rewards[t] / np.sqrt(var + EPS), -10, 10)
        np.testing.assert_allclose(scaled[t], expected, rtol=1e-9, err_msg=f"step {t}")
    assert np.all(scaled > 0)  # the mean was not subtracted


def test_observation_normalization_and_both_clips():
    """[M6] obs normalized by the running statistics (this step's obs included); [M7] clipped to [-10, 10];
    [M9] scaled rewards clipped to [-10, 10]. Spikes after 1000 quiet steps land far outside the bounds."""
    rng = np.random.default_rng(2)
    steps, n = 1000, 2
    obs = rng.normal(scale=0.01, size=(steps + 1, n, 3))
    obs[-1, 0] = [1e3, -1e3, 0.0]
    rewards = rng.normal(scale=0.01, size=(steps, n))
    rewards[-1] = [1e4, -1e4]
    no_end = np.zeros((steps, n), bool)
    envs, seen_obs, seen_rewards = replay(obs, rewards, no_end, no_end)
    assert seen_obs.dtype == np.float32
    raw = obs.reshape(-1, 3)
    mean, var, _ = pooled_moments(raw)  # the statistics at the end include the spike
    np.testing.assert_allclose(envs.obs_rms.mean, mean, rtol=1e-9)
    expected_last = np.clip((obs[-1] - mean) / np.sqrt(var + EPS), -10, 10)
    np.testing.assert_allclose(seen_obs[-1], expected_last, rtol=1e-5, atol=1e-6)
    # clipped: unclipped they would be ~ +-30
    assert seen_obs[-1, 0, 0] == 10.0 and seen_obs[-1, 0, 1] == -10.0
    assert np.abs(seen_obs[:-1]).max() < 10  # the quiet steps are not clipped
    assert seen_rewards[-1, 0] == 10.0 and seen_rewards[-1, 1] == -10.0
    assert np.abs(seen_rewards[:-1]).max() < 10


def test_frozen_statistics_do_not_move():
    rng = np.random.default_rng(3)
    obs, rewards = rng.normal(size=(21, 1, 2)), rng.normal(size=(20, 1))
    no_end = np.zeros((20, 1), bool)
    envs = pca.NormalizeVecEnv(ScriptedVecEnv(obs, rewards, no_end, no_end), 0.99)
    envs.obs_rms.update(np.array([[1.0, 2.0], [3.0, -4.0]]))
    before = (envs.obs_rms.mean.copy(), envs.obs_rms.var.copy(), envs.return_rms.var)
    envs.training = False
    envs.reset()
    for _ in range(20):
        o, _, _, _, _ = envs.step(np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(envs.obs_rms.mean, before[0])
    np.testing.assert_array_equal(envs.obs_rms.var, before[1])
    assert envs.return_rms.var == before[2]
    np.testing.assert_allclose(o, (obs[-1] - before[0]) / np.sqrt(before[1] + EPS), rtol=1e-6)


def fake_envs(obs_dim=5, action_dim=3):
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1, 1, (obs_dim,)),
        single_action_space=gym.spaces.Box(-1, 1, (action_dim,)),
    )


def test_network_layout_and_init():
    """[M4] separate 2 x 64 tanh MLPs; [C2] gains; [M2] the log std is a parameter of its own, initially 0."""
    agent = pca.Agent(fake_envs(obs_dim=8, action_dim=3))
    layers = assert_mlp_init(agent)
    assert layers["actor.4"].out_features == 3 and layers["critic.4"].out_features == 1
    assert isinstance(agent.actor_logstd, torch.nn.Parameter)
    assert torch.equal(agent.actor_logstd.detach(), torch.zeros(1, 3))


def test_normal_policy_matches_torch_distributions():
    """[M1] Normal(actor(x), exp(logstd)); [M2] the std does not depend on x; [M3] log-prob and entropy summed."""
    torch.manual_seed(0)
    agent = pca.Agent(fake_envs())
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[-0.5, 0.0, 0.7]]))
        x, a = torch.randn(64, 5), 3 * torch.randn(64, 3)
        _, logprob, entropy, value = agent.get_action_and_value(x, a)
        dist = torch.distributions.Normal(agent.actor(x), agent.actor_logstd.exp())
        torch.testing.assert_close(logprob, dist.log_prob(a).sum(1))
        torch.testing.assert_close(entropy, dist.entropy().sum(1))
        torch.testing.assert_close(value, agent.critic(x))
        # sampling one observation many times, by both methods: standardized samples are N(0, 1) in every dimension
        one = x[:1].expand(20000, 5)
        actions, logprob, _, _ = agent.get_action_and_value(one)
        torch.testing.assert_close(
            logprob, torch.distributions.Normal(agent.actor(one), agent.actor_logstd.exp()).log_prob(actions).sum(1)
        )
        for actions in (actions, agent.get_action(one)):
            z = (actions - agent.actor(one)) / agent.actor_logstd.exp()
            np.testing.assert_allclose(z.mean(0).numpy(), 0, atol=0.03)
            np.testing.assert_allclose(z.std(0).numpy(), 1, atol=0.03)


class RecordingAgent(pca.Agent):
    """The script's Agent, remembering every call: "sample" (rollout steps, evaluation), "segment" (the log-probs
    and values of a whole rollout, without gradients) and "train" (mini-batches)."""

    calls = []

    def get_action(self, x):
        action = super().get_action(x)
        RecordingAgent.calls.append(dict(kind="sample", x=x.detach().clone(), action=action.detach().clone()))
        return action

    def get_action_and_value(self, x, action=None):
        out = super().get_action_and_value(x, action)
        kind = "sample" if action is None else "train" if torch.is_grad_enabled() else "segment"
        RecordingAgent.calls.append(
            dict(kind=kind, x=x.detach().clone(), action=out[0].detach().clone(), logprob=out[1].detach().clone())
        )
        return out


class RecordingVecEnv(gym.vector.SyncVectorEnv):
    """SyncVectorEnv remembering the actions it receives and the raw observations it returns (reset and step)."""

    actions, observations = [], []

    def reset(self, **kwargs):
        obs, infos = super().reset(**kwargs)
        RecordingVecEnv.observations.append(np.array(obs, copy=True))
        return obs, infos

    def step(self, actions):
        RecordingVecEnv.actions.append(np.array(actions, copy=True))
        obs, *rest = super().step(actions)
        RecordingVecEnv.observations.append(np.array(obs, copy=True))
        return (obs, *rest)


@pytest.fixture
def recording(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pca, "Agent", RecordingAgent)
    monkeypatch.setattr(gym.vector, "SyncVectorEnv", RecordingVecEnv)

    def clear():
        RecordingAgent.calls, RecordingVecEnv.actions, RecordingVecEnv.observations = [], [], []

    clear()
    return clear


def test_env_gets_clipped_action_agent_stores_unclipped(recording):
    """[M5] the env receives clip(sample, low, high); the rollout stores and trains on the sample itself."""
    args = pca.Args(
        env_id="MountainCarContinuous-v0", num_steps=128, total_timesteps=128, num_minibatches=4, update_epochs=1
    )
    pca.main(args)
    calls = {kind: [c for c in RecordingAgent.calls if c["kind"] == kind] for kind in ("sample", "segment", "train")}
    assert len(calls["sample"]) == len(RecordingVecEnv.actions) == 128 and len(calls["segment"]) == 1
    sampled = torch.cat([c["action"] for c in calls["sample"]]).numpy()  # (128, 1)
    # std 1 at the start: many samples fall outside [-1, 1]
    assert (np.abs(sampled) > 1).mean() > 0.1
    np.testing.assert_array_equal(np.concatenate(RecordingVecEnv.actions), np.clip(sampled, -1.0, 1.0))
    # the stored log-probs are those of the unclipped samples, and training sees each of them once (one epoch)
    np.testing.assert_array_equal(calls["segment"][0]["action"].numpy(), sampled)
    trained_on = torch.cat([c["action"] for c in calls["train"]]).numpy()
    np.testing.assert_array_equal(np.sort(trained_on, axis=0), np.sort(sampled, axis=0))


def test_saved_model_is_evaluated_with_the_training_normalization(recording, tmp_path):
    """The checkpoint holds the statistics of every raw observation seen in training; --eval-checkpoint feeds the
    agent observations normalized with exactly those statistics, and does not move them."""
    pca.main(
        pca.Args(
            env_id="Pendulum-v1",
            num_steps=256,
            total_timesteps=512,
            num_minibatches=4,
            update_epochs=2,
            save_model=True,
        )
    )
    (model,) = run_dirs(tmp_path)[0].glob("*.pt")
    checkpoint = torch.load(model, weights_only=True)
    # (1 reset + 512 steps, 3): all the normalizer saw
    raw = np.concatenate(RecordingVecEnv.observations)
    assert raw.shape == (513, 3)
    mean, var, count = pooled_moments(raw)
    np.testing.assert_allclose(checkpoint["obs_rms"]["mean"].numpy(), mean, rtol=1e-9)
    np.testing.assert_allclose(checkpoint["obs_rms"]["var"].numpy(), var, rtol=1e-9)
    assert checkpoint["obs_rms"]["count"] == pytest.approx(count)
    # the reward statistics moved in training and were saved
    assert checkpoint["return_rms"]["var"].item() != 1.0

    recording()  # forget training; now evaluate the saved file, in a fresh script run
    pca.main(pca.Args(eval_checkpoint=str(model), eval_episodes=1))
    # evaluation only samples
    inputs = np.concatenate([c["x"].numpy() for c in RecordingAgent.calls])
    raw = np.concatenate(RecordingVecEnv.observations)
    # one Pendulum episode; the last obs starts the next one
    assert len(inputs) == 200 and len(raw) == 201
    frozen_mean, frozen_var = checkpoint["obs_rms"]["mean"].numpy(), checkpoint["obs_rms"]["var"].numpy()
    expected = np.clip((raw[:200] - frozen_mean) / np.sqrt(frozen_var + EPS), -10, 10)
    np.testing.assert_allclose(inputs, expected, rtol=1e-6, atol=1e-6)
    # without the saved statistics the agent would see something else entirely
    assert not np.allclose(inputs, np.clip(raw[:200], -10, 10), atol=1e-2)


def test_short_run_copied_alone_writes_every_metric_then_evaluates(tmp_path):
    """The default env (HalfCheetah-v5) with a tiny budget: every metric, lr annealing, Adam eps, the checkpoint."""
    proc = run_script(
        SCRIPT,
        "--total-timesteps",
        "2048",
        "--num-steps",
        "1024",
        "--num-minibatches",
        "8",
        "--update-epochs",
        "2",
        "--save-model",
        cwd=tmp_path,
        alone=True,
    )
    assert_ok(proc)
    # only runs/: no MUJOCO_LOG.TXT, where MuJoCo 4 writes its warning about HalfCheetah's settotalmass; and nothing
    # printed of that warning (stderr is empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == [SCRIPT, "runs"]
    assert proc.stderr == "" and "settotalmass" not in proc.stdout
    (run_dir,) = run_dirs(tmp_path)
    assert run_dir.name.startswith("HalfCheetah-v5__ppo_continuous_action__1__")
    scalars = read_every_metric(run_dir)
    assert_annealed_lr(scalars, 3e-4, 2)
    # two 1000-step episodes, raw (unnormalized) returns
    assert len(scalars["charts/episodic_return"]) == 2
    assert "step" in proc.stdout and "SPS" in proc.stdout and "ETA" in proc.stdout
    (model,) = run_dir.glob("*.pt")
    checkpoint = torch.load(model, weights_only=True)
    assert checkpoint["optimizer"]["param_groups"][0]["eps"] == 1e-5
    assert checkpoint["obs_rms"]["mean"].shape == (17,)
    proc = run_script(SCRIPT, "--eval-checkpoint", model, "--eval-episodes", "1", cwd=tmp_path, alone=True)
    assert_ok(proc)
    assert "eval episode 0: return" in proc.stdout and "HalfCheetah-v5: mean return" in proc.stdout


@pytest.mark.parametrize("env_id", ["Hopper-v4", "MountainCarContinuous-v0"])
def test_other_box_envs_run(tmp_path, env_id):
    proc = run_script(
        SCRIPT,
        "--env-id",
        env_id,
        "--total-timesteps",
        "128",
        "--num-steps",
        "64",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        cwd=tmp_path,
    )
    assert_ok(proc)
    assert proc.stderr == ""  # a v4 id: not gymnasium's advice to move to v5
    assert "losses/value_loss" in read_scalars(run_dirs(tmp_path)[0])


def test_halfcheetah_v5_is_v4_step_for_step():
    """The default env, HalfCheetah-v5, is HalfCheetah-v4 in what PPO sees: with the same seed and actions, a whole
    episode (1,000 steps) gives the same observations, rewards and ends, so the v4 results hold for it."""
    need("mujoco")
    seen = {}
    for version in ("v4", "v5"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # v4's out-of-date warning
            env = gym.make(f"HalfCheetah-{version}")
        obs, _ = env.reset(seed=3)
        actions = np.random.default_rng(0).uniform(-1, 1, (1000, 6)).astype(np.float32)
        steps = [env.step(action)[:4] for action in actions]
        seen[version] = (obs, *(np.array([step[k] for step in steps]) for k in range(4)))
        env.close()
    for v4, v5 in zip(seen["v4"], seen["v5"]):
        np.testing.assert_array_equal(v4, v5)
    # cut by the time limit at step 1,000, never terminated
    assert seen["v5"][4][-1] and not seen["v5"][3].any()


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--env-id", "CartPole-v1"], ["Discrete", "ppo.py"]),
        (["--num-minibatches", "3"], ["does not split", "--num-minibatches 3"]),
        (["--eval-checkpoint", "missing.pt"], ["missing.pt"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, args, fragments):
    assert_usage_error(run_script(SCRIPT, *args, cwd=tmp_path), *fragments)


def test_checkpoint_without_normalization_is_refused(tmp_path):
    """A model that fits, saved without the observation statistics it was trained with: refused, not played on raw
    observations."""
    spaces = SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1, 1, (3,)), single_action_space=gym.spaces.Box(-2, 2, (1,))
    )
    model = load_script(SCRIPT).Agent(spaces).state_dict()
    torch.save({"script": SCRIPT, "model": model, "args": {"env_id": "Pendulum-v1"}}, tmp_path / "other.pt")
    assert_usage_error(run_script(SCRIPT, "--eval-checkpoint", "other.pt", cwd=tmp_path), "its obs_rms", "Pendulum-v1")


def egl_works():
    probe = "import mujoco; ctx = mujoco.GLContext(64, 64); ctx.make_current(); ctx.free()"
    env = test_env(MUJOCO_GL="egl")
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=60).returncode == 0


def test_capture_video_headless(tmp_path):
    """--capture-video of a MuJoCo env with neither a display nor MUJOCO_GL set: the script picks EGL itself."""
    if not egl_works():
        missing("MuJoCo cannot render with EGL here: install libegl1 (or libosmesa6 and set MUJOCO_GL=osmesa)")
    env = test_env()
    env.pop("MUJOCO_GL")
    env.pop("DISPLAY", None)
    proc = run_script(
        SCRIPT,
        "--env-id",
        "InvertedPendulum-v4",
        "--total-timesteps",
        "64",
        "--num-steps",
        "64",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        "--capture-video",
        cwd=tmp_path,
        env=env,
    )
    assert_ok(proc)
    videos = list((tmp_path / "videos").rglob("*.mp4"))
    assert videos and all(v.stat().st_size > 0 for v in videos)
