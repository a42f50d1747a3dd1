"""CPU time of the CNN scripts' Agent in PyTorch's default NCHW memory and in channels_last (NHWC), which they use.

    python benchmark/cnn_layout.py                          # ppo_atari.py and ppo_procgen.py
    python benchmark/cnn_layout.py --scripts ppo_atari.py --repeats 20

Per layout: one training mini-batch (get_action_and_value on the script's default mini-batch of frames, then
backward) and one rollout step (inference on one frame per env), in milliseconds of this process's CPU time
(time.process_time, 1 torch thread): CPU time, unlike wall time, hardly moves when other jobs share the cores.
The layouts alternate (NCHW, NHWC, NCHW, ...) and each timing is the median over --repeats; random uint8 frames.
NCHW is the Agent with its pixels() reverted to a plain division by 255 and its weights left in the default layout.
"""

import statistics
import sys
import time

import numpy as np
from common import Parser, load_script

# script -> (observation shape, actions, training mini-batch, envs): the scripts' defaults
SHAPES = {
    "ppo_atari.py": ((4, 84, 84), 4, 8 * 128 // 4, 8),
    "ppo_atari_envpool.py": ((4, 84, 84), 4, 8 * 128 // 4, 8),
    "ppo_atari_multigpu.py": ((4, 84, 84), 4, 8 * 128 // 4, 8),
    "ppo_procgen.py": ((3, 64, 64), 15, 64 * 256 // 8, 64),
}


def time_agent(module, layout, shape, actions, batch, envs, repeats):
    """Median CPU milliseconds of a training mini-batch and of a rollout step for one layout."""
    import gymnasium as gym
    import torch

    class Envs:  # what Agent reads from the vector env
        single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        single_action_space = gym.spaces.Discrete(actions)

    torch.manual_seed(0)
    agent = module.Agent(Envs())
    if layout == "channels_last":
        agent = agent.to(memory_format=torch.channels_last)
    else:
        agent.pixels = lambda x: x / 255.0  # the instance attribute hides the staticmethod
    frames = torch.randint(0, 256, (batch, *shape), dtype=torch.uint8)
    taken = torch.randint(0, actions, (batch,))
    train, step = [], []
    for _ in range(repeats):
        start = time.process_time()
        _, logprob, entropy, value = agent.get_action_and_value(frames, taken)
        (logprob.mean() + entropy.mean() + value.mean()).backward()
        train.append(time.process_time() - start)
        start = time.process_time()
        with torch.no_grad():
            agent.get_action_and_value(frames[:envs])
        step.append(time.process_time() - start)
    return 1000 * statistics.median(train), 1000 * statistics.median(step)


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scripts",
        nargs="+",
        default=["ppo_atari.py", "ppo_procgen.py"],
        choices=sorted(SHAPES),
        help="scripts whose Agent is timed",
    )
    parser.add_argument("--repeats", type=int, default=10, help="timings per layout (the median counts)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be positive, got {args.repeats}")
    import torch

    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, 1 thread; median CPU ms over {args.repeats} repeats")
    print("| script | layout | training mini-batch (frames) | ms | rollout step (envs) | ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for script in args.scripts:
        module = load_script(script)
        shape, actions, batch, envs = SHAPES[script]
        results = {}
        # alternate; the second pair counts
        for layout in ("NCHW", "channels_last", "NCHW", "channels_last"):
            results[layout] = time_agent(module, layout, shape, actions, batch, envs, args.repeats)
        for layout, (train, step) in results.items():
            print(f"| {script} | {layout} | {batch} | {train:.0f} | {envs} | {step:.1f} |", flush=True)
        speedup = results["NCHW"][0] / results["channels_last"][0]
        print(
            f"| {script} | NCHW / channels_last | | {speedup:.2f}x | | "
            f"{results['NCHW'][1] / results['channels_last'][1]:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
