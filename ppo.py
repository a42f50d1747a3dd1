"""PPO for Discrete actions and vector observations (classic control): the base script, no parent.

Reproduces openai/baselines ppo2 with its 13 core details, each tagged where it is implemented ([C1] ... [C13]);
[X1], [X3] and [X5] are opt-in flags. Every other script is this one plus what its family needs. See docs/ppo.md.

    python ppo.py --env-id CartPole-v1 --seed 1                # train; logs in runs/<run_name>/ (tensorboard)
    python ppo.py --eval-checkpoint runs/<run_name>/ppo.pt     # play a model saved by --save-model
"""

import signal

# before the imports below (seconds): until training starts, Ctrl-C ends the process quietly
if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
import contextlib
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import re
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    """PPO (openai/baselines ppo2, 13 core details) for Discrete-action envs with vector observations.
    Train: `python ppo.py --env-id Acrobot-v1 --seed 2`; logs: `tensorboard --logdir runs`;
    save, then evaluate: `python ppo.py --save-model`, `python ppo.py --eval-checkpoint runs/<run>/ppo.pt`."""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """name of the experiment: runs are named {env_id}__{exp_name}__{seed}__{unix time}"""
    seed: int = 1
    """seed of python, numpy, torch and the envs (env i gets seed + i); an integer from 0 to 2**30"""
    torch_deterministic: bool = True
    """set torch.backends.cudnn.deterministic: deterministic cuDNN kernels on a GPU; nothing else, no effect on CPU"""
    cuda: bool = True
    """use the GPU when torch sees one (ignored otherwise)"""
    compile: bool = False
    """torch.compile each mini-batch's forward pass and loss (~20 s to compile; no clear gain on CPUs: docs/speed.md)"""
    track: bool = False
    """mirror the TensorBoard logs to Weights & Biases (pip install wandb; WANDB_MODE=offline without a network)"""
    wandb_project_name: str = "ppo-details"
    """the wandb project to log to (with --track)"""
    wandb_entity: Optional[str] = None
    """the wandb team or user to log under (with --track); default: your wandb default entity"""
    capture_video: bool = False
    """record videos of env 0's episodes into videos/{run_name}/ (needs moviepy)"""
    save_model: bool = False
    """save the agent to runs/{run_name}/{exp_name}.pt at the end of training and on Ctrl-C or SIGTERM"""
    eval_checkpoint: Optional[str] = None
    """path of a model saved by --save-model: play it for --eval-episodes episodes instead of training"""
    eval_episodes: int = 10
    """number of episodes that --eval-checkpoint plays (1 to 1000)"""
    checkpoint_every: int = 0
    """also save the checkpoint every N iterations, for long runs (0: at the end and on a stop, with --save-model)"""
    target_return: Optional[float] = None
    """end training as at its end once the mean return of the last 20 episodes reaches this (Pong: 20); default off"""
    resume: Optional[str] = None
    """path of a checkpoint (runs/{run_name}/{exp_name}.pt): continue that run, in its folder, with its arguments"""

    env_id: str = "CartPole-v1"
    """gymnasium id of an env with Discrete actions and flat observations (CartPole-v1, Acrobot-v1, MountainCar-v0)"""
    total_timesteps: int = 500000
    """env steps to train for, summed over all envs (1e5 to 1e7 for classic control)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start of training (1e-4 to 1e-3)"""
    num_envs: int = 4
    """number of envs stepped in lockstep (1 to 64)"""
    num_steps: int = 128
    """steps per env in each rollout segment; num_envs * num_steps is the batch (16 to 2048)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over training [C4]"""
    gamma: float = 0.99
    """discount factor (0.9 to 0.999)"""
    gae_lambda: float = 0.95
    """GAE lambda: 0 is one-step TD, 1 is Monte Carlo (0.9 to 1) [C5]"""
    num_minibatches: int = 4
    """mini-batches per epoch; must divide num_envs * num_steps (1 to 64) [C6]"""
    update_epochs: int = 4
    """passes over the batch per update (1 to 10)"""
    norm_adv: bool = True
    """normalize advantages to mean 0, std 1 in each mini-batch [C7]"""
    clip_coef: float = 0.2
    """clip range of the probability ratio and of the value change (0.1 to 0.3) [C8, C9]"""
    anneal_clip: bool = False
    """anneal the clip range linearly to 0 like the learning rate (a schedule baselines accepts); off by default [X1]"""
    clip_vloss: bool = True
    """clip the value loss around the old value estimate [C9]"""
    ent_coef: float = 0.01
    """weight of the entropy bonus (0 to 0.05) [C10]"""
    vf_coef: float = 0.5
    """weight of the value loss (0.25 to 1) [C10]"""
    max_grad_norm: float = 0.5
    """clip the global gradient norm to this (0.5 in baselines) [C11]"""
    target_kl: Optional[float] = None
    """stop the epochs early once approx KL exceeds this (0.01 to 0.05); off by default [X3]"""
    bootstrap_truncated: bool = False
    """add gamma * V(final obs) to the reward of a step cut by a time limit (not in ppo2); off by default [X5]"""

    # Derived sizes, computed in this one place.
    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size

    def problem(self) -> Optional[str]:
        """The first thing wrong with these arguments, as a sentence for the user; None when all is well."""
        for name in (
            "total_timesteps",
            "num_envs",
            "num_steps",
            "num_minibatches",
            "update_epochs",
            "eval_episodes",
            "learning_rate",
            "clip_coef",
            "max_grad_norm",
        ):
            if not 0 < getattr(self, name) < np.inf:  # NaN fails every comparison
                return f"--{name.replace('_', '-')} must be positive and finite, got {getattr(self, name)}"
        # with room above for the envs' offsets (+ i) within envpool's int32 seeds
        if not 0 <= self.seed <= 2**30:
            return f"--seed must be an integer from 0 to 2**30, got {self.seed}"
        for name in ("ent_coef", "vf_coef"):
            if not 0 <= getattr(self, name) < np.inf:
                return f"--{name.replace('_', '-')} must be >= 0 and finite, got {getattr(self, name)}"
        if self.target_kl is not None and not 0 < self.target_kl < np.inf:
            return f"--target-kl must be positive (leave it out for no early stopping), got {self.target_kl}"
        for name in ("gamma", "gae_lambda"):
            if not 0 <= getattr(self, name) <= 1:
                return f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(self, name)}"
        if self.batch_size % self.num_minibatches:
            return (
                f"the batch (--num-envs {self.num_envs} x --num-steps {self.num_steps} = {self.batch_size}) "
                f"does not split into --num-minibatches {self.num_minibatches} equal mini-batches"
            )
        if self.checkpoint_every < 0:
            return f"--checkpoint-every must be >= 0 (0: only at the end), got {self.checkpoint_every}"
        if self.resume is not None and self.eval_checkpoint is not None:
            return "--resume continues training, --eval-checkpoint only plays: give one of them"
        if self.num_iterations == 0 and self.eval_checkpoint is None:
            return f"--total-timesteps {self.total_timesteps} is less than one batch ({self.batch_size} steps)"
        return None


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return env

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # [C2] orthogonal weights, gain sqrt(2) for hidden layers
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)  # [C2] biases 0
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        # [C13] separate policy and value networks, 2 x 64 tanh each (baselines' value_network="copy")
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),  # [C2] value output gain 1
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            # [C2] policy output gain 0.01
            layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action(self, x):
        """A sample of the policy and nothing else: what a rollout step needs."""
        # Categorical(logits=...).sample()'s own draw (one multinomial on the softmax), without building the
        # distribution: the same actions, 1.1x the steps/s on CartPole (docs/speed.md)
        return torch.multinomial(self.actor(x).softmax(-1), 1, True).squeeze(-1)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        # validate_args=False: the logits come from our own network; the checks cost ~10% of a rollout step
        probs = Categorical(logits=logits, validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """[C5] Generalized Advantage Estimation over one rollout segment; returns (advantages, returns).

    rewards, values, dones: (num_steps, num_envs); next_value, next_done: (num_envs,), for the obs after the segment.
    dones[t] = 1 means obs[t] is the first observation of a new episode [C1], so the episode ended with the
    transition at t - 1 and V(obs[t]) must not be bootstrapped into it. As in baselines, a time-limit truncation
    counts as an end too (no bootstrap here; --bootstrap-truncated [X5] adds it to the reward instead). Returns
    are advantages + values, the TD(lambda) target.
    """
    next_nonterminal = 1.0 - torch.cat([dones[1:], next_done.unsqueeze(0)])  # (num_steps, num_envs)
    next_values = torch.cat([values[1:], next_value.unsqueeze(0)])  # (num_steps, num_envs)
    deltas = rewards + gamma * next_values * next_nonterminal - values
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        lastgaelam = deltas[t] + gamma * gae_lambda * next_nonterminal[t] * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def ppo_loss(
    newlogprob,
    entropy,
    newvalue,
    logprob,
    value,
    advantages,
    returns,
    clip_coef,
    norm_adv,
    clip_vloss,
    ent_coef,
    vf_coef,
):
    """[C7]-[C10] The PPO loss of one mini-batch; returns (loss, stats), a pure function of its inputs.

    newlogprob, entropy, newvalue: the current policy's log-probs and entropies of the stored actions, and its values;
    logprob, value, advantages, returns: what the rollout stored for the same samples; all (minibatch_size,).
    stats: this mini-batch's [C12] debug variables as 0-d tensors (no gradient), named as the metrics losses/<name>.
    """
    logratio = newlogprob - logprob
    ratio = logratio.exp()

    if norm_adv:  # [C7] per mini-batch; population std, as numpy's in baselines
        advantages = (advantages - advantages.mean()) / (advantages.std(correction=0) + 1e-8)

    # [C8] clipped surrogate objective
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    newvalue = newvalue.view(-1)
    if clip_vloss:  # [C9] value loss clipped around the old value
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = value + torch.clamp(newvalue - value, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef  # [C10] one loss, one optimizer

    # [C12] debug variables: KL by the k1 (old) and k3 estimators, clip fraction
    with torch.no_grad():
        stats = dict(
            value_loss=v_loss.detach(),
            policy_loss=pg_loss.detach(),
            entropy=entropy_loss.detach(),
            old_approx_kl=(-logratio).mean(),
            approx_kl=((ratio - 1) - logratio).mean(),
            clipfrac=((ratio - 1.0).abs() > clip_coef).float().mean(),
        )
    return loss, stats


def evaluate(agent, envs, num_episodes, device, seed):
    """Play the agent's stochastic policy until num_episodes episodes have ended; returns their returns. Seeded."""
    episodic_returns = []
    next_obs, _ = envs.reset(seed=seed)
    while len(episodic_returns) < num_episodes:
        with torch.no_grad():
            action, _, _, _ = agent.get_action_and_value(torch.as_tensor(next_obs, dtype=torch.float32, device=device))
        next_obs, _, _, _, infos = envs.step(action.cpu().numpy())
        if "final_info" in infos:
            for r, done in zip(infos["final_info"]["episode"]["r"], infos["final_info"]["_episode"]):
                if done and len(episodic_returns) < num_episodes:
                    print(f"eval episode {len(episodic_returns)}: return {r:.2f}")
                    episodic_returns.append(float(r))
    return episodic_returns


def main(args: Args) -> None:
    # the plumbing (below the divider): checks, --resume or --eval-checkpoint, run folder, stops
    run = Run(args)
    # classic control renders with it
    if args.capture_video and importlib.util.find_spec("pygame") is None:
        run.fail('--capture-video of classic-control envs needs pygame: pip install -e ".[video]"')

    # seeding (run.seed: --seed, or one drawn from it after --resume); tiny MLPs run fastest on one CPU thread
    random.seed(run.seed)
    np.random.seed(run.seed)
    torch.manual_seed(run.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # [C1] vectorized architecture: num_envs envs stepped in lockstep. SAME_STEP autoreset, as baselines' VecEnv:
    # the obs returned with done=True is already the first obs of the next episode (gymnasium 1.x defaults to NEXT_STEP)
    num_envs = 1 if args.eval_checkpoint is not None else args.num_envs
    try:
        envs = gym.vector.SyncVectorEnv(
            [make_env(args.env_id, i, args.capture_video, run.name) for i in range(num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
    # ImportError: an id whose dependency is missing (HalfCheetah-v3)
    except (gym.error.Error, ImportError) as e:
        atari = re.search(r"^ALE/|NoFrameskip|Deterministic|^[A-Z][A-Za-z]+-v5$", args.env_id)
        hint = " (Atari games: ppo_atari.py with a *NoFrameskip-v4 id, or ppo_atari_envpool.py with a *-v5 id)"
        run.fail(f"cannot make env {args.env_id!r}: {e}".replace("\n", " ") + (hint if atari else ""))
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        hint = {
            gym.spaces.Box: "ppo_continuous_action.py",
            gym.spaces.MultiDiscrete: (
                "the Agent of ppo_multidiscrete.py (that script makes envpool envs: give it your make_env)"
            ),
        }
        run.fail(
            f"{args.env_id} has a {type(envs.single_action_space).__name__} action space; ppo.py handles "
            f"Discrete only: use {hint.get(type(envs.single_action_space), 'another script')}"
        )
    if not isinstance(envs.single_observation_space, gym.spaces.Box) or len(envs.single_observation_space.shape) != 1:
        run.fail(
            f"{args.env_id} has observations {envs.single_observation_space}; ppo.py takes flat vectors "
            f"(use ppo_atari.py for images)"
        )

    agent = Agent(envs).to(device)
    if args.eval_checkpoint is not None:  # play the saved model instead of training
        run.load(model=agent)
        returns = evaluate(agent, envs, args.eval_episodes, device, run.seed)
        print(
            f"{args.env_id}: mean return {np.mean(returns):.2f} +- {np.std(returns):.2f} over {len(returns)} episodes"
        )
        envs.close()
        return

    # [C3] Adam epsilon 1e-5, added after the bias correction (ppo2's TF1 Adam adds it before: docs/details.md).
    # fused=True: one kernel for all parameters, the same math as the default loop, faster
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

    def minibatch_loss(inputs, *loss_args):
        """The agent on a mini-batch, then the loss: one graph for --compile."""
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(*inputs)
        return ppo_loss(newlogprob, entropy, newvalue, *loss_args)

    # compiled at its first call (~20 s, less with inductor's cache); the rollout stays eager
    if args.compile:
        minibatch_loss = torch.compile(minibatch_loss)

    # rollout storage: (num_steps, num_envs, ...)
    # what the envs take and give is kept in numpy arrays, written per step (a numpy write costs a fraction of a
    # torch op: docs/speed.md), and made tensors after the segment (on a CPU without a copy)
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.float32)
    actions = np.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, dtype=np.int64)
    rewards = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)

    def to_torch(array, dtype=torch.float32):
        """A tensor on the run's device; on a CPU no copy if the dtype matches."""
        return torch.as_tensor(array, dtype=dtype, device=device)

    # --resume: their state from the checkpoint; the logs
    writer = run.start(envs, model=agent, optimizer=optimizer)
    # however the loop ends, the logs close; Ctrl-C or SIGTERM ends it after the iteration under way
    with run:
        global_step = run.start_iteration * args.batch_size
        next_obs, _ = envs.reset(seed=run.seed)
        next_done = np.zeros(args.num_envs)  # [C1] next_obs and next_done carry across rollouts
        for iteration in range(run.start_iteration + 1, args.num_iterations + 1):
            # --resume: the schedules go on from the iteration reached; with a larger --total-timesteps they are
            # recomputed for the new length (the learning rate goes up to where the longer run would be, then to 0)
            # the share of training still to come
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            # [C4] learning rate annealed linearly; it would reach 0 after the last iteration
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate
            # [X1] off by default
            clip_coef = frac * args.clip_coef if args.anneal_clip else args.clip_coef
            # a float that changes is compiled anew; a tensor's value is not
            if args.compile and args.anneal_clip:
                clip_coef = torch.tensor(clip_coef, device=device)

            # [C1] a fixed-length segment of num_steps per env
            for step in range(0, args.num_steps):
                global_step += args.num_envs
                obs[step] = next_obs
                dones[step] = next_done

                with torch.inference_mode():  # like no_grad, with less bookkeeping per op
                    # log-probs and values come after the loop
                    action = agent.get_action(to_torch(next_obs))
                action = action.cpu().numpy()
                actions[step] = action

                next_obs, reward, terminations, truncations, infos = envs.step(action)
                # [C5] truncation ends the episode, as in baselines
                next_done = np.logical_or(terminations, truncations)
                rewards[step] = reward
                truncated = np.flatnonzero(truncations & ~terminations) if args.bootstrap_truncated else []
                # [X5] a time limit is no real end: gamma * V(final obs) enters GAE via the reward
                if len(truncated):
                    # as the env returned it, before its reset
                    final_obs = np.stack(infos["final_obs"][truncated])
                    # one batched call for the envs that truncated at this step
                    with torch.inference_mode():
                        final_value = agent.get_value(to_torch(final_obs)).flatten().cpu().numpy()
                    rewards[step, truncated] += args.gamma * final_value

                if "final_info" in infos:
                    episode = infos["final_info"]["episode"]
                    for i in np.flatnonzero(infos["final_info"]["_episode"]):
                        writer.add_scalar("charts/episodic_return", episode["r"][i], global_step)
                        writer.add_scalar("charts/episodic_length", episode["l"][i], global_step)
                        # the progress line, --target-return
                        run.recent_returns.append(float(episode["r"][i]))

            with torch.no_grad():
                # The parameters do not change during a rollout, so one batched call after it gives the log-probs and
                # values that per-step calls would; the steps then run the actor alone (faster: docs/speed.md)
                _, logprob, _, value = agent.get_action_and_value(
                    to_torch(obs).flatten(0, 1), to_torch(actions, torch.long).flatten(0, 1)
                )
                logprobs, values = logprob.view(args.num_steps, -1), value.view(args.num_steps, -1)
                next_value = agent.get_value(to_torch(next_obs)).reshape(1, -1)[0]
                advantages, returns = compute_gae(
                    to_torch(rewards),
                    values,
                    to_torch(dones),
                    next_value,
                    to_torch(next_done),
                    args.gamma,
                    args.gae_lambda,
                )

            # flatten the segment: (num_steps, num_envs, ...) -> (batch_size, ...)
            b_obs = to_torch(obs).reshape((-1,) + envs.single_observation_space.shape)
            b_logprobs = logprobs.reshape(-1)
            b_actions = to_torch(actions, torch.long).reshape((-1,) + envs.single_action_space.shape)
            b_advantages = advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_values = values.reshape(-1)

            # [C12] every mini-batch's debug variables: the logs show their mean over the update
            update_stats = []
            for epoch in range(args.update_epochs):
                # [C6] one shuffle per epoch, cut into equal mini-batches: every sample used exactly once per epoch
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]

                    loss, stats = minibatch_loss(
                        (b_obs[mb_inds], b_actions[mb_inds]),  # the agent's inputs
                        b_logprobs[mb_inds],
                        b_values[mb_inds],
                        b_advantages[mb_inds],
                        b_returns[mb_inds],
                        clip_coef,
                        args.norm_adv,
                        args.clip_vloss,
                        args.ent_coef,
                        args.vf_coef,
                    )
                    update_stats.append(stats)

                    optimizer.zero_grad()
                    loss.backward()
                    # [C11] global gradient clipping
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

                # X3 tests the last mini-batch's approx KL, not the logged mean
                approx_kl = stats["approx_kl"]
                # [X3] early stopping, off by default
                if args.target_kl is not None and approx_kl > args.target_kl:
                    break

            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            # [C12] debug variables: the mean over all mini-batches and epochs of the update, as baselines logs them
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            # value_loss, policy_loss, entropy, old_approx_kl, approx_kl, clipfrac
            for name in update_stats[0]:
                mean = torch.stack([stats[name] for stats in update_stats]).mean()
                writer.add_scalar(f"losses/{name}", mean.item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)

            # the iteration's end: the progress line, --checkpoint-every, --target-return, and a stop (Ctrl-C, SIGTERM)
            run.progress(iteration)
            if args.checkpoint_every and iteration % args.checkpoint_every == 0:
                run.save(iteration)
            if run.target_reached(iteration) or run.stop_signal:
                break
        if args.save_model or args.checkpoint_every:  # the state after the last iteration
            run.save(iteration)


# =====================================================================================================================
# Run plumbing: errors, --resume and --eval-checkpoint, the run's folder and logs, checkpoints, stops, wandb, the
# progress line. No PPO below this line: the same text in every single-process script (a test checks it). docs/ppo.md.
# =====================================================================================================================

# --resume takes the checkpoint's settings; a flag given on the command line changes these (where a script has them)
FREE_ON_RESUME = """total_timesteps target_return cuda compile track wandb_project_name wandb_entity capture_video
    save_model checkpoint_every eval_episodes num_threads""".split()
# what --eval-checkpoint takes from the checkpoint
ENV_SETTINGS = ["env_id", "distribution_mode"]
# the libraries whose versions args.json records, those the run imported: {module: distribution}
LIBRARIES = dict(torch="torch", gymnasium="gymnasium", envpool="envpool", ale_py="ale-py", mujoco="mujoco")
# Gym-μRTS and the gym it runs on
LIBRARIES |= dict(gym="gym", gym_microrts="gym-microrts", jpype="JPype1")


class Run(contextlib.AbstractContextManager):
    """What a run needs besides PPO: its checks, the checkpoint it resumes or plays, its folder and logs, its saves.
    `with run:` around the training loop closes the logs and restores the signal handlers however the loop ends."""

    def __init__(self, args):
        self.args = args
        self.script = os.path.basename(__file__)
        self.name = None
        self.checkpoint = {}
        if args.resume is not None:
            self.checkpoint = self.read_checkpoint("--resume", args.resume)
        elif args.eval_checkpoint is not None:
            self.checkpoint = self.read_checkpoint("--eval-checkpoint", args.eval_checkpoint)
        problem = args.problem()
        if problem is not None:
            self.fail(problem)
        self.start_iteration = self.checkpoint.get("iteration", 0) if args.resume is not None else 0
        if args.resume is not None and self.start_iteration >= args.num_iterations:
            self.fail(
                f"--resume {args.resume}: the run has done all its {self.start_iteration} iterations; "
                f"give a larger --total-timesteps than {args.total_timesteps} to extend it"
            )
        # the returns of the last 20 episodes, for the progress line and --target-return; a resumed run counts on
        self.recent_returns = deque(self.checkpoint.get("recent_returns", []), maxlen=20)
        if args.resume is None:
            self.seed = args.seed
            self.name = self.free_name()
            self.dir = f"runs/{self.name}"
        else:
            # A resumed run draws new random numbers: its seed comes from --seed and the iteration it starts at
            # (below 2**30, as --seed, so that the envs' seeds, seed + i, stay within envpool's int32)
            self.seed = int(np.random.SeedSequence([args.seed, self.start_iteration]).generate_state(1)[0]) % 2**30
            # and it goes on in its own folder
            self.dir = os.path.dirname(args.resume) or "."
            self.name = os.path.basename(os.path.abspath(self.dir))
        if args.eval_checkpoint is not None:  # a recorded evaluation films into videos/{name}/eval
            self.name = f"{self.name}/eval"
        if args.capture_video:
            try:
                os.makedirs("videos", exist_ok=True)
            except OSError as e:
                self.fail(f"cannot make the folder videos ({e.strerror})")
        self.stop_signal = 0
        self.saved_iteration = None
        self.wandb_id = self.checkpoint.get("wandb_id")

    def free_name(self):
        """{env id}__{exp_name}__{seed}__{unix time}, then -2, -3, ... while a run of the same second has that name."""
        first = f"{self.args.env_id.replace('/', '_')}__{self.args.exp_name}__{self.args.seed}__{int(time.time())}"
        name = first
        number = 1
        while os.path.exists(f"runs/{name}") or os.path.exists(f"videos/{name}"):
            number += 1
            name = f"{first}-{number}"
        return name

    def read_checkpoint(self, flag, path):
        """The checkpoint at path, if this script wrote it. Its settings become the run's: all of them for --resume,
        the env's for --eval-checkpoint; a setting given that contradicts them is refused."""
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            self.fail(f"{flag} {path}: no such file")
        except Exception as e:
            self.fail(f"{flag} {path}: not a readable checkpoint ({type(e).__name__})")
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("args"), dict):
            self.fail(f"{flag} {path}: not a checkpoint saved by --save-model (a bare state dict? an older format?)")
        if checkpoint.get("script") != self.script:
            self.fail(f"{flag} {path}: this checkpoint was written by {checkpoint.get('script')}; use that script")
        # A setting is given when typed on the command line (at any value), or set off its default by a caller of main
        typed = set()
        if os.path.realpath(sys.argv[0]) == os.path.realpath(__file__):
            typed = {word[2:].split("=")[0].replace("-", "_").removeprefix("no_") for word in sys.argv[1:]}
        names = vars(self.args) if flag == "--resume" else ENV_SETTINGS
        for name in [name for name in names if name in checkpoint["args"] and name in vars(self.args)]:
            value = getattr(self.args, name)
            saved = checkpoint["args"][name]
            given = name in typed or value != getattr(Args(), name)
            free = flag == "--resume" and name in FREE_ON_RESUME + ["resume", "eval_checkpoint"]
            if given and value != saved and not free:
                self.fail(f"--{name.replace('_', '-')} {value}: the checkpoint was trained with {saved}; leave it out")
            if not given:
                setattr(self.args, name, saved)
        return checkpoint

    def load(self, **parts):
        """The checkpoint's state into the parts (model=agent, ...)."""
        for name, part in parts.items():
            try:
                part.load_state_dict(self.checkpoint[name])
            except Exception:
                path = self.args.resume or self.args.eval_checkpoint
                self.fail(f"{path}: its {name} does not fit this script's {name} for {self.args.env_id}")

    def start(self, envs, **parts):
        """Training starts: --resume loads the parts; the run gets its folder, args.json, wandb and TensorBoard's
        writer (returned); Ctrl-C and SIGTERM now stop the run at the end of the iteration under way."""
        args = self.args
        self.envs = envs
        self.parts = parts
        if args.resume is not None:
            self.load(**parts)
        if args.track and importlib.util.find_spec("wandb") is None:
            self.fail('--track needs wandb: pip install -e ".[wandb]"')
        try:
            os.makedirs(self.dir, exist_ok=args.resume is not None)
        except OSError as e:
            self.fail(f"cannot make the folder {e.filename} ({e.strerror})")
        if args.track:
            import wandb

            # the same wandb run after --resume; without a network, wandb.init gives up after WANDB_INIT_TIMEOUT
            # seconds (90 by default): the run logs offline then (`wandb sync` uploads it later)
            config = dict(project=args.wandb_project_name, entity=args.wandb_entity, name=self.name, config=vars(args))
            config.update(id=self.wandb_id, resume="allow", sync_tensorboard=True, save_code=True)
            try:
                wandb.init(**config)
            except Exception as e:
                print(f"wandb: cannot reach the server ({type(e).__name__}); logging offline", file=sys.stderr)
                wandb.init(**config, mode="offline")
            self.wandb_id = wandb.run.id
        versions = {"python": platform.python_version()}
        for module, distribution in LIBRARIES.items():
            if module in sys.modules:
                versions[distribution] = importlib.metadata.version(distribution)
        info = {"script": self.script, "versions": versions, **vars(args)}
        with open(f"{self.dir}/args.json", "w") as f:
            json.dump(info, f, indent=1)
        # After --resume, TensorBoard hides what the stopped process logged after its checkpoint: no step shows twice
        purge_step = self.start_iteration * args.batch_size + 1 if args.resume is not None else None
        self.writer = SummaryWriter(self.dir, purge_step=purge_step)
        table = "\n".join(f"|{key}|{value}|" for key, value in info.items())
        self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        self.handlers = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        self.start_time = time.time()
        self.printed = self.start_time
        return self.writer

    def on_signal(self, signum, frame):
        """Ctrl-C or SIGTERM: the run stops at the end of the iteration under way; a second one ends it at once."""
        if self.stop_signal:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        self.stop_signal = signum
        # os.write: the main thread may be inside a print, and Python's buffered streams refuse a reentrant write
        os.write(2, b"\nthe run stops at the end of this iteration (once more: at once)\n")

    def progress(self, iteration):
        """After each iteration: charts/SPS, and the progress line every 20th of the run and at least once a minute."""
        args = self.args
        self.last_iteration = iteration
        global_step = iteration * args.batch_size
        sps = int((iteration - self.start_iteration) * args.batch_size / (time.time() - self.start_time))
        self.writer.add_scalar("charts/SPS", sps, global_step)
        twentieth = iteration % max(1, args.num_iterations // 20) == 0
        if twentieth or iteration in (1, args.num_iterations) or time.time() - self.printed >= 60:
            self.printed = time.time()
            eta = datetime.timedelta(seconds=(args.num_iterations - iteration) * args.batch_size // max(sps, 1))
            recent = f"{np.mean(self.recent_returns):8.2f}" if self.recent_returns else "       -"
            episodes = f"return (last {len(self.recent_returns):>2}) {recent}"
            total = args.num_iterations * args.batch_size
            print(f"step {global_step:>9}/{total} | SPS {sps:>6} | {episodes} | ETA {eta}", flush=True)

    def target_reached(self, iteration):
        """--target-return: whether the mean return of the last 20 episodes has reached it (then said and logged)."""
        target = self.args.target_return
        if target is None or len(self.recent_returns) < 20 or np.mean(self.recent_returns) < target:
            return False
        global_step = iteration * self.args.batch_size
        mean = np.mean(self.recent_returns)
        print(f"target reached at step {global_step}: the last 20 episodes' mean return {mean:.2f} >= {target}")
        self.writer.add_text("target_reached", f"step {global_step}", global_step)
        return True

    def save(self, iteration):
        """The state after this iteration into runs/<run>/<script>.pt, written to a temporary file and then renamed,
        so that the file on disk is always a whole checkpoint. Once per iteration."""
        if iteration == self.saved_iteration:
            return
        global_step = iteration * self.args.batch_size
        state = {"script": self.script, "args": vars(self.args), "iteration": iteration, "global_step": global_step}
        state.update(wandb_id=self.wandb_id, recent_returns=list(self.recent_returns))
        for name, part in self.parts.items():
            state[name] = part.state_dict()
        path = f"{self.dir}/{self.args.exp_name}.pt"
        with open(f"{path}.tmp", "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(f"{path}.tmp", path)
        self.saved_iteration = iteration
        print(f"model saved to {path}")

    def __exit__(self, error_type, error, traceback):
        """The loop is over: finished, stopped or failed. After a stop, the exit code a shell shows for a process that
        the signal ended: 130 after Ctrl-C, 143 after SIGTERM."""
        if self.stop_signal and error_type is None:
            step = self.last_iteration * self.args.batch_size
            print(f"interrupted at step {step} (after iteration {self.last_iteration})", file=sys.stderr)
        self.envs.close()
        self.writer.close()
        if self.args.track:
            sys.modules["wandb"].finish()
        for s, handler in self.handlers.items():
            signal.signal(s, handler or signal.SIG_DFL)
        if error_type is not None:
            return False
        print(f"logs in {self.dir}: tensorboard --logdir {os.path.dirname(self.dir) or '.'}")
        if self.stop_signal:
            raise SystemExit(128 + self.stop_signal)
        return False

    def fail(self, message):
        """Refuse the run: one line on stderr and exit code 2, as argparse does; its empty video folders go again."""
        print(f"{self.script}: error: {message}", file=sys.stderr)
        for folder in (f"videos/{self.name}", "videos"):
            with contextlib.suppress(OSError):
                os.removedirs(folder)
        raise SystemExit(2)


if __name__ == "__main__":
    main(tyro.cli(Args))
