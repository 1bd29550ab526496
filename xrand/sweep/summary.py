"""A sweep's summary: pass rates with Wilson intervals, metric quantiles, summary.json and .md, sweep.png."""
from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional

import numpy as np

from ..files import atomic_path, json_safe, pyplot, write_json, write_text
from ..report.html import write_sweep_page
from .config import SWEEP_VERSION, Cell, SweepConfig, split_entry, split_label
from .results import SweepResult

SUMMARY_JSON, SUMMARY_MD, PLOT = "summary.json", "summary.md", "sweep.png"

#: For rel L2 larger is worse; for PSNR and SSIM smaller is. "p90" is the value 90% of cells do better than.
METRICS = {"rel_l2": "higher", "psnr_db": "lower", "ssim": "lower"}
#: sweep.png draws 1 - SSIM at or below this on one band: pixel differences far under an 8-bit
#: step (measured with metrics.ssim on noisy copies of 32x32 images: noise of std 1e-4 gives
#: 6e-8, of an 8-bit rounding's size, 1/255/sqrt(12), 8e-6).
SSIM_FLOOR = 1e-6
Z95 = 1.959963984540054


def wilson(passed: int, n: int, z: float = Z95) -> Optional[List[float]]:
    """95% Wilson score interval of a pass rate (Wilson 1927); None without cells."""
    if n == 0:
        return None
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def quantiles(values: List[float], worse: str) -> Optional[Dict[str, float]]:
    """median, p90, p99 and worst, read on the bad side (an empirical quantile: inf stays inf)."""
    if not values:
        return None
    v = np.asarray(values, dtype=np.float64)
    q = (lambda p: float(np.quantile(v, p, method="inverted_cdf"))) if worse == "higher" else \
        (lambda p: float(np.quantile(v, round(1 - p, 12), method="inverted_cdf")))
    return {"median": q(0.5), "p90": q(0.9), "p99": q(0.99), "worst": float(v.max() if worse == "higher" else v.min())}


def summarize(cells: List[Cell], rows: Dict[Cell, Dict[str, Any]]) -> Dict[str, Any]:
    per: Dict[str, Dict[str, Any]] = {}
    for name in dict.fromkeys(s for _, s in cells):
        mine = [rows[c] for c in cells if c[1] == name and c in rows]
        ok = [r for r in mine if "error" not in r]
        passed = sum(1 for r in mine if r.get("passed"))
        scheduler, dtype = split_entry(name)
        per[name] = {
            **({} if dtype is None else {"scheduler": scheduler, "dtype": dtype}),  # per (scheduler, dtype)
            "cells": sum(1 for c in cells if c[1] == name),
            "finished": len(mine),
            "passed": passed,
            "failed": len(ok) - passed,
            "errors": len(mine) - len(ok),
            "pass_rate": passed / len(mine) if mine else None,
            "pass_rate_95": wilson(passed, len(mine)),
            **{key: quantiles([float(r[key]) for r in ok], worse) for key, worse in METRICS.items()},
        }
    return per


def write_summary(out: str, config: SweepConfig, result: SweepResult) -> Dict[str, Any]:
    per = summarize(result.cells, result.rows)
    summary = json_safe({
        "xrand_sweep_summary": SWEEP_VERSION,
        "verdict": "pass" if result.passed else ("interrupted" if result.interrupted else "fail"),
        "cells": len(result.cells),
        "finished": sum(1 for c in result.cells if c in result.rows),
        "ran_now": result.ran,
        "settings": config.describe(),
        "quantiles": "median, p90, p99, worst: for rel_l2 90% of cells are at or below p90; "
                     "for psnr_db and ssim 90% are at or above it",
        "schedulers": per,
    })
    write_json(os.path.join(out, SUMMARY_JSON), summary)
    write_text(os.path.join(out, SUMMARY_MD), summary_markdown(summary))
    with atomic_path(os.path.join(out, PLOT)) as tmp:
        plot_sweep(result, config, tmp)
    write_sweep_page(out, list(result.rows.values()))  # report.html from the files above
    return summary


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if kind == "ssim":
        return f"1 - {1 - value:.2g}" if 0.999 < value < 1 else f"{value:.4f}"
    return f"{value:.3g}" if kind == "rel_l2" else f"{value:.1f}"


