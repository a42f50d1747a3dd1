"""The PPO update, in every script: ppo_loss [C7]-[C10] against a direct numpy computation, one full update step
[C3, C11] against numpy's Adam, each script's compute_gae and ppo_loss against ppo.py's, the logged losses as the
mean of the update [C12], and evaluation playing the saved weights."""

import dataclasses
import functools
import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import load_script, need, need_procgen, read_scalars

ppo = load_script("ppo.py")
COPIES = [
    "ppo_atari.py",
    "ppo_atari_lstm.py",
    "ppo_atari_multigpu.py",
    "ppo_atari_envpool.py",
    "ppo_continuous_action.py",
    "ppo_multidiscrete.py",
    "ppo_multidiscrete_mask.py",
    "ppo_procgen.py",
]
SCRIPTS = ["ppo.py", *COPIES]
STATS = ["value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"]


def reference_loss(
    newlogprob, entropy, newvalue, logprob, value, advantages, returns, clip, norm_adv, clip_vloss, ent_coef, vf_coef
):
    """ppo2's loss from its definition, sample by sample in float64 (PPO paper eq. 7 and 9, baselines' model.py).

    Returns the loss, its debug statistics and its gradients with respect to newlogprob, newvalue and entropy."""
    lp, h, v = (np.asarray(x, np.float64) for x in (newlogprob, entropy, newvalue))
    old_lp, old_v, adv, ret = (np.asarray(x, np.float64) for x in (logprob, value, advantages, returns))
    n = len(adv)
    if norm_adv:  # mean 0 and std 1, the std over n (numpy's default, as baselines), plus 1e-8
        mean = sum(adv) / n
        std = math.sqrt(sum((a - mean) ** 2 for a in adv) / n)
        adv = np.array([(a - mean) / (std + 1e-8) for a in adv])
    objective, value_error = 0.0, 0.0
    grad_lp, grad_v = np.zeros(n), np.zeros(n)
    kl1 = kl3 = clipped = 0.0
    for i in range(n):
        r = math.exp(lp[i] - old_lp[i])
        r_clipped = min(max(r, 1 - clip), 1 + clip)
        # the pessimistic bound: the smaller of the two objectives; where the clipped one is smaller, the clip
        # binds and the sample gives no gradient
        if r * adv[i] <= r_clipped * adv[i]:
            objective += r * adv[i]
            grad_lp[i] = -adv[i] * r / n  # d(-r A / n) / d log r
        else:
            objective += r_clipped * adv[i]
        error = (v[i] - ret[i]) ** 2
        grad = (v[i] - ret[i]) / n  # d(0.5 * error / n) / dv
        if clip_vloss:
            v_clipped = old_v[i] + min(max(v[i] - old_v[i], -clip), clip)
            # the larger error counts; a clipped v has no gradient
            if (v_clipped - ret[i]) ** 2 > error:
                error, grad = (v_clipped - ret[i]) ** 2, 0.0
        value_error += error
        grad_v[i] = vf_coef * grad
        kl1 += (old_lp[i] - lp[i]) / n
        kl3 += (r - 1 - math.log(r)) / n
        clipped += (abs(r - 1) > clip) / n
    policy_loss, value_loss = -objective / n, 0.5 * value_error / n
    stats = dict(
        value_loss=value_loss,
        policy_loss=policy_loss,
        entropy=h.mean(),
        old_approx_kl=kl1,
        approx_kl=kl3,
        clipfrac=clipped,
    )
    loss = policy_loss - ent_coef * h.mean() + vf_coef * value_loss
    return loss, stats, dict(newlogprob=grad_lp, newvalue=grad_v, entropy=np.full(n, -ent_coef / n))


