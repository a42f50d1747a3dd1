"""Gym-μRTS 0.2.0 (the blog's MultiDiscrete envs) in ppo_multidiscrete*.py: MicrortsVecEnv changes nothing of what the
env gives, the blog's μRTS CNN (C13's shared trunk), short runs of both scripts, stops, and one-line errors. The tests
that need Gym-μRTS and Java are skipped, with the reason, where `bash benchmark/install_microrts.sh` has not been
run."""

import concurrent.futures
import importlib
import importlib.metadata
import json
import multiprocessing
import os
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import (
    METRICS,
    REPO,
    assert_ok,
    assert_usage_error,
    load_script,
    missing,
    read_scalars,
    run_dirs,
    run_script,
    test_env,
)

md = load_script("ppo_multidiscrete.py")
mdm = load_script("ppo_multidiscrete_mask.py")
SCRIPTS = ["ppo_multidiscrete.py", "ppo_multidiscrete_mask.py"]
# a 10 x 10 map: source cell, action type, 4 directions, unit type, target cell
NVEC = [100, 6, 4, 4, 4, 4, 7, 100]
OFFSETS = np.cumsum([0] + NVEC[:-1])  # where each component's choices start in the 229-value mask
LIMITS = {"MicrortsMining-v1": 200, "MicrortsAttackShapedReward-v1": 400, "MicrortsRandomEnemyShapedReward3-v1": 600}
SHORT = ["--env-id", "MicrortsMining-v1", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512"]


def need_microrts():
    """A gym before 0.24 with Gym-μRTS 0.2.0 and a Java runtime, or `missing` (a skip; a failure in CI) with the
    reason."""
    np.int = int  # as the scripts do: gym_microrts 0.2.0 uses np.int, which numpy 1.24 removed
    try:
        legacy_gym = importlib.import_module("gym")
        version = tuple(int(part) for part in legacy_gym.__version__.split(".")[:2])
        assert version < (0, 24), f"gym {legacy_gym.__version__}, not one before 0.24"
        importlib.import_module("gym_microrts")
        jpype = importlib.import_module("jpype")
    except (ImportError, AssertionError) as e:
        missing(f"Gym-μRTS 0.2.0 on a gym before 0.24 is not installed ({e}): bash benchmark/install_microrts.sh")
    if not jpype.isJVMStarted():
        try:
            jpype.getDefaultJVMPath()
        except jpype.JVMNotFoundException as e:
            missing(f"Gym-μRTS needs a Java runtime ({e}): bash benchmark/install_microrts.sh")
    return legacy_gym


def in_a_fresh_process(function, *args):
    """function(*args) run in a new Python (spawned), its exception raised here. The JVM that the first Gym-μRTS env
    starts stays in the process until it exits, with its threads and its SIGINT and SIGTERM handlers: not in
    pytest's."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def random_action(rng, mask=None):
    """One action: each component uniform over its choices, or over the valid ones (all when none is valid)."""
    action, start = [], 0
    for n in NVEC:
        valid = np.arange(n) if mask is None else np.flatnonzero(mask[start : start + n])
        action.append(rng.choice(valid if len(valid) else np.arange(n)))
        start += n
    return np.array(action)


def mask_from_obs(obs):
    """The mask that the docs describe, computed from a (27, h, w) obs (planes: hit points 0-4, resources 5-9, owner
    10-12, unit type 13-20, current action 21-26): the cells where a unit of the agent's (owner plane 11) is not busy
    (action plane 21: none), the 29 parameter choices all valid, the cells where a unit of the enemy's (owner plane 12)
    is not busy. Cell y, x is y * w + x, as the obs grid is read row by row."""
    idle_unit = (obs[13] == 0) & (obs[21] == 1)  # unit type plane 13: no unit
    agents, enemies = idle_unit & (obs[11] == 1), idle_unit & (obs[12] == 1)
    return np.concatenate([agents.ravel(), np.ones(29, bool), enemies.ravel()])


class Recorder:
    """A raw gym env that remembers what each reset() and step() returned, and its action_mask after each, and the
    action that each step() received, with the action_mask that the env had when it received it."""

    def __init__(self, env):
        self.env, self.log, self.received = env, [], []

    def reset(self):
        obs = self.env.reset()
        self.log.append((obs, self.env.action_mask.copy()))
        return obs

    def step(self, action):
        self.received.append((np.array(action, copy=True), self.env.action_mask.copy()))
        out = self.env.step(action)
        self.log.append((out, self.env.action_mask.copy()))
        return out

    def __getattr__(self, name):
        return getattr(self.env, name)


@pytest.mark.parametrize("env_id", list(LIMITS))
def test_adapter_gives_what_the_env_gives(env_id):
    """Step for step, with the same seed and actions: each raw env receives the action sent for it, and the obs (planes
    first), rewards, masks, terminations and the time limit's truncations that the script sees are those of the raw
    env, and whole episodes in final_info. The raw side is the adapter's own envs, recorded; for the two envs against
    the passive AI also twin envs stepped apart (the random AI of RandomEnemy draws from Java's unseeded random
    numbers: two games of it differ). Every mask is the one that the docs describe, computed from its obs."""
    need_microrts()
    in_a_fresh_process(check_adapter, env_id)


def check_adapter(env_id):
    legacy_gym = importlib.import_module("gym")
    seed, limit, rng = 5, LIMITS[env_id], np.random.default_rng(0)
    envs = md.make_env(env_id, 2, seed, False, "test")
    envs.envs = [Recorder(env) for env in envs.envs]
    twins = [] if "RandomEnemy" in env_id else [legacy_gym.make(env_id) for _ in range(2)]
    for i, twin in enumerate(twins):
        twin.seed(seed + i)
    assert envs.single_action_space == gym.spaces.MultiDiscrete(NVEC)
    assert envs.single_observation_space.shape == (27, 10, 10)
    obs, infos = envs.reset()
    for i, env in enumerate(envs.envs):
        ((raw_obs, raw_mask),) = env.log
        if twins:
            np.testing.assert_array_equal(twins[i].reset(), raw_obs)
            np.testing.assert_array_equal(twins[i].action_mask, raw_mask)
        np.testing.assert_array_equal(obs[i], raw_obs.transpose(2, 0, 1))
        np.testing.assert_array_equal(infos["action_mask"][i], raw_mask.astype(bool))
        np.testing.assert_array_equal(infos["action_mask"][i], mask_from_obs(obs[i]))
    returns, lengths, episodes, seen = np.zeros(2), np.zeros(2, int), [], [1, 1]
    for t in range(limit + 20):
        # env 0 plays valid choices only (its units act, rewards come), env 1 uniform ones (mostly invalid)
        actions = np.stack([random_action(rng, infos["action_mask"][0]), random_action(rng)])
        obs, reward, terminations, truncations, infos = envs.step(actions)
        for i, env in enumerate(envs.envs):
            # this step's: a step, then a reset if it ended
            calls, seen[i] = env.log[seen[i] :], len(env.log)
            (raw_obs, raw_reward, done, info), raw_mask = calls[0]
            assert len(calls) == 1 + done
            assert len(env.received) == t + 1
            np.testing.assert_array_equal(env.received[-1][0], actions[i])
            if twins:
                twin_obs, twin_reward, twin_done, twin_info = twins[i].step(actions[i])
                np.testing.assert_array_equal(twin_obs, raw_obs)
                twin_result = (twin_reward, twin_done, twin_info.get("TimeLimit.truncated"))
                assert twin_result == (raw_reward, done, info.get("TimeLimit.truncated"))
                np.testing.assert_array_equal(twins[i].action_mask, raw_mask)
            assert reward[i] == raw_reward and bool(terminations[i] or truncations[i]) == done
            assert truncations[i] == (done and info.get("TimeLimit.truncated", False))
            returns[i] += raw_reward
            lengths[i] += 1
            # the last obs in final_obs; the next episode's first obs and mask come with the done
            if done:
                np.testing.assert_array_equal(infos["final_obs"][i], raw_obs.transpose(2, 0, 1))
                raw_obs, raw_mask = calls[1]
                if twins:
                    np.testing.assert_array_equal(twins[i].reset(), raw_obs)
                    np.testing.assert_array_equal(twins[i].action_mask, raw_mask)
                assert infos["final_info"]["_episode"][i]
                assert infos["final_info"]["episode"]["r"][i] == pytest.approx(returns[i])
                assert infos["final_info"]["episode"]["l"][i] == lengths[i]
                episodes.append((i, lengths[i], bool(truncations[i])))
                returns[i], lengths[i] = 0, 0
            np.testing.assert_array_equal(obs[i], raw_obs.transpose(2, 0, 1))
            np.testing.assert_array_equal(infos["action_mask"][i], raw_mask.astype(bool))
            np.testing.assert_array_equal(infos["action_mask"][i], mask_from_obs(obs[i]))
    # the time limit cuts an episode as a truncation, at exactly its step
    for i, length, truncated in episodes:
        assert length == limit if truncated else length <= limit
    if twins:  # against the passive AI nothing ends these games before the limit at random play
        assert sorted(episodes) == [(0, limit, True), (1, limit, True)]
    else:  # the random AI may win or lose a game before it (a termination)
        assert {i for i, _, _ in episodes} == {0, 1}
    assert obs.dtype == np.float32 and set(np.unique(obs)) <= {0.0, 1.0}
    envs.close()


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_env_receives_the_action_the_script_sampled(tmp_path, script):
    """The path from a sampled action to the env, in the script's own training loop (2 iterations of 2 envs x 64
    steps): at each step each raw env receives its row of the actions that the agent sampled. With the mask, each
    component of what the env receives is a choice that the env's own mask allowed when it received it, wherever the
    mask allowed any (offsets from NVEC here); without it, most source cells are not."""
    need_microrts()
    in_a_fresh_process(check_script_actions, script, tmp_path)


def check_script_actions(script, folder):
    module, sampled, made = load_script(script), [], []

    class Agent(module.Agent):
        # the rollout's only call that picks the actions sent to the envs
        def get_action(self, *inputs):
            action = super().get_action(*inputs)
            sampled.append(action.cpu().numpy().copy())
            return action

    def make_env(*args):
        envs = original_make_env(*args)
        envs.envs = [Recorder(env) for env in envs.envs]
        made.append(envs)
        return envs

    original_make_env, module.Agent, module.make_env = module.make_env, Agent, make_env
    os.chdir(folder)
    module.main(module.Args(env_id="MicrortsMining-v1", num_envs=2, num_steps=64, total_timesteps=256))
    (envs,) = made
    assert len(sampled) == 128
    for i, env in enumerate(envs.envs):
        np.testing.assert_array_equal(np.stack([action for action, _ in env.received]), np.stack(sampled)[:, i])
        # (steps, components)
        allowed = np.array([mask[OFFSETS + action] == 1 for action, mask in env.received])
        has_choice = np.array([[mask[s : s + n].any() for s, n in zip(OFFSETS, NVEC)] for _, mask in env.received])
        if script == "ppo_multidiscrete_mask.py":
            assert allowed[has_choice].all()
        # a near-uniform source cell (100 choices) is rarely one of the 1-2 units that can act
        else:
            assert allowed[:, 0].mean() < 0.5


def test_a_move_from_the_mask_moves_the_unit_as_the_action_says():
    """The action's encoding, through the adapter: the source cell y * w + x of the obs grid, action type 1 a move,
    component 2 its direction (0 up, 1 right, 2 down, 3 left). A worker that the mask lets act walks a square (left,
    down, right, up) on Mining, one move per step into an empty cell: after each step it is in the cell the action
    names, and its old cell is empty."""
    need_microrts()
    in_a_fresh_process(check_moves)


def check_moves():
    envs = md.make_env("MicrortsMining-v1", 1, 1, False, "test")
    # 13: no unit
    worker_plane = 14 + [t["name"] for t in envs.envs[0].unwrapped.utt["unitTypes"]].index("Worker")
    obs, infos = envs.reset()
    for direction, (dy, dx) in [(3, (0, -1)), (2, (1, 0)), (1, (0, 1)), (0, (-1, 0))]:
        # one worker
        (cell,) = np.flatnonzero(infos["action_mask"][0][:100] & (obs[0, worker_plane].ravel() == 1))
        y, x = divmod(int(cell), 10)  # the mask's cell y * 10 + x
        # an empty cell to go to
        assert 0 <= y + dy < 10 and 0 <= x + dx < 10 and obs[0, 13, y + dy, x + dx] == 1
        action = np.array([[y * 10 + x, 1, direction, 0, 0, 0, 0, 0]])
        obs, _, _, _, infos = envs.step(action)
        assert obs[0, worker_plane, y + dy, x + dx] == 1 and obs[0, 13, y, x] == 1
    envs.close()


def test_close_leaves_the_jvm_for_the_next_envs():
    """gym_microrts' env.close() shuts the JVM down, and JPype cannot start another in the same process: the adapter's
    close() closes the envs' clients only, so that an evaluation or a test can make envs again."""
    need_microrts()
    in_a_fresh_process(check_close)


