"""Our scripts against CleanRL's and Stable-Baselines3's PPO on the same jobs, timed in turn by benchmark/speed.sh.

    pip install stable-baselines3            # 2.9.2 was measured; CleanRL: a checkout of vwxyzjn/cleanrl
    python benchmark/peers.py --cleanrl ~/cleanrl                       # every job, 3 rounds
    python benchmark/peers.py --cleanrl ~/cleanrl --jobs cartpole --rounds 5

CleanRL's scripts are copied from the checkout into a scratch folder and patched there, only where gymnasium 1.x
and envpool 1.2 require it (PATCHES below: same-step autoreset, the final_info layout, TransformObservation's
signature, envpool's gymnasium API); the patches are checked to apply, so a checkout they do not fit is refused. SB3
runs its PPO with our defaults for the job (`python benchmark/peers.py sb3 ...`, settings in SB3_SETTINGS). Every
program prints the SPS of its training (env steps over the time since training started); speed.sh reports medians
and the ratios to ours (A). The MLP jobs run every program on one torch thread (OMP_NUM_THREADS=1: ours sets it
anyway, and one thread was the peers' faster setting on 2 cores); the Atari job runs each with its defaults.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, Parser

# name: (our script and its arguments, CleanRL's script, SB3's env or None, one torch thread, steps)
JOBS = {
    "cartpole": (
        "ppo.py --env-id CartPole-v1 --total-timesteps $STEPS --seed 1",
        "ppo.py",
        "CartPole-v1",
        True,
        200000,
    ),
    "halfcheetah": (
        "ppo_continuous_action.py --env-id HalfCheetah-v4 --total-timesteps $STEPS --seed 1",
        "ppo_continuous_action.py",
        "HalfCheetah-v4",
        True,
        30000,
    ),
    "breakout": (
        "ppo_atari_envpool.py --env-id Breakout-v5 --total-timesteps $STEPS --seed 1",
        "ppo_atari_envpool.py",
        None,
        False,
        30000,
    ),
}

# gymnasium 1.x: one dict of arrays, "_episode" marks the ended envs
FINAL_INFO = (
    'for info in infos["final_info"]:',
    'for info in [{"episode": {k: v[i] for k, v in infos["final_info"]["episode"].items()}} '
    'for i in np.flatnonzero(infos["final_info"]["_episode"])]:',
)
# gymnasium 1.x autoresets on the next step by default
SAME_STEP = (
    "for i in range(args.num_envs)]",
    "for i in range(args.num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP",
)
PATCHES = {  # CleanRL script: [(text, replacement)], each text found exactly once
    "ppo.py": [SAME_STEP, FINAL_INFO],
    "ppo_continuous_action.py": [
        SAME_STEP,
        FINAL_INFO,
        ("lambda obs: np.clip(obs, -10, 10))", "lambda obs: np.clip(obs, -10, 10), env.observation_space)"),
    ],
    # gymnasium instead of gym, and envpool's gymnasium API: 5-tuple steps, (obs, info) resets
    "ppo_atari_envpool.py": [
        ("import gym\n", "import gymnasium as gym\n"),
        ('env_type="gym"', 'env_type="gymnasium"'),
        (
            "observations, rewards, dones, infos = super().step(action)",
            "observations, rewards, terminations, truncations, infos = super().step(action)\n"
            "        dones = terminations | truncations",
        ),
        ("torch.Tensor(envs.reset())", "torch.Tensor(envs.reset()[0])"),
        # read-only properties
        (
            "    envs.num_envs = args.num_envs\n    envs.single_action_space = envs.action_space\n"
            "    envs.single_observation_space = envs.observation_space\n    envs = RecordEpisodeStatistics(envs)\n",
            # set on the wrapper, which passes on no attributes in gymnasium 1.x
            "    envs = RecordEpisodeStatistics(envs)\n"
            "    envs.single_action_space, envs.single_observation_space = envs.action_space, envs.observation_space\n",
        ),
    ],
}

SB3_SETTINGS = {  # our scripts' defaults for these envs, in SB3's terms
    "CartPole-v1": dict(
        n_envs=4, n_steps=128, batch_size=128, n_epochs=4, learning_rate=2.5e-4, ent_coef=0.01, normalize=False
    ),
    "HalfCheetah-v4": dict(
        n_envs=1, n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4, ent_coef=0.0, normalize=True
    ),
}


def patched(cleanrl, script, folder):
    """CleanRL's script from the checkout, patched for gymnasium 1.x, written to folder as cleanrl_<script>."""
    text = (cleanrl / "cleanrl" / script).read_text()
    for old, new in PATCHES[script]:
        if text.count(old) != 1:
            sys.exit(f"peers.py: error: {script} of {cleanrl} does not take the patch for {old!r}: another commit?")
        text = text.replace(old, new)
    path = folder / f"cleanrl_{script}"
    path.write_text(text)
    return path