def script_loss(module, inputs, *coefs):
    """A script's ppo_loss on float64 copies of inputs: (loss, stats, gradients of the first three inputs)."""
    inputs = [torch.tensor(x, dtype=torch.float64, requires_grad=i < 3) for i, x in enumerate(inputs)]
    loss, stats = module.ppo_loss(*inputs, *coefs)
    loss.backward()
    grads = dict(zip(["newlogprob", "entropy", "newvalue"], (x.grad for x in inputs[:3])))
    return loss, stats, grads


def assert_loss_matches_reference(inputs, *coefs):
    loss, stats, grads = script_loss(ppo, inputs, *coefs)
    expected_loss, expected_stats, expected_grads = reference_loss(*inputs, *coefs)
    assert list(stats) == STATS
    assert not any(s.requires_grad for s in stats.values())
    np.testing.assert_allclose(loss.item(), expected_loss, rtol=1e-12, atol=1e-15)
    for name in STATS:
        np.testing.assert_allclose(
            stats[name].item(),
            expected_stats[name],
            rtol=1e-6 if name == "clipfrac" else 1e-12,
            atol=1e-15,
            err_msg=name,
        )
    for name, grad in grads.items():
        np.testing.assert_allclose(grad.numpy(), expected_grads[name], rtol=1e-12, atol=1e-15, err_msg=name)
    return grads


# every pairing of a ratio below, inside and above [0.8, 1.2] (clip 0.2) with a positive and a negative advantage
RATIOS = np.array([0.5, 0.9, 1.0, 1.1, 1.6] * 2)
ADVANTAGES = np.array([1.5, 0.7, 2.0, 0.3, 1.1, -1.2, -0.4, -2.5, -0.9, -0.6])


def clip_case_inputs(rng):
    logprob = rng.uniform(-2, -0.1, len(RATIOS))
    value = rng.normal(size=len(RATIOS))
    # some inside the value clip, some outside
    newvalue = value + rng.uniform(-0.5, 0.5, len(RATIOS))
    returns = value + rng.normal(scale=0.6, size=len(RATIOS))
    return [logprob + np.log(RATIOS), rng.uniform(0.1, 1.5, len(RATIOS)), newvalue, logprob, value, ADVANTAGES, returns]


@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("ent_coef,vf_coef", [(0.01, 0.5), (0.05, 1.0)])
def test_ppo_loss_against_numpy(norm_adv, clip_vloss, ent_coef, vf_coef):
    """[C7]-[C10] loss, statistics and gradients on ratios below, inside and above the clip range, both signs."""
    inputs = clip_case_inputs(np.random.default_rng(0))
    assert_loss_matches_reference(inputs, 0.2, norm_adv, clip_vloss, ent_coef, vf_coef)


def test_gradient_is_exactly_zero_where_the_clip_binds():
    """[C8] raw advantages (no normalization, so their signs are the designed ones): the clip binds for a ratio above
    1.2 with a positive advantage and below 0.8 with a negative one; those samples get exactly no gradient."""
    grads = assert_loss_matches_reference(clip_case_inputs(np.random.default_rng(1)), 0.2, False, False, 0.01, 0.5)
    binds = ((RATIOS > 1.2) & (ADVANTAGES > 0)) | ((RATIOS < 0.8) & (ADVANTAGES < 0))
    assert binds.sum() == 2
    assert np.all(grads["newlogprob"].numpy()[binds] == 0.0)
    # outside the range on the other side: still pulled
    assert np.all(grads["newlogprob"].numpy()[~binds] != 0.0)


def test_advantage_normalization_uses_the_population_std_and_its_epsilon():
    """[C7] with every ratio 1, d loss / d newlogprob_i = -A_norm_i / n: the normalized advantages themselves."""
    n = 4
    for advantages, expected in [
        # std over n, not n - 1
        ([1.0, 2.0, 3.0, 6.0], (np.array([1, 2, 3, 6]) - 3) / (math.sqrt(14 / 4) + 1e-8)),
        # epsilon counts
        ([0.0, 1e-8, -1e-8, 0.0], np.array([0, 1e-8, -1e-8, 0]) / (math.sqrt(2e-16 / 4) + 1e-8)),
        ([3.0] * 4, np.zeros(4)),  # no spread: zeros, not NaN
    ]:
        zeros = np.zeros(n)
        _, _, grads = script_loss(
            ppo, [zeros, zeros, zeros, zeros, zeros, advantages, zeros], 0.2, True, True, 0.0, 0.5
        )
        np.testing.assert_allclose(-n * grads["newlogprob"].numpy(), expected, rtol=1e-9, atol=1e-12)


