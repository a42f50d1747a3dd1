"""Let PyPI's torch (the CUDA build) import and run on CPU without its nvidia-* wheels, for CI on Pythons that have no
CPU-only torch wheel here.

PyPI has no CPU-only torch for Linux: every torch wheel there is the CUDA build, whose shared objects (even
libtorch_cpu.so) are linked against CUDA libraries (libcudart, libcupti, libcublas, libcudnn, libnccl, ...) that come
as nvidia-* wheels, several GB in all. CI installs that torch wheel with --no-deps and then runs this script, which
writes into torch/lib (on the $ORIGIN rpath of torch's shared objects) a tiny stand-in for each library that torch
needs and that the dynamic linker cannot find (not in torch/lib, not in ldconfig's cache). A stand-in has the soname,
the symbol versions and the functions torch links against; every function returns 100 (cudaErrorNoDevice), the error
getters a string saying so. The CPU code of torch is untouched: it is the same libtorch_cpu.so users get, and
torch.cuda.is_available() is False, as on any machine without a GPU. Calling into CUDA would just report "no device"
(torch.backends.cudnn.version() raises: the stand-in reports no cuDNN version). Where a library was already stood in,
a second run leaves it.

usage: python cuda_stubs.py SITE_PACKAGES   (needs readelf and a C compiler: Debian's binutils and gcc)
"""

import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

# The functions that return a message rather than an error code.
STRING_GETTERS = re.compile(
    r"^(cuda|cudnn|cusparse|nccl|nvrtc|cublas|cublasLt)Get(Error|Status)(String|Name)$"
    r"|^ncclGetLastError$"
)
# Unversioned functions of the CUDA libraries (versioned ones name their library in the version).
CUDA_PREFIXES = re.compile(r"^(cu[A-Za-z]|nccl|nvshmem|nvrtc|curand)")


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


def main(site_packages):
    lib = Path(site_packages) / "torch" / "lib"
    have = {p.name for p in lib.iterdir()}
    known = set(
        re.findall(r"^\s*(\S+) \(", subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout, re.M)
    )
    needed, versions, versioned, unversioned, defined = set(), defaultdict(set), defaultdict(set), set(), set()
    # what `import torch` loads: torch/_C and libtorch_global_deps.so, and torch's libraries they need, transitively
    # (libtorch_cuda_linalg.so, libcaffe2_nvrtc.so are only opened on use of CUDA)
    todo = sorted(lib.parent.glob("_C*.so")) + [lib / "libtorch_global_deps.so"]
    seen = set()
    while todo:
        elf = todo.pop()
        if elf.name in seen:
            continue
        seen.add(elf.name)
        wants = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", readelf("-d", str(elf))))
        needed |= wants
        todo += [lib / n for n in wants if n in have]
        file = None
        # "Version needs": File: libX.so.N / Name: VERSION
        for line in readelf("-V", str(elf)).splitlines():
            if m := re.search(r"File: (\S+)", line):
                file = m.group(1)
            elif file and (m := re.search(r"Name: (\S+)", line)):
                versions[file].add(m.group(1))
        for line in readelf("--dyn-syms", str(elf)).splitlines():
            fields = line.split()
            if len(fields) < 8 or not fields[0].endswith(":"):
                continue
            name, undefined, weak = fields[7], fields[6] == "UND", fields[4] == "WEAK"
            symbol, _, version = name.partition("@")
            if not undefined:
                defined.add(symbol)
            elif version:
                versioned[version.lstrip("@")].add(symbol)
            elif not weak and CUDA_PREFIXES.match(symbol):
                unversioned.add(symbol)
    missing = sorted(n for n in needed if n not in have and n not in known)
    loose = sorted(unversioned - defined)
    with tempfile.TemporaryDirectory() as tmp:
        for soname in missing:
            nodes = sorted(versions.get(soname, ()))
            by_node = {v: sorted(versioned[v]) for v in nodes}
            symbols = sorted({s for v in nodes for s in versioned[v]} | set(loose))
            c, script = Path(tmp, "stub.c"), Path(tmp, "stub.map")
            c.write_text(
                '#define NO_CUDA "CUDA is not available (a stand-in library for CI, .ci/cuda_stubs.py)"\n'
                + "".join(
                    f"const char *{s}(void) {{ return NO_CUDA; }}\n"
                    if STRING_GETTERS.match(s)
                    else f"long {s}(void) {{ return 100; }}\n"
                    for s in symbols
                )
            )
            # each versioned function in the version torch asks for; the unversioned ones unversioned
            script.write_text(
                "".join(
                    f"{v} {{ global: {' '.join(f'{s};' for s in by_node[v])} }};\n" if by_node[v] else f"{v} {{ }};\n"
                    for v in nodes
                )
                or "{ global: *; };\n"
            )
            subprocess.run(
                [
                    "cc",
                    "-shared",
                    "-fPIC",
                    "-O0",
                    "-w",
                    "-fno-builtin",
                    f"-Wl,-soname,{soname}",
                    f"-Wl,--version-script,{script}",
                    "-o",
                    str(lib / soname),
                    str(c),
                ],
                check=True,
            )
            print(
                f"{soname}: stand-in with {len(symbols)} functions" + (f", version {' '.join(nodes)}" if nodes else "")
            )
    print(f"torch needs {len(needed)} libraries; {len(missing)} stood in, the rest in torch/lib or on the system")


if __name__ == "__main__":
    main(*sys.argv[1:])
