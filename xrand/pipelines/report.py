"""What a person reads: report.json, comparison.png and divergence.png (layers.png with --layers), written atomically."""
from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any, Dict

import numpy as np

from .compare import Comparison
from .files import atomic_path, json_safe, pyplot, write_json

REPORT_VERSION = 1


def report_dict(c: Comparison) -> Dict[str, Any]:
    extra = {}
    if c.noise_floor is not None:
        extra["noise_floor"] = c.noise_floor
    if c.layers is not None:
        extra["layers"] = c.layers.to_dict()
    return json_safe({
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
        **extra,
    })


def write_report(c: Comparison, out_dir: str) -> Dict[str, str]:
    """Write the three files into ``out_dir`` (created if needed); return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name) for name in ("report.json", "comparison.png", "divergence.png")}
    write_json(paths["report.json"], report_dict(c))
    with atomic_path(paths["comparison.png"]) as tmp:
        plot_comparison(c, tmp)
    with atomic_path(paths["divergence.png"]) as tmp:
        plot_divergence(c, tmp)
    if c.layers is not None:
        paths["layers.png"] = os.path.join(out_dir, "layers.png")
        with atomic_path(paths["layers.png"]) as tmp:
            plot_layers(c.layers, tmp)
    return paths


def plot_comparison(c: Comparison, path: str, max_items: int = 8) -> None:
    """One row per batch item: image A, image B, |A - B| as a heat map."""
    plt = pyplot()
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
    plt = pyplot()
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


def plot_layers(layers: Any, path: str) -> None:
    """Local and global relative L2 of every module call along the network, the culprit marked."""
    plt = pyplot()
    rows = layers.modules
    x = np.arange(len(rows))
    tiny = 1e-12

    def series(key):
        return np.array([max(getattr(r, key), tiny) if getattr(r, key) is not None else np.nan for r in rows])

    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.06), 4.5))
    ax.plot(x, series("rel_l2"), ".-", ms=3, lw=0.8, label="global: outputs as run")
    ax.plot(x, series("local_rel_l2"), "s", ms=3, label="local: fed torch's inputs")
    if any(r.floor_rel_l2 is not None for r in rows):
        ax.plot(x, series("floor_rel_l2"), ":", lw=0.8, color="gray", label="torch float32 vs float64 (as run)")
    ax.axhline(layers.threshold, color="red", lw=0.8, ls="--", label=f"threshold {layers.threshold:.3g}")
    culprit = next((i for i, r in enumerate(rows) if r.label == layers.culprit), None)
    if culprit is not None:
        ax.axvline(culprit, color="red", lw=1.2)
        ax.annotate(f"culprit: {layers.culprit}", (culprit, ax.get_ylim()[1]), fontsize=8, color="red",
                    rotation=90, va="top", ha="right")
    ticks = [i for i, r in enumerate(rows) if r.call == 0 and (
        "." not in r.name or (r.name.count(".") == 1 and r.name.split(".")[1].isdigit()))]
    ax.set_xticks(ticks)
    ax.set_xticklabels([rows[i].name or "(denoiser)" for i in ticks], rotation=90, fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel("relative L2")
    step = f"step {layers.step}, timestep {layers.timestep}" if layers.step is not None else "one call"
    ax.set_title(f"module calls in execution order ({step})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
