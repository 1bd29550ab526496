"""Figure 1: xrand.randn_tensor against the randn_tensor it stands in for (dispatch cost).

    python benchmarks/bench_randn_tensor.py [--repeats 21]

- torch.Generator: diffusers.utils.torch_utils.randn_tensor and xrand.randn_tensor get the
  same generator, re-seeded (manual_seed) before every call.
- numpy.random.Generator: mindone.diffusers.utils.mindspore_utils.randn_tensor and
  xrand.randn_tensor on the mindspore backend get the same generator, re-seeded (its PCG64
  state reset) before every call.

Each with the default arguments and as the DDIM pipelines call it (torch: device=cpu,
dtype=float32; mindone: dtype=float32). Target: xrand's time at most 1.05x the library's.
"""
from __future__ import annotations

import contextlib
import functools
import statistics

import numpy as np

from bench_common import Row, Section, calls_for, figure_main, fmt_mmm, interleaved, profile_top, ratios

SHAPES = ((1, 3, 32, 32), (1, 4, 64, 64), (4, 4, 128, 128))
SEED = 1234
TARGET = 1.05
SECONDS_PER_TIMING = 0.02


def _pairs():
    """(label, library call, xrand call, equal(a, b)) for every case that can run here."""
    import xrand

    cases = []
    try:
        import torch
        from diffusers.utils.torch_utils import randn_tensor as diffusers_randn_tensor
    except ImportError:
        torch = None
    if torch is not None:
        torch_generator = torch.Generator("cpu")

        def torch_call(fn, shape, kwargs):
            return fn(shape, generator=torch_generator.manual_seed(SEED), **kwargs)

        for style, kwargs in (("default", {}), ("pipeline: device=cpu, dtype=float32",
                                                dict(device=torch.device("cpu"), dtype=torch.float32))):
            for shape in SHAPES:
                cases.append((
                    f"torch.Generator, {style}", shape,
                    functools.partial(torch_call, diffusers_randn_tensor, shape, kwargs),
                    functools.partial(torch_call, xrand.randn_tensor, shape, kwargs),
                    lambda a, b: a.dtype == b.dtype and bool(torch.equal(a, b)),
                    None,
                ))
    try:
        from xrand.frameworks.quiet import silenced

        with silenced():
            import mindspore as ms
            from mindone.diffusers.utils.mindspore_utils import randn_tensor as mindone_randn_tensor
    except ImportError:
        ms = None
    if ms is not None:
        numpy_generator = np.random.Generator(np.random.PCG64(SEED))
        seeded = numpy_generator.bit_generator.state

        def ms_call(fn, shape, kwargs):
            numpy_generator.bit_generator.state = seeded
            return fn(shape, generator=numpy_generator, **kwargs)

        for style, kwargs in (("default", {}), ("pipeline: dtype=float32", dict(dtype=ms.float32))):
            for shape in SHAPES:
                cases.append((
                    f"numpy Generator, mindspore backend, {style}", shape,
                    functools.partial(ms_call, mindone_randn_tensor, shape, kwargs),
                    functools.partial(ms_call, xrand.randn_tensor, shape, kwargs),
                    lambda a, b: a.dtype == b.dtype and np.array_equal(a.asnumpy(), b.asnumpy()),
                    "mindspore",
                ))
    return cases


def run(repeats: int = 21) -> Section:
    import xrand

    section = Section(
        title="1. randn_tensor dispatch: xrand against diffusers and mindone.diffusers",
        method=(
            "Time per call of `xrand.randn_tensor` and of the library function it stands in for, "
            "with the same generator re-seeded before every call (torch: `manual_seed`; NumPy: PCG64 "
            "state reset; both inside the timed call). Each timing is a loop of calls lasting about "
            f"{SECONDS_PER_TIMING * 1e3:.0f} ms; the two are interleaved (library, xrand, xrand, library, ...) "
            f"over {repeats} repeats. Ratio: xrand / library per repeat; the verdict uses its median. "
            "Every pair was checked to give the same values and dtype."
        ),
        columns=["generator, call", "shape", "library µs (min / med / max)", "xrand µs (min / med / max)",
                 "ratio (min / med / max)", "same values"],
    )
    profiled = False
    for label, shape, library, ours, equal, backend_name in _pairs():
        context = xrand.use_backend(backend_name) if backend_name else contextlib.nullcontext()
        with context:
            same = equal(library(), ours())
            calls = calls_for(library, SECONDS_PER_TIMING)
            times = interleaved({"library": library, "xrand": ours}, repeats, {"library": calls, "xrand": calls})
            r = ratios(times["xrand"], times["library"])
            met = statistics.median(r) <= TARGET
            section.rows.append(Row(
                [label, str(shape), fmt_mmm(times["library"], 1e6), fmt_mmm(times["xrand"], 1e6),
                 fmt_mmm(r, 1, 3), "yes" if same else "**NO**"],
                target=f"≤ {TARGET}x", met=met and same,
            ))
            if not met and not profiled:
                profiled = True
                section.notes.append(
                    f"Where xrand's time goes for `{label}` at {shape} (cProfile of {calls * 10} calls, "
                    "own time; the profiler inflates the cost of Python calls):\n\n"
                    + profile_top(ours, calls * 10, limit=12))
    return section


def main() -> None:
    figure_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
