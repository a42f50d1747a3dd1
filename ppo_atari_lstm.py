"""PPO with an LSTM policy for Atari games (the *NoFrameskip-v4 ids). Parent: ppo_atari.py.

Adds baselines' cnn_lstm details [L1] ... [L5]: one frame instead of 4, an LSTM after the CNN, its state zeroed at
episode starts, and mini-batches of whole env sequences re-run from the state saved before the rollout. docs/atari.md

    python ppo_atari_lstm.py --env-id PongNoFrameskip-v4 --seed 1              # train; logs in runs/<run_name>/
    python ppo_atari_lstm.py --eval-checkpoint runs/<run_name>/ppo_atari_lstm.pt
"""

import signal

# before the imports below (seconds): until training starts, Ctrl-C ends the process quietly
if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import random
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
    """PPO (openai/baselines ppo2, 13 core + 9 Atari + 5 LSTM details), an LSTM policy for Atari games.
    Train: `python ppo_atari_lstm.py --env-id PongNoFrameskip-v4`; logs: `tensorboard --logdir runs`; save, then
    evaluate: `python ppo_atari_lstm.py --save-model`, `python ppo_atari_lstm.py --eval-checkpoint <run>/<name>.pt`."""

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

    env_id: str = "BreakoutNoFrameskip-v4"
    """an Atari *NoFrameskip-v4 id: the wrappers skip frames themselves (BreakoutNoFrameskip-v4, PongNoFrameskip-v4)"""
    total_timesteps: int = 10000000
    """agent steps to train for, summed over all envs; one step is 4 frames (1e6 to 5e7; 1e7 in the benchmarks)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start of training (1e-4 to 1e-3)"""
    num_envs: int = 8
    """number of envs stepped in lockstep (1 to 64; 8 as the PPO paper's 8 actors)"""
    num_threads: Optional[int] = None
    """cores torch trains on, between the env steps (default: all cores; 1 where other jobs keep the cores busy)"""
    num_steps: int = 128
    """steps per env in each rollout segment; num_envs * num_steps is the batch (16 to 2048)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over training [C4]"""
    gamma: float = 0.99
    """discount factor (0.9 to 0.999)"""
    gae_lambda: float = 0.95
    """GAE lambda: 0 is one-step TD, 1 is Monte Carlo (0.9 to 1) [C5]"""
    num_minibatches: int = 4
    """mini-batches per epoch; must divide num_envs: each holds whole env sequences (1 to num_envs) [C6, L4]"""
    update_epochs: int = 4
    """passes over the batch per update (1 to 10)"""
    norm_adv: bool = True
    """normalize advantages to mean 0, std 1 in each mini-batch [C7]"""
    clip_coef: float = 0.1
    """clip range of the probability ratio and of the value change (0.1 to 0.3; 0.1 in baselines' Atari) [C8, C9]"""
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
    def minibatch_envs(self) -> int:
        return self.num_envs // self.num_minibatches

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
        if self.num_threads is not None and self.num_threads <= 0:
            return f"--num-threads must be positive, got {self.num_threads}"
        if self.num_envs % self.num_minibatches:
            return (
                f"--num-envs {self.num_envs} does not split into --num-minibatches {self.num_minibatches} equal "
                f"groups of envs (a mini-batch holds whole env sequences [L4])"
            )
        if self.checkpoint_every < 0:
            return f"--checkpoint-every must be >= 0 (0: only at the end), got {self.checkpoint_every}"
        if self.resume is not None and self.eval_checkpoint is not None:
            return "--resume continues training, --eval-checkpoint only plays: give one of them"
        if self.num_iterations == 0 and self.eval_checkpoint is None:
            return f"--total-timesteps {self.total_timesteps} is less than one batch ({self.batch_size} steps)"
        return None


