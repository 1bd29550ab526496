"""Figure 2: the noise streams against the framework calls they reproduce, per value drawn.

    python benchmarks/bench_streams.py [--repeats 21]

- torch-cpu stream, engines numpy, numba, numba-parallel and torch (native) against torch.randn
  on a CPU generator (float32). The callables come from bench_torch_cpu.methods() (the stream
  owner's benchmark). 1M, 16M and 64M values: the compiled engines and torch only.
- pcg64 stream through xrand.randn_tensor on the torch backend against NumPy's
  standard_normal turned into a torch tensor (float64 as drawn, and float32 as cast).
- torch-cuda stream (no GPU needed): values per second of the NumPy and numba engines.
- Memory: from 1M values on, each timing starts with an output-sized buffer touched and freed
  (untimed); 64M values once more with "cold memory", each timing after that and a 3 s pause.

Targets: numpy and numba engines at most 1.5x torch's time per value, numba-parallel 0.7x from
1M values on (1.5x below), native 1.05x, pcg64 1.05x; torch-cuda numba at least 10x NumPy's rate.
"""
from __future__ import annotations

import glob
import statistics
import time
from typing import Callable, Dict, List

from bench_common import Row, Section, figure_main, fmt_mmm, interleaved, profile_top, ratios

# values a call -> repeats (None: the figure's own); every method at 65,536 and 3,145,728 values,
# the compiled torch-cpu engines and torch alone at the others (goal: 1M to 64M)
SIZES = {65_536: None, 1_048_576: None, 3_145_728: None, 16_777_216: 9, 67_108_864: 5}
ALL_METHODS_AT = (65_536, 3_145_728)
LARGE_ONLY = ("torch.randn", "engine=numba-parallel", "engine=numba", "native (engine=torch)")
VALUES_PER_TIMING = 2**20  # small draws are timed as several calls in a row
TARGETS = {"engine=numpy": 1.5, "engine=numba": 1.5, "engine=numba-parallel": 0.7, "native (engine=torch)": 1.05,
           "pcg64 float64": 1.05, "pcg64 float32": 1.05}
SMALL_TARGET = {"engine=numba-parallel": 1.5}  # below 1M values (starting threads costs more there)
BASELINE = {"engine=numpy": "torch.randn", "engine=numba": "torch.randn", "engine=numba-parallel": "torch.randn",
            "native (engine=torch)": "torch.randn",
            "pcg64 float64": "numpy float64 + torch.from_numpy",
            "pcg64 float32": "numpy float64 + torch.from_numpy + .float()"}
CUDA_NUMPY, CUDA_NUMBA = "torch-cuda, engine=numpy", "torch-cuda, engine=numba"
WARM_FROM = 1_048_576  # from this size on, every timing starts with an output-sized buffer touched and freed
COLD_SIZE, COLD_REPEATS, COLD_PAUSE_S = 67_108_864, 3, 6.0  # 3 s was not always enough (measured)
COLD_METHODS = ("torch.randn", "engine=numba-parallel", "engine=numba")
CUDA_TARGET = 10.0  # numba engine's values/s over the NumPy engine's


def torch_cpu_methods() -> tuple:
    """(name -> callable(n), where they came from): the torch-cpu engines and torch.randn."""
    import bench_torch_cpu

    return bench_torch_cpu.methods(), "bench_torch_cpu.methods()"


def pcg64_methods() -> Dict[str, Callable[[int], object]]:
    import numpy as np
    import torch

    import xrand

    ours = {dtype: xrand.Generator(0, stream="pcg64") for dtype in ("float64", "float32")}
    rng = np.random.Generator(np.random.PCG64(0))

    def xrand_draw(n, dtype):
        with xrand.use_backend("torch"):
            return xrand.randn_tensor((n,), generator=ours[dtype], dtype=dtype)

    return {
        "numpy float64 + torch.from_numpy": lambda n: torch.from_numpy(rng.standard_normal(n)),
        "pcg64 float64": lambda n: xrand_draw(n, "float64"),
        "numpy float64 + torch.from_numpy + .float()": lambda n: torch.from_numpy(rng.standard_normal(n)).float(),
        "pcg64 float32": lambda n: xrand_draw(n, "float32"),
    }


def cuda_methods() -> Dict[str, Callable[[int], object]]:
    import importlib.util

    from xrand.streams.torch_cuda import TorchCUDAStream

    engines = {CUDA_NUMPY: "numpy"}
    if importlib.util.find_spec("numba"):
        engines[CUDA_NUMBA] = "numba"
    streams = {name: TorchCUDAStream(0, engine=engine) for name, engine in engines.items()}
    return {name: (lambda n, s=s: s.normal((n,), "float32")) for name, s in streams.items()}