def check_close():
    import jpype

    envs = mdm.make_env("MicrortsMining-v1", 1, 1, False, "test")
    envs.reset()
    envs.close()
    assert jpype.isJVMStarted()
    envs = mdm.make_env("MicrortsMining-v1", 1, 1, False, "test")
    envs.reset()
    envs.step(np.zeros((1, len(NVEC)), dtype=np.int64))
    envs.close()


def test_d2_the_blogs_microrts_cnn():
    """The μRTS CNN on a (27, 10, 10) observation: the layer sizes of the blog's μRTS Agent, its forward pass written
    out with torch.nn.functional, and C2's orthogonal gains (sqrt(2) hidden, 0.01 policy, 1 value)."""
    envs = type(
        "Envs",
        (),
        dict(
            single_observation_space=gym.spaces.Box(0, 1, (27, 10, 10), np.float32),
            single_action_space=gym.spaces.MultiDiscrete(NVEC),
        ),
    )
    torch.manual_seed(0)
    agent = md.Agent(envs)
    conv1, conv2, linear = (layer for layer in agent.network if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)))
    assert conv1.weight.shape == (16, 27, 3, 3) and conv1.stride == (2, 2)
    assert conv2.weight.shape == (32, 16, 2, 2) and conv2.stride == (1, 1)
    assert linear.weight.shape == (128, 32 * 3 * 3)
    assert agent.actor.weight.shape == (229, 128) and agent.critic.weight.shape == (1, 128)
    for layer, gain in ((conv1, 2**0.5), (conv2, 2**0.5), (linear, 2**0.5), (agent.actor, 0.01), (agent.critic, 1.0)):
        singular = torch.linalg.svdvals(layer.weight.detach().flatten(1))
        torch.testing.assert_close(singular, torch.full_like(singular, gain))
        assert torch.all(layer.bias == 0)
    x = torch.randint(0, 2, (5, 27, 10, 10)).float()
    f = torch.nn.functional
    hidden = f.relu(f.conv2d(x, conv1.weight, conv1.bias, stride=2))
    hidden = f.relu(f.conv2d(hidden, conv2.weight, conv2.bias))
    hidden = f.relu(f.linear(hidden.flatten(1), linear.weight, linear.bias))
    action, logprob, entropy, value = agent.get_action_and_value(x)
    torch.testing.assert_close(value, f.linear(hidden, agent.critic.weight, agent.critic.bias))
    torch.testing.assert_close(agent.get_value(x), value)
    logits = f.linear(hidden, agent.actor.weight, agent.actor.bias)
    expected = sum(
        torch.log_softmax(c, 1).gather(1, a[:, None])[:, 0] for c, a in zip(torch.split(logits, NVEC, 1), action.T)
    )
    torch.testing.assert_close(logprob, expected)
    # the masked script builds the same network, and a flat observation still gets C13's two MLPs (no CNN)
    assert [p.shape for p in mdm.Agent(envs).parameters()] == [p.shape for p in agent.parameters()]
    flat = type(
        "Envs",
        (),
        dict(
            single_observation_space=gym.spaces.Box(0, 1, (12,)), single_action_space=gym.spaces.MultiDiscrete([3, 4])
        ),
    )
    assert isinstance(md.Agent(flat).network, torch.nn.Identity)


