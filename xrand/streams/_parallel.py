"""Starting numba's parallel kernels safely: a thread count per call, no abort after a fork.

Shared by the numba-parallel engines of the torch-cpu and torch-cuda streams; numba is imported
only by :func:`launch`.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional

# GNU OpenMP (numba's "omp" threading layer) aborts a forked child that starts a parallel region
# after its parent did (checked with numba 0.60), so such a child must run one-thread code.
_state = {"launched": False, "forked": False}
# numba's "workqueue" threading layer aborts on launches from two threads at once
_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    _state["forked"] = _state["forked"] or _state["launched"]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def parallel_allowed() -> bool:
    """False in a forked child of a process that ran a parallel kernel."""
    return not _state["forked"]


def launch(threads: Optional[int], kernel: Callable[..., Any], *args: Any) -> Any:
    """``kernel(*args)`` (a ``parallel=True`` numba function) on ``threads`` threads (None: numba's current number)."""
    import numba

    with _LOCK:
        _state["launched"] = True
        previous = numba.get_num_threads()
        numba.set_num_threads(previous if threads is None else min(threads, numba.config.NUMBA_NUM_THREADS))
        try:
            return kernel(*args)
        finally:
            numba.set_num_threads(previous)
