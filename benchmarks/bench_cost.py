"""What a comparison costs: the whole default ``xrand compare`` against torch's own pipeline alone.

Models: the embedded digits model with ``xrand compare``'s defaults (DDIM, 50 steps, batch 4), and
figure 10's random-weight SD-1.5-sized folder (its Euler ancestral scheduler, 256 px, 4 steps,
batch 1, guidance 7.5, float32). Each run is a fresh process, timed from its start to its exit,
its peak resident memory (the process and its children, VmRSS sampled every 0.2 s) kept:

- torch alone: diffusers' pipeline loaded from the folder and called once with the same settings
  (the seed's generator on the CPU, output as NumPy), as a user runs it without xrand;
- ``xrand compare`` (its defaults: both sides, the loaded weights checked, torch's float64 floor,
  report.json, report.html and pictures written into ``--out``), once with the floor measured (no
  kept floor: the cache's ``torch-floors`` folder emptied before) and once with the floor kept by
  the run before (xrand.compare.floor.kept_floor).

The SD-1.5-sized folder, which the compare runs MindSpore PyNative on by default (its weights are
over 1 GiB), once more with ``--mindspore-mode graph`` and the floor kept: what the faster steps
of graph mode give at that size, at the memory graph mode holds.

One warm-up compare first puts MindSpore's compiled graphs (the digits model runs graph mode; one
more warm-up in graph mode for the SD-1.5-sized folder) and the floor in a cache folder of this
figure's own; the runs are then interleaved per repeat.
The ratio of each compare to the torch run of the same repeat; target: within 3x torch alone.
Where the compare's time goes: the stages' seconds from its manifest.json (median over repeats).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import PYTHON, ROOT, Row, Section, figure_main, tree_rss  # noqa: E402

TARGET = 3.0
PROMPT = "a red circle on a blue square"
#: model -> (the compare's settings flags, the pipeline call's keyword arguments)
MODELS = {
    "digits": ([], {"batch_size": 4, "num_inference_steps": 50}),
    "SD-1.5-sized": (["--steps", "4", "--batch-size", "1", "--height", "256", "--width", "256", "--prompt", PROMPT],
                     {"prompt": PROMPT, "num_inference_steps": 4, "height": 256, "width": 256,
                      "num_images_per_prompt": 1}),
}
#: model -> the flags of one more compare, the floor kept (the folders MindSpore runs PyNative on by default)
GRAPH_MODE = {"SD-1.5-sized": ["--mindspore-mode", "graph"]}
TORCH_ALONE = """
import torch, diffusers
pipe = diffusers.DiffusionPipeline.from_pretrained({folder!r})
pipe.set_progress_bar_config(disable=True)
pipe(generator=torch.Generator().manual_seed(0), output_type="np", **{call!r})
"""


def timed(argv: List[str], env: Dict[str, str]) -> Dict[str, float]:
    """Run ``python *argv``; its wall seconds and peak RSS (GiB, 2**30 bytes) of its process tree."""
    peak = [0]
    start = time.perf_counter()
    proc = subprocess.Popen([PYTHON, *argv], cwd=str(ROOT), env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = proc.communicate(timeout=3600)
    seconds = time.perf_counter() - start
    sampler.join()
    if proc.returncode not in (0, 1):  # 1: a FAIL verdict, still a whole comparison
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {stderr.strip().splitlines()[-3:]}")
    return {"seconds": seconds, "peak_gb": peak[0] / 2**30}


def stage_seconds(out: str) -> Dict[str, float]:
    with open(os.path.join(out, "manifest.json")) as f:
        return {name: entry["seconds"] for name, entry in json.load(f)["stages"].items()}


def model_folder(name: str) -> str:
    if name == "digits":
        from xrand.models import DIGITS

        return DIGITS
    from bench_scale import model_folder as sd15

    return sd15(Path(tempfile.gettempdir()) / "xrand-sd15-sized")


def run(repeats: int = 2, models=tuple(MODELS)) -> Section:
    section = Section(
        title="16. What a comparison costs: the whole default `xrand compare` against torch's own pipeline alone",
        method=__doc__.split("\n\n", 1)[1].strip(),
        columns=["model", "run", "seconds (min / median / max)", "peak RSS (GiB)", "x torch alone (median)"])
    for model in models:
        folder = model_folder(model)
        flags, call = MODELS[model]
        with tempfile.TemporaryDirectory() as work:
            env = {"XRAND_CACHE_DIR": os.path.join(work, "cache")}
            compare = ["-m", "xrand", "compare", "--model", folder, *flags, "--quiet"]
            kinds = {"compare, floor measured": compare, "compare, floor kept": compare}
            if model in GRAPH_MODE:
                kinds["compare in graph mode, floor kept"] = [*compare, *GRAPH_MODE[model]]
            for i, argv in enumerate(dict.fromkeys(tuple(argv) for argv in kinds.values())):
                timed([*argv, "--out", os.path.join(work, f"warm-up-{i}")], env)
            runs: Dict[str, List[Dict[str, float]]] = {"torch alone": [], **{name: [] for name in kinds}}
            stages: Dict[str, List[Dict[str, float]]] = {name: [] for name in kinds}
            for r in range(repeats):
                runs["torch alone"].append(timed(["-c", TORCH_ALONE.format(folder=folder, call=call)], env))
                for j, (name, argv) in enumerate(kinds.items()):
                    if name == "compare, floor measured":
                        shutil.rmtree(os.path.join(work, "cache", "torch-floors"), ignore_errors=True)
                    out = os.path.join(work, f"{r}-{j}")
                    runs[name].append(timed([*argv, "--out", out], env))
                    stages[name].append(stage_seconds(out))
        alone = [x["seconds"] for x in runs["torch alone"]]
        for name, measured in runs.items():
            seconds = [x["seconds"] for x in measured]
            ratio = statistics.median(s / a for s, a in zip(seconds, alone))
            section.rows.append(Row([model, name, " / ".join(f"{s:.1f}" for s in (min(seconds), statistics.median(
                seconds), max(seconds))), f"{max(x['peak_gb'] for x in measured):.2f}",
                "-" if name == "torch alone" else f"{ratio:.2f}x"],
                *(("", None) if name == "torch alone" else (f"≤ {TARGET:g}x", ratio <= TARGET))))
        for name, per_run in stages.items():
            names = list(per_run[0])
            section.notes.append(f"{model}, {name}: stages (median s) " + ", ".join(
                f"{stage} {statistics.median(s.get(stage, 0.0) for s in per_run):.1f}" for stage in names)
                + f"; MindSpore's side alone {statistics.median(s['mindspore'] for s in per_run) / statistics.median(alone):.2f}x"
                " torch alone")
    return section


if __name__ == "__main__":
    figure_main(run, "the whole default xrand compare against torch's own pipeline alone")