def parallel_breakdown(n: int = 2**20, repeats: int = 9) -> str:
    """Where numba-parallel's time goes: the words (drawn in order, one thread) and the transform
    (split over the threads), each timed alone on one thread, and the CPU other processes took."""
    import os

    import numpy as np

    from bench_common import CpuShare
    from xrand.streams.torch_cpu import compiled, stream

    engine = stream._ParallelEngine("avx2")
    words, out = np.empty(n, np.uint32), np.empty(n, np.float32)
    engine.kernels.raw_words(engine.key, engine.pos, words)
    compiled.float_avx2_range(words.copy(), out, 0, n, False)
    share = CpuShare().start()
    times = interleaved({"words": lambda: compiled.raw_words(engine.key, engine.pos, words),
                         "transform": lambda: compiled.float_avx2_range(words, out, 0, n, False)},
                        repeats, {"words": 1, "transform": 1})
    others = share.stop()
    w, t = (statistics.median(times[k]) / n * 1e9 for k in ("words", "transform"))
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"Why `engine=numba-parallel` misses: per value, drawing the mt19937 words in order takes {w:.2f} ns "
            f"and the Box-Muller transform {t:.2f} ns on one thread (medians of {repeats}, {n:,} values, timed "
            f"alone just now). With its {threads} threads the engine needs at least {w:.2f} + {t:.2f} / {threads} "
            f"= {w + t / threads:.2f} ns per value if every thread has a core, {w + t:.2f} ns if it has one. Other "
            f"processes took {'an unknown share' if others is None else f'{others:.0%}'} of the CPU during this "
            "breakdown (the figure's own share is under the table): when they take most of it, the second thread "
            "has no core to run on and the engine runs at about one thread's speed, plus handing out tasks.")


def memory_in_hand(n: int) -> Callable[[], None]:
    """Touch and free n float32 values: the next allocation gets memory the machine holds now."""
    import numpy as np

    def touch() -> None:
        np.ones(n, np.float32)

    return touch


def cold_memory(n: int) -> Callable[[], None]:
    """Touch and free n float32 values, then pause: what the machine does with freed memory meanwhile."""
    warm = memory_in_hand(n)

    def pause() -> None:
        warm()
        time.sleep(COLD_PAUSE_S)

    return pause


def free_page_reporting() -> bool:
    """Whether a virtio balloon reports this guest's free pages to its host (feature bit 5)."""
    for path in glob.glob("/sys/bus/virtio/drivers/virtio_balloon/virtio*/features"):
        with open(path) as f:
            bits = f.read().strip()
        if len(bits) > 5 and bits[5] == "1":
            return True
    return False


def first_touch_breakdown(n: int = COLD_SIZE, repeats: int = COLD_REPEATS) -> str:
    """What writing a fresh n-value float32 output costs, warm and cold, on NumPy's, xrand's and torch's pages."""
    import numpy as np
    import torch

    from xrand.streams import pages

    fill = {"NumPy's np.empty": lambda: np.empty(n, np.float32).fill(1),
            "xrand.streams.pages.empty": lambda: pages.empty(n, np.float32).fill(1),
            "torch.empty": lambda: torch.empty(n).fill_(1)}
    warm = interleaved(fill, repeats, {k: 1 for k in fill}, before=memory_in_hand(n))
    cold = interleaved(fill, repeats, {k: 1 for k in fill}, before=cold_memory(n))
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        thp = f.read().strip()
    ns = {k: (statistics.median(warm[k]) / n * 1e9, statistics.median(cold[k]) / n * 1e9) for k in fill}
    parts = [f"{k} {w:.2f} warm, {c:.2f} cold" for k, (w, c) in ns.items()]
    where = ("this machine is a virtual machine whose balloon reports free pages to the host: memory freed "
             f"{COLD_PAUSE_S:.0f} s ago has been handed back, and touching it again costs more"
             if free_page_reporting() else "no virtio balloon reports free pages here")
    return (f"Cold memory: {where}. NumPy asks for transparent huge pages for arrays of 4 MiB and more (madvise "
            f"{'on' if np.core.multiarray._get_madvise_hugepage() else 'off'}; the kernel's setting: {thp}); "
            "torch's allocator does not, and the torch-cpu stream's output takes the pages torch's would "
            f"(xrand.streams.pages). Filling a fresh output of {n:,} float32 values, ns per value (medians of "
            f"{repeats}): {'; '.join(parts)}. Huge pages are the cheaper ones only while the memory is at hand.")


