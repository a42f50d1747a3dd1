"""The --cuda path without a GPU: every script trains two tiny iterations in this process on an emulated GPU, and a
tensor of a training step on another device than the run's fails the test, so that --cuda on a GPU machine meets no
device mismatch that CPU runs never showed.

The emulation: torch.cuda.is_available() says True (device_count 2), so main picks torch.device("cuda") as on a GPU
machine (ppo_atari_multigpu.py: cuda:1, from --device-ids 1). A CPU-only torch cannot make a "cuda" tensor, not even an
empty one (no CUDA device guard), so a TorchFunctionMode renames every "cuda" device that a call names to "meta", the
one other device type that it can: a tensor of the emulated GPU is an OnGpu, a wrapper whose device is meta:<index>
(shown as cuda:<index>) and whose values are a CPU tensor. A TorchDispatchMode runs every aten op, forward, backward and
the fused Adam step alike, on those CPU values, after checking that the op's tensors are all on one device. That check
is CUDA's, made stricter: only a transfer (.to, .cpu, .cuda: aten._to_copy) may take a tensor from one device to
another. So a CPU tensor copied into the run's buffers, used as an index or as a 0-dim operand, which CUDA accepts with
a hidden host-device copy, fails here too: it is a tensor of the training step made on the wrong device."""

import contextlib
import importlib
import linecache
import os
import re
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from helpers import NEEDS, REPO, SCRIPTS, assert_ok, load_script, need, need_procgen, run_main

# two iterations of 2 envs x 16 steps, one mini-batch, one epoch: every tensor of a training step, twice
TINY = [
    "--num-envs",
    "2",
    "--num-steps",
    "16",
    "--num-minibatches",
    "1",
    "--update-epochs",
    "1",
    "--total-timesteps",
    "64",
]
EXTRA = {
    # the same device code as HalfCheetah's, without MuJoCo
    "ppo_continuous_action.py": ["--env-id", "Pendulum-v1"],
    # torch on one thread is much faster on 2 busy cores
    "ppo_atari_envpool.py": ["--num-threads", "1"],
    "ppo_procgen.py": ["--num-threads", "1"],
    # this process's GPU by --device-ids: cuda:1, not the default
    "ppo_atari_multigpu.py": ["--device-ids", "1"],
}
TIME_LIMIT = 5  # steps: episodes truncated within the tiny run (cut_episodes), for [X5]
RUN_GPU = {"ppo_atari_multigpu.py": 1}  # the index of the run's GPU; 0 for the others
TORCHRUN_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class DeviceMismatch(RuntimeError):
    """An op of the emulated run got tensors on two devices."""


def shown(device):
    return f"cuda:{device.index}" if device.type == "meta" else str(device)


def script_lines():
    """The (script, line number) of each frame of a ppo*.py script in the stack, innermost first: the line that runs
    the current op, then the lines that called it."""
    frame, lines = sys._getframe(1), []
    while frame is not None:
        if os.path.basename(frame.f_code.co_filename) in SCRIPTS:
            lines.append((os.path.basename(frame.f_code.co_filename), frame.f_lineno))
        frame = frame.f_back
    return lines


def shown_line(where):
    return f"{where[0]}:{where[1]}: {linecache.getline(str(REPO / where[0]), where[1]).strip()}"


class OnGpu(torch.Tensor):
    """A tensor of the emulated GPU: device meta:<index> to torch, its values in the CPU tensor .host."""

    @staticmethod
    def __new__(cls, host, device, gpu):
        # a view of a normal tensor made in inference mode is a normal tensor (it shares its base's version counter)
        with torch.inference_mode(torch.is_inference_mode_enabled() and host.is_inference()):
            t = torch.Tensor._make_wrapper_subclass(
                cls,
                host.shape,
                strides=host.stride(),
                dtype=host.dtype,
                storage_offset=host.storage_offset(),
                layout=host.layout,
                device=device,
                requires_grad=False,
            )
        t.host, t.gpu = host, gpu
        return t

    # functions go on to aten ops, and so to the check
    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self):
        return f"OnGpu({shown(self.device)}, {self.host!r})"

    @classmethod
    # an op outside the modes (none in a run)
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        gpu = next(x.gpu for x in tree_flatten((args, kwargs))[0] if isinstance(x, OnGpu))
        return gpu.run(func, args, kwargs or {})