@pytest.mark.parametrize("script", SCRIPTS)
def test_short_run_on_mining_copied_alone(tmp_path, script):
    need_microrts()
    # the masked one saves and evaluates its model; the other adds gamma * V(obs at the limit) to the reward [X5]
    save = ["--save-model"] if script == "ppo_multidiscrete_mask.py" else ["--bootstrap-truncated"]
    proc = run_script(script, *SHORT, *save, cwd=tmp_path, alone=True)
    assert_ok(proc)
    # the Java side's prints are not shown
    assert proc.stdout.splitlines()[0].startswith("step"), proc.stdout[:500]
    (run_dir,) = run_dirs(tmp_path)
    assert run_dir.name.startswith("MicrortsMining-v1__")
    # args.json names the libraries that ran the envs, as installed here
    versions = json.loads((run_dir / "args.json").read_text())["versions"]
    for distribution in ("gym", "gym-microrts", "JPype1"):
        assert versions[distribution] == importlib.metadata.version(distribution), distribution
    scalars = read_scalars(run_dir)
    for tag in METRICS + ["charts/invalid_action_rate"]:
        assert tag in scalars and all(np.isfinite(v) for _, v in scalars[tag]), tag
    # each env's first game, to the limit
    assert [v for _, v in scalars["charts/episodic_length"]] == [200, 200]
    rates = [v for _, v in scalars["charts/invalid_action_rate"]]
    # [X4] invalid only where nothing is valid: at a step when all of the
    if script == "ppo_multidiscrete_mask.py":
        # agent's units are busy, no source cell is (seen: 1 component in 1024)
        assert all(r < 0.01 for r in rates)
    else:  # a near-uniform source cell (100 choices) is rarely one of the units that can act
        assert all(r > 0.1 for r in rates)
    if save == ["--save-model"]:
        proc = run_script(
            script, "--eval-checkpoint", run_dir / f"{script[:-3]}.pt", "--eval-episodes", "1", cwd=tmp_path
        )
        assert_ok(proc)
        assert "MicrortsMining-v1: mean return" in proc.stdout