def add_rows(section: Section, misses: Dict[str, int], n: int, per_value: Dict[str, List[float]],
             suffix: str = "") -> None:
    """The rows of one size: ns per value, and each method against its baseline; misses noted as name: n."""
    for name, ts in per_value.items():
        base = BASELINE.get(name)
        if name.startswith("torch-cuda"):
            rate = [1 / t for t in ts]
            if name == CUDA_NUMBA and CUDA_NUMPY in per_value:
                speedup = ratios(per_value[CUDA_NUMPY], ts)
                met = statistics.median(speedup) >= CUDA_TARGET
                section.rows.append(Row([name + suffix, f"{n:,}", fmt_mmm(ts, 1e9), CUDA_NUMPY,
                                         f"{statistics.median(rate) / 1e6:.1f} M values/s; "
                                         f"{fmt_mmm(speedup, 1, 1)} x its rate"],
                                        target=f"≥ {CUDA_TARGET:.0f}x", met=met))
                if not met:
                    misses.setdefault(name + suffix, n)
            else:
                section.rows.append(Row([name + suffix, f"{n:,}", fmt_mmm(ts, 1e9), "-",
                                         f"{statistics.median(rate) / 1e6:.1f} M values/s"]))
            continue
        if base is None or base not in per_value:
            section.rows.append(Row([name + suffix, f"{n:,}", fmt_mmm(ts, 1e9), "(baseline)", "-"]))
            continue
        r = ratios(ts, per_value[base])
        target = SMALL_TARGET.get(name, TARGETS[name]) if n < 1_000_000 else TARGETS[name]
        met = statistics.median(r) <= target
        section.rows.append(Row([name + suffix, f"{n:,}", fmt_mmm(ts, 1e9), base, fmt_mmm(r, 1, 2)],
                                target=f"≤ {target}x", met=met))
        if not met:
            misses.setdefault(name + suffix, n)


def run(repeats: int = 21) -> Section:
    cpu, source = torch_cpu_methods()
    methods = dict(cpu)
    methods.update(pcg64_methods())
    methods.update(cuda_methods())
    for fn in methods.values():
        fn(1024)  # imports, numba compilation, allocator warm-up
    section = Section(
        title="2. Noise streams against the framework calls they reproduce",
        method=(
            "Nanoseconds per float32 value (float64 where named). Every repeat calls each method once "
            f"(draws of 65,536 values: {VALUES_PER_TIMING // 65_536} calls in a row), all methods interleaved with "
            f"the first one rotating, {repeats} repeats per size. Ratio: method / its baseline per repeat, "
            f"verdict on the median. torch-cpu callables from {source}. The pcg64 rows go through "
            "`xrand.randn_tensor(..., generator=xrand.Generator(0, stream=\"pcg64\"))` on the torch backend; "
            "their baseline is what a torch user writes to get mindone's noise. 16M and 64M values: "
            f"{SIZES[16_777_216]} and {SIZES[67_108_864]} repeats, the compiled torch-cpu engines and torch only. "
            "torch-cuda: the stream's two engines on this CPU (no GPU), as throughput; the numba row's ratio is "
            "its speed-up over the NumPy engine per repeat. From 1M values on, each timing starts (untimed) by "
            "touching and freeing an output-sized buffer, so that every method gets memory the machine holds at "
            f"that moment. Cold memory: {COLD_SIZE:,} values, {COLD_REPEATS} repeats, each timing after that "
            f"buffer and a {COLD_PAUSE_S:.0f} s pause."
        ),
        columns=["method", "values a call", "ns per value (min / med / max)", "baseline", "ratio (min / med / max)"],
    )
    misses = {}
    for n, size_repeats in SIZES.items():
        calls = max(1, VALUES_PER_TIMING // n)
        names = [name for name in methods if n in ALL_METHODS_AT or name in LARGE_ONLY]
        callables = {name: (lambda fn=methods[name], n=n: fn(n)) for name in names}
        times = interleaved(callables, size_repeats or repeats, {name: calls for name in callables},
                            before=memory_in_hand(n) if n >= WARM_FROM else None)
        add_rows(section, misses, n, {name: [t / n for t in ts] for name, ts in times.items()})
    cold = {name: (lambda fn=methods[name]: fn(COLD_SIZE)) for name in COLD_METHODS}
    times = interleaved(cold, COLD_REPEATS, {name: 1 for name in cold}, before=cold_memory(COLD_SIZE))
    add_rows(section, misses, COLD_SIZE, {name: [t / COLD_SIZE for t in ts] for name, ts in times.items()},
             suffix=" (cold memory)")
    if "engine=numpy" in misses:
        section.notes.append(
            "engine=numpy evaluates torch's AVX2 kernel (Cephes log and sin/cos polynomials with fused "
            "multiply-adds, each rounded as float32) in whole-array NumPy passes; emulating every fused "
            "multiply-add exactly in float64 (`fma32`) is most of its time (profile below). It stays the exact, "
            "dependency-free path; the compiled engine of the optional extra `xrand[fast]` (numba) gives the same "
            "bits (tests/test_stream_torch_cpu.py) within the target, and `engine=\"auto\"` picks it when numba "
            "is installed.")
    if "engine=numba-parallel" in misses:
        section.notes.append(parallel_breakdown())
    section.notes.append(first_touch_breakdown())  # what the cold rows measure
    for name, n in misses.items():
        if name not in methods:
            continue  # a cold-memory row: the breakdown above
        fn = methods[name]
        section.notes.append(f"Where `{name}` spends its time drawing {n:,} values (cProfile, own time):\n\n"
                             + profile_top(lambda: fn(n), calls=max(1, VALUES_PER_TIMING // n), limit=10))
    return section


def main() -> None:
    figure_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
