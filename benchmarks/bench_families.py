"""Figure 9: seconds per step of each pipeline family, diffusers on torch and mindone on MindSpore (CPU).

    python benchmarks/bench_families.py [--repeats 3]

Models: xrand.models' tiny random-weight folders (32x32 images, Wan 5 and LTX 9 frames of 32x32, T5 prompts
of 32 tokens), built in a temporary folder; the settings are those of the README's commands
(batch 1, the pipelines' own guidance, image-to-image and inpainting at strength 0.5). One fresh
process loads every family with ``xrand.compare.sides.load`` (as ``xrand compare`` does) and
times, interleaved within each family: diffusers' pipeline with a ``torch.Generator``, mindone's
with a NumPy generator in the mode ``xrand compare`` runs it in (graph mode where the denoiser
compiles for a CPU, else PyNative: the plan's ``mindspore_mode``), and in PyNative where that
is graph mode. Reported only: no target (PyNative on a CPU is MindSpore's slow path).
"""
from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from bench_common import Row, Section, figure_main, fmt_mmm, interleaved, ratios, run_json

STEPS = 4
PROMPT = "a red circle on a blue square"
TEXT = dict(height=32, width=32, call_options={"max_sequence_length": 32})
TINY = {"tiny": True}  # the size and call options of the folder's tiny run (xrand.models.TINY_MODELS)
# family -> (tiny folder, pipeline (None: the folder's), settings; image-to-image runs STEPS of 2 * STEPS).
# HunyuanVideo is not timed: mindone 0.5.0 cannot run it (xrand/compare/known.py, KNOWN_FAILURES).
FAMILIES = {
    "SD img2img": ("sd", "StableDiffusionImg2ImgPipeline", dict(steps=2 * STEPS, strength=0.5, image=True)),
    "SD inpaint": ("sd-inpaint", None, dict(steps=2 * STEPS, strength=0.5, height=32, width=32, image=True,
                                            mask=True)),
    "SDXL": ("sdxl", None, dict(height=32, width=32)),
    "SD3": ("sd3", None, TEXT),
    "Flux": ("flux", None, TEXT),
    "Flux Kontext": ("flux", "FluxKontextPipeline", dict(TEXT, image=True, call_options={
        "max_sequence_length": 32, "_auto_resize": False, "max_area": 1024})),
    "PixArt-Sigma": ("pixart", None, dict(TEXT, call_options={"max_sequence_length": 32,
                                                              "use_resolution_binning": False})),
    "Wan (5 frames)": ("wan", None, dict(TEXT, frames=5)),
    "LTX-Video (9 frames)": ("ltx", None, dict(TEXT, frames=9)),
    "Sana": ("sana", None, TINY),
    "Lumina 2": ("lumina2", None, TINY),
    "CogView4": ("cogview4", None, TINY),
    "Chroma": ("chroma", None, TINY),
    "Wan image to video (5 frames)": ("wan-i2v", None, dict(TINY, image=True)),
    "CogVideoX (5 frames)": ("cogvideox", None, TINY),
    "CogVideoX image to video (5 frames)": ("cogvideox-i2v", None, dict(TINY, image=True)),
    "AnimateDiff (4 frames)": ("animatediff", None, dict(TINY, frames=4)),
    "Qwen-Image": ("qwenimage", None, TINY),
    "SD ControlNet": ("sd-controlnet", None, dict(height=32, width=32, control_image=True)),
    "SDXL ControlNet": ("sdxl-controlnet", None, dict(height=32, width=32, control_image=True)),
    "Flux ControlNet": ("flux-controlnet", None, dict(TEXT, control_image=True)),
}