class NoopReset(gym.Wrapper):
    """[A1] On a reset, play a random number (1 to noop_max) of no-op frames, so that games start in varied states."""

    def __init__(self, env, noop_max=30):
        super().__init__(env)
        assert env.unwrapped.get_action_meanings()[0] == "NOOP"
        self.noop_max = noop_max

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        # the env's seeded generator
        for _ in range(self.unwrapped.np_random.integers(1, self.noop_max + 1)):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class EpisodicLife(gym.Wrapper):
    """[A3] A lost life ends the episode for learning, but the game goes on: reset() then continues the same game
    with one no-op step, and restarts the emulator only when the game is really over (baselines' EpisodicLifeEnv).
    gymnasium's AtariPreprocessing(terminal_on_life_loss=True) cannot stand in: its reset() restarts the game."""

    def __init__(self, env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True  # a life lost: no bootstrapping across it, as in the DQN paper
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # continue the game where the life was lost
            obs, _, terminated, truncated, info = self.env.step(0)
            # the no-op itself ended the game (baselines ignores this rare case)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """[A4] After every reset (a new game or a new life), press FIRE then action 2, as baselines' FireResetEnv does:
    games such as Breakout stand still until FIRE is pressed."""

    def __init__(self, env):
        super().__init__(env)
        assert env.unwrapped.get_action_meanings()[1] == "FIRE"

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class WarpFrame(gym.ObservationWrapper):
    """[A5] RGB frame -> 84 x 84 grayscale, as baselines' WarpFrame: OpenCV's luminance, then an area resize.
    gymnasium's GrayscaleObservation + ResizeObservation differ in the luminance weights and rounding."""

    def __init__(self, env, size=84):
        super().__init__(env)
        self.size = size
        self.observation_space = gym.spaces.Box(0, 255, (size, size), np.uint8)

    def observation(self, frame):
        # the atari extra (opencv-python-headless); imported where used so the file imports without it
        import cv2

        gray = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        return cv2.resize(gray, (self.size, self.size), interpolation=cv2.INTER_AREA)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        # ppo2's time limit: gym's *NoFrameskip-v4 registration truncated a game at 100,000 x 4 frames, 100,000 agent
        # steps (SpaceInvaders: x 3 frames, 75,000 steps); ale-py's v4 ids would truncate it at 108,000 frames
        frames = 100000 * (3 if env_id.startswith("SpaceInvaders") else 4)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array", max_num_frames_per_episode=frames)
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id, max_num_frames_per_episode=frames)
        env = NoopReset(env, noop_max=30)  # [A1]
        # [A2] repeat 4 frames, sum rewards, max of last 2
        env = gym.wrappers.MaxAndSkipObservation(env, skip=4)
        # where baselines' Monitor sits (cmd_util.py make_env): episodic_return is the whole game's raw score (before
        # [A3] and [A6]) and episodic_length counts its agent steps, the no-op and FIRE steps of [A3, A4] resets too
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = EpisodicLife(env)  # [A3]
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireReset(env)  # [A4]
        env = WarpFrame(env)  # [A5]
        # [A6] rewards clipped to their sign (baselines' ClipRewardEnv)
        env = gym.wrappers.TransformReward(env, np.sign)
        # [A7] with 1 frame: (1, 84, 84); the LSTM is the memory
        env = gym.wrappers.FrameStackObservation(env, 1)
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
        # [A8] Nature-CNN trunk shared by the policy and the value head (baselines' Atari default)
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(envs.single_observation_space.shape[0], 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, 128)  # after the trunk, as baselines' cnn_lstm (nlstm=128)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0)  # [L1] biases 0
            elif "weight" in name:
                nn.init.orthogonal_(param, 1.0)  # [L1] orthogonal weights, gain 1
        # [C2] policy output gain 0.01
        self.actor = layer_init(nn.Linear(128, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1.0)  # [C2] value output gain 1

    def initial_state(self, num_envs):
        """[L2] the LSTM state (h, c) of num_envs fresh envs: zeros, each (1, num_envs, 128)."""
        zeros = torch.zeros(self.lstm.num_layers, num_envs, self.lstm.hidden_size, device=self.actor.weight.device)
        return zeros, zeros.clone()

    @staticmethod
    def pixels(x):
        """[A9] uint8 pixels scaled to [0, 1] here, not in storage. In channels_last (NHWC) memory, as the weights
        (main): oneDNN's CPU convolutions run faster so (measured in docs/speed.md)."""
        return x.contiguous(memory_format=torch.channels_last) / 255.0

    def get_states(self, x, lstm_state, done):
        """Run the LSTM through a sequence of steps; returns its outputs (T * B, 128) and the state after the last.

        x: (T * B, 1, 84, 84) and done: (T * B,), step-major (all B envs of step 0, then of step 1, ...), where
        done = 1 means the obs is the first of a new episode; lstm_state: (h, c), each (1, B, 128), before step 0.
        """
        num_envs = lstm_state[0].shape[1]
        # [A9] (T, B, 512)
        hidden = self.network(self.pixels(x)).reshape(-1, num_envs, self.lstm.input_size)
        keep = (1.0 - done).reshape(-1, num_envs, 1)  # (T, B, 1)
        # the steps where some episode starts cut the sequence into stretches with no reset inside: one LSTM call per
        # stretch computes what one call per step computes (up to float rounding), faster (docs/speed.md)
        starts = torch.nonzero(done.reshape(-1, num_envs)[1:].any(1)).flatten() + 1
        bounds = [0, *starts.tolist(), hidden.shape[0]]
        h, c = lstm_state
        outputs = []
        for t, end in zip(bounds[:-1], bounds[1:]):
            # [L3] a new episode starts from a zero state, in rollouts and training
            h, c = keep[t] * h, keep[t] * c
            out, (h, c) = self.lstm(hidden[t:end], (h, c))
            outputs.append(out)
        return torch.cat(outputs).flatten(0, 1), (h, c)

    def get_value(self, x, lstm_state, done):
        hidden, _ = self.get_states(x, lstm_state, done)
        return self.critic(hidden)

    def get_action_and_value(self, x, lstm_state, done, action=None):
        hidden, lstm_state = self.get_states(x, lstm_state, done)
        logits = self.actor(hidden)
        # validate_args=False: the logits come from our own network; the checks cost ~10% of a rollout step
        probs = Categorical(logits=logits, validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden), lstm_state


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
    next_lstm_state = agent.initial_state(envs.num_envs)
    next_done = torch.zeros(envs.num_envs, device=device)
    while len(episodic_returns) < num_episodes:
        with torch.no_grad():
            action, _, _, _, next_lstm_state = agent.get_action_and_value(
                torch.as_tensor(next_obs, device=device), next_lstm_state, next_done
            )
        next_obs, _, terminations, truncations, infos = envs.step(action.cpu().numpy())
        next_done = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32, device=device)
        # [A3] a lost life carries no statistics
        if "final_info" in infos and "episode" in infos["final_info"]:
            for r, done in zip(infos["final_info"]["episode"]["r"], infos["final_info"]["_episode"]):
                if done and len(episodic_returns) < num_episodes:
                    print(f"eval episode {len(episodic_returns)}: return {r:.2f}")
                    episodic_returns.append(float(r))
    return episodic_returns


