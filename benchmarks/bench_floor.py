"""Figure 15: the float64 floor's peak memory and time on a Stable-Diffusion-1.5-sized model, each
submodule widened while it runs (as xrand compare does) against the pipeline cast whole to float64.

    python benchmarks/bench_floor.py [--repeats 1] [--model-dir DIR]

Model: figure 10's random-weight SD-1.5-sized folder (4.1e9 bytes of float32 safetensors), 256 px,
Euler ancestral, 4 steps, batch 1, guidance 7.5, float32. For each way and repeat a fresh process
loads torch's side, runs it once (the float32 images the floor is measured against), then the
floor (``xrand.compare.floor.pipeline_floor``; "cast whole" runs the same with
``xrand.frameworks.torch.cast_whole`` in place of ``widened``). A thread samples the process's
resident memory (VmRSS) every 50 ms; the floor's peak is the largest sample while it runs (GB here:
2**30 bytes). Target: the floor within 1.5x the weights at the run's dtype (the folder's safetensors
bytes). Cast whole and widened per call with whole convolutions give the same floor bit for bit
(tests/test_floor.py); the row blocks' floor differs in its last digits.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_common import Row, Section, fmt_mmm, run_json, tree_rss

WAYS = {"widened per call, float64 convolutions in row blocks (xrand compare)": "per-call",
        "widened per call, each convolution whole (before)": "per-call-whole-convs",
        "cast whole to float64 (before)": "whole"}
STEPS, SIZE = 4, 256
TARGET = 1.5  # x the weights


def child(argv) -> None:
    """A fresh process: torch's side of the folder, then its floor the way ``argv[1]`` names."""
    folder, way = argv
    import xrand.compare.floor as floor
    from xrand.compare import make_plan
    from xrand.compare.sides import load, run
    from xrand.frameworks import torch as torch_framework
    from xrand.pipelines.settings import Settings

    if way == "whole":
        floor.widened = torch_framework.cast_whole
    if way in ("whole", "per-call-whole-convs"):
        torch_framework.IM2COL_BYTES = 1 << 62  # every convolution unfolded whole, as before
    settings = Settings(model=folder, steps=STEPS, batch_size=1, prompt="a red circle on a blue square",
                        height=SIZE, width=SIZE, scheduler="euler-a")
    plan = make_plan(settings, frameworks=("torch",))
    loaded = load(plan, "torch")
    images = run(loaded, plan).images
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], tree_rss(os.getpid()))

    before = tree_rss(os.getpid())
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    result = floor.pipeline_floor(loaded, plan, images, keep=False)  # measured, not read from the cache
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    print(json.dumps({"seconds": seconds, "peak": max(peak[0], before), "before": before,
                      "rel_l2": result["rel_l2"], "max_abs": result["max_abs"]}))


def run(repeats: int = 1, model_dir: str = "") -> Section:
    from bench_scale import model_folder

    folder = model_folder(Path(model_dir or os.path.join(tempfile.gettempdir(), "xrand-sd15-sized")))
    weights = sum(p.stat().st_size for p in Path(folder).rglob("*.safetensors"))
    gb = 1024 ** 3
    section = Section(
        title="15. The float64 floor on an SD-1.5-sized model: widened per call against cast whole",
        method=__doc__.split("\n\n", 2)[2].strip() + f" {repeats} repeat(s); weights {weights / gb:.2f} GB.",
        columns=["floor", "seconds", "peak RSS (GB)", "peak / weights", "floor rel L2"])
    results = {name: [] for name in WAYS}
    for _ in range(repeats):
        for name, way in WAYS.items():
            results[name].append(run_json([__file__, "--child", folder, way], timeout=3600))
    for name, runs in results.items():
        peak, xrands = max(r["peak"] for r in runs), WAYS[name] == "per-call"
        section.rows.append(Row([name, fmt_mmm([r["seconds"] for r in runs], 1, 1), f"{peak / gb:.2f}",
                                 f"{peak / weights:.2f}x", f"{runs[0]['rel_l2']:.6g}"],
                                target=f"≤ {TARGET}x the weights" if xrands else "",
                                met=peak <= TARGET * weights if xrands else None))
    section.notes.append(
        "What was left above the weights before the row blocks, measured apart (a thread naming the module "
        "running at the peak sample): the process holds 4.4 GB before the floor (the weights and torch's own); "
        "the peak was inside the VAE decoder's convolutions at 256x256 (up_blocks.2's upsampler conv), where "
        "torch's CPU convolution in float64 has no oneDNN kernel and unfolds its input whole (im2col: 256 "
        "channels x 9 x 65,536 positions x 8 bytes, 1.2 GB). xrand.frameworks.torch.conv2d_in_row_blocks "
        "unfolds at most 256 MiB at once; its sums run in another order (about 1e-16 relative apart on "
        "random convolutions), so the floor differs from the whole convolutions' in its last digits.")
    floors = {name: {(r["rel_l2"], r["max_abs"]) for r in runs} for name, runs in results.items()}
    section.notes.append("Floors (rel L2, max |diff|) per way: " + "; ".join(
        f"{name}: {', '.join(f'{a:.9g}, {b:.3g}' for a, b in sorted(found))}" for name, found in floors.items()))
    return section


if __name__ == "__main__":
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1:])
    else:
        import argparse

        parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        parser.add_argument("--repeats", type=int, default=1)
        parser.add_argument("--model-dir", default="")
        args = parser.parse_args()
        print(run(args.repeats, args.model_dir).markdown())
