"""Figure 10: a Stable-Diffusion-1.5-sized model through `xrand compare`: peak memory and time per
stage, and seconds per step per side and MindSpore mode.

    python benchmarks/bench_scale.py [--sizes 256,512] [--model-dir DIR]

Model: xrand.models.sd15_sized's random-weight StableDiffusionPipeline folder (UNet 860M, VAE
84M, CLIP text encoder 86M parameters; 4.1 GB of float32 safetensors), built once into
``--model-dir``. Euler ancestral, 4 steps, batch 1, guidance 7.5 (the UNet sees a batch of 2),
float32.

Stages: for each image size a fresh process runs ``xrand.compare.stages.run_stages`` into a
comparison folder as ``xrand compare`` does (report.json and pictures written after each stage;
MindSpore in its default mode for this folder, PyNative), the first size with every stage
(``--layers --lockstep``, noise floor on), larger sizes the sides only, 2 steps (machine time). A
thread samples the resident memory of the process and its children (VmRSS) every 50 ms and keeps
the peak per stage; the stage is set by wrapping each stage's function (``stages.RUNS``) and the
loads. MindSpore's stages of this folder (above ``stages.OWN_PROCESS_BYTES``) run in one process
of their own, its load included: one row, their seconds each from manifest.json in the notes.
Target: every stage within 12 GB (half this machine's 24 GB).

Records (two machines): for each size a fresh process runs torch's stages only (``xrand compare
--only torch --lockstep --layers``, 2 steps, no floor), and once more with ``--layers-scope
down_blocks.1``; the folder's bytes per stage (what travels to the MindSpore machine) and the
peak RSS of each stage.

Speed: for each size and side (torch; MindSpore PyNative; MindSpore graph mode, compiled in this
process on a fresh graph cache, at the first size only) a fresh process loads the pipeline and
runs it twice: a later step is the median time between two scheduler steps of the second run;
the first run's extra time over the second is the compile (and first-call) cost. Peak RSS of
that process.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import Row, Section, run_json, tree_rss

TARGET_GB = 12.0
STEPS = 4
LARGE_STEPS = 2  # the larger sizes: the sides only, 2 steps (machine time)
PROMPT = "a red circle on a blue square"


def child(argv) -> None:
    """Runs in a fresh process: the stages of one compare of the folder at one size, measured."""
    import threading

    # "all": every stage; "default": sides and floor, as xrand compare; "sides": the sides only;
    # "torch" / "torch-scoped": torch's stages for two machines, --layers (--layers-scope down_blocks.1)
    model, size, stages_asked, steps = argv[0], int(argv[1]), argv[2], int(argv[3])
    every_stage = stages_asked == "all"
    from xrand.frameworks.quiet import silenced

    with silenced():
        import mindspore  # noqa: F401
        import torch  # noqa: F401

    import xrand.compare.stages as stages
    from xrand.compare import LayerOptions, make_plan
    from xrand.compare.boundary import Boundary
    from xrand.pipelines.settings import Settings
    from xrand.report.compare import write_report

    gb = 1024 ** 3
    peaks, seconds, label = {}, {}, ["between stages"]
    only_torch = stages_asked.startswith("torch")  # the records a MindSpore machine gets

    def rss() -> int:
        """Resident memory of this process and its children (a side run in a process of its own)."""
        return tree_rss(os.getpid())

    done = threading.Event()

    def sample() -> None:
        ticks = 0
        while not done.wait(0.05):
            peaks[label[-1]] = max(peaks.get(label[-1], 0), rss())
            ticks += 1
            if ticks % 100 == 0:  # every 5 s on stderr: what a run killed for memory leaves
                print(f"bench_scale: {label[-1]}: {rss() / gb:.2f} GB now, peak {peaks[label[-1]] / gb:.2f} GB",
                      file=sys.stderr, flush=True)

    def stage(name: str, fn):
        def wrapped(*args, **kwargs):
            what = name(args) if callable(name) else name
            label.append(what)
            peaks[what] = max(peaks.get(what, 0), rss())
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[what] = seconds.get(what, 0.0) + time.perf_counter() - start
                peaks[what] = max(peaks.get(what, 0), rss())
                label.pop()
        return wrapped

    stages.load = stage(lambda args: f"load {args[1]}", stages.load)
    stages.stages_in_own_process = stage(OWN_PROCESS, stages.stages_in_own_process)
    for name, fn in list(stages.RUNS.items()):
        stages.RUNS[name] = stage(STAGE_LABELS.get(name, name), fn)
    step_times = {}
    real_step = Boundary._step

    def timed_step(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        step_times.setdefault(label[-1], []).append(time.perf_counter())
        return out

    Boundary._step = timed_step

    threading.Thread(target=sample, daemon=True).start()
    settings = Settings(model=model, steps=steps, batch_size=1, prompt=PROMPT, height=size, width=size,
                        scheduler="euler-a")
    scope = ("down_blocks.1",) if stages_asked == "torch-scoped" else ()
    plan = make_plan(settings, frameworks=("torch",) if only_torch else ("torch", "mindspore"),
                     lockstep=every_stage or only_torch,
                     layers=LayerOptions(scope=scope) if every_stage or only_torch else None,
                     noise_floor=stages_asked in ("all", "default"))
    out = tempfile.mkdtemp(prefix="xrand-bench-scale-")
    report_seconds = []

    def on_stage(outcome):
        if outcome.comparison is None:
            return
        start = time.perf_counter()
        label.append("report")
        write_report(outcome.comparison, out)
        label.pop()
        report_seconds.append(time.perf_counter() - start)

    start = time.perf_counter()
    store = stages.Store(plan, stages.Asks.of(plan), out)
    outcome = stages.run_stages(store, stages.Loading(plan), ("torch",) if only_torch else ("torch", "mindspore"),
                                on_stage)
    comparison = outcome.comparison
    stage_seconds = {name: entry["seconds"] for name, entry in store.manifest["stages"].items()}
    shutil.rmtree(out)
    if only_torch:
        done.set()
        print(json.dumps({"size": size, "bytes": outcome.bytes, "peaks_gb": {k: v / gb for k, v in peaks.items()},
                          "seconds": seconds, "total_seconds": time.perf_counter() - start}))
        return
    total = time.perf_counter() - start
    done.set()
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    per_step = {}
    for name, times in step_times.items():
        gaps = [b - a for a, b in zip(times, times[1:])]
        per_step[name] = {"later_steps": statistics.median(gaps) if gaps else None, "steps": len(times)}
    sides = {s: comparison.seconds.get(s) for s in ("torch", "mindspore")}
    print(json.dumps({"size": size, "steps_run": steps, "peaks_gb": {k: v / gb for k, v in peaks.items()}, "seconds": seconds,
                      "steps": per_step, "side_seconds": sides, "stage_seconds": stage_seconds, "report_seconds": sum(report_seconds),
                      "total_seconds": total, "hwm_gb": hwm / gb, "rel_l2": comparison.final["rel_l2"],
                      "floor": (comparison.noise_floor or {}).get("rel_l2"),
                      "culprit": comparison.layers.culprit if comparison.layers else None,
                      "modules": len(comparison.layers.modules) if comparison.layers else None,
                      "mode": comparison.environments["b"].get("mindspore_mode")}))


def speed_child(argv) -> None:
    """Runs in a fresh process: one side of the folder at one size, loaded once and run twice."""
    import threading

    model, size, side, steps = argv[0], int(argv[1]), argv[2], int(argv[3])
    framework, _, mode = side.partition(":")
    from xrand.frameworks.quiet import silenced

    with silenced():
        import mindspore  # noqa: F401
        import torch  # noqa: F401

    from xrand.compare import make_plan
    from xrand.compare.boundary import Boundary
    from xrand.compare.sides import load, run
    from xrand.patch import patched
    from xrand.pipelines.settings import Settings

    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            with open("/proc/self/status") as f:
                peak[0] = max(peak[0], next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")))

    threading.Thread(target=sample, daemon=True).start()
    times = []
    real_step = Boundary._step

    def timed_step(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        times.append(time.perf_counter())
        return out

    Boundary._step = timed_step
    settings = Settings(model=model, steps=steps, batch_size=1, prompt=PROMPT, height=size, width=size,
                        scheduler="euler-a")
    plan = make_plan(settings, frameworks=(framework,), mindspore_mode=mode or None)
    start = time.perf_counter()
    loaded = load(plan, framework)
    load_seconds = time.perf_counter() - start
    runs = []
    with patched():
        for _ in range(2):
            times.clear()
            start = time.perf_counter()
            run(loaded, plan)
            runs.append(time.perf_counter() - start)
    done.set()
    gaps = [b - a for a, b in zip(times, times[1:])]
    print(json.dumps({"load": load_seconds, "first": runs[0], "second": runs[1], "later_step": statistics.median(gaps),
                      "peak_gb": peak[0] / 1024 ** 3, "mode": plan.mindspore_mode}))


def model_folder(folder: Path) -> str:
    if not (folder / "model_index.json").exists():
        from xrand.models.sd15_sized import build_sd15_sized

        build_sd15_sized(folder)
    return str(folder)


STAGE_LABELS = {"torch": "torch side", "mindspore": "mindspore side", "floor": "floor (torch float64)"}
#: MindSpore's stages of a folder above OWN_PROCESS_BYTES: one process for all of them (its load included)
OWN_PROCESS = "mindspore stages, one process of their own (load, weights' check, side, layers, lockstep)"
ORDER = ["load torch", "torch side", "torch layers", "floor (torch float64)", "load mindspore", "mindspore side",
         "mindspore layers", "lockstep", OWN_PROCESS, "report", "between stages"]
SPEED_SIDES = {"torch": "torch", "mindspore:pynative": "MindSpore PyNative", "mindspore:graph": "MindSpore graph mode"}


def records(section: Section, folder: str, sizes) -> None:
    """Rows of what torch's stages leave for the MindSpore machine, full and scoped, per size."""
    for size in sizes:
        for asked, what in (("torch", "every module"), ("torch-scoped", "--layers-scope down_blocks.1")):
            data = run_json([__file__, "--child", folder, str(size), asked, "2"], timeout=3600)
            for name in ("torch side", "torch layers"):
                stage = {"torch side": "torch", "torch layers": "torch layers"}[name]
                section.rows.append(Row([f"{size}", f"records: {name} ({what})", f"{data['seconds'].get(name, 0):.1f}",
                                         f"{data['bytes'][stage] / 1e6:.0f} MB written",
                                         f"{data['peaks_gb'].get(name, 0):.2f}"],
                                        f"≤ {TARGET_GB:g} GB", data["peaks_gb"].get(name, 0) <= TARGET_GB))


