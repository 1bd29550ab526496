"""Parity over many seeds and schedulers: ``xrand sweep``, on local processes or a Ray cluster.

A cell is (seed, scheduler), and dtype in a sweep over dtypes (``--dtype float32,bfloat16``):
one free-running torch-vs-MindSpore comparison. Each worker loads both pipelines once (per
dtype; :class:`CellRunner`, the only code here that touches the pipeline API) and runs cells
until none are left. Every cell derives everything from its own seed, and a worker's
thread count is fixed (``threads_per_worker``), so a cell's numbers do not depend on how many
workers there are or where they run. Finished cells go to ``results.jsonl`` one line at a time;
running the same sweep again on the same folder runs only the cells that are missing.

Modules, each importing only those above it: ``config`` (parsing, :class:`SweepConfig`), ``cells``
(one cell), ``engines`` (local processes, Ray), ``results`` (the folder, :class:`SweepResult`),
``summary`` (pass rates, quantiles, the plot), ``run`` (:func:`run_sweep`).
"""
from .cells import KILL_DIR, KILL_HOOK, CellRunner, error_row, run_cell, ssim
from .config import (ENGINES, MAX_CELLS, SWEEP_VERSION, Cell, SweepConfig, check_engine, check_workers,
                     entry_label, parse_dtypes, parse_schedulers, parse_seeds, row_label, scheduler_label,
                     split_entry, split_label)
from .engines import RAY_CONNECT_TIMEOUT, THREAD_VARIABLES, LocalEngine, RayEngine, check_ray, connect_check
from .results import MANIFEST, RESULTS, ResultsFolder, SweepResult
from .run import run_sweep, schedule
from .summary import (METRICS, PLOT, SUMMARY_JSON, SUMMARY_MD, Z95, plot_sweep, quantiles, summarize,
                      summary_markdown, wilson, write_summary)

__all__ = [
    "ENGINES", "MAX_CELLS", "SWEEP_VERSION", "Cell", "SweepConfig", "check_engine", "check_workers", "parse_schedulers",
    "parse_seeds", "row_label", "scheduler_label", "split_label", "entry_label", "split_entry", "parse_dtypes",
    "KILL_DIR", "KILL_HOOK", "CellRunner", "error_row", "run_cell", "ssim",
    "RAY_CONNECT_TIMEOUT", "THREAD_VARIABLES", "LocalEngine", "RayEngine", "check_ray", "connect_check",
    "MANIFEST", "RESULTS", "ResultsFolder", "SweepResult",
    "METRICS", "PLOT", "SUMMARY_JSON", "SUMMARY_MD", "Z95", "plot_sweep", "quantiles", "summarize", "summary_markdown",
    "wilson", "write_summary",
    "run_sweep", "schedule",
]
