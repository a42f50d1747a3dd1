"""ppo_multidiscrete.py [D1] and ppo_multidiscrete_mask.py [X4]: the action distribution checked against independent
computations, envpool's autoreset handled, and both scripts' behaviour as a user sees it."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import METRICS, assert_ok, assert_usage_error, load_script, read_scalars, run_script, test_env

md = load_script("ppo_multidiscrete.py")
mdm = load_script("ppo_multidiscrete_mask.py")
SCRIPTS = ["ppo_multidiscrete.py", "ppo_multidiscrete_mask.py"]
# 4 iterations of 64 steps
TINY = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256"]
NVEC = [3, 5, 2, 4]


def fake_envs(obs_dim=6, nvec=NVEC):
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1, 1, (obs_dim,)), single_action_space=gym.spaces.MultiDiscrete(nvec)
    )


def random_mask(rng, batch, nvec=NVEC):
    """(batch, sum(nvec)) booleans with at least one valid choice in every component."""
    parts = []
    for n in nvec:
        m = rng.random((batch, n)) < 0.5
        m[np.arange(batch), rng.integers(0, n, batch)] = True
        parts.append(m)
    return torch.as_tensor(np.concatenate(parts, axis=1))


def reference_logprob_entropy(logits, actions, mask=None, nvec=NVEC):
    """Per component: softmax over the valid choices only (all when mask is None), in float64 numpy;
    returns (sum_j log p_j(a_j), sum_j H_j)."""
    logits, actions = logits.detach().double().numpy(), actions.numpy()
    mask = np.ones(logits.shape, bool) if mask is None else mask.numpy()
    logprob, entropy, start = np.zeros(len(logits)), np.zeros(len(logits)), 0
    for j, n in enumerate(nvec):
        z, m = logits[:, start : start + n], mask[:, start : start + n]
        z = np.where(m, z - z.max(1, keepdims=True), -np.inf)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        p = np.exp(logp)
        logprob += logp[np.arange(len(z)), actions[:, j]]
        entropy -= np.where(m, p * np.where(m, logp, 0.0), 0.0).sum(1)
        start += n
    return logprob, entropy


def test_d1_logprob_and_entropy_are_sums_over_components():
    torch.manual_seed(0)
    agent = md.Agent(fake_envs())
    with torch.no_grad():  # larger output weights, so that the components are far from uniform
        agent.actor[4].weight.mul_(300)
    x = torch.randn(64, 6)
    action, logprob, entropy, value = agent.get_action_and_value(x)
    assert action.shape == (64, len(NVEC)) and value.shape == (64, 1)
    assert all(0 <= a < n for row in action.tolist() for a, n in zip(row, NVEC))
    ref_logprob, ref_entropy = reference_logprob_entropy(agent.actor(x), action)
    np.testing.assert_allclose(logprob.detach().numpy(), ref_logprob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy.detach().numpy(), ref_entropy, rtol=1e-5, atol=1e-5)
    # not the uniform case, where any split would give the same entropy
    assert ref_entropy.std() > 0.1
    # given actions are scored, not resampled
    _, logprob2, _, _ = agent.get_action_and_value(x, action)
    assert torch.equal(logprob2, logprob)


def test_d1_components_sampled_with_their_own_probabilities():
    torch.manual_seed(0)
    agent = md.Agent(fake_envs())
    with torch.no_grad():
        agent.actor[4].weight.mul_(300)
    x = torch.randn(1, 6).expand(20000, 6)
    with torch.no_grad():
        action, _, _, _ = agent.get_action_and_value(x)
        logits = agent.actor(x[:1])[0].double()
    start = 0
    # each component's frequencies follow the softmax of its own slice of the logits
    for j, n in enumerate(NVEC):
        expected = torch.softmax(logits[start : start + n], 0).numpy()
        freq = np.bincount(action[:, j].numpy(), minlength=n) / len(action)
        np.testing.assert_allclose(freq, expected, atol=0.015)
        start += n


def test_x4_masked_logprob_and_entropy_use_valid_actions_only():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    agent = mdm.Agent(fake_envs())
    with torch.no_grad():
        agent.actor[4].weight.mul_(300)
    x, mask = torch.randn(64, 6), random_mask(rng, 64)
    action, logprob, entropy, _ = agent.get_action_and_value(x, mask)
    ref_logprob, ref_entropy = reference_logprob_entropy(agent.actor(x), action, mask)
    np.testing.assert_allclose(logprob.detach().numpy(), ref_logprob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy.detach().numpy(), ref_entropy, rtol=1e-5, atol=1e-5)
    # with every action valid, the masked script computes exactly what its parent computes
    all_valid = torch.ones_like(mask)
    _, lp_mask, ent_mask, _ = agent.get_action_and_value(x, all_valid, action)
    parent = md.Agent(fake_envs())
    parent.load_state_dict(agent.state_dict())
    _, lp_parent, ent_parent, _ = parent.get_action_and_value(x, action)
    torch.testing.assert_close(lp_mask, lp_parent)
    torch.testing.assert_close(ent_mask, ent_parent)


def test_x4_sampled_actions_are_never_masked():
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    agent = mdm.Agent(fake_envs())
    # the invalid actions the most likely ones before masking: the hardest case
    with torch.no_grad():
        agent.actor[4].weight.mul_(300)
    x = torch.randn(50, 6).repeat(400, 1)  # 20000 draws, 400 for each of 50 (obs, mask) pairs
    mask = random_mask(rng, 50).repeat(400, 1)
    with torch.no_grad():
        action, _, _, _ = agent.get_action_and_value(x, mask)
        rollout_action = agent.get_action(x, mask)  # what a rollout step samples
        # the same network without the mask
        unmasked, _, _, _ = md.Agent.get_action_and_value(agent, x)
    offsets = torch.tensor(np.cumsum([0] + NVEC[:-1]))
    assert mask.gather(1, offsets + action).all() and mask.gather(1, offsets + rollout_action).all()
    # the check can fail: unmasked draws do hit invalid actions
    assert not mask.gather(1, offsets + unmasked).all()


@pytest.mark.parametrize("masked", [False, True])
def test_rollout_sample_is_the_categoricals_own_draw(masked):
    """get_action skips building the distributions: with the same seed it draws exactly what one
    Categorical(logits).sample() per component draws, in order."""
    rng = np.random.default_rng(2)
    agent = (mdm if masked else md).Agent(fake_envs())
    x = torch.randn(3000, 6)
    mask = random_mask(rng, 3000)
    args = (x, mask) if masked else (x,)
    with torch.inference_mode():
        torch.manual_seed(5)
        ours = agent.get_action(*args)
        torch.manual_seed(5)
        logits = torch.where(mask, agent.actor(x), mdm.MASKED_LOGIT) if masked else agent.actor(x)
        theirs = torch.stack(
            [torch.distributions.Categorical(logits=c).sample() for c in torch.split(logits, NVEC, dim=1)], dim=1
        )
    assert ours.shape == theirs.shape == (3000, len(NVEC)) and ours.dtype == theirs.dtype
    assert torch.equal(ours, theirs)


class FixedLogits(torch.nn.Module):
    """An actor whose output is a leaf tensor, so that the gradient with respect to the logits can be read."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(logits)

    def forward(self, x):
        return self.logits


