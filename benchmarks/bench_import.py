"""Figure 4: what ``import xrand`` costs beyond NumPy's own import, and what it imports.

    python benchmarks/bench_import.py [--repeats 15]

Fresh processes, interleaved: A runs ``import numpy``, B runs ``import numpy`` then
``import xrand``. B times its two imports with perf_counter (the figure: xrand's import once
NumPy is loaded) and lists the heavy modules present afterwards; the difference of the two
processes' wall times is a cross-check. Target: under 50 ms, and neither torch nor MindSpore
(nor diffusers, mindone, numba) imported.
"""
from __future__ import annotations

import statistics
import subprocess
import time

from bench_common import PYTHON, ROOT, Row, Section, figure_main, fmt_mmm

TARGET_MS = 50.0
HEAVY = ("torch", "mindspore", "diffusers", "mindone", "numba", "transformers")

_NUMPY_ONLY = "import numpy"
_NUMPY_XRAND = (
    "import sys, time\n"
    "t0 = time.perf_counter(); import numpy; t1 = time.perf_counter(); import xrand; t2 = time.perf_counter()\n"
    f"print(t1 - t0, t2 - t1, ','.join(m for m in {HEAVY!r} if m in sys.modules))"
)


def _wall(code: str) -> tuple:
    start = time.perf_counter()
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True, cwd=str(ROOT)).stdout
    return time.perf_counter() - start, out


def importtime_top(limit: int = 8) -> str:
    """The slowest modules ``import xrand`` adds (python -X importtime, cumulative µs)."""
    err = subprocess.run([PYTHON, "-X", "importtime", "-c", "import numpy; import xrand"], capture_output=True,
                         text=True, cwd=str(ROOT)).stderr
    rows, seen_xrand = [], False
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        if name.strip() == "numpy":
            seen_xrand = True  # everything after numpy's block is imported by xrand
            continue
        if seen_xrand and not name.strip().startswith("numpy"):
            rows.append((int(parts[1]), int(parts[0].split(":")[1]), name))
    rows.sort(reverse=True)
    lines = ["cumulative µs | self µs | module"] + [f"{c:>13} | {s:>7} | {n}" for c, s, n in rows[:limit]]
    return "```\n" + "\n".join(lines) + "\n```"


def run(repeats: int = 15) -> Section:
    _wall(_NUMPY_XRAND)  # warm the OS file cache and .pyc files
    walls_a, walls_b, numpy_s, xrand_s, heavy = [], [], [], [], set()
    for r in range(repeats):
        order = [("a", _NUMPY_ONLY), ("b", _NUMPY_XRAND)]
        for which, code in (order if r % 2 == 0 else order[::-1]):
            seconds, out = _wall(code)
            if which == "a":
                walls_a.append(seconds)
            else:
                walls_b.append(seconds)
                t_numpy, t_xrand, *mods = out.split()
                numpy_s.append(float(t_numpy))
                xrand_s.append(float(t_xrand))
                heavy.update(m for m in (mods[0].split(",") if mods else []) if m)
    diff = [b - a for a, b in zip(walls_a, walls_b)]
    median_ms = statistics.median(xrand_s) * 1e3
    section = Section(
        title="4. `import xrand` beyond NumPy's own import",
        method=(
            f"{repeats} pairs of fresh processes, interleaved (A: `import numpy`; B: `import numpy; import xrand`, "
            "B timing each import inside the process). Milliseconds."
        ),
        columns=["figure", "ms (min / med / max)"],
    )
    section.rows.append(Row(["`import numpy` (inside B)", fmt_mmm(numpy_s, 1e3, 1)]))
    section.rows.append(Row(["`import xrand` after NumPy (inside B)", fmt_mmm(xrand_s, 1e3, 1)],
                            target=f"< {TARGET_MS:.0f} ms", met=median_ms < TARGET_MS))
    section.rows.append(Row(["process B − process A, wall time (cross-check)", fmt_mmm(diff, 1e3, 1)]))
    section.rows.append(Row(["heavy modules present after `import xrand`",
                             ", ".join(sorted(heavy)) or f"none of {', '.join(HEAVY)}"],
                            target="no torch, no MindSpore", met=not heavy & {"torch", "mindspore"}))
    section.notes.append("The modules `import xrand` adds that take longest (`python -X importtime`, one run):\n\n"
                         + importtime_top())
    return section


def main() -> None:
    figure_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
