"""``xrand compare --scheduler all``: every shared image scheduler against one model.

Both pipelines are loaded once; each row swaps the scheduler on both sides and compares
(:func:`.compare.compare_loaded`). Writes matrix.json, matrix.md and matrix.png.
"""
from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import schedulers
from .compare import DEFAULT_TOLERANCE, Pair, compare_loaded, load_pair
from .files import atomic_path, json_safe, pyplot, write_json, write_text
from .frameworks import DEFAULT_MINDSPORE_MODE
from .settings import Settings

MATRIX_VERSION = 1


@dataclass
class Row:
    scheduler: str
    options: Dict[str, Any]
    verdict: str  # "pass", "fail" or "error"
    noise_draws: Optional[int] = None  # values drawn from the generator during the steps (torch side)
    rel_l2: Optional[float] = None
    max_abs: Optional[float] = None
    max_local_rel_l2: Optional[float] = None  # with lockstep
    error: Optional[str] = None
    ran: Dict[str, Any] = field(default_factory=dict)
    mindspore_mode: Optional[str] = None  # what MindSpore ran, and what its compile cache did
    mindspore_compile_cache: Optional[str] = None

    @property
    def label(self) -> str:
        return schedulers.describe(self.scheduler, self.options)


@dataclass
class Matrix:
    settings: Settings
    tolerance: float
    rows: List[Row]

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.verdict == "pass" for r in self.rows)

    def summary(self) -> str:
        bad = [r.label for r in self.rows if r.verdict != "pass"]
        word = "PASS" if self.passed else "FAIL"
        return (f"{word}: {len(self.rows) - len(bad)}/{len(self.rows)} schedulers within relative L2 "
                f"{self.tolerance:g} after {self.settings.steps} steps" + (f"; not passing: {', '.join(bad)}" if bad
                                                                          else ""))


def run_matrix(settings: Settings, entries: Sequence[Tuple[str, Dict[str, Any]]] = schedulers.MATRIX,
               tolerance: Optional[float] = None, lockstep_mode: bool = False, torch_device: str = "cpu",
               mindspore_device: Optional[str] = None, quiet: bool = True,
               mindspore_mode: str = DEFAULT_MINDSPORE_MODE,
               pair: Optional[Pair] = None, progress=None) -> Matrix:
    """Compare every ``(scheduler, options)`` in ``entries``; a row that raises is an error row."""
    tolerance = DEFAULT_TOLERANCE[settings.dtype] if tolerance is None else tolerance
    cells = [replace(settings, scheduler=name, scheduler_options=dict(options)) for name, options in entries]
    if pair is None:
        pair = load_pair(cells[0] if cells else settings, torch_device, mindspore_device, quiet)
    rows = []
    for cell in cells:
        row = Row(scheduler=cell.scheduler, options=cell.scheduler_options, verdict="error")
        try:
            c = compare_loaded(pair, cell, tolerance, lockstep_mode, mindspore_mode)
        except Exception as exc:  # one scheduler's failure is that row's result, not the matrix's end
            row.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            row.ran = {"traceback": traceback.format_exc(limit=-3)}
        else:
            row.verdict = "pass" if c.passed else "fail"
            row.noise_draws = c.ran["a"].get("noise_draws")
            row.rel_l2, row.max_abs = c.final["rel_l2"], c.final["max_abs"]
            if c.local_steps:
                row.max_local_rel_l2 = max(r["sample"]["rel_l2"] for r in c.local_steps)
            row.ran = c.ran
            row.mindspore_mode = c.environments["b"].get("mindspore_mode")
            row.mindspore_compile_cache = c.environments["b"].get("mindspore_compile_cache")
        rows.append(row)
        if progress is not None:
            progress(row)
    return Matrix(settings, tolerance, rows)


def matrix_dict(m: Matrix) -> Dict[str, Any]:
    from dataclasses import asdict

    return json_safe({
        "xrand_matrix": MATRIX_VERSION,
        "verdict": "pass" if m.passed else "fail",
        "summary": m.summary(),
        "settings": asdict(m.settings),
        "tolerance": {"metric": "rel_l2 of the final images", "value": m.tolerance},
        "rows": [dict(asdict(r), label=r.label) for r in m.rows],
    })


def _number(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2g}"


def matrix_markdown(m: Matrix) -> str:
    lines = [f"{m.summary()}", "",
             "| scheduler | options | noise draws during steps | final rel L2 | max \\|diff\\| | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in m.rows:
        options = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(r.options.items())) or "-"
        verdict = r.verdict.upper() + (f" ({r.error})" if r.error else "")
        draws = "-" if r.noise_draws is None else str(r.noise_draws)
        lines.append(f"| {r.scheduler} | {options} | {draws} | {_number(r.rel_l2)} | {_number(r.max_abs)} | "
                     f"{verdict} |")
    return "\n".join(lines) + "\n"


def plot_matrix(m: Matrix, path: str) -> None:
    """Final relative L2 per scheduler on a log axis, the tolerance as a line; exact agreement on a
    band of its own, rows that raised drawn at 1 in gray; title wrapped, legend under the plot."""
    from matplotlib.patches import Patch

    from ..report.plots import ExactBand, wrap

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


def write_matrix(m: Matrix, out_dir: str) -> Dict[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name) for name in ("matrix.json", "matrix.md", "matrix.png")}
    write_json(paths["matrix.json"], matrix_dict(m))
    write_text(paths["matrix.md"], matrix_markdown(m))
    with atomic_path(paths["matrix.png"]) as tmp:
        plot_matrix(m, tmp)
    from ..report.html import write_matrix_page  # report.html from the files above
    paths.update(write_matrix_page(out_dir))
    return paths