def test_value_loss_clip_by_hand():
    """[C9] old value 0, clip 0.2; the larger of the two errors counts, the clipped one included; [C10] weights."""
    newvalue, returns = [1.0, 1.0, 0.1, -1.0], [0.9, -1.0, 0.5, -0.5]
    # sample 0: unclipped error 0.01, clipped (0.2 - 0.9)^2 = 0.49 is the larger; sample 1: 4 vs (0.2 + 1)^2 = 1.44;
    # sample 2: inside the clip, 0.16 both; sample 3: 0.25 vs (-0.2 + 0.5)^2 = 0.09
    zeros = np.zeros(4)
    inputs = [zeros, np.full(4, 0.8), newvalue, zeros, zeros, zeros, returns]
    for clip_vloss, errors in [(True, [0.49, 4.0, 0.16, 0.25]), (False, [0.01, 4.0, 0.16, 0.25])]:
        loss, stats, grads = script_loss(ppo, inputs, 0.2, False, clip_vloss, 0.01, 0.5)
        np.testing.assert_allclose(stats["value_loss"].item(), 0.5 * np.mean(errors), rtol=1e-12)
        np.testing.assert_allclose(loss.item(), 0.5 * 0.5 * np.mean(errors) - 0.01 * 0.8, rtol=1e-12)
        # the clipped term does not depend on the new value
        assert (grads["newvalue"][0] == 0) == clip_vloss


def test_one_update_step_of_ppo_py_against_numpy_adam(tiny_run):
    """[C3, C11] One mini-batch step from the state a short ppo.py run saved (its weights, its optimizer with its
    settings, moments and step count): the global gradient norm clipped to 0.5, then Adam with epsilon 1e-5 added
    to the bias-corrected sqrt(v) (PyTorch's form), against numpy."""
    run = tiny_run("ppo.py")
    checkpoint = torch.load(run.model, weights_only=True)
    agent = ppo.Agent(
        SimpleNamespace(
            single_observation_space=gym.spaces.Box(-1, 1, (4,)), single_action_space=gym.spaces.Discrete(2)
        )
    )
    agent.load_state_dict(checkpoint["model"])
    agent.double()  # float64 throughout, so the comparison can be tight
    optimizer = torch.optim.Adam(agent.parameters(), fused=True)
    # the script's settings, moments and step count
    optimizer.load_state_dict(checkpoint["optimizer"])
    params = list(agent.parameters())
    state = [optimizer.state[p] for p in params]
    step = state[0]["step"].item()
    m0 = [s["exp_avg"].numpy().copy() for s in state]
    v0 = [s["exp_avg_sq"].numpy().copy() for s in state]
    p0 = [p.detach().numpy().copy() for p in params]

    rng = np.random.default_rng(2)
    obs = torch.tensor(rng.normal(size=(32, 4)))
    action = torch.tensor(rng.integers(0, 2, 32))
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, action)
    stored = [
        newlogprob.detach() + torch.tensor(rng.normal(scale=0.3, size=32)),
        newvalue.detach().view(-1),
        torch.tensor(rng.normal(size=32)),
        torch.tensor(rng.normal(scale=3.0, size=32)),
    ]
    args = ppo.Args()
    loss, _ = ppo.ppo_loss(
        newlogprob,
        entropy,
        newvalue,
        *stored,
        args.clip_coef,
        args.norm_adv,
        args.clip_vloss,
        args.ent_coef,
        args.vf_coef,
    )
    optimizer.zero_grad()
    loss.backward()
    grads = [p.grad.numpy().copy() for p in params]
    torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    optimizer.step()

    norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
    assert norm > 1.0  # the clip binds
    scale = 0.5 / (norm + 1e-6)  # torch.nn.utils.clip_grad_norm_ divides by the norm plus 1e-6
    # [C4] the last iteration's
    lr = 2.5e-4 * (1 - (run.args.num_iterations - 1) / run.args.num_iterations)
    beta1, beta2, eps, t = 0.9, 0.999, 1e-5, step + 1
    for p, g, m, v, p_before in zip(params, grads, m0, v0, p0):
        g = g * scale
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
        expected = p_before - lr * m_hat / (np.sqrt(v_hat) + eps)
        np.testing.assert_allclose(p.detach().numpy() - p_before, expected - p_before, rtol=1e-6, atol=1e-13)