def test_x4_gradient_of_masked_logits_is_exactly_zero():
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    agent = mdm.Agent(fake_envs())
    agent.actor = FixedLogits(torch.randn(32, sum(NVEC)) * 3)
    x, mask = torch.randn(32, 6), random_mask(rng, 32)
    action, _, _, _ = agent.get_action_and_value(x, mask)
    _, logprob, entropy, _ = agent.get_action_and_value(x, mask, action)
    advantages = torch.randn(32)
    # the policy and entropy terms of the loss
    (-(logprob * advantages).mean() - 0.01 * entropy.mean()).backward()
    grad = agent.actor.logits.grad
    assert torch.all(grad[~mask] == 0)
    # the check can fail: every valid logit of a component with a choice (2+ valid actions) gets a gradient
    has_choice = torch.cat([m.sum(1, keepdim=True).expand_as(m) >= 2 for m in torch.split(mask, NVEC, dim=1)], 1)
    assert torch.all(grad[mask & has_choice] != 0) and (mask & has_choice).sum() > 50


class RecordingAgent(mdm.Agent):
    """The mask script's Agent, remembering its log-prob calls: the segment's (after the rollout), then training's."""

    calls = []

    def get_action_and_value(self, x, mask, action=None):
        out = super().get_action_and_value(x, mask, action)
        with torch.no_grad():  # the same network and samples, scored without the masks
            unmasked_logprob = md.Agent.get_action_and_value(self, x, out[0])[1]
        RecordingAgent.calls.append(
            dict(
                x=x.detach().clone(),
                mask=mask.clone(),
                action=out[0].detach().clone(),
                logprob=out[1].detach().clone(),
                unmasked_logprob=unmasked_logprob,
            )
        )
        return out


