"""``xrand compare --scheduler all``: every shared scheduler that fits the model, against it.

Both pipelines are loaded once; each row is the plan with another scheduler
(:meth:`.plan.Plan.cell`), compared by :func:`.run.compare_loaded`. :mod:`xrand.report.matrix`
writes the result.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..pipelines import schedulers
from ..pipelines.settings import Settings
from .plan import Plan, matrix_entries
from .run import Pair, compare_loaded, load_pair


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
    note: Optional[str] = None  # why a FAIL that is not about the numbers alone failed
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
    left_out: Dict[str, str] = field(default_factory=dict)  # label -> why the pipeline cannot run it

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.verdict == "pass" for r in self.rows)

    def summary(self) -> str:
        bad = [r.label for r in self.rows if r.verdict != "pass"]
        word = "PASS" if self.passed else "FAIL"
        return (f"{word}: {len(self.rows) - len(bad)}/{len(self.rows)} schedulers within relative L2 "
                f"{self.tolerance:g} after {self.settings.steps} steps" + (f"; not passing: {', '.join(bad)}" if bad
                                                                          else "")
                + (f"; left out (the pipeline cannot run them): {', '.join(self.left_out)}" if self.left_out else ""))


def run_matrix(plan: Plan, entries: Optional[Sequence[Tuple[str, Dict[str, Any]]]] = None,
               pair: Optional[Pair] = None, progress: Optional[Callable[[Row], None]] = None) -> Matrix:
    """Compare every ``(scheduler, options)`` in ``entries`` (default: the matrix of the recipe's
    scheduler kind, less what its library pipeline cannot run, :func:`.plan.matrix_entries`);
    a row that raises is an error row."""
    left_out: Dict[str, str] = {}
    if entries is None:
        entries, left_out = matrix_entries(plan)
    if pair is None:
        pair = load_pair(plan.cell(scheduler=entries[0][0], scheduler_options=entries[0][1]) if entries else plan)
    rows = []
    for name, options in entries:
        row = Row(scheduler=name, options=dict(options), verdict="error")
        try:
            cell = plan.cell(scheduler=name, scheduler_options=options)
            c = compare_loaded(pair, cell)
        except Exception as exc:  # one scheduler's failure is that row's result, not the matrix's end
            row.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            row.ran = {"traceback": traceback.format_exc(limit=-3)}
        else:
            row.verdict = "pass" if c.passed else "fail"
            row.noise_draws = c.ran["a"].get("noise_draws")
            row.rel_l2, row.max_abs = c.final["rel_l2"], c.final["max_abs"]
            if c.timesteps_b is not None:
                row.note = "the schedulers' timesteps differ"
            if c.local_steps:
                row.max_local_rel_l2 = max(r["sample"]["rel_l2"] for r in c.local_steps)
            row.ran = c.ran
            row.mindspore_mode = c.environments["b"].get("mindspore_mode")
            row.mindspore_compile_cache = c.environments["b"].get("mindspore_compile_cache")
        rows.append(row)
        if progress is not None:
            progress(row)
    return Matrix(plan.settings, plan.tolerance, rows, left_out)
