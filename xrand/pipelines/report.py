"""What a person reads: report.json, comparison.png and divergence.png, written atomically."""
from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Dict, Iterator

import numpy as np

from .compare import Comparison

REPORT_VERSION = 1


@contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary name beside ``path``; rename it into place only if the block succeeds."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def report_dict(c: Comparison) -> Dict[str, Any]:
    return _json_safe({
        "xrand_report": REPORT_VERSION,
        "verdict": "pass" if c.passed else "fail",
        "summary": c.verdict(),
        "frameworks": c.frameworks,
        "settings": dict(asdict(c.settings), ran=c.ran),
        "tolerance": {"metric": "rel_l2 of the final images", "value": c.tolerance},
        "final": c.final,
        "initial_noise": c.initial_noise,
        "steps": [
            {"step": i, "timestep": t, "global": g, **({"local": c.local_steps[i]} if c.local_steps else {})}
            for i, (t, g) in enumerate(zip(c.timesteps, c.global_steps))
        ],
        "seconds": c.seconds,
        "environment": c.environments,
    })


def write_report(c: Comparison, out_dir: str) -> Dict[str, str]:
    """Write the three files into ``out_dir`` (created if needed); return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name) for name in ("report.json", "comparison.png", "divergence.png")}
    with atomic_path(paths["report.json"]) as tmp:
        with open(tmp, "w") as f:
            json.dump(report_dict(c), f, indent=2)
    with atomic_path(paths["comparison.png"]) as tmp:
        plot_comparison(c, tmp)
    with atomic_path(paths["divergence.png"]) as tmp:
        plot_divergence(c, tmp)
    return paths


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_comparison(c: Comparison, path: str, max_items: int = 8) -> None:
    """One row per batch item: image A, image B, |A - B| as a heat map."""
    plt = _pyplot()
    a, b = c.images["a"][:max_items], c.images["b"][:max_items]
    rows = len(a)
    fig, axes = plt.subplots(rows, 3, figsize=(9, 3 * rows + 0.6), squeeze=False)
    diff_max = float(np.max(np.abs(a - b))) or 1e-12
    for i in range(rows):
        for j, (img, title) in enumerate([(a[i], c.frameworks[0]), (b[i], c.frameworks[1])]):
            ax = axes[i, j]
            if img.shape[-1] == 1:
                ax.imshow(img[..., 0], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            else:
                ax.imshow(np.clip(img, 0, 1), interpolation="nearest")
            ax.set_title(f"{title} #{i}")
            ax.axis("off")
        heat = axes[i, 2].imshow(np.abs(a[i] - b[i]).max(axis=-1), cmap="magma", vmin=0, vmax=diff_max,
                                 interpolation="nearest")
        axes[i, 2].set_title("|difference|")
        axes[i, 2].axis("off")
        fig.colorbar(heat, ax=axes[i, 2], fraction=0.046)
    fig.suptitle(c.verdict(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def plot_divergence(c: Comparison, path: str) -> None:
    """Relative L2 and max |diff| per step: free running (global) and lockstep (local)."""
    plt = _pyplot()
    steps = np.arange(1, len(c.global_steps) + 1)
    tiny = 1e-12  # exact agreement plotted at the floor of the log axis

    def series(rows, key):
        return np.maximum([r[key] for r in rows], tiny)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, series(c.global_steps, "rel_l2"), "o-", ms=3, label="global: relative L2 (free running)")
    ax.plot(steps, series(c.global_steps, "max_abs"), "o--", ms=3, label="global: max |diff|")
    if c.local_steps:
        ax.plot(steps, series([r["sample"] for r in c.local_steps], "rel_l2"), "s-", ms=3,
                label="local: relative L2 of one step (lockstep)")
        ax.plot(steps, series([r["model_output"] for r in c.local_steps], "rel_l2"), "^:", ms=3,
                label="local: relative L2 of the UNet output")
    ax.axhline(c.tolerance, color="gray", lw=0.8, ls=":", label=f"tolerance {c.tolerance:g}")
    ax.set_yscale("log")
    ax.set_xlabel("denoising step")
    ax.set_ylabel("difference")
    ax.set_title(f"{c.frameworks[0]} vs {c.frameworks[1]}: error per step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