def run_sb3(env_id, total_timesteps, seed):
    """SB3's PPO with SB3_SETTINGS[env_id]; prints the SPS of model.learn, as our scripts count it."""
    import torch.nn as nn
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    s = SB3_SETTINGS[env_id]
    envs = make_vec_env(env_id, n_envs=s["n_envs"], seed=seed)
    if s["normalize"]:  # our per-env obs and reward normalization, clipped at 10
        envs = VecNormalize(envs, gamma=0.99, clip_obs=10.0, clip_reward=10.0)
    model = PPO(
        "MlpPolicy",
        envs,
        n_steps=s["n_steps"],
        batch_size=s["batch_size"],
        n_epochs=s["n_epochs"],
        learning_rate=lambda frac: frac * s["learning_rate"],
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        clip_range_vf=0.2,
        ent_coef=s["ent_coef"],
        vf_coef=0.5,
        max_grad_norm=0.5,
        seed=seed,
        device="cpu",
        policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=nn.Tanh),
        verbose=0,
    )
    start = time.time()
    model.learn(total_timesteps=total_timesteps)
    print(f"SPS {model.num_timesteps / (time.time() - start):.0f}")


def main():
    if sys.argv[1:2] == ["sb3"]:  # python benchmark/peers.py sb3 ENV_ID STEPS SEED: one SB3 run
        run_sb3(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanrl", type=Path, required=True, help="a checkout of vwxyzjn/cleanrl")
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS), help="which jobs")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each program per job, in turn")
    parser.add_argument("--steps", type=int, help="every job's budget (default: the job's own, in JOBS)")
    opts = parser.parse_args()
    if not (opts.cleanrl / "cleanrl" / "ppo.py").is_file():
        parser.error(f"--cleanrl {opts.cleanrl}: no cleanrl/ppo.py there")
    commit = (
        subprocess.run(
            ["git", "-C", str(opts.cleanrl), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    print(f"# CleanRL at commit {commit}, patched for gymnasium 1.x (benchmark/peers.py PATCHES)")
    status = 0
    with tempfile.TemporaryDirectory() as folder:
        for job in opts.jobs:
            ours, cleanrl_script, sb3_env, one_thread, steps = JOBS[job]
            theirs = patched(opts.cleanrl, cleanrl_script, Path(folder))
            args = ours.split(" ", 1)[1]
            commands = [f"python {ours}", f"python {theirs} {args}"]
            if sb3_env:
                commands.append(f"python {Path(__file__).resolve()} sb3 {sb3_env} $STEPS 1")
            env = dict(os.environ, STEPS=str(opts.steps or steps), REPEATS=str(opts.rounds))
            if one_thread:
                env["OMP_NUM_THREADS"] = "1"
            print(f"## {job}: A ours, B CleanRL{', C SB3' if sb3_env else ''}", flush=True)
            status |= subprocess.run(["bash", str(REPO / "benchmark" / "speed.sh"), *commands], env=env).returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
