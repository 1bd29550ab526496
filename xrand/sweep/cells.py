"""One cell (seed, scheduler) of a sweep: :class:`CellRunner` runs it, :func:`run_cell` makes it a row."""
from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any, Dict

from ..checks import UsageError
from ..compare.metrics import ssim
from .config import Cell, SweepConfig, split_entry, split_label

#: Test hook: "SEED:TIMES[,SEED:TIMES]" kills the worker process running that seed's cells, TIMES times
#: in all (counted by marker files in XRAND_SWEEP_TEST_KILL_DIR, each holding the killed worker's
#: name), as an out-of-memory kill would; "SEED@SCHEDULER:TIMES" only that seed's cell of one
#: scheduler (its label).
KILL_HOOK, KILL_DIR = "XRAND_SWEEP_TEST_KILL", "XRAND_SWEEP_TEST_KILL_DIR"


class CellRunner:
    """The one place a sweep calls the pipeline API: load both sides once, then run cells.

    Both pipelines are loaded once per dtype (:func:`xrand.compare.load_pair`, with the config's
    ``load_scheduler``; in a sweep over dtypes each other dtype when a cell first needs it); each
    cell runs its plan on both sides and compares them (:func:`xrand.compare.compare_loaded`), as
    ``xrand compare --scheduler all`` does per row.
    ``run(seed, scheduler)`` takes an entry label (:func:`entry_label`) and returns a row of
    results.jsonl (without ``seconds`` and ``worker``, which the caller adds).
    """

    def __init__(self, config: SweepConfig) -> None:
        from ..compare import load_pair
        from ..frameworks.collector import imports_uncollected
        from ..frameworks.quiet import silenced
        from ..frameworks.threads import fix as fix_threads
        from ..mindspore_cpu import tune_cpu_runtime

        with silenced(), imports_uncollected():
            import mindspore  # noqa: F401
            import torch

        # A fixed thread count per worker: reductions may split differently with more threads,
        # and a cell's numbers must not depend on the layout of the sweep (nor on the load).
        why = "fixed per sweep worker"
        torch.set_num_threads(config.threads_per_worker)
        fix_threads(config.threads_per_worker, why)
        tune_cpu_runtime(config.threads_per_worker, why)  # before loading: it can be set once per process
        self.config = config
        first = config.cell_plan(0, config.load_scheduler)
        self.pairs = {first.settings.dtype: load_pair(first)}

    def run(self, seed: int, scheduler: str) -> Dict[str, Any]:
        from ..compare import compare_loaded, load_pair

        plan = self.config.cell_plan(seed, scheduler)
        if plan.settings.dtype not in self.pairs:
            self.pairs[plan.settings.dtype] = load_pair(plan)
        comparison = compare_loaded(self.pairs[plan.settings.dtype], plan)
        row = _cell_row(seed, scheduler)
        row.update(rel_l2=comparison.final["rel_l2"], max_abs=comparison.final["max_abs"],
                   psnr_db=comparison.final["psnr_db"], ssim=ssim(comparison.images["a"], comparison.images["b"]),
                   passed=comparison.passed)
        return row


def _load_error(exc: Exception) -> Dict[str, Any]:
    """Why a worker could not load, for the parent: a UsageError stays one (one line, exit 2)."""
    usage = isinstance(exc, UsageError)
    return {"usage": usage, "error": _first_line(exc) if usage else f"{type(exc).__name__}: {_first_line(exc)}"}


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _maybe_die(seed: int, scheduler: str) -> None:
    """The fault-injection test hook (see KILL_HOOK): SIGKILL this process on a chosen cell."""
    spec = os.environ.get(KILL_HOOK)
    if not spec:
        return
    times = dict((key, int(n)) for key, _, n in (item.rpartition(":") for item in spec.split(",")))
    key = next((k for k in (f"{seed}@{scheduler}", str(seed)) if k in times), None)
    if key is None:
        return
    folder = os.environ[KILL_DIR]
    done = [name for name in os.listdir(folder) if name.startswith(f"{seed}-")]
    if len(done) < times[key]:
        with open(os.path.join(folder, f"{seed}-{len(done)}"), "w") as marker:
            marker.write(_worker_name())
        os.kill(os.getpid(), signal.SIGKILL)


def run_cell(runner: CellRunner, seed: int, scheduler: str) -> Dict[str, Any]:
    """One cell as a row; a Python error in the cell becomes an error row."""
    _maybe_die(seed, scheduler)
    start = time.perf_counter()
    try:
        row = runner.run(seed, scheduler)
    except Exception as exc:  # recorded, and the sweep goes on
        row = error_row((seed, scheduler), f"{type(exc).__name__}: {_first_line(exc)}")
    row["seconds"] = time.perf_counter() - start
    row["worker"] = _worker_name()
    return row


def _cell_row(seed: int, label: str) -> Dict[str, Any]:
    """A row's cell: seed, scheduler, its options when it has any, the dtype in a sweep over dtypes."""
    scheduler, dtype = split_entry(label)
    name, options = split_label(scheduler)
    row: Dict[str, Any] = {"seed": seed, "scheduler": name}
    if options:
        row["options"] = options
    if dtype is not None:
        row["dtype"] = dtype
    return row


def error_row(cell: Cell, reason: str, worker: str = "", seconds: float = 0.0) -> Dict[str, Any]:
    row = _cell_row(*cell)
    row.update(rel_l2=None, max_abs=None, psnr_db=None, ssim=None, passed=False, seconds=seconds, worker=worker,
               error=reason)
    return row


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
