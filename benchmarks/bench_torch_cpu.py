"""torch-cpu stream engines against torch.randn on a CPU generator (float32).

    python benchmarks/bench_torch_cpu.py [--repeats 9] [--no-memory]

Times are interleaved (one call of each method per round) so machine noise hits all alike;
ns per sample as min / median / max over the rounds, and the median's ratio to torch's.
Memory: the peak-RSS growth (VmHWM) of a fresh process drawing 64M float32 values, and the
peak of NumPy's allocations (tracemalloc), as multiples of the 256 MiB output.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from xrand.streams.torch_cpu import TorchCPUStream  # noqa: E402

SIZES = (65_536, 1_048_576, 3_145_728, 16_777_216)
MEMORY_NUMEL = 64 * 2**20

_MEMORY_CHILD = r"""
import json, resource, sys, tracemalloc
sys.path.insert(0, {root!r})
method, n = {method!r}, {n}
if method == "torch.randn":
    import torch
    g = torch.Generator("cpu").manual_seed(0)
    draw = lambda k: torch.randn(k, generator=g).numpy()
else:
    from xrand.streams.torch_cpu import TorchCPUStream
    s = TorchCPUStream(0, engine=method)
    draw = lambda k: s.normal((k,), "float32")
draw(65536)  # imports, compilation, allocator warm-up


def peak_rss():
    # VmHWM (Linux) starts afresh at exec; ru_maxrss would include the parent's RSS at fork
    try:
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak to the current RSS
except OSError:
    pass
before = peak_rss()
tracemalloc.start()
out = draw(n)
traced = tracemalloc.get_traced_memory()[1]
after = peak_rss()
print(json.dumps({{"rss": after - before, "traced": traced, "nbytes": out.nbytes}}))
"""


def methods() -> dict:
    """name -> callable(n) drawing n float32 values."""
    found = {}
    if importlib.util.find_spec("torch"):
        import torch

        generator = torch.Generator("cpu").manual_seed(0)
        found["torch.randn"] = lambda n: torch.randn(n, generator=generator)
    for engine in ("numba-parallel", "numba", "numpy", "torch"):
        if engine != "numpy" and importlib.util.find_spec(engine.split("-")[0]) is None:
            continue
        stream = TorchCPUStream(0, engine=engine)
        label = "native (engine=torch)" if engine == "torch" else f"engine={engine}"
        found[label] = lambda n, s=stream: s.normal((n,), "float32")
    return found


def time_methods(repeats: int) -> None:
    table = methods()
    for fn in table.values():
        fn(1024)  # warm up: imports, numba compilation
    for n in SIZES:
        times = {name: [] for name in table}
        calls = max(1, 2**20 // n)  # small sizes: several calls per timing
        names = list(table)
        for r in range(repeats):
            for name in names[r % len(names):] + names[: r % len(names)]:  # rotate who runs first
                fn = table[name]
                start = time.perf_counter()
                for _ in range(calls):
                    fn(n)
                times[name].append((time.perf_counter() - start) / (calls * n) * 1e9)
        base = statistics.median(times["torch.randn"]) if "torch.randn" in times else None
        print(f"\nfloat32, {n:,} values a call: ns per sample (min / median / max over {repeats} rounds"
              f"{f' of {calls} calls' if calls > 1 else ''})")
        for name, ts in times.items():
            ratio = f"{statistics.median(ts) / base:5.2f}x torch" if base else ""
            print(f"  {name:24s} {min(ts):8.2f} {statistics.median(ts):8.2f} {max(ts):8.2f}   {ratio}")


def measure_memory() -> None:
    print(f"\npeak memory drawing {MEMORY_NUMEL:,} float32 values ({MEMORY_NUMEL * 4 / 2**20:.0f} MiB output), "
          "fresh process each")
    names = ["torch.randn", "numba-parallel", "numba", "numpy", "torch"]
    for method in names:
        module = "torch" if method in ("torch.randn", "torch") else method.split("-")[0]
        if method != "numpy" and importlib.util.find_spec(module) is None:
            continue
        code = _MEMORY_CHILD.format(root=str(ROOT), method=method, n=MEMORY_NUMEL)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if result.returncode:
            print(f"  {method}: failed\n{result.stderr}")
            continue
        info = json.loads(result.stdout.strip().splitlines()[-1])
        label = {"torch.randn": method, "torch": "native (engine=torch)"}.get(method, f"engine={method}")
        print(f"  {label:24s} peak RSS growth {info['rss'] / info['nbytes']:5.2f}x output, "
              f"NumPy allocations peak {info['traced'] / info['nbytes']:5.2f}x  "
              f"({time.perf_counter() - start:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--no-memory", action="store_true")
    args = parser.parse_args()
    versions = [f"numpy {np.__version__}"]
    for module in ("torch", "numba"):
        if importlib.util.find_spec(module):
            versions.append(f"{module} {__import__(module).__version__}")
    if importlib.util.find_spec("torch"):
        import torch

        versions.append(f"cpu capability {torch.backends.cpu.get_cpu_capability()}, "
                        f"torch threads {torch.get_num_threads()}")
    print(f"{platform.machine()} {platform.processor() or ''}; " + ", ".join(versions))
    time_methods(args.repeats)
    if not args.no_memory:
        measure_memory()


if __name__ == "__main__":
    main()