class EmulatedGpu:
    """The emulated GPUs' record: the devices that tensors were made on, the ops run there, the mismatches."""

    def __init__(self):
        self.current = 0  # torch.cuda.set_device's index
        self.made, self.ops, self.lines, self.mismatches = set(), set(), set(), []

    def meta(self, device):
        device = torch.device(device)
        return torch.device("meta", self.current if device.index is None else device.index)

    def run(self, func, args, kwargs):
        """Run one aten op on the CPU values; OnGpu results where the op's tensors (or its device=) are on a GPU."""
        devices, unwrapped = set(), {}

        def unwrap(x):
            if isinstance(x, OnGpu):
                devices.add(x.device)
                unwrapped[id(x.host)] = x
                return x.host
            if isinstance(x, torch.Tensor):
                assert x.device.type != "meta", f"{func}: a meta tensor without values, a gap of this emulation"
                devices.add(x.device)
            return x

        args, kwargs = tree_map(unwrap, (args, kwargs))
        # the one op that may move a tensor between devices
        if func is torch.ops.aten._to_copy.default:
            device = kwargs.get("device") or next(iter(devices))
        else:
            if len(devices) > 1:
                self.mismatches.append(
                    f"{func} got tensors on {' and '.join(sorted(map(shown, devices)))}, at "
                    + ", called from ".join(map(shown_line, script_lines()))
                )
                raise DeviceMismatch(self.mismatches[-1])
            device = kwargs.get("device") or next(iter(devices), torch.device("cpu"))
        on_gpu = torch.device(device).type == "meta"
        if on_gpu:
            self.ops.add(str(func))
            self.lines.update(script_lines()[:1])
            if "device" in kwargs:
                kwargs["device"] = torch.device("cpu")
        out = func(*args, **kwargs)

        def wrap(x):
            if not isinstance(x, torch.Tensor) or not on_gpu:
                return x
            if id(x) in unwrapped:  # an in-place op returns its input
                return unwrapped[id(x)]
            self.made.add(shown(device))
            return OnGpu(x, device, self)

        return tree_map(wrap, out)


class CudaIsMeta(TorchFunctionMode):
    """Every "cuda" device that a call names becomes meta:<index>; a factory (torch.zeros(..., device=d),
    torch.as_tensor, torch.randperm, ...) on the emulated GPU makes its tensor on the CPU, then moves it there."""

    def __init__(self, gpu):
        super().__init__()
        self.gpu = gpu

    @staticmethod
    def on_gpu(value):
        if isinstance(value, (str, torch.device)):
            with contextlib.suppress(RuntimeError):  # a string that names no device
                return torch.device(value).type in ("cuda", "meta")
        return False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            device = args[1] if len(args) > 1 else kwargs.pop("device", None)
            return args[0].to(self.gpu.meta("cuda" if device is None else device), **kwargs)
        if func is torch.Tensor.to:
            args = tuple(self.gpu.meta(a) if self.on_gpu(a) else a for a in args)
            if self.on_gpu(kwargs.get("device")):
                kwargs["device"] = self.gpu.meta(kwargs["device"])
            return func(*args, **kwargs)
        # a GPU copies the values to the host
        if func is torch.Tensor.tolist and isinstance(args[0], OnGpu):
            return args[0].host.tolist()  # (torch refuses tolist() on a tensor subclass)
        if self.on_gpu(kwargs.get("device")):
            device, kwargs["device"] = self.gpu.meta(kwargs["device"]), torch.device("cpu")
            return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, func(*args, **kwargs))
        return func(*args, **kwargs)


