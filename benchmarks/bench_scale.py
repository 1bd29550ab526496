"""Figure 10: a Stable-Diffusion-1.5-sized model through `xrand compare`: seconds per step per
side and peak memory per stage.

    python benchmarks/bench_scale.py [--sizes 256,512] [--model-dir DIR]

Model: xrand.models.sd15_sized's random-weight StableDiffusionPipeline folder (UNet 860M, VAE
84M, CLIP text encoder 86M parameters; 4.1 GB of float32 safetensors), built once into
``--model-dir``. Euler ancestral, 4 steps, batch 1, guidance 7.5 (the UNet sees a batch of 2),
float32, MindSpore in graph mode (compiled in this run: a fresh graph cache).

For each image size a fresh process runs ``xrand.compare.staged.compare_in_stages`` as
``xrand compare`` does (report.json and pictures written after each stage), the first size with
every stage (``--lockstep --layers``, noise floor on), larger sizes the sides only, 2 steps (so
that the whole figure stays near 20 minutes on 2 cores). A thread
samples the resident memory of the process and its children (VmRSS) every 50 ms and keeps the
peak per stage; the stage is set by wrapping the functions the staged compare calls (load,
run, pipeline_floor, layers_at_step). Seconds per step: the time between two scheduler steps of
a side (the first step, which includes the prompt's encoding and, on MindSpore in graph mode,
compiling the UNet, is reported apart; a side run in a process of its own, as MindSpore's is for a
folder this size, gives its whole time only). Memory counts the process and its children. Target: every stage within 12 GB (half this machine's
24 GB).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import Row, Section, run_json

TARGET_GB = 12.0
STEPS = 4
LARGE_STEPS = 2  # the larger sizes: the sides only, 2 steps (machine time)
PROMPT = "a red circle on a blue square"


def child(argv) -> None:
    """Runs in a fresh process: one staged compare of the folder at one size, measured."""
    import threading

    model, size, stages, steps = argv[0], int(argv[1]), argv[2], int(argv[3])
    every_stage = stages == "all"  # "default": sides and floor, as xrand compare; "sides": the sides only
    from xrand.pipelines.quiet import silenced

    with silenced():
        import mindspore  # noqa: F401
        import torch  # noqa: F401

    import xrand.compare.staged as staged
    from xrand.compare import LayerOptions, make_plan
    from xrand.compare.boundary import Boundary
    from xrand.pipelines.settings import Settings
    from xrand.report.compare import write_report

    gb = 1024 ** 3
    peaks, seconds, label = {}, {}, ["between stages"]

    def rss(pid: int = os.getpid()) -> int:
        """Resident memory of ``pid`` and its child processes (a side run in a process of its own)."""
        total = 0
        try:
            with open(f"/proc/{pid}/status") as f:
                total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    total += sum(rss(int(child)) for child in f.read().split())
        except (OSError, StopIteration):  # a process that ended meanwhile
            pass
        return total

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

    staged.load = stage(lambda args: f"load {args[1]}", staged.load)
    staged.pipeline_floor = stage("floor (torch float64)", staged.pipeline_floor)
    staged.layers_at_step = stage("layers", staged.layers_at_step)
    staged.side_in_own_process = stage(lambda args: f"{args[1]} side", staged.side_in_own_process)
    real_run = staged.run

    def run(loaded, plan, **kwargs):
        name = "lockstep" if kwargs.get("feed") is not None else f"{loaded.framework} side"
        if label[-1] == "floor (torch float64)":
            return real_run(loaded, plan, **kwargs)
        return stage(name, real_run)(loaded, plan, **kwargs)

    staged.run = run
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
    plan = make_plan(settings, lockstep=every_stage, layers=LayerOptions() if every_stage else None,
                     noise_floor=stages in ("all", "default"))
    out = tempfile.mkdtemp(prefix="xrand-bench-scale-")
    report_seconds = []

    def on_stage(comparison, missing):
        start = time.perf_counter()
        label.append("report")
        write_report(comparison, out)
        label.pop()
        report_seconds.append(time.perf_counter() - start)

    start = time.perf_counter()
    comparison = staged.compare_in_stages(plan, out, on_stage)
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
                      "steps": per_step, "side_seconds": sides, "report_seconds": sum(report_seconds),
                      "total_seconds": total, "hwm_gb": hwm / gb, "rel_l2": comparison.final["rel_l2"],
                      "floor": (comparison.noise_floor or {}).get("rel_l2"),
                      "culprit": comparison.layers.culprit if comparison.layers else None,
                      "modules": len(comparison.layers.modules) if comparison.layers else None,
                      "mode": comparison.environments["b"].get("mindspore_mode")}))


def model_folder(folder: Path) -> str:
    if not (folder / "model_index.json").exists():
        from xrand.models.sd15_sized import build_sd15_sized

        build_sd15_sized(folder)
    return str(folder)


ORDER = ["load torch", "torch side", "load mindspore", "mindspore side", "lockstep", "floor (torch float64)",
         "layers", "report", "between stages"]


def run(repeats: int = 1, sizes=(256, 512), model_dir: str = "") -> Section:
    folder = model_folder(Path(model_dir or os.path.join(tempfile.gettempdir(), "xrand-sd15-sized")))
    section = Section(
        title="10. A Stable-Diffusion-1.5-sized model through xrand compare: time and peak memory per stage",
        method=(__doc__.split("\n\n", 2)[2].strip()),
        columns=["size", "stage", "seconds", "peak RSS (GB)"])
    with tempfile.TemporaryDirectory() as cache:
        for size in sizes:
            every = size == sizes[0]
            data = run_json([__file__, "--child", folder, str(size), "all" if every else "sides",
                             str(STEPS if every else LARGE_STEPS)], timeout=3600, env={"XRAND_CACHE_DIR": cache})
            for name in ORDER:
                if name in data["peaks_gb"]:
                    peak = data["peaks_gb"][name]
                    section.rows.append(Row([f"{size}", name, f"{data['seconds'].get(name, 0):.1f}" if name != "report"
                                             else f"{data['report_seconds']:.1f}", f"{peak:.2f}"],
                                            f"≤ {TARGET_GB:g} GB", peak <= TARGET_GB))
            for side in ("torch side", "mindspore side"):
                s = data["steps"].get(side, {})
                section.notes.append(
                    f"{size} px, {side}: {data['side_seconds'].get(side.split()[0]) or 0:.1f} s for {data['steps_run']} steps "
                    f"(prompt, steps, VAE decode), a later step {s.get('later_steps') or 0:.2f} s")
            section.notes.append(
                f"{size} px: whole compare {data['total_seconds']:.0f} s, process high-water mark (VmHWM) "
                f"{data['hwm_gb']:.2f} GB; rel L2 {data['rel_l2']:.3g}, torch's floor {data['floor'] or 0:.3g}"
                + (f"; layers: {data['modules']} module calls, culprit {data['culprit']}" if data["modules"] else "")
                + f"; MindSpore ran {data['mode']}")
    return section


def main() -> None:
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="256,512", help="image sizes, comma-separated (default 256,512)")
    parser.add_argument("--model-dir", default="", help="where the SD-1.5-sized folder is (built there if missing)")
    args = parser.parse_args()
    print(run(sizes=[int(s) for s in args.sizes.split(",")], model_dir=args.model_dir).markdown())


if __name__ == "__main__":
    main()
