"""Figure 5: DDIM seconds per step on torch and on MindSpore (CPU), and what compare adds.

    python benchmarks/bench_ddim.py [--repeats 5]

Models: the embedded digits model (xrand/models/digits; a random-weight model of the same
architecture is made on the fly if it is missing) and a random-weight model of the
google/ddpm-cifar10-32 architecture saved to a temporary folder. Batch 1.

Each model runs in fresh processes (MindSpore's runtime settings can be made once per
process): "as shipped" loads both pipelines with xrand.pipelines.ddim's loaders, exactly as
``xrand compare`` does; "tuned" first calls mindspore_cpu.tune_cpu_runtime() and also runs
MindSpore in graph mode (mindspore_cpu.cpu_fallbacks(graph_mode=True)), where that module has
them. torch and MindSpore calls are interleaved. Targets: MindSpore at most 2x torch's time per
step; compare_frameworks at most 10% slower than the two pipelines called directly.
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
from typing import List

from bench_common import ROOT, Row, Section, fmt_mmm, profile_top, ratios, run_json

TARGET_RATIO = 2.0
TARGET_OVERHEAD = 0.10
SECONDS_PER_TIMING = 1.0  # steps per timed call: about this long (2 to 50 steps)
COMPARE_STEPS = {False: [5], True: [5, 50]}  # digits only; False: as shipped, True: tuned
COMPARE_REPEATS = 5

CIFAR_UNET = dict(
    sample_size=32, in_channels=3, out_channels=3, block_out_channels=(128, 256, 256, 256),
    down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"), layers_per_block=2,
    downsample_padding=0, flip_sin_to_cos=False, freq_shift=1, norm_eps=1e-6, norm_num_groups=32,
)
CIFAR_SCHEDULER = dict(num_train_timesteps=1000, beta_start=1e-4, beta_end=0.02, beta_schedule="linear",
                       clip_sample=True)


# ----------------------------------------------------------------------------- models

def save_model(folder: str, unet_config: dict, scheduler_config: dict) -> str:
    """A random-weight UNet2DModel and a DDPMScheduler, as a diffusers folder (safetensors)."""
    import torch
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    pipe = DDPMPipeline(unet=UNet2DModel(**unet_config), scheduler=DDPMScheduler(**scheduler_config))
    pipe.save_pretrained(folder, safe_serialization=True)
    return folder


def digits_model(tmp: str) -> tuple:
    """(folder, note): the embedded digits model, or one of its architecture made now."""
    from xrand.cli import default_model

    folder = default_model()
    if os.path.isfile(os.path.join(folder, "unet", "diffusion_pytorch_model.safetensors")):
        return folder, "the embedded digits model (xrand/models/digits)"
    sys.path.insert(0, str(ROOT / "scripts"))
    from train_digits import SCHEDULER_CONFIG, UNET_CONFIG

    made = save_model(os.path.join(tmp, "digits"), UNET_CONFIG, SCHEDULER_CONFIG)
    return made, ("**xrand/models/digits was missing: a random-weight model of its architecture "
                  "(scripts/train_digits.py's config) was made on the fly**")


# ----------------------------------------------------------------------------- child

def child(model: str, tuned: bool, repeats: int, compare_steps: List[int], profile: bool) -> dict:
    """Runs in a fresh process: load both pipelines, time them interleaved; returns a dict."""
    import numpy as np

    from xrand.pipelines.quiet import silenced

    with silenced():
        import mindspore  # noqa: F401
        import torch

    from xrand.pipelines import ddim, mindspore_cpu

    result = {"torch_threads": torch.get_num_threads(), "load_s": {}, "warmup_s": {}, "steps": {}}
    if tuned:
        if not hasattr(mindspore_cpu, "tune_cpu_runtime"):
            return {"skipped": "xrand.pipelines.mindspore_cpu has no tune_cpu_runtime()"}
        result["tuned_settings_made"] = bool(mindspore_cpu.tune_cpu_runtime())
    start = time.perf_counter()
    torch_pipe = ddim.load_torch_pipeline(model, quiet=True)
    result["load_s"]["torch"] = time.perf_counter() - start
    start = time.perf_counter()
    ms_pipe = ddim.load_mindspore_pipeline(model, quiet=True)
    result["load_s"]["mindspore"] = time.perf_counter() - start

    def run_torch(k):
        return torch_pipe(batch_size=1, generator=torch.Generator("cpu").manual_seed(0), num_inference_steps=k,
                          output_type="np")

    def run_mindspore(k):
        return ms_pipe(batch_size=1, generator=np.random.Generator(np.random.PCG64(0)), num_inference_steps=k,
                       output_type="np", return_dict=False)

    def run_mindspore_graph(k):
        with mindspore_cpu.cpu_fallbacks(graph_mode=True):
            return run_mindspore(k)

    methods = {"torch": run_torch, "mindspore": run_mindspore}
    if tuned and hasattr(mindspore_cpu, "cpu_fallbacks"):
        methods["mindspore graph mode"] = run_mindspore_graph
    for name, fn in methods.items():
        start = time.perf_counter()
        fn(1)  # first call: allocations, graph compilation
        result["warmup_s"][name] = time.perf_counter() - start
        start = time.perf_counter()
        fn(2)  # how long a step takes, to give every timing about SECONDS_PER_TIMING
        result["steps"][name] = max(2, min(50, round(SECONDS_PER_TIMING / ((time.perf_counter() - start) / 2))))
    per_step = {name: [] for name in methods}
    for r in range(repeats):
        names = list(methods)
        for name in names[r % len(names):] + names[: r % len(names)]:
            steps = result["steps"][name]
            start = time.perf_counter()
            methods[name](steps)
            per_step[name].append((time.perf_counter() - start) / steps)
    result["per_step"] = per_step

    result["compare"] = {}
    if compare_steps:
        from xrand.pipelines.compare import compare_frameworks

        # compare_frameworks loads its pipelines itself: hand it the ones loaded above
        ddim.load_torch_pipeline = lambda *args, **kwargs: torch_pipe
        ddim.load_mindspore_pipeline = lambda *args, **kwargs: ms_pipe
    for steps in compare_steps:
        both = {"direct": lambda: (run_torch(steps), run_mindspore(steps)),
                "compare": lambda: compare_frameworks(ddim.Settings(model=model, steps=steps), quiet=True)}
        times = {name: [] for name in both}
        for r in range(COMPARE_REPEATS):
            for name in (["direct", "compare"] if r % 2 == 0 else ["compare", "direct"]):
                start = time.perf_counter()
                both[name]()
                times[name].append(time.perf_counter() - start)
        result["compare"][steps] = times
        over = statistics.median(c / d - 1 for c, d in zip(times["compare"], times["direct"]))
        if profile and over > TARGET_OVERHEAD and "compare_profile" not in result:
            result["compare_profile"] = (steps, profile_top(both["compare"], limit=12))

    slower = statistics.median(ratios(per_step["mindspore"], per_step["torch"]))
    if profile and slower > TARGET_RATIO:
        result["mindspore_profile"] = profile_top(lambda: run_mindspore(1), limit=10,
                                                  also_cumulative=r"mindspore_cpu|pipeline_ddim|unet_2d\.py")
    return result


def _child_main(argv) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--tuned", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare-steps", default="", help="comma-separated step counts")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    compare_steps = [int(k) for k in args.compare_steps.split(",") if k]
    print(json.dumps(child(args.model, args.tuned, args.repeats, compare_steps, args.profile)))


# ----------------------------------------------------------------------------- parent

def _spawn(model: str, tuned: bool, repeats: int, compare_steps: List[int]) -> dict:
    argv = [str(Path(__file__).resolve()), "--child", "--model", model, "--repeats", str(repeats),
            "--compare-steps", ",".join(map(str, compare_steps)), "--profile"] + ["--tuned"] * tuned
    return run_json(argv, timeout=900)


def run(repeats: int = 5) -> Section:
    section = Section(
        title="5. DDIM on torch and on MindSpore (CPU), and the cost of compare_frameworks",
        method=(
            "Seconds per step = time of one pipeline call of k steps / k (batch 1, fp32; k chosen per run so a "
            f"call lasts about {SECONDS_PER_TIMING:.0f} s, 2 to 50 steps, shown as k; the call's fixed costs "
            f"included), {repeats} repeats with the runs interleaved, after a warm-up call each. diffusers' "
            "`DDIMPipeline` with a `torch.Generator`, mindone.diffusers' with a NumPy generator, both in one "
            "process as `xrand compare` runs them. Ratio: MindSpore / torch per repeat. "
            "**As shipped**: pipelines from `xrand.pipelines.ddim.load_torch_pipeline` / `load_mindspore_pipeline`, "
            "exactly what `xrand compare` runs. **Tuned**: a separate process that first calls "
            "`mindspore_cpu.tune_cpu_runtime()` (MindSpore settings that can be made once per process); "
            "**graph mode** also runs the MindSpore call inside `mindspore_cpu.cpu_fallbacks(graph_mode=True)`. "
            "compare_frameworks: `compare_frameworks(Settings(model, steps=n))` with its loaders handed the already "
            f"loaded pipelines, against calling the two pipelines directly, interleaved, {COMPARE_REPEATS} repeats."
        ),
        columns=["model", "run", "s per step (min / med / max)", "MindSpore / torch (min / med / max)"],
    )
    with tempfile.TemporaryDirectory(prefix="xrand-bench-") as tmp:
        digits, digits_note = digits_model(tmp)
        start = time.perf_counter()
        cifar = save_model(os.path.join(tmp, "cifar10-architecture"), CIFAR_UNET, CIFAR_SCHEDULER)
        section.notes.append(f"Models: digits is {digits_note}; the cifar10-architecture model (35.7M parameters, "
                             f"random weights, made and saved in {time.perf_counter() - start:.0f} s) follows "
                             "google/ddpm-cifar10-32's config.")
        compare_rows = []
        medians = {}  # (model, run, framework) -> median s per step
        for label, folder in (("digits", digits), ("cifar10-architecture", cifar)):
            for tuned in (False, True):
                run_name = "tuned" if tuned else "as shipped"
                try:
                    info = _spawn(folder, tuned, repeats, COMPARE_STEPS[tuned] if label == "digits" else [])
                except RuntimeError as exc:
                    section.rows.append(Row([label, run_name, "failed", str(exc)[-300:].replace("\n", " ")]))
                    continue
                if "skipped" in info:
                    section.notes.append(f"{label}, tuned: skipped ({info['skipped']}).")
                    continue
                per_step, steps = info["per_step"], info["steps"]
                for name, ts in per_step.items():
                    medians[label, run_name, name] = statistics.median(ts)
                    what = {"torch": "torch", "mindspore": "MindSpore",
                            "mindspore graph mode": "MindSpore, graph mode"}[name]
                    cells = [label, f"{run_name}: {what} (k={steps[name]})", fmt_mmm(ts, 1, 4)]
                    if name == "torch":
                        section.rows.append(Row(cells + ["-"]))
                        continue
                    r = ratios(ts, per_step["torch"])
                    section.rows.append(Row(cells + [fmt_mmm(r, 1, 1)], target=f"≤ {TARGET_RATIO:.0f}x",
                                            met=statistics.median(r) <= TARGET_RATIO))
                loads = ", ".join(f"{k} {v:.1f} s" for k, v in info["load_s"].items())
                warm = ", ".join(f"{k} {v:.1f} s" for k, v in info["warmup_s"].items())
                section.notes.append(f"{label}, {run_name}: loading {loads}; first (1-step) calls {warm}; "
                                     f"torch threads {info['torch_threads']}"
                                     + (f"; tune_cpu_runtime() made its settings: {info['tuned_settings_made']}"
                                        if tuned else "") + ".")
                if "mindspore_profile" in info:
                    section.notes.append(f"Where a 1-step MindSpore call's time goes ({label}, {run_name}, PyNative; "
                                         "cProfile, own time; with asynchronous launch the wait for results "
                                         "shows up in whichever call needs them, e.g. `Tensor.shape`):\n\n"
                                         + info["mindspore_profile"])
                for n, times in info["compare"].items():
                    compare_rows.append((label, run_name, int(n), times))
                if "compare_profile" in info:
                    n, text = info["compare_profile"]
                    section.notes.append(f"Where compare_frameworks' time goes ({label}, {run_name}, {n} steps; "
                                         "cProfile, own time):\n\n" + text)
        for label in ("digits", "cifar10-architecture"):
            shipped = medians.get((label, "as shipped", "mindspore"))
            torch_s = medians.get((label, "as shipped", "torch"))
            if shipped is None or torch_s is None:
                continue
            parts = [f"as shipped {shipped:.3f} s ({shipped / torch_s:.1f}x torch's {torch_s:.4f} s)"]
            for name, what in (("mindspore", "after tune_cpu_runtime()"), ("mindspore graph mode", "graph mode")):
                tuned_s = medians.get((label, "tuned", name))
                if tuned_s is not None:
                    parts.append(f"{what} {tuned_s:.3f} s ({shipped / tuned_s:.1f}x faster than as shipped)")
            section.notes.append(f"MindSpore per step, {label} (medians): " + "; ".join(parts) + ".")
        for label, run_name, n, times in compare_rows:
            over = [c / d - 1 for c, d in zip(times["compare"], times["direct"])]
            extra = [c - d for c, d in zip(times["compare"], times["direct"])]
            section.rows.append(Row(
                [label, f"{run_name}: compare_frameworks, {n} steps, against both pipelines called directly "
                        f"({fmt_mmm(times['direct'], 1, 2)} s)",
                 f"compare {fmt_mmm(times['compare'], 1, 2)} s; extra {statistics.median(extra):+.2f} s",
                 "overhead " + " / ".join(f"{v:+.1%}" for v in (min(over), statistics.median(over), max(over)))],
                target=f"≤ {TARGET_OVERHEAD:.0%}", met=statistics.median(over) <= TARGET_OVERHEAD))
    return section


def main() -> None:
    if "--child" in sys.argv:
        argv = [a for a in sys.argv[1:] if a != "--child"]
        _child_main(argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    print(run(parser.parse_args().repeats).markdown())


if __name__ == "__main__":
    main()