class OpsOnCpu(TorchDispatchMode):
    def __init__(self, gpu):
        super().__init__()
        self.gpu = gpu

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # a composite op (aten.to in inference mode, ...) as the ops it is made of, each checked
        with self:
            out = func.decompose(*args, **kwargs)
        return self.gpu.run(func, args, kwargs) if out is NotImplemented else out


@contextlib.contextmanager
def emulated_gpus(monkeypatch):
    """Two emulated GPUs for the with-block: torch.cuda's calls that the scripts make, and the modes above."""
    gpu = EmulatedGpu()

    def set_device(device):
        gpu.current = device if isinstance(device, int) else gpu.meta(device).index

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: gpu.current)
    # fused Adam checks its params' device type (cuda and cpu have fused kernels; the meta of the emulation stands
    # for cuda, and its step runs on the CPU)
    optimizer = importlib.import_module("torch.optim.optimizer")
    supported = optimizer._get_fused_kernels_supported_devices
    monkeypatch.setattr(optimizer, "_get_fused_kernels_supported_devices", lambda: [*supported(), "meta"])
    with CudaIsMeta(gpu), OpsOnCpu(gpu):
        yield gpu


class CutShort:
    """An envpool env whose every TIME_LIMIT-th step ends the episodes of all its envs as truncated (a termination
    there too: ppo_multidiscrete.py's random play ends every JobShop episode at once). envpool's own
    max_episode_steps does not cut procgen's or Jumanji's games."""

    def __init__(self, envs):
        self.envs, self.steps = envs, 0

    def __getattr__(self, name):
        return getattr(self.envs, name)

    def step(self, actions, *env_ids):
        obs, reward, terminated, truncated, info = self.envs.step(actions, *env_ids)
        # a step of every env, not the adapter's reset step of those that just ended
        if not env_ids:
            self.steps += 1
            if self.steps % TIME_LIMIT == 0:
                terminated, truncated = np.zeros_like(terminated), np.ones_like(truncated)
        return obs, reward, terminated, truncated, info


def cut_episodes(module, monkeypatch):
    """Episodes truncated after about TIME_LIMIT steps, so that the tiny run meets --bootstrap-truncated's lines [X5]:
    envpool's envs in a CutShort, gymnasium's with a time limit (Atari's counts frames: the no-ops of a reset, up to
    30, and 4 per step)."""
    if hasattr(module, "EnvpoolVecEnv"):
        envpool = need("envpool")
        make = envpool.make
        monkeypatch.setattr(envpool, "make", lambda *a, **k: CutShort(make(*a, **k)))
    else:
        make = gym.make
        limit = lambda env_id: 32 + 4 * TIME_LIMIT if env_id.endswith("NoFrameskip-v4") else TIME_LIMIT
        monkeypatch.setattr(gym, "make", lambda env_id, **k: make(env_id, **k, max_episode_steps=limit(env_id)))


def train_on_emulated_gpu(script, module, tmp_path, monkeypatch):
    """Two tiny iterations of script's main (module: the script loaded) on the emulated GPUs, with --bootstrap-truncated
    and short episodes; returns the GPUs' record."""
    if script == "ppo_procgen.py":
        need_procgen()
    elif script in NEEDS:
        need(NEEDS[script])
    for name in TORCHRUN_VARIABLES:  # ppo_atari_multigpu.py: one process, as without torchrun
        monkeypatch.delenv(name, raising=False)
    cut_episodes(module, monkeypatch)
    with emulated_gpus(monkeypatch) as gpu:
        proc = run_main(script, *TINY, "--bootstrap-truncated", *EXTRA.get(script, []), cwd=tmp_path, module=module)
    assert_ok(proc)
    return gpu


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_tensor_of_a_training_step_is_on_the_runs_gpu(script, tmp_path, monkeypatch):
    gpu = train_on_emulated_gpu(script, load_script(script), tmp_path, monkeypatch)
    # also those a script might have caught: each was raised where it happened
    assert gpu.mismatches == []
    # the run was on the GPU that main chose, on it alone: the rollout, the backward pass, the optimizer step, and
    # the bootstrap of truncated episodes [X5]
    assert gpu.made == {f"cuda:{RUN_GPU.get(script, 0)}"}
    assert {"aten.convolution_backward.default", "aten.mm.default"} & gpu.ops
    assert "aten._fused_adam_.default" in gpu.ops
    ran = [shown_line(where) for where in gpu.lines]
    assert any("final_value = " in line for line in ran)