@pytest.mark.parametrize("script", COPIES)
def test_every_copy_computes_what_ppo_py_computes(script):
    """compute_gae [C5] and ppo_loss [C7]-[C10] of each script give ppo.py's outputs to the bit, on random inputs
    with episode ends inside the segment and at both of its edges, for every combination of the loss's flags."""
    module = load_script(script)
    rng = np.random.default_rng(3)
    num_steps, num_envs = 12, 4
    as_t = lambda a: torch.tensor(a, dtype=torch.float64)
    dones = (rng.random((num_steps, num_envs)) < 0.2).astype(float)
    dones[0, 0] = dones[num_steps - 1, 1] = dones[5, 2] = 1
    gae_inputs = [
        as_t(rng.normal(size=(num_steps, num_envs))),
        as_t(rng.normal(size=(num_steps, num_envs))),
        as_t(dones),
        as_t(rng.normal(size=num_envs)),
        as_t([0.0, 1.0, 0.0, 1.0]),
    ]
    for gamma, lam in [(0.99, 0.95), (0.9, 0.5)]:
        for ours, theirs in zip(module.compute_gae(*gae_inputs, gamma, lam), ppo.compute_gae(*gae_inputs, gamma, lam)):
            assert torch.equal(ours, theirs)

    n = 24
    logprob = rng.uniform(-3, -0.1, n)
    value = rng.normal(size=n)
    inputs = [
        logprob + rng.normal(scale=0.3, size=n),
        rng.uniform(0.1, 2, n),
        value + rng.normal(scale=0.3, size=n),
        logprob,
        value,
        rng.normal(size=n),
        value + rng.normal(size=n),
    ]
    for norm_adv in (True, False):
        for clip_vloss in (True, False):
            coefs = (0.2, norm_adv, clip_vloss, 0.01, 0.5)
            ours, theirs = script_loss(module, inputs, *coefs), script_loss(ppo, inputs, *coefs)
            assert torch.equal(ours[0], theirs[0])
            assert ours[1].keys() == theirs[1].keys() and all(torch.equal(ours[1][k], theirs[1][k]) for k in STATS)
            assert all(torch.equal(ours[2][k], theirs[2][k]) for k in theirs[2])


# --- one tiny training run per script, shared by the tests below ---------------------------------------------------

NEEDS = {
    "ppo_atari.py": ["ale_py", "cv2"],
    "ppo_atari_lstm.py": ["ale_py", "cv2"],
    "ppo_atari_multigpu.py": ["ale_py", "cv2"],
    "ppo_atari_envpool.py": ["envpool"],
    "ppo_continuous_action.py": ["mujoco"],
    "ppo_multidiscrete.py": ["envpool"],
    "ppo_multidiscrete_mask.py": ["envpool"],
}
# 2 iterations of 2 envs x 8 steps, 2 epochs of 2 mini-batches; coefficients off their defaults, so a script that
# passes one in the place of another is seen
TINY = dict(
    num_envs=2,
    num_steps=8,
    total_timesteps=32,
    num_minibatches=2,
    update_epochs=2,
    clip_coef=0.15,
    ent_coef=0.02,
    vf_coef=0.6,
)