def child(root: str, repeats: int) -> dict:
    """Runs in a fresh process: each family loaded once, its pipelines timed interleaved."""
    import numpy as np

    from xrand.frameworks.quiet import silenced

    with silenced():
        import mindspore  # noqa: F401
        import torch

    from xrand.compare import make_plan
    from xrand.compare.sides import load
    from xrand.frameworks import mindspore_mode
    from xrand.pipelines.settings import Settings

    from xrand.models import TINY_MODELS

    out = {}
    for family, (folder, pipeline, values) in FAMILIES.items():
        values = dict(values)
        if values.pop("tiny", False):
            values = {**TINY_MODELS[folder].settings(), **values}
        files = {name: f"{root}/{'image' if name == 'control_image' else name}.png"
                 for name in ("image", "mask", "control_image") if values.pop(name, False)}
        settings = Settings(model=f"{root}/{folder}", pipeline=pipeline, prompt=PROMPT, batch_size=1,
                            **{"steps": STEPS, **values, **files})
        plan = make_plan(settings)
        loaded = {name: load(plan, name) for name in ("torch", "mindspore")}

        def call(name, generator):
            return loaded[name].pipe(**plan.call_arguments(generator), return_dict=False)

        def run_mindspore(mode):
            with mindspore_mode(mode):
                return call("mindspore", np.random.Generator(np.random.PCG64(0)))

        methods = {"torch": lambda: call("torch", torch.Generator("cpu").manual_seed(0)),
                   f"mindspore {plan.mindspore_mode}": lambda: run_mindspore(plan.mindspore_mode)}
        if plan.mindspore_mode != "pynative":
            methods["mindspore pynative"] = lambda: run_mindspore("pynative")
        for fn in methods.values():
            fn()  # warm-up (graph mode compiles here)
        times = interleaved(methods, repeats, {name: 1 for name in methods})
        out[family] = {"times": times, "pipeline": plan.pipeline, "mode": plan.mindspore_mode,
                       "reason": plan.mindspore_mode_reason}
    return {"families": out, "torch_threads": torch.get_num_threads()}


def run(repeats: int = 5) -> Section:
    section = Section(
        title="9. Pipeline families on torch and on MindSpore (CPU), seconds per step",
        method=(f"{__doc__.split(chr(10) + chr(10))[2].strip()} {STEPS} denoising steps per call, seconds per "
                f"step = call time / {STEPS} (text encoding, VAE encoding and decoding included), {repeats} "
                "repeats after a warm-up call each."),
        columns=["family (pipeline)", "torch s per step", "MindSpore s per step (mode xrand compare runs)",
                 "MindSpore / torch", "MindSpore PyNative s per step", "PyNative / torch"],
    )
    with tempfile.TemporaryDirectory(prefix="xrand-bench-families-") as tmp:
        import numpy as np
        from PIL import Image

        from xrand.models import build_tiny

        for name in sorted({folder for folder, _, _ in FAMILIES.values()}):
            build_tiny(name, Path(tmp) / name)
        Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)).save(
            Path(tmp) / "image.png")
        mask = np.zeros((32, 32), np.uint8)
        mask[8:24, 8:24] = 255
        Image.fromarray(mask).save(Path(tmp) / "mask.png")
        try:
            info = run_json([str(Path(__file__).resolve()), "--child", tmp, str(repeats)], timeout=1800)
        except RuntimeError as exc:
            section.rows.append(Row(["failed", str(exc)[-300:].replace("\n", " "), "-", "-", "-", "-"]))
            return section
    reasons = {}
    for family, r in info["families"].items():
        t = r["times"]
        torch_steps = [x / STEPS for x in t["torch"]]
        mode = f"mindspore {r['mode']}"
        cells = [f"{family} ({r['pipeline']})", fmt_mmm(torch_steps, 1, 3),
                 f"{fmt_mmm([x / STEPS for x in t[mode]], 1, 3)} ({r['mode']})",
                 fmt_mmm(ratios(t[mode], t["torch"]), 1, 1)]
        if "mindspore pynative" in t and r["mode"] != "pynative":
            cells += [fmt_mmm([x / STEPS for x in t["mindspore pynative"]], 1, 3),
                      fmt_mmm(ratios(t["mindspore pynative"], t["torch"]), 1, 1)]
        else:
            cells += ["(the same)", "-"]
        section.rows.append(Row(cells))
        if r["reason"]:
            reasons.setdefault(r["reason"], []).append(family)
    for reason, families in reasons.items():
        section.notes.append(f"PyNative for {', '.join(families)}: {reason} (the plan's mindspore_mode_reason).")
    medians = {f: statistics.median(ratios(r["times"][f"mindspore {r['mode']}"], r["times"]["torch"]))
               for f, r in info["families"].items()}
    section.notes.append("Median MindSpore / torch per family: " + ", ".join(f"{f} {v:.1f}x" for f, v in
                                                                          medians.items())
                         + f". torch threads {info['torch_threads']}.")
    spread = {side: max(max(t) / min(t) for r in info["families"].values()
                        for name, t in r["times"].items() if name.startswith(side)) for side in ("torch", "mindspore")}
    section.notes.append("Largest spread of one family's times over its repeats (max / min): torch "
                         f"{spread['torch']:.0f}x, MindSpore {spread['mindspore']:.0f}x. Where it is large, other "
                         "processes took the cores during some repeats and not others (see below); the minima are "
                         "the nearest to an idle machine.")
    return section


if __name__ == "__main__":
    figure_main(run, __doc__.splitlines()[0], child=lambda argv: print(json.dumps(child(argv[0], int(argv[1])))))