def run(repeats: int = 1, sizes=(256, 512), model_dir: str = "", parts=("stages", "records")) -> Section:
    folder = model_folder(Path(model_dir or os.path.join(tempfile.gettempdir(), "xrand-sd15-sized")))
    section = Section(
        title="10. A Stable-Diffusion-1.5-sized model through xrand compare: memory and time per stage, seconds per step",
        method=(__doc__.split("\n\n", 2)[2].strip()),
        columns=["size", "stage, or side (speed)", "seconds", "a later step (s)", "peak RSS (GB)"])
    if "records" in parts:
        records(section, folder, sizes)
    if "stages" not in parts:
        return section
    with tempfile.TemporaryDirectory() as cache:
        for size in sizes:
            every = size == sizes[0]
            steps = STEPS if every else LARGE_STEPS
            data = run_json([__file__, "--child", folder, str(size), "all" if every else "sides", str(steps)],
                            timeout=3600, env={"XRAND_CACHE_DIR": cache})
            for name in ORDER:
                if name in data["peaks_gb"]:
                    peak = data["peaks_gb"][name]
                    took = data["report_seconds"] if name == "report" else data["seconds"].get(name, 0)
                    later = (data["steps"].get(name) or {}).get("later_steps")
                    section.rows.append(Row([f"{size}", name, f"{took:.1f}", f"{later:.2f}" if later else "",
                                             f"{peak:.2f}"], f"≤ {TARGET_GB:g} GB", peak <= TARGET_GB))
            section.notes.append(
                f"{size} px, {steps} steps: whole compare {data['total_seconds']:.0f} s, process high-water mark "
                f"(VmHWM) {data['hwm_gb']:.2f} GB; rel L2 {data['rel_l2']:.3g}"
                + (f", torch's floor {data['floor']:.3g}" if data["floor"] is not None else "")
                + (f"; layers: {data['modules']} module calls, culprit {data['culprit']}" if data["modules"] else "")
                + f"; MindSpore ran {data['mode']}; each stage's seconds (manifest.json): "
                + ", ".join(f"{name} {took:.1f}" for name, took in data["stage_seconds"].items()))
            for side, label in SPEED_SIDES.items():
                if side == "mindspore:graph" and not every:
                    section.notes.append(
                        f"{size} px: MindSpore graph mode not run. In this figure's run of 2026-11-26 07:33 UTC "
                        "its process was killed by the out-of-memory killer (exit -9, signal 9) on this 24 GB machine.")
                    continue
                try:
                    s = run_json([__file__, "--speed", folder, str(size), side, str(steps)], timeout=3600,
                                 env={"XRAND_CACHE_DIR": cache})
                except RuntimeError as exc:  # killed for memory, say
                    section.rows.append(Row([f"{size}", f"speed: {label}, {steps} steps", "failed",
                                             str(exc)[-200:].replace("\n", " "), ""]))
                    continue
                section.rows.append(Row([f"{size}", f"speed: {label}, {steps} steps (load {s['load']:.0f} s)",
                                         f"{s['second']:.1f} (first run {s['first']:.1f})", f"{s['later_step']:.2f}",
                                         f"{s['peak_gb']:.2f}"]))
    return section


def main() -> None:
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1:])
        return
    if "--speed" in sys.argv:
        speed_child(sys.argv[sys.argv.index("--speed") + 1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="256,512", help="image sizes, comma-separated (default 256,512)")
    parser.add_argument("--model-dir", default="", help="where the SD-1.5-sized folder is (built there if missing)")
    parser.add_argument("--parts", default="stages,records", help="stages (the whole compare), records (torch's "
                                                                  "stages for two machines), or both (default)")
    args = parser.parse_args()
    print(run(sizes=[int(s) for s in args.sizes.split(",")], model_dir=args.model_dir,
              parts=args.parts.split(",")).markdown())


if __name__ == "__main__":
    main()
