"""The pictures of a report: both sides' images and their difference, error per step, error per
module call, and the scheduler matrix (matplotlib, written to PNG files)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..compare.component_call import root_label, where
from ..files import pyplot


def plot_comparison(c: Any, path: str, max_items: int = 8) -> None:
    """One row per batch item: image A, image B, |A - B| as a heat map; the verdict above, wrapped
    to the figure's width so that none of it is cut off. Videos (batch, frames, H, W, C): one
    row per first, middle and last frame of each of the first two videos."""
    from .plots import wrap

    plt = pyplot()
    a, b = c.images["a"][:max_items], c.images["b"][:max_items]
    labels = [f"#{i}" for i in range(len(a))]
    if a.ndim == 5:
        frames = sorted({0, a.shape[1] // 2, a.shape[1] - 1})
        a, b = a[:2], b[:2]
        labels = [f"#{i} frame {f}" for i in range(len(a)) for f in frames]
        a, b = a[:, frames].reshape(-1, *a.shape[2:]), b[:, frames].reshape(-1, *b.shape[2:])
    rows = len(a)
    fig, axes = plt.subplots(rows, 3, figsize=(9, 3 * rows + 0.9), squeeze=False, layout="constrained")
    diff = np.abs(a - b)
    diff_max = float(np.max(diff, initial=0.0, where=np.isfinite(diff))) or 1e-12
    for i in range(rows):
        for j, (img, title) in enumerate([(a[i], c.frameworks[0]), (b[i], c.frameworks[1])]):
            ax = axes[i, j]
            if img.shape[-1] == 1:
                ax.imshow(img[..., 0], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            else:
                ax.imshow(np.clip(img, 0, 1), interpolation="nearest")
            ax.set_title(f"{title} {labels[i]}{_mark_nonfinite(ax, img)}")
            ax.axis("off")
        heat = axes[i, 2].imshow(np.nan_to_num(diff[i].max(axis=-1), nan=0.0, posinf=diff_max), cmap="magma", vmin=0,
                                 vmax=diff_max, interpolation="nearest")
        axes[i, 2].set_title(f"|difference| {labels[i]}{_mark_nonfinite(axes[i, 2], diff[i])}")
        axes[i, 2].axis("off")
        fig.colorbar(heat, ax=axes[i, 2], fraction=0.046)
    fig.suptitle(wrap(c.verdict(), 125), fontsize=9)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def _mark_nonfinite(ax: Any, img: np.ndarray) -> str:
    """Paint the pixels of ``img`` (H, W, C) that hold NaN or Inf cyan on ``ax``; a title's note of
    how many there are ('' where none)."""
    bad = ~np.isfinite(img).all(axis=-1)
    if not bad.any():
        return ""
    overlay = np.zeros(bad.shape + (4,))
    overlay[bad] = (0.0, 1.0, 1.0, 1.0)
    ax.imshow(overlay, interpolation="nearest")
    return f"\n{int(bad.sum())} pixels NaN/Inf (cyan)"


def plot_frames(c: Any, path: str) -> None:
    """A video's relative L2 and max |diff| per frame (``final["per_frame"]``) against the
    tolerance; exact agreement on a band of its own."""
    from .plots import ExactBand

    plt = pyplot()
    per_frame = c.final["per_frame"]
    frames = np.arange(len(per_frame))
    series = [("relative L2", [f["rel_l2"] for f in per_frame], "o-"),
              ("max |diff|", [f["max_abs"] for f in per_frame], "s--")]
    band = ExactBand([v for _, values, _ in series for v in values] + [c.tolerance])
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    band.start(ax)
    for label, values, style in series:
        ax.plot(frames, band(values), style, ms=4, label=label)
    ax.axhline(band([c.tolerance])[0], color="tab:red", lw=1, ls="--",
               label=f"tolerance {c.tolerance:g} (relative L2 of the whole video)")
    _finish_errors(fig, ax, band, frames, 40, "frame",
                   f"{c.frameworks[0]} vs {c.frameworks[1]}: error per frame of the final video", path)


def plot_divergence(c: Any, path: str) -> None:
    """Relative L2 and max |diff| per step, free running (global) and lockstep (local), against the
    tolerance and, when it was measured, torch's own floor at the run's dtype (the one the verdict
    names); exact agreement on a band of its own; the legend beside the plot, off the data."""
    from .plots import ExactBand

    plt = pyplot()
    steps = np.arange(1, len(c.global_steps) + 1)
    series = [("global: relative L2 (free running)", [r["rel_l2"] for r in c.global_steps], "o-"),
              ("global: max |diff|", [r["max_abs"] for r in c.global_steps], "o--")]
    if c.local_steps:
        series += [("local: relative L2 of one step (lockstep)", [r["sample"]["rel_l2"] for r in c.local_steps], "s-"),
                   ("local: relative L2 of the model output", [r["model_output"]["rel_l2"] for r in c.local_steps],
                    "^:")]
    floor = c.noise_floor["rel_l2"] if c.noise_floor is not None else None
    band = ExactBand([v for _, values, _ in series for v in values] + [c.tolerance, floor, c.final["rel_l2"]])
    fig, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
    band.start(ax)
    for label, values, style in series:
        ax.plot(steps, band(values), style, ms=3, label=label)
    ax.plot(steps[-1:], band([c.final["rel_l2"]]), "*", ms=11, color="black",
            label=f"final images: relative L2 {c.final['rel_l2']:.3g} (the verdict's)")
    ax.axhline(band([c.tolerance])[0], color="tab:red", lw=1, ls="--", label=f"tolerance {c.tolerance:g}")
    if floor is not None:
        ax.axhline(band([floor])[0], color="0.35", lw=1, ls="-.",
                   label=f"noise floor {floor:.3g}: torch {c.settings.dtype} vs float64, final images")
    for framework, seen in c.nonfinite_seen().items():
        if seen.get("step") is not None:  # the numbers after it are over the values still finite
            ax.axvline(seen["step"] + 1, color="c", lw=2,
                       label=f"{framework}: {seen['kind']} from step {seen['step'] + 1}")
    _finish_errors(fig, ax, band, steps, 30, "denoising step",
                   f"{c.frameworks[0]} vs {c.frameworks[1]}: error per step", path)


def _finish_errors(fig: Any, ax: Any, band: Any, xs: Any, max_ticks: int, xlabel: str, title: str, path: str) -> None:
    """The end of an error plot: the exact band, a tick per point when they are few, labels, the
    legend beside the plot, the file."""
    from .plots import legend_outside

    band.finish(ax)
    if len(xs) <= max_ticks:
        ax.set_xticks(xs)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("difference")
    ax.set_title(title)
    legend_outside(ax, fontsize=8)
    fig.savefig(path, format="png", dpi=100)
    pyplot().close(fig)


def plot_layers(layers: Any, path: str) -> None:
    """Local and global relative L2 of every module call along the network against the limit each
    call is judged by (:func:`.layers.module_limit`: per call when torch's floors are used), the
    calls over it circled, the culprit named; exact zeros on a band of their own; x labels thinned
    so that none overlap."""
    from .plots import ExactBand, legend_outside, spaced_ticks
    from ..compare.layers import LAYER_FLOOR_MULTIPLE, module_limit

    plt = pyplot()
    rows = layers.modules
    x = np.arange(len(rows))
    limits = [module_limit(m, layers.threshold, layers.use_floors) for m in rows]
    local = [m.local_rel_l2 for m in rows]
    over = np.array([v is not None and v > lim for v, lim in zip(local, limits)], dtype=bool)
    floors = [m.floor_rel_l2 for m in rows]
    band = ExactBand([m.rel_l2 for m in rows] + local + floors + limits)
    width = min(max(11.0, len(rows) * 0.07), 40.0)
    fig, ax = plt.subplots(figsize=(width, 5), layout="constrained")
    band.start(ax)
    ax.plot(x, band([m.rel_l2 for m in rows]), ".-", ms=3, lw=0.8, label="global: outputs as run")
    ax.plot(x, band(local), "s", ms=3, label="local: fed torch's inputs")
    if any(f is not None for f in floors):
        ax.plot(x, band(floors), ":", lw=0.8, color="gray", label=f"torch {layers.dtype} vs float64 (as run)")
    if layers.use_floors:
        limit_label = f"limit per call: max({layers.threshold:.3g}, {LAYER_FLOOR_MULTIPLE:g}x its torch floor)"
    else:
        limit_label = f"limit {layers.threshold:.3g} for every call"
    ax.step(x, band(limits), where="mid", color="red", lw=0.9, ls="--", label=limit_label)
    if over.any():
        ax.plot(x[over], band(local)[over], "o", mfc="none", mec="red", ms=8,
                label=f"local error over its limit ({int(over.sum())} of {len(rows)} calls)")
    culprit = next((i for i, r in enumerate(rows) if r.label == layers.culprit), None)
    if culprit is not None:
        ax.axvline(culprit, color="red", lw=1.2, label=f"culprit: {layers.culprit} (at x = {culprit})")
    band.finish(ax)
    # ticks at the top modules (down_blocks.0, mid_block), one level deeper where they are few (a
    # VAE's decode: decoder.conv_in, decoder.mid_block); a component's names start with its own
    depth = [sum(not part.isdigit() for part in r.name.removeprefix(f"{layers.component}.").split(".")) if r.name
             else 0 for r in rows]
    top = 1 if sum(d == 1 for d in depth) >= 4 else 2
    candidates = [i for i, (r, d) in enumerate(zip(rows, depth)) if r.call == 0 and d <= top]
    px_per_call = (width - 3.5) * 100 / max(len(rows), 1)
    labelled = spaced_ticks(candidates, 13 / px_per_call)
    ax.set_xticks(labelled, [rows[i].name or root_label(layers.component) for i in labelled], rotation=90, fontsize=7)
    ax.set_xticks(candidates, minor=True)
    ax.set_xlim(-1, len(rows))
    ax.set_ylabel("relative L2")
    ax.set_title(f"module calls in execution order, {where(layers.component, layers.step, layers.timestep)}")
    legend_outside(ax, fontsize=8)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def plot_matrix(m: Any, path: str) -> None:
    """Final relative L2 per scheduler on a log axis, the tolerance as a line; exact agreement on a
    band of its own, rows that raised drawn at 1 in gray; title wrapped, legend under the plot."""
    from matplotlib.patches import Patch

    from .plots import ExactBand, wrap

    plt = pyplot()
    labels = [r.label for r in m.rows]
    ran = [r.rel_l2 if r.rel_l2 is not None and r.rel_l2 == r.rel_l2 else None for r in m.rows]
    band = ExactBand(ran + [m.tolerance] + ([1.0] if None in ran else []), axis="x")
    values = [1.0 if v is None else band([v])[0] for v in ran]  # a row that raised: drawn at 1
    colors = {"pass": "tab:green", "fail": "tab:red", "error": "tab:gray"}
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(labels) + 2.0), layout="constrained")
    band.start(ax)
    ax.barh(range(len(labels)), values, color=[colors[r.verdict] for r in m.rows])
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    tolerance = ax.axvline(band([m.tolerance])[0], color="black", lw=0.8, ls=":",
                           label=f"tolerance {m.tolerance:g}")
    names = {"pass": "PASS", "fail": "FAIL", "error": "error (drawn at 1)"}
    shown = [v for v in colors if any(r.verdict == v for r in m.rows)]
    handles = [tolerance] + [Patch(color=colors[v], label=names[v]) for v in shown]
    band.finish(ax)
    ax.set_xlabel("relative L2, torch vs MindSpore, final images")
    ax.set_title(wrap(m.summary(), 100), fontsize=9)
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
