"""Output arrays on the memory pages a torch tensor of that size gets.

From 4 MiB on, NumPy asks Linux for transparent huge pages (``madvise(MADV_HUGEPAGE)``); torch's
CPU allocator does not, so where the kernel gives huge pages only on request (its setting
``always [madvise] never``) a torch tensor gets 4 KiB pages. Huge pages are cheaper to fill while
the memory is at hand, but on a virtual machine whose balloon takes freed memory back they are far
dearer to fault in again: filling 64M float32 values cost about 0.5 ns a value warm and 7 cold
on huge pages, 1.4 either way on torch's 4 KiB pages (benchmarks/RESULTS.md, figure 2). :func:`empty` undoes
NumPy's request before the pages are touched, so a stream's output costs what torch's does.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Optional

import numpy as np

HUGE_PAGE_REQUEST_BYTES = 1 << 22  # NumPy's threshold (numpy/core/src/multiarray/alloc.c)
_MADV_NOHUGEPAGE = 15  # linux/mman.h
_THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


@functools.lru_cache(maxsize=None)
def _madvise() -> Optional[Callable[..., int]]:
    """libc's madvise where huge pages come only on request (Linux, THP ``madvise``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open(_THP_SETTING) as f:
            if "[madvise]" not in f.read():
                return None
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return function


def empty(n: int, dtype: Any) -> np.ndarray:
    """``np.empty(n, dtype)``, on the pages torch's allocator would get (see the module)."""
    out = np.empty(n, dtype)
    madvise = _madvise() if out.nbytes >= HUGE_PAGE_REQUEST_BYTES else None
    if madvise is not None:
        page = os.sysconf("SC_PAGE_SIZE")
        start = -(-out.ctypes.data // page) * page
        stop = (out.ctypes.data + out.nbytes) // page * page
        madvise(start, stop - start, _MADV_NOHUGEPAGE)  # a hint: nothing to do if refused
    return out
