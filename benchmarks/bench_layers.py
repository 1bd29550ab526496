"""Figure 7: what ``xrand compare --layers`` costs, against one lockstep step of the same model.

    python benchmarks/bench_layers.py [--repeats 5]

Models: the embedded digits model and a random-weight model of the google/ddpm-cifar10-32
architecture (bench_ddim's). Each runs in a fresh process that loads both pipelines as
``xrand compare`` does, runs the torch side once (its trajectory feeds both), then times,
interleaved: one lockstep step (what ``--lockstep`` runs over k steps, divided by k: the torch
side recording every denoiser call and step, the MindSpore side fed them) and
``compare.layers.layers_at_step`` at step 0 (what ``--layers``
adds: hooked torch pass, two hooked MindSpore passes, torch's float64 floor pass), also with an
explicit ``--layer-tolerance`` (no floor pass). MindSpore in PyNative (what --layers uses).
Target: --layers at most 5x one lockstep step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench_common import Row, Section, figure_main, fmt_mmm, profile_top, ratios, run_json
from bench_ddim import CIFAR_SCHEDULER, CIFAR_UNET, digits_model, save_model

TARGET_RATIO = 5.0
LOCKSTEP_SECONDS = 1.0  # lockstep steps per timed call: about this long (1 to 20 steps)


def child(model: str, repeats: int, profile: bool) -> dict:
    """Runs in a fresh process: load both pipelines, time lockstep and layers interleaved."""
    from xrand.frameworks.quiet import silenced

    with silenced():
        import mindspore  # noqa: F401
        import torch

    from xrand.compare import LayerOptions, load_pair, make_plan
    from xrand.compare.layers import layers_at_step
    from xrand.compare.sides import Everything, run
    from xrand.patch import patched
    from xrand.pipelines.settings import Settings

    def plan_of(steps, layers=None):
        return make_plan(Settings(model=model, steps=steps, batch_size=1), mindspore_mode="pynative", layers=layers)

    def lockstep(plan):
        """What --lockstep runs: torch recording every call, MindSpore fed them (PyNative, as --layers runs)."""
        side = run(pair.torch, plan, record_calls=Everything(), record_steps=True)
        return run(pair.mindspore, plan, feed=side.recording)

    pair = load_pair(plan_of(1))
    lockstep(plan_of(1))  # warm-up
    start = time.perf_counter()
    lockstep(plan_of(2))
    k = max(1, min(20, round(LOCKSTEP_SECONDS / ((time.perf_counter() - start) / 2))))
    plans = {name: plan_of(k, LayerOptions(step=0, threshold=threshold))
             for name, threshold in (("layers", None), ("layers, --layer-tolerance", 1e-4))}
    side = run(pair.torch, plans["layers"], record_calls={0})

    def layers(name):
        return layers_at_step(pair.torch, pair.mindspore, plans[name], side.recording, side.timesteps)

    methods = {
        "lockstep step": lambda: lockstep(plan_of(k)),
        "layers": lambda: layers("layers"),
        "layers, --layer-tolerance": lambda: layers("layers, --layer-tolerance"),
    }
    per = {"lockstep step": k, "layers": 1, "layers, --layer-tolerance": 1}
    times = {name: [] for name in methods}
    names = list(methods)
    with patched():  # as compare_loaded runs them: patched once, not once per call
        for fn in methods.values():
            fn()  # warm-up
        for r in range(repeats):
            for name in names[r % len(names):] + names[: r % len(names)]:
                start = time.perf_counter()
                methods[name]()
                times[name].append((time.perf_counter() - start) / per[name])
    report = methods["layers"]()
    result = {"k": k, "times": times, "torch_threads": torch.get_num_threads(), "modules": len(report.modules),
              "culprit": report.culprit, "threshold": report.threshold}
    ratio = statistics.median(ratios(times["layers"], times["lockstep step"]))
    if profile and ratio > TARGET_RATIO:
        with patched():
            result["profile"] = profile_top(methods["layers"], limit=12)
    return result


def _child_main(argv) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(child(args.model, args.repeats, args.profile)))


def run(repeats: int = 5) -> Section:
    section = Section(
        title="7. The cost of compare --layers, against one lockstep step",
        method=(
            "Seconds per call, batch 1, fp32, MindSpore in PyNative, both pipelines loaded in one fresh process by "
            "`compare.load_pair`, as `xrand compare` loads them. **lockstep step**: what `--lockstep` runs over k steps "
            "(the torch side recording every denoiser call and step, then the MindSpore side fed them; k chosen so a "
            f"call lasts about {LOCKSTEP_SECONDS:.0f} s) divided by k. "
            "**layers**: `compare.layers.layers_at_step` at step 0, what `--layers` adds to a comparison (the denoiser "
            "call the torch side recorded at that step, a hooked torch pass, MindSpore as run and MindSpore fed torch's "
            "inputs at every module, torch's float64 floor pass). "
            f"{repeats} repeats, interleaved, after a warm-up call each, all inside one `xrand.patched()` block as "
            "`compare_loaded` runs them (patching scans every loaded module, once per comparison). Ratio: layers / "
            "lockstep step per repeat."
        ),
        columns=["model", "run", "s per call (min / med / max)", "ratio to a lockstep step (min / med / max)"],
    )
    with tempfile.TemporaryDirectory(prefix="xrand-bench-") as tmp:
        digits, digits_note = digits_model(tmp)
        cifar = save_model(os.path.join(tmp, "cifar10-architecture"), CIFAR_UNET, CIFAR_SCHEDULER)
        section.notes.append(f"Models: digits is {digits_note}; cifar10-architecture: random weights, "
                             "google/ddpm-cifar10-32's config (35.7M parameters).")
        for label, folder in (("digits", digits), ("cifar10-architecture", cifar)):
            argv = [os.path.abspath(__file__), "--child", "--model", folder, "--repeats", str(repeats), "--profile"]
            try:
                info = run_json(argv, timeout=1800)
            except RuntimeError as exc:
                section.rows.append(Row([label, "failed", str(exc)[-300:].replace("\n", " "), "-"]))
                continue
            times = info["times"]
            section.rows.append(Row([label, f"lockstep step (k={info['k']})", fmt_mmm(times["lockstep step"], 1, 3),
                                     "-"]))
            for name in ("layers", "layers, --layer-tolerance"):
                r = ratios(times[name], times["lockstep step"])
                section.rows.append(Row([label, name, fmt_mmm(times[name], 1, 3), fmt_mmm(r, 1, 1)],
                                        target=f"≤ {TARGET_RATIO:.0f}x",
                                        met=statistics.median(r) <= TARGET_RATIO))
            section.notes.append(f"{label}: {info['modules']} module calls compared; culprit at step 0: "
                                 f"{info['culprit'] or 'none'} (threshold {info['threshold']:.3g}); "
                                 f"torch threads {info['torch_threads']}.")
            if "profile" in info:
                section.notes.append(f"Where --layers' time goes ({label}; cProfile, own time):\n\n" + info["profile"])
    return section


def main() -> None:
    figure_main(run, __doc__.splitlines()[0], child=_child_main)


if __name__ == "__main__":
    main()