def threads(module):
    """num_threads=1 for the envpool scripts (they have the field), so the tests do not claim every core."""
    return {"num_threads": 1} if "num_threads" in {f.name for f in dataclasses.fields(module.Args)} else {}


def load_needed(script):
    """The script loaded, after skipping the test where the packages its envs need are missing."""
    if script == "ppo_procgen.py":
        need_procgen()
    for module_name in NEEDS.get(script, []):
        need(module_name)
    return load_script(script)


def train(script, cwd, **overrides):
    """Train `script` in-process for TINY (with overrides) and save the model, recording every ppo_loss call (inputs,
    coefficients, statistics), every gradient clip and the agent's initial weights."""
    module = load_needed(script)
    run = SimpleNamespace(module=module, calls=[], clips=[], initial=[], cwd=cwd)
    ppo_loss, clip_grad_norm_ = module.ppo_loss, torch.nn.utils.clip_grad_norm_

    def recording_loss(*inputs):
        loss, stats = ppo_loss(*inputs)
        run.calls.append(
            dict(
                inputs=[x.detach().cpu().reshape(-1).double().numpy() for x in inputs[:7]],
                coefs=inputs[7:],
                stats={k: v.item() for k, v in stats.items()},
            )
        )
        return loss, stats

    class RecordingAgent(module.Agent):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            run.initial.append({k: v.detach().clone() for k, v in self.state_dict().items()})
            run.num_params = len(list(self.parameters()))

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.setattr(module, "ppo_loss", recording_loss)
        mp.setattr(module, "Agent", RecordingAgent)
        mp.setattr(
            torch.nn.utils,
            "clip_grad_norm_",
            lambda params, max_norm, *a, **k: run.clips.append(max_norm) or clip_grad_norm_(params, max_norm, *a, **k),
        )
        run.args = module.Args(**{**TINY, "save_model": True, **threads(module), **overrides})
        module.main(run.args)
    # rglob: an env id such as Jumanji/JobShop-v0 makes a subfolder
    (run.model,) = (cwd / "runs").rglob("*.pt")
    run.scalars = read_scalars(run.model.parent)
    return run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    runs = {}

    def get(script):
        if script not in runs:
            runs[script] = train(script, tmp_path_factory.mktemp(script[: -len(".py")]))
        return runs[script]

    return get


@pytest.mark.parametrize("script", SCRIPTS)
def test_logged_losses_are_the_mean_of_the_update(tiny_run, script):
    """[C12] each losses/* scalar of an iteration is the mean, over all epochs and mini-batches of that update, of
    the statistics computed independently from the mini-batch's inputs; the update calls ppo_loss with the
    arguments' coefficients and clips the gradient [C11] once per mini-batch."""
    run = tiny_run(script)
    args = run.args
    per_update = args.update_epochs * args.num_minibatches
    assert len(run.calls) == args.num_iterations * per_update
    assert all(
        call["coefs"] == (args.clip_coef, args.norm_adv, args.clip_vloss, args.ent_coef, args.vf_coef)
        for call in run.calls
    )
    assert run.clips == [0.5] * len(run.calls)
    distinguishable = False
    for i in range(args.num_iterations):
        calls = run.calls[i * per_update : (i + 1) * per_update]
        expected = [reference_loss(*call["inputs"], *call["coefs"])[1] for call in calls]
        for name in STATS:
            step, logged = run.scalars[f"losses/{name}"][i]
            mean, last = np.mean([e[name] for e in expected]), expected[-1][name]
            np.testing.assert_allclose(logged, mean, rtol=1e-4, atol=1e-6, err_msg=f"{name}, iteration {i + 1}")
            distinguishable |= abs(last - mean) > 1e-3 * abs(mean) + 1e-5
    assert distinguishable  # the check above would have failed had the last mini-batch been logged