def summary_markdown(summary: Dict[str, Any]) -> str:
    s = summary["settings"]
    lines = [f"# xrand sweep: {summary['verdict']}", "",
             f"{summary['finished']} of {summary['cells']} cells finished ({summary['ran_now']} in the last run). "
             f"Model {s['model']} ({s['pipeline']}), {s['steps']} steps, batch {s['batch_size']}, eta {s['eta']}, "
             f"stream {s['stream']}, {s['dtype']}" + (", noise native" if s.get("noise") == "native" else "")
             + f", MindSpore {s['mindspore_mode']}"
             + (f", prompt {s['prompt']!r}" if s.get("prompt") else "") + ".", "",
             "| scheduler | cells | passed | failed | errors | pass rate (95% Wilson) |", "| --- | --- | --- | --- | --- | --- |"]
    for name, p in summary["schedulers"].items():
        rate = "-" if p["pass_rate"] is None else \
            f"{p['pass_rate']:.1%} ({p['pass_rate_95'][0]:.1%} to {p['pass_rate_95'][1]:.1%})"
        lines.append(f"| {name} | {p['finished']} of {p['cells']} | {p['passed']} | {p['failed']} | {p['errors']} "
                     f"| {rate} |")
    lines += ["", "Quantiles on the bad side: for rel L2 the median, 90% and 99% quantiles and the max; for PSNR "
              "(dB) and SSIM the median, 10% and 1% quantiles and the min.", "",
              "| scheduler | metric | median | p90 | p99 | worst |", "| --- | --- | --- | --- | --- | --- |"]
    for name, p in summary["schedulers"].items():
        for key in METRICS:
            q = p[key] or {}
            lines.append(f"| {name} | {key} | " + " | ".join(_fmt(q.get(k), key) for k in
                                                               ("median", "p90", "p99", "worst")) + " |")
    return "\n".join(lines) + "\n"


def plot_sweep(result: SweepResult, config: SweepConfig, path: str) -> None:
    """sweep.png: :func:`sweep_figure`."""
    plt = pyplot()
    fig = sweep_figure(result, config)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def sweep_figure(result: SweepResult, config: SweepConfig) -> Any:
    """One panel per metric: each scheduler's cells as points over a box plot; exact agreement
    (rel L2 0, PSNR infinite, 1 - SSIM at most :data:`SSIM_FLOOR`) on a labelled band of its own;
    each tolerance named on its line."""
    from ..pipelines.schedulers import describe
    from ..report.plots import ExactBand

    plt = pyplot()
    names = list(dict.fromkeys(s for _, s in result.cells))
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.6), layout="constrained")
    rng = np.random.default_rng(0)  # jitter only
    tols = sorted({config.cell_plan(0, name).tolerance for name in names}) if config.dtypes else [config.plan.tolerance]
    panels = (("rel_l2", "relative L2", 0.0), ("psnr_db", "PSNR (dB)", math.inf), ("ssim", "1 - SSIM", 0.0))
    for ax, (key, label, exact) in zip(axes, panels):
        data = []
        for name in names:
            values = [float(r[key]) for c, r in result.rows.items() if c[1] == name and "error" not in r]
            values = [1 - v for v in values] if key == "ssim" else values  # SSIM sits close to 1
            data.append([v for v in values if not math.isnan(v)])
        band = ExactBand([v for d in data for v in d] + (tols if key == "rel_l2" else []), exact=exact,
                         floor=SSIM_FLOOR if key == "ssim" else None)
        band.start(ax)
        placed = [list(band(d)) or [np.nan] for d in data]
        ax.boxplot(placed, showfliers=False)
        for i, values in enumerate(placed, 1):
            ax.plot(i + rng.uniform(-0.15, 0.15, len(values)), values, "o", ms=3, alpha=0.6)
        ax.set_xticks(range(1, len(names) + 1))
        ax.set_xticklabels([describe(*split_label(name)) + (f"\n{split_entry(name)[1]}" if split_entry(name)[1] else "")
                            for name in names], rotation=20, fontsize=8)
        ax.set_title(label)
        if key == "rel_l2":  # each tolerance labelled on its line, inside the panel
            for tol in tols:
                ax.axhline(band([tol])[0], color="tab:red", lw=0.8, ls="--")
                ax.annotate(f"tolerance {tol:g}", (0.99, band([tol])[0]), xycoords=("axes fraction", "data"),
                            ha="right", va="bottom", fontsize=8, color="tab:red")
        band.finish(ax)
    fig.suptitle(f"xrand sweep: {sum(1 for c in result.cells if c in result.rows)} cells, "
                 f"{config.settings.steps} steps", fontsize=9)
    return fig