def test_x4_first_minibatch_ratio_is_exactly_one_with_stored_masks(tmp_path, monkeypatch):
    """The first mini-batch is scored before any update, with the rollout's masks: the ratio is exactly 1."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mdm, "Agent", RecordingAgent)
    RecordingAgent.calls = []
    args = mdm.Args(num_envs=2, num_steps=32, total_timesteps=64, num_minibatches=4, update_epochs=1)
    mdm.main(args)
    # the segment's log-probs, then the first mini-batch's
    segment, first = RecordingAgent.calls[:2]
    assert len(segment["x"]) == args.batch_size and len(first["x"]) == args.minibatch_size
    rows = lambda c: torch.cat([c["x"], c["mask"].float(), c["action"].float()], 1)
    old_of = {}  # (obs, mask, action) -> the log-prob stored for the rollout; equal rows must agree
    for row, lp in zip(rows(segment), segment["logprob"]):
        assert old_of.setdefault(tuple(row.tolist()), lp) == lp
    old = torch.stack([old_of[tuple(row.tolist())] for row in rows(first)])
    ratio = (first["logprob"] - old).exp()
    assert torch.equal(ratio, torch.ones_like(ratio))
    assert not first["mask"].all()  # the env's masks were really in use
    # the stored masks matter: scored without them, the same samples would give a ratio far from 1
    assert (first["unmasked_logprob"] - old).exp().max() < 0.5


def test_envpool_autoreset_gives_whole_episodes_and_no_reset_step():
    """JobShop-v0's instance: job 0 on machine 0 (2 time units), job 1 on machine 1 (3 units), 20 = no-op. Starting
    both at once and then waiting finishes in 3 steps (return -3); an invalid choice ends the episode at once (-10)."""
    envs = md.make_env("Jumanji/JobShop-v0", 2, 1, False, "test")
    assert isinstance(envs.single_action_space, gym.spaces.MultiDiscrete)
    assert list(envs.single_action_space.nvec) == [21] * 10
    obs0, infos = envs.reset()
    assert obs0.shape == (2,) + envs.single_observation_space.shape and obs0.dtype == np.float32
    # no-op always valid
    assert infos["action_mask"].shape == (2, 210) and infos["action_mask"][:, 20::21].all()
    noop = np.full(10, 20)
    start = noop.copy()
    start[:2] = [0, 1]
    invalid = np.zeros(10, dtype=np.int64)  # job 0 on every machine
    # env 0 plays the 3-step schedule twice; env 1 ends with an invalid action, then plays the schedule
    plan = [(start, invalid), (noop, start), (noop, noop), (start, noop), (noop, noop), (noop, start)]
    episodes, rewards = [], []
    for a0, a1 in plan:
        obs, reward, terminations, truncations, infos = envs.step(np.stack([a0, a1]))
        rewards.append(reward.tolist())
        assert not truncations.any()
        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodes.append((i, infos["final_info"]["episode"]["r"][i], infos["final_info"]["episode"]["l"][i]))
                # done: the obs is already the next episode's first
                np.testing.assert_array_equal(obs[i], obs0[i])
    # no reward-0 reset step ever reaches the learner: every step was a real one
    assert rewards == [[-1, -10], [-1, -1], [-1, -1], [-1, -1], [-1, -1], [-1, -1]]
    assert sorted(episodes) == [(0, -3, 3), (0, -3, 3), (1, -10, 1), (1, -3, 3)]
    envs.close()


@pytest.mark.parametrize("script", SCRIPTS)
def test_short_run_copied_alone_writes_every_metric(tmp_path, script):
    # save and evaluate once: time
    save = ["--save-model"] if script == "ppo_multidiscrete_mask.py" else []
    proc = run_script(script, *TINY, *save, cwd=tmp_path, alone=True)
    assert_ok(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == [script, "runs"]
    (run_dir,) = (tmp_path / "runs").iterdir()
    # the "/" in envpool's env id: one folder level all the same
    assert run_dir.name.startswith("Jumanji_JobShop-v0__")
    scalars = read_scalars(run_dir)
    for tag in METRICS + ["charts/invalid_action_rate"]:
        assert tag in scalars, tag
        # without masking every episode ends at once with -10: returns have no variance, explained variance is nan
        if not (tag == "losses/explained_variance" and script == "ppo_multidiscrete.py"):
            assert all(np.isfinite(v) for _, v in scalars[tag]), tag
    rates = [v for _, v in scalars["charts/invalid_action_rate"]]
    if script == "ppo_multidiscrete_mask.py":
        assert rates == [0.0] * 4  # [X4] a masked policy never picks an invalid action
        assert {v for _, v in scalars["charts/episodic_length"]} <= set(range(3, 1001))
    else:  # a near-uniform policy on JobShop picks an invalid choice for ~94% of the 10 machines
        assert all(0.8 < r < 1 for r in rates)
        # so every episode ends at once
        assert {v for _, v in scalars["charts/episodic_return"]} == {-10.0}
    if not save:
        return
    # the saved model plays again with --eval-checkpoint (the mask script's evaluate needs the env's masks)
    (model,) = run_dir.glob("*.pt")
    proc = run_script(script, "--eval-checkpoint", model, "--eval-episodes", "3", cwd=tmp_path)
    assert_ok(proc)
    assert len([line for line in proc.stdout.splitlines() if line.startswith("eval episode")]) == 3


@pytest.mark.parametrize(
    "script,args,fragments",
    [
        ("ppo_multidiscrete.py", ["--env-id", "CartPole-v1"], ["Discrete", "use ppo.py"]),
        ("ppo_multidiscrete_mask.py", ["--env-id", "Pendulum-v1"], ["Box", "use ppo_continuous_action.py"]),
        ("ppo_multidiscrete_mask.py", ["--env-id", "NoSuchEnv-v0"], ["cannot make env", "NoSuchEnv-v0"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, script, args, fragments):
    assert_usage_error(run_script(script, *args, cwd=tmp_path), script, *fragments)


def test_missing_envpool_is_one_line_error(tmp_path):
    # shadows the real one
    (tmp_path / "envpool.py").write_text("raise ImportError('No module named envpool')\n")
    proc = run_script("ppo_multidiscrete_mask.py", *TINY, cwd=tmp_path / "cwd", env=test_env(PYTHONPATH=str(tmp_path)))
    assert_usage_error(proc, 'pip install -e ".[envpool]"')


def test_capture_video(tmp_path):
    args = ["--num-envs", "1", "--num-steps", "32", "--total-timesteps", "32", "--capture-video"]
    assert_ok(run_script("ppo_multidiscrete_mask.py", *args, cwd=tmp_path))
    # env 0's episodes 0 and 1 (at most 10 steps each here), named as gymnasium names them
    videos = {v.name: v for v in (tmp_path / "videos").rglob("*.mp4")}
    assert {"rl-video-episode-0.mp4", "rl-video-episode-1.mp4"} <= set(videos)
    assert all(v.stat().st_size > 0 for v in videos.values())
