"""Running compiled kernels on several threads: a thread pool per process and thread count.

The kernels are numba functions compiled with ``nogil=True``, so Python threads run them on
every core. Work is handed out task by task (no barriers, no spinning OpenMP threads), so a
thread that the OS deschedules on a busy machine holds up only its own task, and a forked
child simply gets a new pool.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

_pools: Dict[Tuple[int, int], ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def thread_count(threads: Optional[int]) -> int:
    """``threads``, or the CPUs this process may run on when None."""
    if threads is not None:
        return threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _pool(threads: int) -> ThreadPoolExecutor:
    key = (os.getpid(), threads)  # a forked child has none of its parent's pool threads
    with _LOCK:
        if key not in _pools:
            _pools[key] = ThreadPoolExecutor(threads, thread_name_prefix="xrand")
        return _pools[key]


class Tasks:
    """Tasks run on ``threads`` threads (in the calling thread when 1); ``wait`` ends them all."""

    def __init__(self, threads: Optional[int]) -> None:
        self.threads = thread_count(threads)
        self.futures: List[Future] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> Optional[Future]:
        """Start ``fn(*args)``; its future, or None when it ran already (one thread)."""
        if self.threads == 1:
            fn(*args)
            return None
        future = _pool(self.threads).submit(fn, *args)
        self.futures.append(future)
        return future

    def wait(self) -> None:
        for future in self.futures:
            future.result()
        self.futures = []