@pytest.mark.parametrize(
    "script,signum,code",
    [("ppo_multidiscrete.py", signal.SIGINT, 130), ("ppo_multidiscrete_mask.py", signal.SIGTERM, 143)],
)
def test_a_stop_mid_run_saves_the_checkpoint(tmp_path, script, signum, code):
    """The JVM takes over SIGINT and SIGTERM when it starts (it would exit at once, saving nothing); the adapter gives
    them back to the script, so Ctrl-C or a scheduler's SIGTERM stops at an iteration boundary with a checkpoint."""
    need_microrts()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / script), *SHORT[:6], "--total-timesteps", "100000", "--save-model"],
        cwd=tmp_path,
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().startswith("step")  # training is under way
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "interrupted at step" in err and "Traceback" not in err
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / f"{script[:-3]}.pt", weights_only=True)
    # the iterations done when the signal came
    assert saved["global_step"] == saved["iteration"] * 128


def test_missing_microrts_is_one_line_error(tmp_path):
    # shadows it
    (tmp_path / "gym_microrts.py").write_text("raise ImportError('No module named gym_microrts')\n")
    (tmp_path / "gym.py").write_text("__version__ = '0.18.3'\n")  # and gym 0.18, installed or not
    proc = run_script("ppo_multidiscrete_mask.py", *SHORT, cwd=tmp_path / "cwd", env=test_env(PYTHONPATH=str(tmp_path)))
    assert_usage_error(proc, "No module named gym_microrts", "bash benchmark/install_microrts.sh")
    assert not (tmp_path / "cwd" / "runs").exists()


