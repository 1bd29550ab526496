"""Figure 6: a tiny Stable Diffusion on torch and on MindSpore (CPU), and what compare adds.

    python benchmarks/bench_sd.py [--repeats 9]

Model: xrand.models.tiny_sd's random-weight StableDiffusionPipeline folder (32x32 images, 16x16
latents), built in a temporary folder. Batch 1, guidance 7.5 (the UNet sees a batch of 2), fp32.
A fresh process loads both pipelines with ``xrand.compare.sides.load`` (as ``xrand compare``
does) and times, interleaved: diffusers' pipeline with a ``torch.Generator``, mindone's with a
NumPy generator in graph mode (``xrand compare``'s default; compiled in the warm-up call) and in
PyNative, and ``compare_loaded`` in its default mode (both runs from one xrand generator, every
step recorded) against the two pipelines called directly (torch, MindSpore in graph mode).
Targets: MindSpore in graph mode at most 2x torch's time per step; compare at most 10% over the
two pipelines.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from bench_common import Row, Section, figure_main, fmt_mmm, ratios, run_json

TARGET_RATIO = 2.0
TARGET_OVERHEAD = 0.10
STEPS = 5
PROMPT = "a red circle on a blue square"


def child(model: str, repeats: int) -> dict:
    """Runs in a fresh process: load both pipelines once, time them and compare, interleaved."""
    import numpy as np

    from xrand.frameworks.quiet import silenced

    with silenced():
        import mindspore  # noqa: F401
        import torch

    from xrand.compare import Pair, compare_loaded, make_plan
    from xrand.compare.sides import load
    from xrand.frameworks import mindspore_mode
    from xrand.pipelines.settings import Settings

    settings = make_plan(Settings(model=model, steps=STEPS, batch_size=1, prompt=PROMPT))
    loaded = {name: load(settings, name) for name in ("torch", "mindspore")}
    pair = Pair(torch=loaded["torch"], mindspore=loaded["mindspore"])
    call = dict(prompt=PROMPT, num_inference_steps=STEPS, output_type="np", return_dict=False)

    def run_torch():
        return loaded["torch"].pipe(generator=torch.Generator("cpu").manual_seed(0), **call)

    def run_mindspore(mode):
        with mindspore_mode(mode):
            return loaded["mindspore"].pipe(generator=np.random.Generator(np.random.PCG64(0)), **call)

    methods = {"torch": run_torch, "mindspore graph": lambda: run_mindspore("graph"),
               "mindspore pynative": lambda: run_mindspore("pynative"),
               "both": lambda: (run_torch(), run_mindspore("graph")), "compare": lambda: compare_loaded(pair, settings)}
    for fn in methods.values():
        fn()  # warm-up
    times = {name: [] for name in methods}
    for r in range(repeats):
        names = list(methods)
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.perf_counter()
            methods[name]()
            times[name].append(time.perf_counter() - start)
    # compare's own time, independent of machine noise: one profiled call, the pipelines' share of it
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(methods["compare"])
    stats = pstats.Stats(profiler).stats
    total = max(v[3] for v in stats.values())
    inside = sum(v[3] for (path, _, name), v in stats.items()
                 if name == "__call__" and path.endswith("pipeline_stable_diffusion.py"))
    return {"times": times, "torch_threads": torch.get_num_threads(), "profile": [total, inside]}


def run(repeats: int = 9) -> Section:  # calls of a quarter second: 3 repeats left the median to chance
    section = Section(
        title="6. Tiny Stable Diffusion on torch and on MindSpore (CPU), and the cost of compare",
        method=(f"{__doc__.split(chr(10) + chr(10))[2].strip()} {STEPS} steps per call, seconds per step = "
                f"call time / {STEPS} (text encoding and VAE decoding included), {repeats} repeats after a "
                "warm-up call each."),
        columns=["run", "s per step (min / med / max)", "ratio (min / med / max)"],
    )
    with tempfile.TemporaryDirectory(prefix="xrand-bench-sd-") as tmp:
        from xrand.models.tiny_sd import build_tiny_sd

        folder = str(build_tiny_sd(Path(tmp) / "tiny-sd", seed=0))
        try:
            info = run_json([str(Path(__file__).resolve()), "--child", folder, str(repeats)], timeout=1200)
        except RuntimeError as exc:
            section.rows.append(Row(["failed", str(exc)[-300:].replace("\n", " "), "-"]))
            return section
    t = info["times"]
    section.rows.append(Row(["torch (diffusers)", fmt_mmm([x / STEPS for x in t["torch"]], 1, 3), "-"]))
    for mode, label in (("graph", "graph mode (the default)"), ("pynative", "PyNative")):
        r = ratios(t[f"mindspore {mode}"], t["torch"])
        row = [f"MindSpore, {label} (mindone.diffusers)", fmt_mmm([x / STEPS for x in t[f"mindspore {mode}"]], 1, 3),
               "MindSpore / torch " + fmt_mmm(r, 1, 1)]
        judged = mode == "graph"
        section.rows.append(Row(row, target=f"≤ {TARGET_RATIO:.0f}x" if judged else "",
                                met=statistics.median(r) <= TARGET_RATIO if judged else None))
    over = [c / b - 1 for c, b in zip(t["compare"], t["both"])]
    section.rows.append(Row([f"compare_loaded against both pipelines called directly ({fmt_mmm(t['both'], 1, 2)} s)",
                             fmt_mmm([x / STEPS for x in t["compare"]], 1, 3),
                             "overhead " + " / ".join(f"{v:+.1%}" for v in (min(over), statistics.median(over),
                                                                            max(over)))],
                            target=f"≤ {TARGET_OVERHEAD:.0%}", met=statistics.median(over) <= TARGET_OVERHEAD))
    total, inside = info["profile"]
    section.notes.append(f"One compare_loaded call under cProfile: {total:.2f} s, of which the two pipelines' own "
                         f"calls {inside:.2f} s; compare's own work (seeding, recording each step, fingerprints, "
                         f"the report's data) {total - inside:.3f} s = {(total - inside) / inside:+.1%} over the "
                         "pipelines, whatever the machine's load. torch threads "
                         f"{info['torch_threads']}.")
    return section


def _child_main(argv) -> None:
    model, repeats = argv[0], int(argv[1])
    print(json.dumps(child(model, repeats)))


if __name__ == "__main__":
    figure_main(run, __doc__.splitlines()[0], child=_child_main)