@pytest.mark.parametrize("script", ["ppo.py", "ppo_atari_multigpu.py"])
def test_early_stopping_tests_the_last_mini_batch_kl(tiny_run, tmp_path, script):
    """[X3] --target-kl ends an update's epochs when the last mini-batch's approx KL exceeds it, not their mean (the
    logged value). The first epoch of the tiny run's first update has two mini-batches, of approx KL 0 (ratio 1) and
    k > 0; a target between their mean and k ends that update after one epoch (the multi-GPU script: a world of one)."""
    first_epoch = [call["stats"]["approx_kl"] for call in tiny_run(script).calls[:2]]
    target = 0.75 * first_epoch[-1]
    assert np.mean(first_epoch) < target < first_epoch[-1]
    # one iteration: the first update of the tiny run, the same until --target-kl stops it
    run = train(script, tmp_path, total_timesteps=16, target_kl=target)
    assert len(run.calls) == TINY["num_minibatches"]  # one epoch of two


@pytest.mark.parametrize("script", SCRIPTS)
def test_evaluation_plays_the_saved_weights(tiny_run, script):
    """--eval-checkpoint hands evaluate an agent whose weights are the checkpoint's, which differ from the weights
    the same seed gives a new agent. It needs no optimizer state: a finished run keeps its checkpoint without it
    (benchmark/breakout.sh)."""
    run = tiny_run(script)
    module = run.module
    checkpoint = torch.load(run.model, weights_only=True)
    del checkpoint["optimizer"]
    torch.save(checkpoint, run.cwd / "weights.pt")
    played = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(run.cwd)
        mp.setattr(module, "evaluate", lambda agent, *args, **kwargs: played.append(agent) or [0.0])
        module.main(module.Args(eval_checkpoint="weights.pt", eval_episodes=1, **threads(module)))
    saved = checkpoint["model"]
    (agent,) = played
    state = agent.state_dict()
    assert state.keys() == saved.keys()
    assert all(torch.equal(state[k].cpu(), saved[k]) for k in saved)
    initial = run.initial[0]
    # training moved the weights
    assert any(not torch.equal(initial[k].cpu(), saved[k]) for k in saved)


@pytest.mark.parametrize("script", SCRIPTS)
def test_optimizer_settings_and_step_count(tiny_run, script):
    """[C3, C4] what each script's saved optimizer holds after the tiny run: one Adam group over every parameter of
    the agent with eps 1e-5 and PyTorch's other defaults, its learning rate that of the last iteration (annealed
    linearly where --anneal-lr is on), and exactly one step per mini-batch."""
    run = tiny_run(script)
    args = run.args
    optimizer = torch.load(run.model, weights_only=True)["optimizer"]
    (group,) = optimizer["param_groups"]
    assert group["eps"] == 1e-5
    assert tuple(group["betas"]) == (0.9, 0.999)
    assert group["weight_decay"] == 0 and not group["amsgrad"] and not group["maximize"]
    frac = 1 - (args.num_iterations - 1) / args.num_iterations if args.anneal_lr else 1.0
    assert group["lr"] == pytest.approx(args.learning_rate * frac, rel=1e-12)
    assert sorted(group["params"]) == list(range(run.num_params))
    steps = args.num_iterations * args.update_epochs * args.num_minibatches
    assert sorted(optimizer["state"]) == list(range(run.num_params))
    # Adam's moments (an SGD or RMSprop state has neither)
    for state in optimizer["state"].values():
        assert {"exp_avg", "exp_avg_sq"} <= state.keys()
        assert float(state["step"]) == steps


