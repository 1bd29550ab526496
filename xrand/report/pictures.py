"""The pictures of a report: both sides' images and their difference, error per step, error per
module call, and the scheduler matrix (matplotlib, written to PNG files)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..files import pyplot


def plot_comparison(c: Any, path: str, max_items: int = 8) -> None:
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


def plot_divergence(c: Any, path: str) -> None:
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


def plot_matrix(m: Any, path: str) -> None:
    """Final relative L2 per scheduler on a log axis, the tolerance as a line."""
    plt = pyplot()
    labels = [r.label for r in m.rows]
    values = [max(r.rel_l2, 1e-12) if r.rel_l2 is not None and r.rel_l2 == r.rel_l2 else 1.0 for r in m.rows]
    colors = {"pass": "tab:green", "fail": "tab:red", "error": "tab:gray"}
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(labels) + 1.5))
    ax.barh(range(len(labels)), values, color=[colors[r.verdict] for r in m.rows])
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(m.tolerance, color="black", lw=0.8, ls=":", label=f"tolerance {m.tolerance:g}")
    ax.set_xlabel("relative L2, torch vs MindSpore, final images (errors drawn at 1)")
    ax.set_title(m.summary()[:110], fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
