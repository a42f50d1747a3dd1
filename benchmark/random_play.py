"""The score of uniformly random play in an envpool env: the floor a scaled learning run has to beat.

    python benchmark/random_play.py --env-id StarpilotEasy-v0                 # procgen starpilot, easy
    python benchmark/random_play.py --env-id Breakout-v5 --episodes-per-env 2

Each of --num-envs envs plays its first --episodes-per-env whole episodes with uniformly random actions; the score
of an episode is the sum of its raw rewards (envpool's default options: for Atari, a whole game's score, unclipped).
Why not "the first N episodes to end": in parallel envs the short episodes end first, and in most games a short
episode is a bad one, so that sample would put random play too low. Every env counts the same number of episodes.

envpool resets on the step after a done (a reset step: action ignored, reward 0); that step belongs to no episode.
Prints one line per env id: mean ± population std (ddof=0), min, max, the number of episodes and their mean length;
with --markdown, a "Random play" section with a table instead (the sweep scripts append it to their report).
"""

import sys
import time

import numpy as np
from common import Parser


def random_play(env_id, num_envs, episodes_per_env, seed):
    """Returns (returns, lengths): arrays of num_envs * episodes_per_env whole episodes of random play."""
    import envpool  # imported here so that --help works without it

    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed)
    rng = np.random.default_rng(seed)
    envs.action_space.seed(seed)  # for the spaces drawn with sample()
    envs.reset()
    episode_return, episode_length = np.zeros(num_envs), np.zeros(num_envs, dtype=np.int64)
    returns, lengths = [[] for _ in range(num_envs)], [[] for _ in range(num_envs)]
    resetting = np.zeros(num_envs, dtype=bool)  # True for an env whose next step is envpool's reset step
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


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", nargs="+", required=True, help="envpool ids, e.g. StarpilotEasy-v0 Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=100, help="envs played in parallel (each counts equally)")
    parser.add_argument("--episodes-per-env", type=int, default=3, help="whole episodes each env plays")
    parser.add_argument("--seed", type=int, default=1, help="seed of the envs and of the random actions")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown section with a table")
    args = parser.parse_args(argv)
    if args.num_envs < 1 or args.episodes_per_env < 1:
        parser.error("--num-envs and --episodes-per-env must be positive")
    try:
        import envpool
    except ImportError:
        parser.error("needs envpool: pip install envpool")
    for env_id in args.env_id:
        if env_id not in envpool.list_all_envs():
            parser.error(f"--env-id {env_id}: not an envpool id (see envpool.list_all_envs())")
    if args.markdown:
        print(f"\n## Random play\n\nUniformly random actions, envpool's default options, seed {args.seed}: "
              f"{args.num_envs} envs x their first {args.episodes_per_env} whole episodes "
              f"(`python benchmark/random_play.py`).\n")
        print("| env | episodes | return (mean ± population std) | min | max | mean length |\n| --- | --- | --- | --- | --- | --- |")
    for env_id in args.env_id:
        start = time.time()
        returns, lengths = random_play(env_id, args.num_envs, args.episodes_per_env, args.seed)
        if args.markdown:
            print(f"| {env_id} | {len(returns)} | {returns.mean():.2f} ± {returns.std():.2f} | {returns.min():g} | "
                  f"{returns.max():g} | {lengths.mean():.1f} |", flush=True)
        else:
            print(f"{env_id}: random play {returns.mean():.2f} ± {returns.std():.2f} (min {returns.min():g}, max "
                  f"{returns.max():g}) over {len(returns)} episodes ({args.num_envs} envs x {args.episodes_per_env}, "
                  f"seed {args.seed}), mean length {lengths.mean():.1f}, {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
