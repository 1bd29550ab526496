"""Figure 3: peak memory of drawing 64M float32 values (256 MiB), each way in a fresh process.

    python benchmarks/bench_memory.py

Per method a new Python imports what it needs and draws 65,536 values (imports, numba
compilation, allocator warm-up), resets the kernel's peak-RSS mark, then draws 64M float32
values once. Reported as multiples of the 256 MiB output:

- peak RSS growth: VmHWM after the draw minus VmRSS before it (Linux; elsewhere ru_maxrss);
- NumPy allocations peak: tracemalloc's peak (NumPy reports its buffers to it; torch does not),
  and the Python function that was running when the live NumPy memory was highest.

Target: peak RSS growth at most 1.5x the output.
"""
from __future__ import annotations

import argparse

from bench_common import Row, Section, run_child

NUMEL = 64 * 2**20
TARGET = 1.5

# label -> code that defines draw(n) returning the values (an ndarray or a torch tensor)
METHODS = {
    "torch.randn (baseline)": "import torch\ng = torch.Generator('cpu').manual_seed(0)\n"
                              "draw = lambda n: torch.randn(n, generator=g)",
    "torch-cpu, engine=numpy": "import xrand\ng = xrand.Generator(0, engine='numpy')\n"
                               "draw = lambda n: g.normal((n,), 'float32')",
    "torch-cpu, engine=numba-parallel": "import xrand\ng = xrand.Generator(0, engine='numba-parallel')\n"
                                        "draw = lambda n: g.normal((n,), 'float32')",
    "torch-cpu, engine=numba": "import xrand\ng = xrand.Generator(0, engine='numba')\n"
                               "draw = lambda n: g.normal((n,), 'float32')",
    "torch-cpu, engine=torch (native)": "import xrand\ng = xrand.Generator(0, engine='torch')\n"
                                        "draw = lambda n: g.normal((n,), 'float32')",
    "pcg64": "import xrand\ng = xrand.Generator(0, stream='pcg64')\ndraw = lambda n: g.normal((n,), 'float32')",
    "torch-cuda, engine=numpy": "import xrand\ng = xrand.Generator(0, stream='torch-cuda', engine='numpy')\n"
                                "draw = lambda n: g.normal((n,), 'float32')",
    "torch-cuda, engine=numba": "import xrand\ng = xrand.Generator(0, stream='torch-cuda', engine='numba')\n"
                                "draw = lambda n: g.normal((n,), 'float32')",
}

_CHILD = r"""
import json, resource, sys, threading, tracemalloc
{setup}
draw(65536)


def rss(key):
    try:
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) * 1024 for l in status if l.startswith(key + ":"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # start the peak (VmHWM) afresh from the current RSS
except OSError:
    pass
before = rss("VmRSS")
where = {{"live": 0, "stack": []}}


def watch(frame, event, arg):
    # on every Python and C call/return: is the live NumPy memory at its highest so far?
    live = tracemalloc.get_traced_memory()[0]
    if live > where["live"]:
        stack, f = [], frame
        while f is not None and len(stack) < 4:
            stack.append(f"{{f.f_code.co_name}} ({{f.f_code.co_filename.rsplit('/', 1)[-1]}}:{{f.f_lineno}})")
            f = f.f_back
        name = getattr(arg, "__qualname__", None) if event.startswith("c_") else None
        where.update(live=live, stack=([f"{{name}} (C)"] if name else []) + stack)


tracemalloc.start()
profiled = {profiled}
if profiled:
    sys.setprofile(watch)
out = draw({numel})
sys.setprofile(None)
traced = tracemalloc.get_traced_memory()[1]
after = rss("VmHWM")
nbytes = out.nbytes if hasattr(out, "nbytes") else out.numel() * out.element_size()
print(json.dumps({{"rss": after - before, "traced": traced, "nbytes": nbytes, "where": where}}))
"""


def measure(label: str, profiled: bool = False) -> dict:
    code = _CHILD.format(setup=METHODS[label], numel=NUMEL, profiled=profiled)
    return run_child(code, timeout=300)


def run() -> Section:
    section = Section(
        title="3. Peak memory of drawing 64M float32 values (output 256 MiB)",
        method=(
            "Each method in a fresh process: warm-up draw of 65,536 values, peak-RSS mark reset "
            "(`/proc/self/clear_refs`), then one draw of 67,108,864 float32 values. Peak RSS growth = VmHWM "
            "after minus VmRSS before; NumPy allocations peak = tracemalloc's peak (torch's own allocations "
            "are not traced). As multiples of the output's 256 MiB; the output itself counts, so 1.0x is the "
            "floor. The xrand rows call `xrand.Generator(...).normal((n,), 'float32')`. Where a method misses, "
            "a second run records which function was running when NumPy's live memory peaked."
        ),
        columns=["method", "peak RSS growth", "NumPy allocations peak"],
    )
    for label in METHODS:
        try:
            info = measure(label)
        except RuntimeError as exc:
            section.rows.append(Row([label, "failed", str(exc).splitlines()[-1][:100]]))
            continue
        growth, traced = info["rss"] / info["nbytes"], info["traced"] / info["nbytes"]
        baseline = label.endswith("(baseline)")
        met = growth <= TARGET
        section.rows.append(Row([label, f"{growth:.2f}x ({info['rss'] / 2**20:.0f} MiB)",
                                 f"{traced:.2f}x" if traced > 0.01 else "- (torch allocations)"],
                                target="" if baseline else f"≤ {TARGET}x", met=None if baseline else met))
        if not met and not baseline:
            peak = measure(label, profiled=True)["where"]
            section.notes.append(
                f"`{label}` misses: NumPy's live memory peaked at {peak['live'] / 2**20:.0f} MiB "
                f"({peak['live'] / info['nbytes']:.2f}x the output) inside: " + " <- ".join(
                    f"`{s}`" for s in peak["stack"]) + ".")
    return section


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(run().markdown())


if __name__ == "__main__":
    main()
