"""The sweep itself: :func:`run_sweep` runs the missing cells on an engine, :func:`schedule` hands them out."""
from __future__ import annotations

import collections
import os
import sys
from dataclasses import replace
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional

from ..checks import UsageError
from ..frameworks import framework
from .cells import error_row
from .config import Cell, SweepConfig, check_engine, check_workers, row_label
from .engines import LocalEngine, RayEngine, check_ray, connect_check
from .results import ResultsFolder, SweepResult
from .summary import write_summary


def run_sweep(config: SweepConfig, seeds: Iterable[int], schedulers: Iterable[str], out: str, workers: int = 1,
              engine: str = "local", ray_address: Optional[str] = None,
              progress: bool = False) -> SweepResult:
    """Run every missing cell of seeds x schedulers (x ``config.dtypes``) into ``out``; write the
    summary and plot.

    Usage errors are raised before anything is written. Ctrl-C stops the workers, keeps every
    finished cell and writes the summary of those (``SweepResult.interrupted``).
    """
    check_workers(workers)
    check_engine(engine)
    cells = [(seed, name) for name in config.entries(list(schedulers)) for seed in seeds]
    if not cells:
        raise UsageError("a sweep needs at least one seed and one scheduler")
    if engine == "ray":
        check_ray()
        if ray_address:
            connect_check(ray_address)
    for name in config.plan.frameworks:  # a library that is missing: one line, before any worker starts
        framework(name).check_installed()
    folder = ResultsFolder(out)
    identity = config.identity()
    folder.check(identity)
    rows = folder.read()
    todo = [cell for cell in cells if cell not in rows]
    if todo and config.load_scheduler is None:  # workers load with the first scheduler they will run
        config = replace(config, load_scheduler=todo[0][1])
    result = SweepResult(cells=cells, rows=rows, ran=0)
    # Ray connects before the folder is made: a cluster that cannot be reached leaves nothing behind.
    pool = RayEngine(config, ray_address, min(workers, len(todo))) if todo and engine == "ray" else None
    folder.start(identity)
    if todo:
        bar = _progress_bar(len(cells), len(cells) - len(todo), progress)
        try:
            pool = pool or LocalEngine(config, os.path.join(out, "workers.log"))
            try:
                def finished(row: Dict[str, Any]) -> None:
                    folder.append(row)
                    rows[(row["seed"], row_label(row))] = row
                    result.ran += 1
                    bar.update(1)
                    bar.set_postfix(failed=sum(1 for r in rows.values() if not r.get("passed")), refresh=False)

                schedule(pool, todo, min(workers, len(todo)), finished)
            finally:
                pool.close()
        except KeyboardInterrupt:
            result.interrupted = True
        finally:
            bar.close()
    result.summary = write_summary(out, config, result)
    return result


def schedule(pool: Any, cells: List[Cell], workers: int, finished: Callable[[Dict[str, Any]], None]) -> None:
    """Keep ``pool.depth`` cells in flight on each worker; a worker runs its cells in order. The
    cells of a worker that died are handed out again, the one it was running retried once on
    another worker, then recorded as an error row."""
    pending: Deque[Cell] = collections.deque(cells)
    attempts: Dict[Cell, int] = collections.Counter()
    busy: Dict[int, Deque[Cell]] = {pool.add_worker(): collections.deque() for _ in range(workers)}
    replacements = 0
    while pending or any(busy.values()):
        for wid, in_flight in busy.items():
            while pending and len(in_flight) < pool.depth:
                in_flight.append(pending.popleft())
                pool.submit(wid, in_flight[-1])
        for wid, kind, payload in pool.wait():
            if kind == "row":
                busy[wid].popleft()
                finished(payload)
            elif kind == "fatal":
                if payload["usage"]:  # the model or a setting, refused while loading: the user's to fix
                    raise UsageError(payload["error"])
                raise RuntimeError(f"a sweep worker could not load the pipelines: {payload['error']}")
            elif kind == "died" and wid in busy:  # Ray reports each call in flight: the first report counts
                in_flight = busy.pop(wid)
                pending.extendleft(reversed(list(in_flight)[1:]))  # never started: not an attempt
                if in_flight:
                    cell = in_flight[0]
                    attempts[cell] += 1
                    if attempts[cell] < 2:
                        pending.appendleft(cell)
                    else:
                        finished(error_row(cell, f"{payload}, twice: not retried again"))
                # A new worker loads for a while: start one only when the live ones cannot take
                # the waiting cells at once (always when none is left).
                alive = len(busy)
                if pending and alive < workers and (alive == 0 or len(pending) > alive):
                    replacements += 1
                    if replacements > 2 * len(cells) + workers:
                        raise RuntimeError(f"sweep workers keep dying ({payload})")
                    busy[pool.add_worker()] = collections.deque()


def _progress_bar(total: int, done: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="cell", desc="xrand sweep", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True)
