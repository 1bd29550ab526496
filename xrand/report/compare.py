"""What a person reads of a comparison: report.json, comparison.png and divergence.png (layers.png
with --layers, frames.png for a video), each written whole or not at all."""
from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any, Dict, Optional

from ..compare.boundary import largest_local_error
from ..compare.result import Comparison
from ..files import atomic_path, json_safe, write_json
from .command import compare_command
from .html import write_compare_page
from .pictures import plot_comparison, plot_divergence, plot_frames, plot_layers

REPORT_VERSION = 1


def report_dict(c: Comparison, reproduce: Optional[str] = None) -> Dict[str, Any]:
    """report.json's dict; ``reproduce``: the ``xrand compare`` command that makes it again (by
    default derived from the comparison, with absolute paths: :func:`.command.compare_command`)."""
    extra = {}
    if c.noise_floor is not None:
        extra["noise_floor"] = c.noise_floor
    if c.layers is not None:
        extra["layers"] = c.layers.to_dict()
    if c.ops is not None:  # the operators inside one module call (--ops)
        extra["ops"] = c.ops.to_dict()
    if c.local_steps:  # lockstep's largest local errors, for the verdict box
        extra["lockstep"] = largest_local_error(c.local_steps)
    if c.weights is not None:  # the loaded weights matched before any step (compare/weights.py)
        extra["weights"] = c.weights
    if c.stages is not None:  # a staged run: what is in this report and what is still to come
        extra["stages"] = c.stages
    report = json_safe({
        "xrand_report": REPORT_VERSION,
        "verdict": "pass" if c.passed else "fail",
        "summary": c.verdict(),
        "known_causes": c.known_causes(),
        "frameworks": c.frameworks,
        "settings": dict(asdict(c.settings), ran=c.ran),
        "tolerance": {"metric": "rel_l2 of the final images", "value": c.tolerance},
        "final": c.final,
        "components": c.components,
        "parted_by": c.parted_by,
        "nonfinite": {fw: c.nonfinite_seen().get(fw) for fw in c.frameworks},
        "initial_noise": c.initial_noise,
        "steps_ran": c.steps_ran(),
        "steps": [
            {"step": i, "timestep": t, "global": g, **({"local": c.local_steps[i]} if c.local_steps else {}),
             **({"timestep_b": c.timesteps_b[i]} if c.timesteps_b else {})}
            for i, (t, g) in enumerate(zip(c.timesteps, c.global_steps))
        ],
        "seconds": c.seconds,
        "environment": c.environments,
        **extra,
    })
    report["reproduce"] = reproduce or compare_command(report, absolute=True)
    return report


def write_report(c: Comparison, out_dir: str, reproduce: Optional[str] = None) -> Dict[str, str]:
    """Write report.json, the pictures and report.html into ``out_dir`` (created if needed); return
    their paths. ``reproduce``: the command that makes the report again (see :func:`report_dict`)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name) for name in ("report.json", "comparison.png", "divergence.png")}
    write_json(paths["report.json"], report_dict(c, reproduce))
    with atomic_path(paths["comparison.png"]) as tmp:
        plot_comparison(c, tmp)
    with atomic_path(paths["divergence.png"]) as tmp:
        plot_divergence(c, tmp)
    if "per_frame" in c.final:
        paths["frames.png"] = os.path.join(out_dir, "frames.png")
        with atomic_path(paths["frames.png"]) as tmp:
            plot_frames(c, tmp)
    if c.layers is not None:
        paths["layers.png"] = os.path.join(out_dir, "layers.png")
        with atomic_path(paths["layers.png"]) as tmp:
            plot_layers(c.layers, tmp)
    paths.update(write_compare_page(out_dir))  # report.html (and layers.csv) from the files above
    return paths