def train_compiled(script, cwd, backend, **overrides):
    """Train `script` in-process for TINY (with overrides) with --compile, torch.compile's backend replaced by one
    that records each graph dynamo hands it and then compiles it with `backend`; returns the graphs, dynamo's graph
    breaks and the saved model's path."""
    from torch._dynamo.utils import counters

    module, graphs = load_needed(script), []

    def recording(graph, example_inputs):
        graphs.append(graph)
        return torch._dynamo.lookup_backend(backend)(graph, example_inputs)

    torch._dynamo.reset()
    counters.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.setattr(torch, "compile", functools.partial(torch.compile, backend=recording))
        module.main(module.Args(**{**TINY, "save_model": True, "compile": True, **threads(module), **overrides}))
    (model,) = (cwd / "runs").rglob("*.pt")
    return graphs, dict(counters["graph_break"]), model


def assert_same_losses(run_dir, scalars, names):
    """The losses/<name> a run logged in run_dir equal those of scalars (another run's), to float rounding."""
    logged = read_scalars(run_dir)
    for name in names:
        ours = [value for _, value in logged[f"losses/{name}"]]
        theirs = [value for _, value in scalars[f"losses/{name}"]]
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=name)


def calls(graph, name):
    """Whether an FX graph calls a function or method whose name holds `name` (linear, conv2d, clamp)."""
    return any(name in str(node.target) for node in graph.graph.nodes if node.op.startswith("call_"))


@pytest.mark.parametrize("script,backend", [(script, "aot_eager") for script in SCRIPTS] + [("ppo.py", "inductor")])
def test_compile_computes_what_the_default_computes(tiny_run, tmp_path, script, backend):
    """--compile hands each mini-batch's forward pass and loss to torch.compile as one graph, which computes what the
    default run does: from the same seed, the tiny run's logged losses of both updates and its final weights agree
    with the uncompiled run's, to float rounding. In ppo_atari_lstm.py dynamo stops at the nn.LSTM in get_states's
    loop and leaves that method (the CNN too) to eager code: its graphs hold the heads and the loss. Every script
    with the aot_eager backend (dynamo's tracing, no code generation: seconds); ppo.py also with inductor, the
    backend that --compile uses (its C++ build takes a while)."""
    eager = tiny_run(script)
    graphs, breaks, model = train_compiled(script, tmp_path, backend)
    if script == "ppo_atari_lstm.py":
        assert breaks and all("LSTM" in reason for reason in breaks)
        assert any(calls(g, "linear") for g in graphs) and any(calls(g, "clamp") for g in graphs)
    # one graph: the forward pass (its linear layers, and convolutions in the CNN scripts) and the loss
    else:
        assert not breaks and len(graphs) == 1
        assert calls(graphs[0], "linear") and calls(graphs[0], "clamp")
        assert calls(graphs[0], "conv2d") == ("atari" in script or "procgen" in script)
    assert_same_losses(model.parent, eager.scalars, STATS + ["explained_variance"])
    ours, theirs = torch.load(model, weights_only=True)["model"], torch.load(eager.model, weights_only=True)["model"]
    assert ours.keys() == theirs.keys()
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], rtol=1e-5, atol=1e-6)
    # the update moved the weights
    assert any(not torch.equal(eager.initial[0][k].cpu(), theirs[k]) for k in theirs)


def test_compile_with_anneal_clip_compiles_once(tmp_path):
    """[X1] --anneal-clip's clip range changes every iteration: with --compile it goes in as a tensor, since dynamo
    compiles a graph anew for each value of a float handed to torch.clamp (and after 8, runs eager code). One graph
    for three iterations, the same losses as without --compile."""
    (tmp_path / "compiled").mkdir()
    (tmp_path / "eager").mkdir()
    graphs, breaks, model = train_compiled(
        "ppo.py", tmp_path / "compiled", "aot_eager", anneal_clip=True, total_timesteps=48
    )
    assert not breaks and len(graphs) == 1
    eager = train("ppo.py", tmp_path / "eager", anneal_clip=True, total_timesteps=48)
    # annealed
    assert [call["coefs"][0] for call in eager.calls[::4]] == pytest.approx([0.15, 0.1, 0.05])
    assert_same_losses(model.parent, eager.scalars, STATS)