def main(args: Args) -> None:
    # the plumbing (below the divider): checks, --resume or --eval-checkpoint, run folder, stops
    run = Run(args)
    try:  # optional: the atari extra, imported only where it is used
        import ale_py
        import cv2  # noqa: F401 (used by WarpFrame)
    except ImportError as e:
        run.fail(f'Atari needs the atari extra ({e.name} is missing): pip install -e ".[atari]"')
    gym.register_envs(ale_py)  # the ALE ids, among them *NoFrameskip-v4
    if not args.env_id.endswith("NoFrameskip-v4"):
        run.fail(
            f"--env-id {args.env_id}: use an Atari *NoFrameskip-v4 id such as BreakoutNoFrameskip-v4 "
            f"(the wrappers skip frames themselves [A2], and other ids have sticky actions)"
        )

    # seeding (run.seed: --seed, or one drawn from it after --resume); torch trains on every core (--num-threads)
    # between the env steps: the CNN's mini-batches take most of the time (measured: docs/speed.md)
    # all the cores this process may use
    num_threads = args.num_threads or len(os.sched_getaffinity(0))
    random.seed(run.seed)
    np.random.seed(run.seed)
    torch.manual_seed(run.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(num_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # [C1] vectorized architecture: num_envs envs stepped in lockstep. SAME_STEP autoreset, as baselines' VecEnv:
    # the obs returned with done=True is already the first obs of the next episode (gymnasium 1.x defaults to NEXT_STEP)
    num_envs = 1 if args.eval_checkpoint is not None else args.num_envs
    try:
        envs = gym.vector.SyncVectorEnv(
            [make_env(args.env_id, i, args.capture_video, run.name) for i in range(num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
    except gym.error.Error as e:
        run.fail(f"cannot make env {args.env_id!r}: {e}")

    # the faster layout of CPU convolutions
    agent = Agent(envs).to(device, memory_format=torch.channels_last)
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
        _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(*inputs)
        return ppo_loss(newlogprob, entropy, newvalue, *loss_args)

    # compiled at its first call (~20 s, less with inductor's cache); the rollout stays eager
    if args.compile:
        minibatch_loss = torch.compile(minibatch_loss)

    # rollout storage: (num_steps, num_envs, ...)
    # what the envs take and give is kept in numpy arrays, written per step (a numpy write costs a fraction of a
    # torch op: docs/speed.md), and made tensors after the segment (on a CPU without a copy)
    # [A9] frames stay uint8: a quarter of float32's memory, cheaper copies to a GPU
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, dtype=np.int64)
    rewards = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    # what the network gives stays in tensors
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

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
        next_lstm_state = agent.initial_state(args.num_envs)  # [L2] and so does the LSTM state
        for iteration in range(run.start_iteration + 1, args.num_iterations + 1):
            # --resume: the schedules go on from the iteration reached; with a larger --total-timesteps they are
            # recomputed for the new length (the learning rate goes up to where the longer run would be, then to 0)
            # [L5] the state before the segment's first step, from which training re-runs every env's sequence
            initial_lstm_state = (next_lstm_state[0].clone(), next_lstm_state[1].clone())
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
                    # [A8] unlike ppo.py, per step: the trunk is shared, so the value comes with the action for free
                    action, logprob, _, value, next_lstm_state = agent.get_action_and_value(
                        to_torch(next_obs, torch.uint8), next_lstm_state, to_torch(next_done)
                    )
                    values[step] = value.flatten()
                action = action.cpu().numpy()
                actions[step] = action
                logprobs[step] = logprob

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
                        # from each env's LSTM state after this step's forward pass, before [L3] zeroes it for the
                        # next episode: the final obs continues the episode, so V sees it as that sequence's next step
                        h, c = next_lstm_state
                        # done = 0: no reset before the final obs
                        not_new = torch.zeros(len(truncated), device=device)
                        state = (h[:, truncated], c[:, truncated])
                        final_value = agent.get_value(to_torch(final_obs, torch.uint8), state, not_new)
                        final_value = final_value.flatten().cpu().numpy()
                    rewards[step, truncated] += args.gamma * final_value

                # [A3] only whole games carry statistics
                if "final_info" in infos and "episode" in infos["final_info"]:
                    episode = infos["final_info"]["episode"]
                    for i in np.flatnonzero(infos["final_info"]["_episode"]):
                        writer.add_scalar("charts/episodic_return", episode["r"][i], global_step)
                        writer.add_scalar("charts/episodic_length", episode["l"][i], global_step)
                        # the progress line, --target-return
                        run.recent_returns.append(float(episode["r"][i]))

            with torch.no_grad():
                next_value = agent.get_value(to_torch(next_obs, torch.uint8), next_lstm_state, to_torch(next_done))
                next_value = next_value.reshape(1, -1)[0]
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
            b_obs = to_torch(obs, torch.uint8).reshape((-1,) + envs.single_observation_space.shape)
            b_logprobs = logprobs.reshape(-1)
            b_actions = to_torch(actions, torch.long).reshape((-1,) + envs.single_action_space.shape)
            b_dones = to_torch(dones).reshape(-1)
            b_advantages = advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_values = values.reshape(-1)

            flat_inds = torch.arange(args.batch_size, device=device).reshape(args.num_steps, args.num_envs)
            # [C12] every mini-batch's debug variables: the logs show their mean over the update
            update_stats = []
            for epoch in range(args.update_epochs):
                # [C6, L4] one shuffle of the envs per epoch, cut into equal groups: a mini-batch holds the whole
                # sequences of its envs, in step order, and every sample is used exactly once per epoch
                env_inds = torch.randperm(args.num_envs, device=device)
                for start in range(0, args.num_envs, args.minibatch_envs):
                    mb_envs = env_inds[start : start + args.minibatch_envs]
                    mb_inds = flat_inds[:, mb_envs].reshape(-1)  # step-major, as get_states expects

                    loss, stats = minibatch_loss(
                        (
                            b_obs[mb_inds],
                            # [L5]
                            (initial_lstm_state[0][:, mb_envs], initial_lstm_state[1][:, mb_envs]),
                            b_dones[mb_inds],  # [L3]
                            b_actions[mb_inds],
                        ),  # the agent's inputs
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
