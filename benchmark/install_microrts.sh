#!/usr/bin/env bash
# Gym-μRTS 0.2.0, the release with the blog's envs (MicrortsMining-v1, MicrortsAttackShapedReward-v1,
# MicrortsRandomEnemyShapedReward3-v1, ...), for ppo_multidiscrete.py and ppo_multidiscrete_mask.py, into this Python
# beside gymnasium and numpy 2 (Python 3.11 to 3.13):
#
#   bash benchmark/install_microrts.sh                   # into python3; PYTHON=.venv/bin/python for another one
#
# gym 0.18.3 and gym-microrts 0.2.0 exist only as source archives, and gym's metadata asks for "opencv-python>=3.",
# a version that today's pip (24.1+) and setuptools (67+) refuse. So both are built into wheels in a throwaway venv
# with pip<24.1, setuptools 66.1 (it still accepts that, and runs on 3.12+) and wheel<0.38; gym's wheel gets
# ">=3" instead, and both go in with --no-deps: nothing installed here is downgraded. gym 0.18's own pins are left out
# (Pillow<=8.2 has no wheel for 3.11+; cloudpickle<1.7, pyglet and scipy serve parts of gym the scripts do not use).
# Then JPype1, dacite, Pillow (kept if there), setuptools (kept if there: gym imports distutils, which Python 3.12
# dropped and setuptools provides), and a Java runtime if there is none: Debian's or Ubuntu's
# openjdk-17-jre-headless (as root; otherwise it says what to install). What this Python gets: a `gym` module, gym
# 0.18.3 (gymnasium is another package, untouched). ~15 s with pip's cache warm, plus the JRE if it installs one.
set -euo pipefail
PYTHON=${PYTHON:-python3}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
"$PYTHON" -m venv "$build/venv"
pip=(-m pip install -q --disable-pip-version-check)
"$build/venv/bin/python" "${pip[@]}" "pip<24.1" "setuptools>=66.1,<67" "wheel<0.38"
"$build/venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
    gym==0.18.3 gym-microrts==0.2.0 -w "$build/built"
"$build/venv/bin/python" -m wheel unpack -d "$build/gym" "$build"/built/gym-0.18.3-*.whl >/dev/null
sed -i 's/(>=3\.)/(>=3)/' "$build"/gym/gym-0.18.3/gym-0.18.3.dist-info/METADATA
mkdir "$build/wheels" && mv "$build"/built/gym_microrts-*.whl "$build/wheels"
"$build/venv/bin/python" -m wheel pack -d "$build/wheels" "$build/gym/gym-0.18.3" >/dev/null
"$PYTHON" "${pip[@]}" JPype1 dacite Pillow setuptools
"$PYTHON" "${pip[@]}" --no-deps "$build"/wheels/*.whl
if ! command -v java >/dev/null && [ -z "${JAVA_HOME:-}" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    else
        echo "install_microrts.sh: Gym-μRTS runs in Java and none was found: install a Java runtime (8 or newer), e.g." \
            "sudo apt-get install openjdk-17-jre-headless, then run this again" >&2
        exit 1
    fi
fi
# The check: one env made, reset and stepped, as the scripts do it (their np.int stand-in, the Java side's prints hidden)
"$PYTHON" - <<'PY' >/dev/null
import numpy as np
np.int = int
import gym, gym_microrts  # noqa: F401
env = gym.make("MicrortsMining-v1")
env.seed(1)
assert env.reset().shape == (10, 10, 27) and env.action_mask.shape == (229,)
env.step(env.action_space.sample())
PY
echo "Gym-μRTS 0.2.0 (gym 0.18.3) is installed for $("$PYTHON" -c 'import sys; print(sys.executable)'):" \
    "python ppo_multidiscrete_mask.py --env-id MicrortsMining-v1"