@pytest.mark.parametrize("version", ["0.23.1", "0.24.0", "0.26.2"])
def test_a_later_gym_is_one_line_error(tmp_path, version):
    """gym 0.24 and later cannot run Gym-μRTS 0.2.0: refused by version. 0.23 passes that check, and this stand-in
    module then fails at gym_microrts' import, which says what to install too."""
    # a stand-in: a module, not the package
    (tmp_path / "gym.py").write_text(f"__version__ = '{version}'\n")
    proc = run_script("ppo_multidiscrete.py", *SHORT, cwd=tmp_path / "cwd", env=test_env(PYTHONPATH=str(tmp_path)))
    assert_usage_error(proc, "bash benchmark/install_microrts.sh")
    assert (f"found gym {version}" in proc.stderr) == (version != "0.23.1")


def test_a_gym_that_fails_its_own_import_is_one_line_error(tmp_path):
    """gym 0.21 on Python 3.12+ fails its own import with an AttributeError (its plugin loader), not an ImportError."""
    (tmp_path / "gym.py").write_text("raise AttributeError(\"'EntryPoints' object has no attribute 'get'\")\n")
    proc = run_script("ppo_multidiscrete_mask.py", *SHORT, cwd=tmp_path / "cwd", env=test_env(PYTHONPATH=str(tmp_path)))
    assert_usage_error(proc, "'EntryPoints' object has no attribute 'get'", "bash benchmark/install_microrts.sh")


