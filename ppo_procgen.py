"""PPO for Procgen games (envpool's port), the openai/train-procgen setup. Parent: ppo_atari_envpool.py.

Adds [P1]: the IMPALA-style CNN on 64x64 RGB frames and train-procgen's hyperparameters, with rewards scaled and
clipped as by baselines' VecNormalize [M8, M9]. Needs envpool and, on Linux, Qt 5 (libqt5gui5). See docs/envpool.md.

    python ppo_procgen.py --env-id starpilot --distribution-mode easy --seed 1  # train; logs in runs/<run_name>/
    python ppo_procgen.py --eval-checkpoint runs/<run_name>/ppo_procgen.pt
"""

import signal

if __name__ == "__main__":  # before the imports below (seconds): until training starts, Ctrl-C ends the process quietly
    signal.signal(signal.SIGINT, signal.SIG_DFL)
import contextlib
import copy
import importlib.metadata
import io
import itertools
import json
import os
import platform
import random
import shutil
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
    """PPO (openai/baselines ppo2, 13 core details + [P1]) for Procgen games on envpool, with train-procgen's defaults.
    Train: `python ppo_procgen.py --env-id bigfish --seed 2`; logs: `tensorboard --logdir runs`; save, then
    evaluate: add `--save-model`, then `--eval-checkpoint runs/<run>/ppo_procgen.pt`."""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """name of the experiment: runs are named {env_id}__{exp_name}__{seed}__{unix time}"""
    seed: int = 1
    """seed of python, numpy, torch and the levels (as procgen's ProcgenEnv(rand_seed=seed)); an integer, 0 to 2**30"""
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
    """save the agent to runs/{run_name}/{exp_name}.pt at the end of training (and on Ctrl-C)"""
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

    env_id: str = "starpilot"
    """the procgen game: bigfish, bossfight, caveflyer, chaser, climber, coinrun, dodgeball, fruitbot, heist, jumper,
    leaper, maze, miner, ninja, plunder, starpilot"""
    distribution_mode: str = "easy"
    """the game's level distribution: easy, hard (all games), or memory, exploration, extreme (some games)"""
    total_timesteps: int = 25000000
    """env steps to train for, summed over all envs (1e6 to 2e8; 2.5e7 in the benchmarks, train-procgen's easy runs)"""
    learning_rate: float = 5e-4
    """Adam learning rate (1e-4 to 1e-3; 5e-4 in train-procgen) [P1]"""
    num_envs: int = 64
    """number of envs stepped in lockstep (1 to 256; 64 in train-procgen) [P1]"""
    num_threads: Optional[int] = None
    """cores this run uses: envpool's C++ threads step the envs on them, then torch trains (default: all cores) [E1]"""
    num_steps: int = 256
    """steps per env in each rollout segment; num_envs * num_steps is the batch (16 to 2048) [P1]"""
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 over training [C4]; off in train-procgen [P1]"""
    gamma: float = 0.999
    """discount factor (0.9 to 0.999; 0.999 in train-procgen) [P1]"""
    gae_lambda: float = 0.95
    """GAE lambda: 0 is one-step TD, 1 is Monte Carlo (0.9 to 1) [C5]"""
    num_minibatches: int = 8
    """mini-batches per epoch; must divide num_envs * num_steps (1 to 64) [C6, P1]"""
    update_epochs: int = 3
    """passes over the batch per update (1 to 10; 3 in train-procgen) [P1]"""
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
        for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs",
                     "eval_episodes", "learning_rate", "clip_coef", "max_grad_norm"):
            if not 0 < getattr(self, name) < np.inf:  # NaN fails every comparison
                return f"--{name.replace('_', '-')} must be positive and finite, got {getattr(self, name)}"
        if not 0 <= self.seed <= 2**30:  # with room above for the envs' offsets (+ i) within envpool's int32 seeds
            return f"--seed must be an integer from 0 to 2**30, got {self.seed}"
        for name in ("ent_coef", "vf_coef"):
            if not 0 <= getattr(self, name) < np.inf:
                return f"--{name.replace('_', '-')} must be >= 0 and finite, got {getattr(self, name)}"
        if self.target_kl is not None and not 0 < self.target_kl < np.inf:
            return f"--target-kl must be positive (leave it out for no early stopping), got {self.target_kl}"
        for name in ("gamma", "gae_lambda"):
            if not 0 <= getattr(self, name) <= 1:
                return f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(self, name)}"
        if self.num_threads is not None and self.num_threads <= 0:
            return f"--num-threads must be positive, got {self.num_threads}"
        if self.batch_size % self.num_minibatches:
            return (f"the batch (--num-envs {self.num_envs} x --num-steps {self.num_steps} = {self.batch_size}) "
                    f"does not split into --num-minibatches {self.num_minibatches} equal mini-batches")
        if self.checkpoint_every < 0:
            return f"--checkpoint-every must be >= 0 (0: only at the end), got {self.checkpoint_every}"
        if self.resume is not None and self.eval_checkpoint is not None:
            return "--resume continues training, --eval-checkpoint only plays: give one of them"
        if self.num_iterations == 0 and self.eval_checkpoint is None:
            return f"--total-timesteps {self.total_timesteps} is less than one batch ({self.batch_size} steps)"
        return None


# the 16 procgen games; envpool names them <Game><Mode>-v0, e.g. StarpilotEasy-v0
PROCGEN_GAMES = ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot", "heist",
                 "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot")


class RunningMeanStd:
    """[M8] Mean and variance of every sample seen so far, updated one batch at a time (baselines' RunningMeanStd):
    batches merged with the parallel-variance formula (Chan et al.), exact in float64, starting from a pseudo-sample of
    mean 0, variance 1 and weight epsilon, so that they are defined before any update."""

    def __init__(self, shape=(), epsilon=1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = epsilon

    def update(self, x):
        """x: (batch, *shape)."""
        batch_mean, batch_var, batch_count = x.mean(axis=0), x.var(axis=0), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.var = m2 / total
        self.count = total

    def state_dict(self):  # tensors and floats only: torch.load(weights_only=True) accepts them
        return {"mean": torch.tensor(self.mean), "var": torch.tensor(self.var), "count": float(self.count)}

    def load_state_dict(self, state):
        self.mean, self.var, self.count = state["mean"].double().numpy(), state["var"].double().numpy(), state["count"]


class EnvpoolVecEnv:
    """[E1] envpool's procgen envs seen as ppo_atari.py sees its gymnasium vector env: SAME_STEP autoreset, uint8
    frames (3, 64, 64), episode statistics of raw rewards in infos["final_info"], and scaled rewards [M8, M9].

    Autoreset: envpool resets on the NEXT step, i.e. the step() after a done is a reset step whose action is ignored
    and whose reward is 0. Stored as it comes, that step is a fake transition (last obs -> first obs of the next
    episode, reward 0, not done) that GAE and the losses would learn as real. So here the envs that just finished
    take their reset step at once (envpool steps a subset of its envs by id) and the obs returned with done=True is
    already the first obs of the next episode, exactly as in ppo_atari.py's SAME_STEP mode and baselines' VecEnv [C1].
    No transition across a reset is stored, and the episode statistics count whole episodes, reset step excluded.

    Statistics [E1], from envpool's outputs: the raw rewards summed over the episode (before [M8, M9]), and
    info["elapsed_step"], the episode's length. Every done ends an episode (envpool reports some of procgen's own
    episode ends as truncations), so the sums are reported and reset then, and never leak into the next episode.
    """

    # [M8] gamma 0.99 for the return statistics, whatever PPO's --gamma: VecNormalize's own default, which baselines'
    # MuJoCo path (VecNormalize(env, use_tf=True)) and train-procgen (VecNormalize(venv, ob=False)) both keep
    def __init__(self, envs, capture_video, run_name, gamma=0.99, clip_reward=10.0, epsilon=1e-8):
        self.envs, self.run_name = envs, run_name
        self.num_envs = envs.config["num_envs"]
        self.single_observation_space = envs.observation_space  # (3, 64, 64) uint8
        self.single_action_space = envs.action_space  # Discrete(15)
        self.episode_returns = np.zeros(self.num_envs)  # raw return of each env's current episode
        self.return_rms = RunningMeanStd(())
        self.returns = np.zeros(self.num_envs)  # (num_envs,) discounted return of each env's current episode [M8]
        self.gamma, self.clip_reward, self.epsilon = gamma, clip_reward, epsilon
        self.capture_video, self.frames, self.episode = capture_video, [], 0  # env 0's current episode and its frames

    def record(self, done):
        """--capture-video: env 0's episodes 0, 1, 8, 27, ..., 729, 1000, 2000, ... (gymnasium's schedule, as ppo_atari.py's
        RecordVideo) to mp4 files; frames are drawn for those episodes only."""
        if not self.capture_video:
            return
        from gymnasium.utils.save_video import capped_cubic_video_schedule, save_video  # save_video needs moviepy

        if capped_cubic_video_schedule(self.episode):
            self.frames.append(self.envs.render(env_ids=[0])[0])
        if done:
            if self.frames:
                save_video(self.frames, f"videos/{self.run_name}", episode_index=self.episode, fps=15)
            self.frames, self.episode = [], self.episode + 1

    def reset(self, seed=None):  # envpool seeds the levels when made, as ProcgenEnv(rand_seed=seed); ignored here
        obs, _ = self.envs.reset()
        self.record(False)
        return obs, {}

    def step(self, actions):
        obs, reward, terminations, truncations, info = self.envs.step(actions)
        dones = np.logical_or(terminations, truncations)
        self.episode_returns += reward
        self.record(dones[0])
        infos = {}
        if dones.any():
            finished = np.flatnonzero(dones)
            infos["final_obs"] = obs  # [X5] the obs at the done, before the reset step replaces it in a copy
            reset_obs, _, _, _, reset_info = self.envs.step(np.zeros_like(actions[finished]), finished)  # action ignored
            obs = obs.copy()
            obs[reset_info["env_id"]] = reset_obs
            if dones[0]:
                self.record(False)  # the first frame of env 0's next episode
            infos["final_info"] = {"episode": {"r": self.episode_returns.copy(), "l": info["elapsed_step"].copy()},
                                   "_episode": dones}
            self.episode_returns[dones] = 0
        # [M8] reward scaling: divide by the std of the discounted return, the mean is not subtracted
        self.returns = self.returns * self.gamma + reward
        self.return_rms.update(self.returns)
        reward = reward / np.sqrt(self.return_rms.var + self.epsilon)
        reward = np.clip(reward, -self.clip_reward, self.clip_reward)  # [M9] reward clipping
        self.returns[dones] = 0  # the return restarts with the next episode
        return obs, reward, terminations, truncations, infos

    def close(self):
        self.envs.close()


def make_env(env_id, num_envs, seed, num_threads, capture_video, run_name):
    import envpool  # optional: imported only here, so that the file imports without it
    if envpool.__version__ != "1.2.5":  # the release the tests and results were made with; 1.2.7 changed JobShop
        print(f"{os.path.basename(__file__)}: warning: made for envpool 1.2.5, found {envpool.__version__}, whose envs may "
              f"differ: pip install envpool==1.2.5", file=sys.stderr)

    render_mode = {"render_mode": "rgb_array"} if capture_video else {}
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed, num_threads=num_threads,
                        **render_mode)
    return EnvpoolVecEnv(envs, capture_video, run_name)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)  # [C2] orthogonal weights, gain sqrt(2) for hidden layers
    torch.nn.init.constant_(layer.bias, bias_const)  # [C2] biases 0
    return layer


def glorot_init(layer):
    """[P1] TensorFlow's default init, which baselines' build_impala_cnn keeps for every convolution and for the dense
    layer: Glorot-uniform weights (bound sqrt(6 / (fan_in + fan_out))), biases 0."""
    torch.nn.init.xavier_uniform_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    return layer


class ResidualBlock(nn.Module):
    """[P1] x + conv(relu(conv(relu(x)))), 3x3 convolutions keeping the channels and the size (IMPALA's block)."""

    def __init__(self, channels):
        super().__init__()
        self.conv0 = glorot_init(nn.Conv2d(channels, channels, 3, padding=1))
        self.conv1 = glorot_init(nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x):
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """[P1] One IMPALA stage: a 3x3 convolution to `depth` channels, a 3x3 max-pool of stride 2 (halves the size),
    then two residual blocks."""

    def __init__(self, in_channels, depth):
        super().__init__()
        self.conv = glorot_init(nn.Conv2d(in_channels, depth, 3, padding=1))
        self.pool = nn.MaxPool2d(3, stride=2)
        self.res0 = ResidualBlock(depth)
        self.res1 = ResidualBlock(depth)

    def forward(self, x):
        # [P1] the pool pads as TF's max_pool2d(padding="same") in baselines' IMPALA CNN: to ceil(size / 2) windows,
        # with the one row (column) of an even size after the frame, none before (nn.MaxPool2d's padding=1 puts one on
        # both sides, which shifts every window by a pixel)
        x = self.conv(x)
        x = nn.functional.pad(x, (x.shape[-1] % 2, 1, x.shape[-2] % 2, 1), value=float("-inf"))
        return self.res1(self.res0(self.pool(x)))


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        # [P1] IMPALA-style CNN trunk shared by the policy and the value head: stages of depth 16, 32, 32 take
        # (3, 64, 64) to (32, 8, 8), then a 256-unit embedding. The convolutions and the embedding get TensorFlow's
        # default init, as in baselines' build_impala_cnn (glorot_init); the policy and value heads get [C2]'s.
        channels, height, width = envs.single_observation_space.shape
        stages = []
        for depth in (16, 32, 32):
            stages.append(ConvSequence(channels, depth))
            channels, height, width = depth, (height + 1) // 2, (width + 1) // 2
        self.network = nn.Sequential(
            *stages,
            nn.Flatten(),
            nn.ReLU(),
            glorot_init(nn.Linear(channels * height * width, 256)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(256, envs.single_action_space.n), std=0.01)  # [C2] policy output gain 0.01
        self.critic = layer_init(nn.Linear(256, 1), std=1.0)  # [C2] value output gain 1

    @staticmethod
    def pixels(x):
        """[A9] uint8 pixels scaled to [0, 1] here, not in storage. In channels_last (NHWC) memory, as the weights
        (main): oneDNN's CPU convolutions run faster so (measured in docs/speed.md)."""
        return x.contiguous(memory_format=torch.channels_last) / 255.0

    def get_value(self, x):
        return self.critic(self.network(self.pixels(x)))  # [A9]

    def get_action_and_value(self, x, action=None):
        hidden = self.network(self.pixels(x))  # [A9]
        logits = self.actor(hidden)
        # validate_args=False: the logits come from our own network; the checks cost ~10% of a rollout step
        probs = Categorical(logits=logits, validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


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


def ppo_loss(newlogprob, entropy, newvalue, logprob, value, advantages, returns, clip_coef, norm_adv, clip_vloss,
             ent_coef, vf_coef):
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

    with torch.no_grad():  # [C12] debug variables: KL by the k1 (old) and k3 estimators, clip fraction
        stats = dict(value_loss=v_loss.detach(), policy_loss=pg_loss.detach(), entropy=entropy_loss.detach(),
                     old_approx_kl=(-logratio).mean(), approx_kl=((ratio - 1) - logratio).mean(),
                     clipfrac=((ratio - 1.0).abs() > clip_coef).float().mean())
    return loss, stats


def evaluate(agent, envs, num_episodes, device, seed):
    """Play the agent's stochastic policy until num_episodes episodes have ended; returns their returns. Seeded."""
    episodic_returns = []
    next_obs, _ = envs.reset(seed=seed)
    while len(episodic_returns) < num_episodes:
        with torch.no_grad():
            action, _, _, _ = agent.get_action_and_value(torch.as_tensor(next_obs, device=device))
        next_obs, _, _, _, infos = envs.step(action.cpu().numpy())
        if "final_info" in infos:
            for r, done in zip(infos["final_info"]["episode"]["r"], infos["final_info"]["_episode"]):
                if done and len(episodic_returns) < num_episodes:
                    print(f"eval episode {len(episodic_returns)}: return {r:.2f}")
                    episodic_returns.append(float(r))
    return episodic_returns


def main(args: Args) -> None:
    run = Run(args)  # the plumbing (below the divider): checks, --resume or --eval-checkpoint, run folder, stops
    if args.env_id not in PROCGEN_GAMES:
        run.fail(f"--env-id {args.env_id}: not a procgen game; choose from {', '.join(PROCGEN_GAMES)}")
    try:  # optional: imported only where it is used
        import envpool
    except ImportError:
        run.fail('the envs come from envpool, which is not installed: pip install -e ".[envpool]"')
    # envpool's id, e.g. starpilot + easy -> StarpilotEasy-v0; the modes a game has are those envpool registers
    envpool_id = f"{args.env_id.capitalize()}{args.distribution_mode.capitalize()}-v0"
    if envpool_id not in envpool.list_all_envs():
        modes = [m for m in ("easy", "hard", "memory", "exploration", "extreme")
                 if f"{args.env_id.capitalize()}{m.capitalize()}-v0" in envpool.list_all_envs()]
        run.fail(f"--distribution-mode {args.distribution_mode}: {args.env_id} has {', '.join(modes)}")

    # seeding (run.seed: --seed, or one drawn from it after --resume); torch runs on the cores envpool steps the envs
    # on (--num-threads), in turn: envpool's threads wait while the network works. All cores is fastest on an idle
    # machine; on cores that other jobs keep busy, pass --num-threads 1 (measured: docs/speed.md)
    num_threads = args.num_threads or len(os.sched_getaffinity(0))  # all the cores this process may use
    random.seed(run.seed)
    np.random.seed(run.seed)
    torch.manual_seed(run.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(num_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # [C1] vectorized architecture: num_envs envs stepped in lockstep, in envpool's C++ threads [E1]. SAME_STEP
    # autoreset, as baselines' VecEnv: the obs returned with done=True is already the first obs of the next episode
    # (EnvpoolVecEnv)
    num_envs = 1 if args.eval_checkpoint is not None else args.num_envs
    try:
        envs = make_env(envpool_id, num_envs, run.seed, min(num_threads, num_envs), args.capture_video, run.name)
    except ImportError as e:  # envpool's procgen needs the Qt 5 libraries on Linux
        run.fail(f"cannot make env {envpool_id!r}: {e}".replace("\n", " "))

    agent = Agent(envs).to(device, memory_format=torch.channels_last)  # the faster layout of CPU convolutions
    if args.eval_checkpoint is not None:  # play the saved model instead of training
        run.load(model=agent)
        returns = evaluate(agent, envs, args.eval_episodes, device, run.seed)
        print(f"{args.env_id}: mean return {np.mean(returns):.2f} +- {np.std(returns):.2f} over {len(returns)} episodes")
        envs.close()
        return

    # [C3] Adam epsilon 1e-5, added after the bias correction (ppo2's TF1 Adam adds it before: docs/details.md).
    # fused=True: one kernel for all parameters, the same math as the default loop, faster
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    writer = run.start(envs, model=agent, optimizer=optimizer, return_rms=envs.return_rms)  # [M8] saved with the model

    def minibatch_loss(inputs, *loss_args):  # the agent on a mini-batch, then the loss: one graph for --compile
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(*inputs)
        return ppo_loss(newlogprob, entropy, newvalue, *loss_args)

    if args.compile:  # compiled at its first call (~20 s, less with inductor's cache); the rollout stays eager
        minibatch_loss = torch.compile(minibatch_loss)

    # rollout storage: (num_steps, num_envs, ...)
    # what the envs take and give is kept in numpy arrays, written per step (a numpy write costs a fraction of a
    # torch op: docs/speed.md), and made tensors after the segment (on a CPU without a copy)
    # [A9] frames stay uint8: a quarter of float32's memory, cheaper copies to a GPU
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, dtype=np.int64)
    rewards = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)  # what the network gives stays in tensors
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    def to_torch(array, dtype=torch.float32):  # a tensor on the run's device; on a CPU no copy if the dtype matches
        return torch.as_tensor(array, dtype=dtype, device=device)

    global_step = run.start_iteration * args.batch_size
    next_obs, _ = envs.reset(seed=run.seed)
    next_done = np.zeros(args.num_envs)  # [C1] next_obs and next_done carry across rollouts
    with run:  # Ctrl-C or SIGTERM: the loop ends within an env step or a mini-batch; the last whole iteration is saved
        for iteration in run.iterations():  # between two: the progress line, checkpoints (--checkpoint-every)
            # --resume: the schedules go on from the iteration reached; with a larger --total-timesteps they are
            # recomputed for the new length (the learning rate goes up to where the longer run would be, then to 0)
            frac = 1.0 - (iteration - 1.0) / args.num_iterations  # the share of training still to come
            if args.anneal_lr:  # [C4] learning rate annealed linearly; it would reach 0 after the last iteration
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate
            clip_coef = frac * args.clip_coef if args.anneal_clip else args.clip_coef  # [X1] off by default
            if args.compile and args.anneal_clip:  # a float that changes is compiled anew; a tensor's value is not
                clip_coef = torch.tensor(clip_coef, device=device)

            for step in range(0, args.num_steps):  # [C1] a fixed-length segment of num_steps per env
                global_step += args.num_envs
                obs[step] = next_obs
                dones[step] = next_done

                with torch.inference_mode():  # like no_grad, with less bookkeeping per op
                    # [A8] unlike ppo.py, per step: the trunk is shared, so the value comes with the action for free
                    action, logprob, _, value = agent.get_action_and_value(to_torch(next_obs, torch.uint8))
                    values[step] = value.flatten()
                actions[step] = action = action.cpu().numpy()
                logprobs[step] = logprob

                next_obs, reward, terminations, truncations, infos = envs.step(action)
                next_done = np.logical_or(terminations, truncations)  # [C5] truncation ends the episode, as in baselines
                rewards[step] = reward
                truncated = np.flatnonzero(truncations & ~terminations) if args.bootstrap_truncated else []
                if len(truncated):  # [X5] a time limit is no real end: gamma * V(final obs) enters GAE via the reward
                    final_obs = np.stack(infos["final_obs"][truncated])  # as the env returned it, before its reset
                    with torch.inference_mode():  # one batched call for the envs that truncated at this step
                        final_value = agent.get_value(to_torch(final_obs, torch.uint8)).flatten().cpu().numpy()
                    rewards[step, truncated] += args.gamma * final_value

                if "final_info" in infos:
                    episode = infos["final_info"]["episode"]
                    for i in np.flatnonzero(infos["final_info"]["_episode"]):
                        writer.add_scalar("charts/episodic_return", episode["r"][i], global_step)
                        writer.add_scalar("charts/episodic_length", episode["l"][i], global_step)
                        run.recent_returns.append(float(episode["r"][i]))  # the progress line, --target-return

            with torch.no_grad():
                next_value = agent.get_value(to_torch(next_obs, torch.uint8)).reshape(1, -1)[0]
                advantages, returns = compute_gae(to_torch(rewards), values, to_torch(dones), next_value,
                                                  to_torch(next_done), args.gamma, args.gae_lambda)

            # flatten the segment: (num_steps, num_envs, ...) -> (batch_size, ...)
            b_obs = to_torch(obs, torch.uint8).reshape((-1,) + envs.single_observation_space.shape)
            b_logprobs = logprobs.reshape(-1)
            b_actions = to_torch(actions, torch.long).reshape((-1,) + envs.single_action_space.shape)
            b_advantages = advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_values = values.reshape(-1)

            update_stats = []  # [C12] every mini-batch's debug variables: the logs show their mean over the update
            for epoch in range(args.update_epochs):
                # [C6] one shuffle per epoch, cut into equal mini-batches: every sample used exactly once per epoch
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]

                    loss, stats = minibatch_loss(
                        (b_obs[mb_inds], b_actions[mb_inds]),  # the agent's inputs
                        b_logprobs[mb_inds], b_values[mb_inds], b_advantages[mb_inds], b_returns[mb_inds],
                        clip_coef, args.norm_adv, args.clip_vloss, args.ent_coef, args.vf_coef,
                    )
                    update_stats.append(stats)

                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # [C11] global gradient clipping
                    optimizer.step()

                approx_kl = stats["approx_kl"]  # X3 tests the last mini-batch's approx KL, not the logged mean
                if args.target_kl is not None and approx_kl > args.target_kl:  # [X3] early stopping, off by default
                    break

            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            # [C12] debug variables: the mean over all mini-batches and epochs of the update, as baselines logs them
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            for name in update_stats[0]:  # value_loss, policy_loss, entropy, old_approx_kl, approx_kl, clipfrac
                mean = torch.stack([stats[name] for stats in update_stats]).mean()
                writer.add_scalar(f"losses/{name}", mean.item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)


# =====================================================================================================================
# Run plumbing: errors, --resume and --eval-checkpoint, run folders, checkpoints, stops, wandb, the progress line. No
# PPO below this line: the same text in all nine ppo*.py scripts (a test checks it). How it behaves: docs/ppo.md.
# =====================================================================================================================

# --resume takes the checkpoint's settings, but a flag given (typed, at any value) changes these (those a script has)
FREE_ON_RESUME = ("total_timesteps", "target_return", "cuda", "compile", "track", "wandb_project_name",
                  "wandb_entity", "capture_video", "save_model", "checkpoint_every", "eval_episodes", "num_threads",
                  "backend", "device_ids", "dist_timeout")
ENV_SETTINGS = ("env_id", "distribution_mode")  # what --eval-checkpoint takes from the checkpoint


class Run(contextlib.AbstractContextManager):  # with run: the training loop, which a stop ends (__exit__)
    """parts: what a checkpoint holds besides the settings (model=agent, ...), with state_dict and load_state_dict."""

    class Stop(Exception):
        """Raised at a safe point (check) after a stop signal: it ends the training loop, and __exit__ handles it."""

    def __init__(self, args, rank=0):  # rank: under torchrun, only rank 0 writes. Checks, checkpoint, run folder
        self.args, self.rank, self.script, self.stopped_by = args, rank, os.path.basename(__file__), 0
        self.name, self.dir, self.made, self.writer, self.state, self.written, self.wandb_id = "", *[None] * 6
        self.reached, self.start_iteration, self.done, self.world = False, 0, 0, 1  # done: the last whole iteration
        stops = (signal.SIGINT, signal.SIGTERM) if args.eval_checkpoint is None else ()  # Ctrl-C, a scheduler's stop
        self.handlers = {s: signal.signal(s, self.on_signal) for s in stops}  # training's, until main ends (restore)
        self.flag, self.path = ("--resume", args.resume) if args.resume else ("--eval-checkpoint", args.eval_checkpoint)
        self.checkpoint = self.read_checkpoint() if self.path is not None else {}
        if (problem := args.problem()) is not None:
            self.fail(problem)
        self.start_iteration = self.checkpoint.get("iteration", 0) if args.resume is not None else 0
        if args.resume is not None and self.start_iteration >= args.num_iterations:
            self.fail(f"--resume {args.resume}: the run has done all its {self.start_iteration} iterations; give a "
                      f"larger --total-timesteps than {args.total_timesteps} to extend it")
        saved = self.checkpoint.get("recent_returns", []) if args.resume and rank == 0 else []  # a resume counts on
        self.recent_returns = deque(saved, maxlen=20)  # the last episodes' returns: progress line, --target-return
        seeds = np.random.SeedSequence([args.seed, self.start_iteration])  # --resume: new random numbers everywhere,
        self.seed = args.seed if args.resume is None else int(seeds.generate_state(1)[0]) % 2**30  # envpool: int32
        self.name = f"{args.env_id.replace('/', '_')}__{args.exp_name}__{args.seed}__{int(time.time())}"  # one level
        if args.resume is not None:  # the run goes on in its own folder
            self.dir = os.path.dirname(args.resume) or "."
            self.name = os.path.basename(os.path.abspath(self.dir))
        try:
            if args.capture_video and rank == 0:  # the envs record into videos/{run_name}
                os.makedirs("videos", exist_ok=True)
            if args.resume is None and rank == 0 and (args.eval_checkpoint is None or args.capture_video):
                parent = "runs" if args.eval_checkpoint is None else "videos"  # a recorded evaluation's in videos/
                for name in (self.name if n == 1 else f"{self.name}-{n}" for n in itertools.count(1)):
                    with contextlib.suppress(FileExistsError):  # mkdir is atomic: a name taken gets -2, -3, ...
                        os.makedirs(f"{parent}/{name}")
                        break
                self.dir, self.name = f"{parent}/{name}", name if parent == "runs" else f"{name}/eval"
                self.made = self.dir if parent == "runs" else None  # what fail removes if the run trained nothing
        except OSError as e:  # a file of that name, or no permission
            self.fail(f"cannot make the folder {e.filename} ({e.strerror})")

    def read_checkpoint(self):  # if this script wrote it; its settings become the run's
        flag, path, args = self.flag, self.path, self.args
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            self.fail(f"{flag} {path}: no such file")
        except Exception as e:  # empty, truncated, corrupt, or not a torch file at all
            self.fail(f"{flag} {path}: not a readable checkpoint ({type(e).__name__})")
        if not (isinstance(checkpoint, dict) and "script" in checkpoint and isinstance(checkpoint.get("args"), dict)):
            self.fail(f"{flag} {path}: not a checkpoint saved by --save-model (a bare state dict? an older format?)")
        if checkpoint["script"] != self.script:
            self.fail(f"{flag} {path}: this checkpoint was written by {checkpoint['script']}; use that script")
        typed = {word[2:].split("=")[0].replace("-", "_").removeprefix("no_") for word in sys.argv[1:]
                 if word.startswith("--")} if os.path.realpath(sys.argv[0]) == os.path.realpath(__file__) else set()
        names = vars(args) if flag == "--resume" else [name for name in ENV_SETTINGS if name in vars(args)]
        for name in [name for name in names if name in checkpoint["args"] and name not in ("resume", "eval_checkpoint")]:
            value, saved = getattr(args, name), checkpoint["args"][name]
            given = name in typed or value != getattr(type(args)(), name)  # typed (--no-cuda), or off its default
            if given and value != saved and (flag == "--eval-checkpoint" or name not in FREE_ON_RESUME):
                self.fail(f"--{name.replace('_', '-')} {value}: the checkpoint was trained with {saved}; leave it out")
            setattr(args, name, value if given else saved)
        return checkpoint

    def load(self, **parts):  # the checkpoint's state into the parts
        for name, part in parts.items():
            try:
                part.load_state_dict(self.checkpoint[name])
            except Exception:  # missing, or other layer sizes or layers
                self.fail(f"{self.flag} {self.path}: its {name} does not fit this script's {name} for {self.args.env_id}")

    def start(self, envs, **parts):  # --resume loads the parts; rank 0 opens the logs and returns them
        args, self.envs, self.parts, env_step = self.args, envs, parts, envs.step
        if torch.distributed.is_available() and torch.distributed.is_initialized():  # under torchrun
            self.world = torch.distributed.get_world_size()
        if args.resume is not None:
            self.load(**parts)
        envs.step = lambda *a, **k: self.check() or env_step(*a, **k)  # a stop's safe points: before each env step
        parts["optimizer"].register_step_pre_hook(self.check)  # and each optimizer step (one a mini-batch)
        if self.rank != 0:
            return None
        if args.track:  # --resume: the same wandb run. Without a network, wandb.init gives up after a timeout: log offline
            try:
                import wandb
            except ImportError:
                self.fail('--track needs wandb: pip install -e ".[wandb]"')
            kwargs = dict(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, name=self.name,
                          config=vars(args), save_code=True, resume="allow", id=self.checkpoint.get("wandb_id"))
            if not (timeout := os.environ.get("WANDB_INIT_TIMEOUT", "30")).replace(".", "", 1).isdigit():  # wandb's: 90
                self.fail(f"WANDB_INIT_TIMEOUT={timeout}: not a number of seconds")
            try:
                wandb.init(**kwargs, settings=wandb.Settings(init_timeout=float(timeout)))
            except Exception as e:
                print(f"wandb: cannot reach the server ({type(e).__name__}); logging offline (wandb sync)", file=sys.stderr)
                wandb.init(**kwargs, mode="offline")
            self.wandb_id = wandb.run.id
        installed = {dist.name: dist.version for dist in importlib.metadata.distributions()}
        versions = {"python": platform.python_version(), **{name: installed[name] for name in ("torch", "gymnasium",
                    "envpool", "ale-py", "mujoco") if name in installed}}  # the libraries that made the run
        info = {"script": self.script, "versions": versions, **vars(args)}  # what made the run, for the reports
        with open(f"{self.dir}/args.json", "w") as f:
            json.dump(info, f, indent=1)
        # --resume: TensorBoard hides what the stopped process logged after its checkpoint, so no step appears twice
        self.writer = SummaryWriter(self.dir, purge_step=self.start_iteration * args.batch_size + 1 if args.resume else None)
        self.writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in info.items()))
        return self.writer

    def iterations(self):  # between two and after the last: progress, the state to save, --checkpoint-every's save
        args, self.start_time, self.saved = self.args, time.time(), True
        printed = self.start_time  # the progress line: every 20th of the run, and at least once a minute
        for self.done in range(self.start_iteration, args.num_iterations + 1):
            step = self.done * args.batch_size
            if self.rank == 0 and self.done > self.start_iteration:  # SPS of this process's steps
                sps = int((step - self.start_iteration * args.batch_size) / (time.time() - self.start_time))
                self.writer.add_scalar("charts/SPS", sps, step)
                if self.done % max(1, args.num_iterations // 20) == 0 or self.done in (1, args.num_iterations) \
                        or time.time() - printed >= 60:
                    printed, eta = time.time(), int((args.num_iterations - self.done) * args.batch_size / max(sps, 1))
                    recent = f"{np.mean(self.recent_returns):8.2f}" if self.recent_returns else "       -"
                    print(f"step {step:>9}/{args.num_iterations * args.batch_size} | SPS {sps:>6} | return (last "
                          f"{len(self.recent_returns):>2}) {recent} | ETA {eta // 3600:02d}:{eta // 60 % 60:02d}:"
                          f"{eta % 60:02d}", flush=True)
            reached = args.target_return is not None and len(self.recent_returns) == 20 and \
                bool(np.mean(self.recent_returns) >= args.target_return)  # rank 0's episodes (others record none)
            if self.rank == 0 and (args.save_model or args.checkpoint_every):
                self.state = {"script": self.script, "args": dict(vars(args)), "iteration": self.done, "global_step": step,
                              "wandb_id": self.wandb_id, "target_reached": reached, "recent_returns": [*self.recent_returns],
                              **{name: copy.deepcopy(part.state_dict()) for name, part in self.parts.items()}}
                if args.checkpoint_every and self.done > self.start_iteration and self.done % args.checkpoint_every == 0:
                    self.saved = self.save()
            flags = torch.tensor([self.stopped_by, not self.saved, reached])
            if self.world > 1:  # under torchrun what one rank says holds for all ranks, so that they stop together
                flags = flags.to("cuda" if torch.distributed.get_backend() == "nccl" else "cpu")
                torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
            self.stopped_by, self.saved, self.reached = int(flags[0]), not flags[1], bool(flags[2])
            if self.done == args.num_iterations or flags.any():
                return
            yield self.done + 1

    def save(self):  # to a temporary file, fsync, rename: never a half-written checkpoint; False when it failed
        path, state = f"{self.dir}/{self.args.exp_name}.pt", self.state
        try:
            with open(path + ".tmp", "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
            print(f"model saved to {path}")
            self.written = state
            return True
        except (OSError, RuntimeError) as e:  # a full disk (torch reports it as a RuntimeError)
            print(f"{self.script}: error: cannot save {path} ({getattr(e, 'strerror', None) or 'disk full?'}); the "
                  f"last complete checkpoint is kept", file=sys.stderr)
            with contextlib.suppress(OSError):
                os.remove(path + ".tmp")
            return False

    def on_signal(self, signum, frame):  # records the stop, for check() and the iteration's end; raises nothing
        if self.stopped_by and self.world == 1:  # a second: the process ends now, as by the signal's default action,
            if self.state is not self.written:  # once the last whole iteration is saved (a save under way: anew)
                self.save()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        self.stopped_by = self.stopped_by or signum

    def check(self, *_):  # a safe point: a stop drops the iteration under way (under torchrun, where a rank gets each
        if self.stopped_by and self.world == 1:  # stop twice, all ranks stop together at its end)
            raise self.Stop

    def __exit__(self, kind, error, trace):  # the loop is over: finished, stopped, or failed with an error
        args, clean = self.args, kind in (None, self.Stop)
        trained, step = self.done > self.start_iteration, self.done * args.batch_size  # the saved state's step
        if self.reached and self.rank == 0:  # a stop as at the end: the last save, exit code 0
            print(f"target reached at step {step}: the mean return of the last 20 episodes is "
                  f"{np.mean(self.recent_returns):.2f} >= --target-return {args.target_return}; training ends", flush=True)
            self.writer.add_text("target_reached", f"step {step}", step)
        if self.stopped_by and trained and self.rank == 0:
            print(f"\ninterrupted at step {step} (after iteration {self.done}, the last whole one)", file=sys.stderr)
        if clean and trained and self.saved and self.state is not self.written:  # the state after the last iteration
            self.saved = self.save()
        self.envs.close()
        try:
            if self.writer is not None:
                self.writer.close()
        except OSError as e:  # a full disk: one line, unless the save has said it already
            if self.saved:
                print(f"{self.script}: error: cannot write the logs in {self.dir} ({e.strerror})", file=sys.stderr)
            self.saved = False
        if args.track and self.rank == 0:
            sys.modules["wandb"].finish()  # imported by start()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            if clean:  # wait for every rank: gloo's own thread frees the last all-reduce's tensors (under the GIL)
                torch.distributed.barrier()  # after the call returns, and a rank that is exiting by then aborts
            torch.distributed.destroy_process_group()
        if clean and trained and self.rank == 0:
            print(f"logs in {self.dir}: tensorboard --logdir {os.path.dirname(self.dir) or '.'}")
        if clean and (self.stopped_by or not self.saved):  # 130 after Ctrl-C, 143 after SIGTERM (as a shell reports a
            self.fail(None, code=128 + self.stopped_by if self.stopped_by else 1)  # process so ended), 1: a failed save
        self.restore()
        return clean  # the stop is handled: no traceback; an error goes on with its own

    def restore(self):  # the signal handlers from before the run
        for s, handler in self.handlers.items():
            signal.signal(s, handler or signal.SIG_DFL)  # None: one not set from Python

    def fail(self, message, code=2):  # one line on stderr, exit code 2, like argparse; what the run made goes again
        self.restore()
        if message:  # torchrun stops every rank once one exits: a pause on the others, so that rank 0 says the errors
            time.sleep(5 if self.rank != 0 else 0)  # all ranks meet (once); an error of one rank alone comes after it
            print(f"{self.script}: error: {message}", file=sys.stderr)
        if self.made and self.done == self.start_iteration:  # the new run's folder, if it trained nothing: no trace
            shutil.rmtree(self.made, ignore_errors=True)
        for folder in (f"videos/{self.name}", self.dir or "", "videos", "runs"):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise SystemExit(code)


if __name__ == "__main__":
    try:  # tyro's error box (--total-timesteps abc) said in one line, as every error here
        with contextlib.redirect_stderr(io.StringIO()) as box:
            args = tyro.cli(Args)
    except SystemExit as e:  # what is wrong: the box's first section, after its title, up to a rule or a blank line
        lines = [" ".join(line.strip(" │").split()) for line in box.getvalue().splitlines()[1:]]
        if e.code:  # --help exits with 0
            message = " ".join(itertools.takewhile(lambda line: line.strip("─"), lines)).removeprefix("Error parsing ")
            print(f"{os.path.basename(__file__)}: error: {message} (see --help)", file=sys.stderr)
        raise
    main(args)
