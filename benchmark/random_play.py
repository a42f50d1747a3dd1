"""The score of uniformly random play: the floor a scaled learning run has to beat.

    python benchmark/random_play.py --env-id StarpilotEasy-v0                 # an envpool id (procgen starpilot, easy)
    python benchmark/random_play.py --env-id Breakout-v5 --episodes-per-env 2
    python benchmark/random_play.py --env-id BreakoutNoFrameskip-v4 --num-envs 1 --episodes-per-env 50
    python benchmark/random_play.py --env-id Ant-v5 Swimmer-v5 --num-envs 1 --episodes-per-env 10

Each of --num-envs envs plays its first --episodes-per-env whole episodes with uniformly random actions.
Why not "the first N episodes to end": in parallel envs the short episodes end first, and in most games a short
episode is a bad one, so that sample would put random play too low. Every env counts the same number of episodes.

- An envpool id: envpool's default options; the score is the sum of an episode's raw rewards (for Atari, a whole
  game's score, unclipped). envpool resets on the step after a done (a reset step: action ignored, reward 0); that
  step belongs to no episode.
- A *NoFrameskip-v4 id: played through ppo_atari.py's make_env, so the score and length are what ppo_atari.py logs
  (a whole game, all lives, raw score; the length in frames); env i is seeded with seed + i.
- A gymnasium MuJoCo id (Hopper-v5, Ant-v4, ...): gymnasium's env as ppo_continuous_action.py makes it, with its
  registered time limit; the score is the sum of the raw rewards; env i and its action space are seeded with seed + i.

Prints one line per env id: mean ± population std (ddof=0), min, max, the number of episodes and their mean length;
with --markdown, a "Random play" section with a table instead (the sweep scripts append it to their report).
"""

import re
import sys
import time

import numpy as np
from common import Parser, load_script


def random_play(env_id, num_envs, episodes_per_env, seed):
    """Returns (returns, lengths): arrays of num_envs * episodes_per_env whole episodes of random play."""
    if env_id.endswith("NoFrameskip-v4"):
        return random_play_atari(env_id, num_envs, episodes_per_env, seed)
    if is_mujoco(env_id):
        return random_play_mujoco(env_id, num_envs, episodes_per_env, seed)
    import envpool  # imported here so that --help works without it

    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed)
    rng = np.random.default_rng(seed)
    envs.action_space.seed(seed)  # for the spaces drawn with sample()
    envs.reset()
    episode_return, episode_length = np.zeros(num_envs), np.zeros(num_envs, dtype=np.int64)
    returns, lengths = [[] for _ in range(num_envs)], [[] for _ in range(num_envs)]
    # True for an env whose next step is envpool's reset step
    resetting = np.zeros(num_envs, dtype=bool)
    while min(map(len, returns)) < episodes_per_env:
        if hasattr(envs.action_space, "n"):  # Discrete: one draw for all envs
            actions = rng.integers(envs.action_space.n, size=num_envs)
        else:
            actions = np.stack([envs.action_space.sample() for _ in range(num_envs)])
        _, reward, terminations, truncations, _ = envs.step(actions)
        playing = ~resetting  # the reset step's reward (0) and length belong to no episode
        episode_return[playing] += reward[playing]
        episode_length[playing] += 1
        dones = np.logical_or(terminations, truncations) & playing
        for i in np.flatnonzero(dones):
            if len(returns[i]) < episodes_per_env:
                returns[i].append(episode_return[i])
                lengths[i].append(episode_length[i])
        episode_return[dones], episode_length[dones] = 0, 0
        resetting = dones
    envs.close()
    return np.array(returns).ravel(), np.array(lengths).ravel()


