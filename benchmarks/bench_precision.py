"""Figure 11: seconds per step in float32, float16 and bfloat16, diffusers on torch and mindone on MindSpore (CPU).

    python benchmarks/bench_precision.py [--repeats 5]

Models: the digits model shipped in the package (DDIMPipeline, batch 1) and xrand.models' tiny
Stable Diffusion (32x32, batch 1, one prompt). One fresh process plans each (model, dtype) as
``xrand compare --dtype DTYPE --no-noise-floor`` plans it, loads both sides with
``xrand.compare.sides.load`` and times each side's run with ``xrand.compare.sides.run`` (what
``xrand compare`` runs per side: the library pipeline, or xrand's loop where the plan says so;
MindSpore in the plan's mode, with the bfloat16 stand-ins where its CPU kernels lack bfloat16),
the two sides interleaved. Reported only: no target.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench_common import Row, Section, figure_main, fmt_mmm, ratios, run_json

STEPS = 4
DTYPES = ("float32", "float16", "bfloat16")


def child(sd_folder: str, repeats: int) -> dict:
    """Runs in a fresh process: each (model, dtype) loaded once, its two sides timed interleaved."""
    from bench_common import interleaved

    from xrand.cli import default_model
    from xrand.compare import make_plan
    from xrand.compare.sides import load, run
    from xrand.patch import patched
    from xrand.pipelines.settings import Settings

    models = {"digits": dict(model=default_model()),
              "tiny SD": dict(model=sd_folder, prompt="a red circle", height=32, width=32)}
    out = {}
    for model, values in models.items():
        for dtype in DTYPES:
            plan = make_plan(Settings(steps=STEPS, batch_size=1, seed=0, dtype=dtype, **values), noise_floor=False)
            loaded = {name: load(plan, name) for name in ("torch", "mindspore")}

            def side(name):
                with patched():
                    return run(loaded[name], plan)

            methods = {name: (lambda name=name: side(name)) for name in loaded}
            ran = {name: fn() for name, fn in methods.items()}  # warm-up (graph mode compiles here)
            times = interleaved(methods, repeats, {name: 1 for name in methods})
            out[f"{model} {dtype}"] = {
                "times": times, "mode": plan.mindspore_mode, "reason": plan.mindspore_mode_reason,
                "pipeline": ran["torch"].ran["pipeline"],
                "stand_ins": sorted(ran["mindspore"].ran.get("half_precision_stand_ins") or {})}
    return out


def run(repeats: int = 5) -> Section:
    section = Section(
        title="11. Seconds per step in float32, float16 and bfloat16 on torch and on MindSpore (CPU)",
        method=(f"{__doc__.split(chr(10) + chr(10))[2].strip()} {STEPS} denoising steps per run, seconds per "
                f"step = run time / {STEPS} (text encoding and decoding included), {repeats} repeats after a "
                "warm-up run each."),
        columns=["model, dtype", "ran", "torch s per step", "MindSpore s per step (mode)", "MindSpore / torch",
                 "MindSpore kernels through a bfloat16 stand-in"],
    )
    with tempfile.TemporaryDirectory(prefix="xrand-bench-precision-") as tmp:
        from xrand.models import build_tiny

        folder = build_tiny("sd", Path(tmp) / "sd")
        try:
            info = run_json([str(Path(__file__).resolve()), "--child", str(folder), str(repeats)], timeout=1800)
        except RuntimeError as exc:
            section.rows.append(Row(["failed", str(exc)[-300:].replace("\n", " "), "-", "-", "-", "-"]))
            return section
    reasons = {}
    for name, r in info.items():
        t = r["times"]
        section.rows.append(Row([
            name, r["pipeline"], fmt_mmm([x / STEPS for x in t["torch"]], 1, 3),
            f"{fmt_mmm([x / STEPS for x in t['mindspore']], 1, 3)} ({r['mode']})",
            fmt_mmm(ratios(t["mindspore"], t["torch"]), 1, 1), ", ".join(r["stand_ins"]) or "-"]))
        if r["reason"]:
            reasons.setdefault(r["reason"], []).append(name)
    for reason, names in reasons.items():
        section.notes.append(f"PyNative for {', '.join(names)}: {reason} (the plan's mindspore_mode_reason).")
    return section


if __name__ == "__main__":
    figure_main(run, __doc__.splitlines()[0], child=lambda argv: print(json.dumps(child(argv[0], int(argv[1])))))
