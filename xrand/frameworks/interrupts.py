"""Ctrl-C raises KeyboardInterrupt even after MindSpore has run a graph, and not inside an import;
a process that ran the frameworks ends without their teardown.

MindSpore 2.10's graph runtime puts its own SIGINT handler in place at every graph run and never
gives Python's back (``GraphScheduler::Run`` calls ``RegisterGlobalSignalHandler(DefaultIntHandler)``,
mindspore/ccsrc/utils/signal_util.cc; older sources used a ``SignalGuard`` that put the old one
back). That handler sends the process SIGTERM: measured with strace, Ctrl-C after MindSpore's side
of a comparison ended the process by SIGTERM (exit 143, no message, no ``finally`` run).
:func:`keyboard_interrupts` turns that SIGTERM back into what Ctrl-C does in Python;
:func:`interrupts_deferred` holds a Ctrl-C until the frameworks' imports are done;
:func:`ctrl_c_ignored` leaves a Ctrl-C to this process, not to one it starts.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import threading
from typing import Iterator, NoReturn, Optional


class _Sigaction(ctypes.Structure):
    """glibc's ``struct sigaction`` (the same on x86-64 and aarch64)."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


def sigint_handler_address() -> Optional[int]:
    """The address of the C-level SIGINT handler in place now (None where it cannot be read)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        now = _Sigaction()
        if libc.sigaction(signal.SIGINT, None, ctypes.byref(now)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return now.handler


@contextlib.contextmanager
def keyboard_interrupts() -> Iterator[None]:
    """Inside the block, Ctrl-C does what Python's SIGINT handler does (KeyboardInterrupt, by
    default), whatever MindSpore did to SIGINT; after it, Python's handler is back in place.

    A SIGTERM that arrives while SIGINT's handler is not Python's is taken as MindSpore's
    translation of a Ctrl-C; any other SIGTERM does what it did before the block. Linux only
    (MindSpore installs no such handler on Windows and macOS), main thread only (as ``signal``).
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        yield
        return
    on_int, on_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    if on_int is None or on_term is None:  # handlers not installed from Python: leave them alone
        yield
        return
    signal.signal(signal.SIGINT, on_int)  # Python's own handler at the C level (MindSpore may have run)
    python_handler = sigint_handler_address()

    def sigterm(signum, frame):
        if python_handler is not None and sigint_handler_address() != python_handler:
            signal.signal(signal.SIGINT, on_int)  # take SIGINT back, then do what Ctrl-C does
            signal.raise_signal(signal.SIGINT)
        elif callable(on_term):  # someone else's SIGTERM: what it did before the block
            on_term(signum, frame)
        elif on_term == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_int)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A Ctrl-C inside the block raises KeyboardInterrupt at its end, not inside it.

    For imports of the frameworks: an import of MindSpore cut short leaves an exit handler of its
    C++ half behind that aborts the interpreter at exit (SIGABRT, "PyThreadState_Get: the function
    must be called with the GIL held", measured with MindSpore 2.10), so Ctrl-C there gave exit 134.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    asked = []
    signal.signal(signal.SIGINT, lambda signum, frame: asked.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if asked:
        raise KeyboardInterrupt


@contextlib.contextmanager
def ctrl_c_ignored() -> Iterator[None]:
    """SIGINT ignored inside the block, for starting a process there: it inherits that (a handler
    of Python's is not inherited, an ignored signal is), so a Ctrl-C is this process's alone to
    handle, which ends the new one itself, and not the new one's, which a Ctrl-C cut short inside
    an import (a traceback and "Fatal Python error" of MindSpore's exit handler). A Ctrl-C inside
    the block itself is lost. Main thread only (as ``signal``)."""
    before = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if before is None:  # not the main thread, or a handler not installed from Python: left alone
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def end_process(code: int) -> NoReturn:
    """End this process now with exit status ``code``: the exit handlers run (logging's,
    multiprocessing's, Ray's shutdown, temporary folders) and the standard streams are flushed, but
    the interpreter's teardown, which destroys every object torch, MindSpore and mindone hold one
    by one, is left out: it took 2.0 s from a digits-model comparison's last line to its process's
    end (0.1 s with this; the exit handlers themselves 0.02 s). For processes that end with their
    work (a command line, a process of MindSpore's stages, a sweep's worker), never a caller's."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader gone
            pass
    os._exit(code)