def with_bug(script, line, buggy):
    """script loaded, then its main (and all else) redefined from its source with one line replaced: a copy with a
    bug, the file untouched. Fails when the line is no longer in the script (update the bug here then)."""
    module, source = load_script(script), (REPO / script).read_text()
    assert source.count(line) == 1, f"{script} no longer has this line once: {line.strip()!r}"
    exec(compile(source.replace(line, buggy), str(REPO / script), "exec"), module.__dict__)
    return module


# one tensor of ppo.py's training step made on the CPU, and the line where it meets the GPU's, which fails here. On a
# GPU all but the shuffled indices end with "Expected all tensors to be on the same device" (in the agent, or in
# compute_gae); CUDA takes CPU indices with a hidden copy.
BUGS = {
    "numpy arrays made tensors without device=": (
        "        return torch.as_tensor(array, dtype=dtype, device=device)\n",
        "        return torch.as_tensor(array, dtype=dtype)\n",
        "action = agent.get_action(to_torch(next_obs))",
    ),  # the first step's observation
    "shuffled indices without device=": (
        "b_inds = torch.randperm(args.batch_size, device=device)",
        "b_inds = torch.randperm(args.batch_size)",
        "(b_obs[mb_inds], b_actions[mb_inds]),  # the agent's inputs",
    ),
    "rewards without device=": (
        "                    to_torch(rewards),\n",
        "                    torch.as_tensor(rewards),\n",
        # in compute_gae (the message shows the file's lines, not the bug)
        "deltas = rewards + gamma * next_values",
    ),
    "final obs of a truncated episode without device= [X5]": (
        "final_value = agent.get_value(to_torch(final_obs))",
        "final_value = agent.get_value(torch.as_tensor(final_obs, dtype=torch.float32))",
        # shown as the file has it, called from there
        "final_value = agent.get_value(to_torch(final_obs))",
    ),
}


@pytest.mark.parametrize("bug", BUGS)
def test_a_tensor_left_on_the_cpu_fails(bug, tmp_path, monkeypatch):
    line, buggy, where = BUGS[bug]  # where: the line of main where the CPU tensor meets the GPU's
    module = with_bug("ppo.py", line, buggy)
    with pytest.raises(DeviceMismatch, match=r"got tensors on cpu and cuda:0, at ppo\.py:\d+: .*" + re.escape(where)):
        train_on_emulated_gpu("ppo.py", module, tmp_path, monkeypatch)


def test_a_process_on_another_gpu_than_its_device_id_fails(tmp_path, monkeypatch):
    """ppo_atari_multigpu.py without the GPU of its --device-ids: one device for every tensor, so no mismatch, but
    every process of a machine on GPU 0."""
    module = with_bug(
        "ppo_atari_multigpu.py", 'device = torch.device("cuda", gpus[local_rank])', 'device = torch.device("cuda")'
    )
    gpu = train_on_emulated_gpu("ppo_atari_multigpu.py", module, tmp_path, monkeypatch)
    # what the main test refuses: not {"cuda:1"}
    assert gpu.mismatches == [] and gpu.made == {"cuda:0"}
