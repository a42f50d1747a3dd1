"""What CI installs beside a torch wheel it installed with --no-deps (see .ci/cuda_stubs.py), one requirement a line:
the project's requirements with the given extras (pyproject.toml), torch left out, and torch's own requirements less
its CUDA ones (nvidia-*, cuda-*, triton), read from the installed torch.

A plain `pip install -e ".[all]"` next to that torch would not do: pip resolves the dependencies of an installed
distribution that a requirement names, so "torch>=2.4" brings in the nvidia-* wheels, several GB.

usage: python .ci/requirements.py EXTRA...      the requirements
       python .ci/requirements.py --constraints  pip constraints that refuse torch's CUDA packages and any torch but
                                                 the installed one: should some requirement ever depend on torch, pip
                                                 stops at resolution instead of downloading the CUDA packages
Run it with the venv's Python, torch installed there (3.11+ for tomllib).
"""

import re
import sys
import tomllib
from importlib.metadata import requires, version
from pathlib import Path

CUDA = re.compile(r"^(nvidia-|nvidia_|cuda-|cuda_|triton\b)", re.I)


def name(requirement):
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


def project_requirements(extras):
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    own, optional, out, todo = name(project["name"]), project.get("optional-dependencies", {}), [], list(extras)
    out += project["dependencies"]
    seen = set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in optional[extra]:
            if name(requirement) == own:  # "ppo-details[atari,mujoco,...]": the extras it names
                todo += re.search(r"\[(.*?)\]", requirement).group(1).replace(" ", "").split(",")
            else:
                out.append(requirement)
    return out


def main(args):
    if args == ["--constraints"]:
        cuda = sorted({name(r) for r in requires("torch") or [] if CUDA.match(r)})
        # no release is older than 0.dev0
        lines = [f"torch=={version('torch')}"] + [f"{n}<0.dev0" for n in cuda]
    else:
        lines = [r for r in project_requirements(args) if name(r) != "torch"]
        lines += [r for r in requires("torch") or [] if "extra ==" not in r and not CUDA.match(r)]
    print("\n".join(dict.fromkeys(lines)))


if __name__ == "__main__":
    main(sys.argv[1:])