def random_play_atari(env_id, num_envs, episodes_per_env, seed):
    """Whole games through ppo_atari.py's wrappers, one env at a time: its episode statistics sit on the raw
    emulator and report a game only when it is over, while a lost life [A3] just resets to the next life."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    atari = load_script("ppo_atari.py")
    returns, lengths = [], []
    for i in range(num_envs):
        env = atari.make_env(env_id, 0, False, "random")()
        env.reset(seed=seed + i)
        env.action_space.seed(seed + i)
        played = 0
        while played < episodes_per_env:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            if "episode" in info:  # only at the end of a whole game
                returns.append(float(info["episode"]["r"]))
                lengths.append(int(info["episode"]["l"]))
                played += 1
            if terminated or truncated:
                env.reset()
        env.close()
    return np.array(returns), np.array(lengths)


def is_mujoco(env_id):
    """Whether gymnasium registers env_id as one of its MuJoCo envs (envpool has MuJoCo ids of its own)."""
    import gymnasium as gym

    return env_id in gym.registry and "mujoco" in str(gym.registry[env_id].entry_point)


def random_play_mujoco(env_id, num_envs, episodes_per_env, seed):
    """Whole episodes of gymnasium's MuJoCo env, one env at a time, each ended by the env or its time limit."""
    import warnings

    import gymnasium as gym
    import mujoco

    # HalfCheetah's settotalmass warning (as ppo_continuous_action.py)
    mujoco.set_mju_user_warning(lambda text: None)
    returns, lengths = [], []
    for i in range(num_envs):
        with warnings.catch_warnings():
            # gymnasium's advice to move from -v4 to -v5
            warnings.simplefilter("ignore", DeprecationWarning)
            env = gym.make(env_id)
        env.reset(seed=seed + i)
        env.action_space.seed(seed + i)
        for _ in range(episodes_per_env):
            total, length, done = 0.0, 0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total, length, done = total + float(reward), length + 1, terminated or truncated
            returns.append(total)
            lengths.append(length)
            env.reset()
        env.close()
    return np.array(returns), np.array(lengths)


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--env-id",
        nargs="+",
        required=True,
        help="envpool ids (StarpilotEasy-v0, Breakout-v5), *NoFrameskip-v4 ids or gymnasium MuJoCo ids",
    )
    parser.add_argument("--num-envs", type=int, default=100, help="envs played in parallel (each counts equally)")
    parser.add_argument("--episodes-per-env", type=int, default=3, help="whole episodes each env plays")
    parser.add_argument("--seed", type=int, default=1, help="seed of the envs and of the random actions")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown section with a table")
    args = parser.parse_args(argv)
    if args.num_envs < 1 or args.episodes_per_env < 1:
        parser.error("--num-envs and --episodes-per-env must be positive")
    envpool_ids = [env_id for env_id in args.env_id if not env_id.endswith("NoFrameskip-v4") and not is_mujoco(env_id)]
    if envpool_ids:
        try:
            import envpool
        except ImportError:
            parser.error("needs envpool for envpool ids: pip install envpool")
        for env_id in envpool_ids:
            if env_id not in envpool.list_all_envs():
                parser.error(
                    f"--env-id {env_id}: neither an envpool id (see envpool.list_all_envs()), an Atari "
                    f"*NoFrameskip-v4 id nor a gymnasium MuJoCo id"
                )
            try:
                envpool.make_spec(env_id)
            # procgen's library loads the Qt 5 runtime: missing on a bare Linux
            except ImportError as e:
                hint = ""
                if "qt" in str(e).lower() or re.search(r"(Easy|Hard)-v\d+$", env_id):
                    hint = "; envpool's procgen games need the Qt 5 runtime on Linux: apt install libqt5gui5"
                parser.error(
                    f"--env-id {env_id}: envpool cannot load it ({str(e).splitlines()[0] if str(e) else e!r}){hint}"
                )
    if args.markdown:
        print(
            f"\n## Random play\n\nUniformly random actions (envpool ids: envpool's default options; *NoFrameskip-v4 "
            f"ids: ppo_atari.py's wrappers; MuJoCo ids: gymnasium's envs), seed {args.seed}: {args.num_envs} envs x "
            f"their first {args.episodes_per_env} whole episodes (`python benchmark/random_play.py`).\n"
        )
        print("| env | episodes | return (mean ± population std) | min | max | mean length |")
        print("| --- | --- | --- | --- | --- | --- |")
    for env_id in args.env_id:
        start = time.time()
        returns, lengths = random_play(env_id, args.num_envs, args.episodes_per_env, args.seed)
        if args.markdown:
            print(
                f"| {env_id} | {len(returns)} | {returns.mean():.2f} ± {returns.std():.2f} | {returns.min():g} | "
                f"{returns.max():g} | {lengths.mean():.1f} |",
                flush=True,
            )
        else:
            print(
                f"{env_id}: random play {returns.mean():.2f} ± {returns.std():.2f} (min {returns.min():g}, max "
                f"{returns.max():g}) over {len(returns)} episodes ({args.num_envs} envs x {args.episodes_per_env}, "
                f"seed {args.seed}), mean length {lengths.mean():.1f}, {time.time() - start:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