# No Java: JPype looks in JAVA_HOME, then /usr/bin/java, then /usr/lib/jvm and the like; here it finds none of them
NO_JAVA = """import runpy, sys
import jpype._jvmfinder as finder
finder.LinuxJVMFinder._locations, finder.LinuxJVMFinder._java = (), "/nonexistent/java"
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_no_java_is_one_line_error(tmp_path):
    need_microrts()
    (tmp_path / "no_java.py").write_text(NO_JAVA)
    env = {key: value for key, value in test_env().items() if key != "JAVA_HOME"}
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "no_java.py"), str(REPO / "ppo_multidiscrete.py"), *SHORT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_usage_error(proc, "No JVM shared library file", "openjdk-17-jre-headless")
    assert not (tmp_path / "runs").exists()


def test_a_jvm_that_does_not_start_is_one_line_error(tmp_path):
    need_microrts()
    (tmp_path / "java" / "lib" / "server").mkdir(parents=True)
    # JAVA_HOME points at it
    (tmp_path / "java" / "lib" / "server" / "libjvm.so").write_text("not a library\n")
    proc = run_script("ppo_multidiscrete_mask.py", *SHORT, cwd=tmp_path, env=test_env(JAVA_HOME=str(tmp_path / "java")))
    assert_usage_error(proc, "cannot make env 'MicrortsMining-v1'", "libjvm.so", "openjdk-17-jre-headless")


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--capture-video"], ["--capture-video", "display"]),
        (["--env-id", "MicrortsNoSuchEnv-v1"], ["cannot make env 'MicrortsNoSuchEnv-v1'"]),
    ],
)
def test_bad_microrts_input_is_one_line_error(tmp_path, args, fragments):
    need_microrts()
    assert_usage_error(run_script("ppo_multidiscrete.py", *SHORT, *args, cwd=tmp_path), *fragments)
