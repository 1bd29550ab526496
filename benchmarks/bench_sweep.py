"""Figure 8: `xrand sweep` throughput: cells per minute with 1 and 2 local workers, and Ray's cost.
Figure 12: the same on a Stable-Diffusion-1.5-sized model, 1 and 2 local workers, with memory.

    python benchmarks/bench_sweep.py [--repeats 2]
    python benchmarks/bench_sweep.py --sd15-sized [--model-dir DIR]

Each sweep runs in a fresh process (``xrand.sweep.run_sweep``, as ``xrand sweep`` runs
it) on the embedded digits model, into a new folder, with the time of every finished cell
recorded. Three runs per repeat, their order rotating: the local engine with 1 and with 2
workers, and the Ray engine with 2 workers on a local Ray started for the run. Steady rate: cells
per minute once every worker has delivered its first cell (loading excluded); wall: the whole
sweep, start-up included. Targets: 2 workers at least 1.6x one worker's steady rate (80% scaling
on 2 cores); Ray's steady rate within 10% of the local engine's.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_common import Row, Section, figure_main, fmt_mmm, run_json, tree_rss

CELLS = 36  # the steady window: about 15 s of cells at one worker (a cell took 0.27 s)
SEEDS = f"0-{CELLS - 1}"
STEPS = 10
TARGET_SCALING = 0.80
TARGET_RAY_OVERHEAD = 0.10
RUNS = {"local, 1 worker": ("local", 1), "local, 2 workers": ("local", 2), "ray, 2 workers": ("ray", 2)}
# Figure 12: the SD-1.5-sized folder (bench_scale's), 256x256, Euler ancestral, batch 1
LARGE = {"cells": 6, "steps": 2, "size": 256}
# Its memory samples: each walks /proc for the workers' threads, and a cell lasts about 40 s
SAMPLE_S = 0.5


def child(engine: str, workers: int, out: str, model: str = "", size: int = 0, steps: int = STEPS,
          cells: int = CELLS) -> dict:
    """Runs in a fresh process: one sweep, the moment each cell was written, and with a ``model``
    (figure 12) the peak memory of this process and its workers, sampled every SAMPLE_S seconds
    (not in figure 8: the sampling thread would take CPU from its workers)."""
    from xrand import sweep
    from xrand.cli import default_model
    from xrand.compare import make_plan

    stamps = []
    append = sweep.ResultsFolder.append

    def timed_append(self, row):
        append(self, row)
        stamps.append(time.perf_counter())

    sweep.ResultsFolder.append = timed_append
    from xrand.pipelines.settings import Settings

    peak, used, done = [0], [0], threading.Event()
    before = machine_used()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            peak[0] = max(peak[0], tree_rss(os.getpid()))
            used[0] = max(used[0], machine_used() - before)

    if model:
        threading.Thread(target=sample, daemon=True).start()
        settings = Settings(model=model, steps=steps, batch_size=1, prompt="a red circle on a blue square",
                            height=size, width=size, scheduler="euler-a")
    else:
        settings = Settings(model=default_model(), steps=steps, batch_size=1)
    plan = make_plan(settings)
    config = sweep.SweepConfig(plan)
    start = time.perf_counter()
    result = sweep.run_sweep(config, sweep.parse_seeds(f"0-{cells - 1}"), sweep.parse_schedulers(None, plan), out,
                             workers=workers, engine=engine)
    wall = time.perf_counter() - start
    done.set()
    times = [t - start for t in stamps]
    k = min(workers, len(times) - 1)  # every worker has delivered once after the k-th cell
    steady = (len(times) - k) / (times[-1] - times[k - 1]) * 60
    return {"wall_s": wall, "first_cell_s": times[0], "steady_cells_per_min": steady,
            "wall_cells_per_min": len(times) / wall * 60, "passed": result.passed,
            "cell_s": statistics.median(r["seconds"] for r in result.rows.values()), "peak_gb": peak[0] / 1024 ** 3,
            "machine_gb": used[0] / 1024 ** 3}


def machine_used() -> int:
    """The machine's memory in use (bytes): MemTotal - MemAvailable, page cache that can be dropped
    (file pages RSS counts in every process that maps them) not included."""
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    return info["MemTotal"] - info["MemAvailable"]


def run(repeats: int = 2) -> Section:
    section = Section(
        title="8. `xrand sweep` throughput: 1 and 2 local workers, and the Ray engine",
        method=(
            f"Sweeps of {CELLS} cells (seeds {SEEDS}, the "
            f"embedded digits model, {STEPS} steps, batch 1, one torch thread per worker), each in a fresh process "
            "calling `run_sweep` as `xrand sweep` does, into a new folder; the three runs of a repeat rotate their "
            f"order, {repeats} repeats. **Steady**: cells per minute once every worker has delivered its first "
            "cell (pipeline loading excluded). **Wall**: cells per minute over the whole sweep, worker start-up "
            "(importing torch and MindSpore, loading both pipelines) and, for Ray, starting a local Ray included. "
            "Scaling efficiency: steady rate with 2 workers / (2 x with 1). Ray overhead: local / Ray steady "
            "rate - 1, both with 2 workers."
        ),
        columns=["run", "steady cells/min (min / med / max)", "wall cells/min", "wall s", "first cell after s",
                 "vs reference"],
    )
    results = {name: [] for name in RUNS}
    with tempfile.TemporaryDirectory(prefix="xrand-bench-sweep-") as tmp:
        for r in range(repeats):
            names = list(RUNS)
            for name in names[r % len(names):] + names[: r % len(names)]:
                engine, workers = RUNS[name]
                out = str(Path(tmp) / f"{engine}-{workers}-{r}")
                results[name].append(run_json([str(Path(__file__).resolve()), "--child", engine, str(workers), out],
                                              timeout=1200))
    steady = {name: [x["steady_cells_per_min"] for x in rs] for name, rs in results.items()}
    for name, rs in results.items():
        cells = [name, fmt_mmm(steady[name], 1, 1), fmt_mmm([x["wall_cells_per_min"] for x in rs], 1, 1),
                 fmt_mmm([x["wall_s"] for x in rs], 1, 0), fmt_mmm([x["first_cell_s"] for x in rs], 1, 0)]
        if name == "local, 2 workers":
            eff = [b / (2 * a) for a, b in zip(steady["local, 1 worker"], steady[name])]
            section.rows.append(Row(cells + ["scaling efficiency " + fmt_mmm(eff, 100, 0) + " %"],
                                    target=f"≥ {TARGET_SCALING:.0%}", met=statistics.median(eff) >= TARGET_SCALING))
        elif name == "ray, 2 workers":
            over = [a / b - 1 for a, b in zip(steady["local, 2 workers"], steady[name])]
            section.rows.append(Row(cells + ["overhead over local " + fmt_mmm(over, 100, 0) + " %"],
                                    target=f"≤ {TARGET_RAY_OVERHEAD:.0%}",
                                    met=statistics.median(over) <= TARGET_RAY_OVERHEAD))
        else:
            section.rows.append(Row(cells + ["-"]))
    cell_s = {name: statistics.median(x["cell_s"] for x in rs) for name, rs in results.items()}
    section.notes.append(f"A cell (both pipelines, {STEPS} steps, and the metrics) took, of a worker's time (median "
                         "of the runs' medians): " + "; ".join(f"{name} {s:.3f} s" for name, s in cell_s.items())
                         + ". Every sweep passed: " f"{all(x['passed'] for rs in results.values() for x in rs)}.")
    return section


def run_sd15_sized(model_dir: str = "") -> Section:
    """Figure 12: 1 and 2 local workers on the SD-1.5-sized folder, one run each."""
    from bench_scale import model_folder

    folder = model_folder(Path(model_dir or os.path.join(tempfile.gettempdir(), "xrand-sd15-sized")))
    cells, steps, size = LARGE["cells"], LARGE["steps"], LARGE["size"]
    section = Section(
        title="12. `xrand sweep` on a Stable-Diffusion-1.5-sized model: 1 and 2 local workers",
        method=(
            f"Sweeps of {cells} cells (seeds 0-{cells - 1}) on bench_scale's SD-1.5-sized random-weight folder (UNet "
            f"860M, VAE 84M, CLIP 86M parameters), {size}x{size}, Euler ancestral, {steps} steps, batch 1, guidance "
            "7.5, float32, MindSpore in its default mode for this folder (PyNative), one torch thread per worker; "
            "each sweep in a fresh process calling `run_sweep` as `xrand sweep` does, 1 worker then 2. Steady rate "
            f"and scaling efficiency as in figure 8. Sampled every {SAMPLE_S:g} s: peak RSS of the sweep process and "
            "its workers together (a shared or file-mapped page counts once in every process that maps it) and the "
            "peak rise of the machine's memory in use (MemTotal - MemAvailable) over its value before the sweep."
        ),
        columns=["run", "steady cells/min", "wall cells/min", "wall s", "first cell after s", "peak RSS (GB)",
                 "machine memory rise (GB)", "vs reference"],
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="xrand-bench-sweep-") as tmp:
        for name in ("local, 1 worker", "local, 2 workers"):
            engine, workers = RUNS[name]
            argv = [str(Path(__file__).resolve()), "--child", engine, str(workers), str(Path(tmp) / f"{workers}"),
                    folder, str(size), str(steps), str(cells)]
            try:
                results[name] = x = run_json(argv, timeout=3600)
            except RuntimeError as exc:  # killed for memory, say
                section.rows.append(Row([name, "failed", str(exc)[-200:].replace("\n", " "), "", "", "", "", ""]))
                continue
            cells_row = [name, f"{x['steady_cells_per_min']:.2f}", f"{x['wall_cells_per_min']:.2f}",
                         f"{x['wall_s']:.0f}", f"{x['first_cell_s']:.0f}", f"{x['peak_gb']:.2f}",
                         f"{x['machine_gb']:.2f}"]
            if workers == 2 and "local, 1 worker" in results:
                eff = x["steady_cells_per_min"] / (2 * results["local, 1 worker"]["steady_cells_per_min"])
                section.rows.append(Row(cells_row + [f"scaling efficiency {eff:.0%}"],
                                        target=f"≥ {TARGET_SCALING:.0%}", met=eff >= TARGET_SCALING))
            else:
                section.rows.append(Row(cells_row + ["-"]))
    for name, x in results.items():
        section.notes.append(f"{name}: a cell (both pipelines, {steps} steps, and the metrics) took "
                             f"{x['cell_s']:.1f} s of a worker's time (median); every cell passed: {x['passed']}.")
    if len(results) == 2:
        alone, together = (results[name]["cell_s"] for name in ("local, 1 worker", "local, 2 workers"))
        section.notes.append(
            f"Side by side, each cell took {together / alone - 1:.0%} longer than alone (one thread per worker, two "
            "cores, the same work per cell): the two workers slow each other down, which bounds the scaling. "
            "Their share of what is shared (memory bandwidth, caches; the UNet reads its 3.4 GB of float32 "
            "weights at every step) is not measured here.")
    return section


def _child_main(argv) -> None:
    engine, workers, out, *large = argv
    if large:
        model, size, steps, cells = large
        print(json.dumps(child(engine, int(workers), out, model, int(size), int(steps), int(cells))))
    else:
        print(json.dumps(child(engine, int(workers), out)))


def main() -> None:
    if "--sd15-sized" in sys.argv:
        model_dir = sys.argv[sys.argv.index("--model-dir") + 1] if "--model-dir" in sys.argv else ""
        print(run_sd15_sized(model_dir).markdown())
        return
    figure_main(run, __doc__.splitlines()[0], child=_child_main)


if __name__ == "__main__":
    main()
