"""Keep the frameworks' import and loading chatter out of xrand's output."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from typing import Iterator

_QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "DIFFUSERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "GLOG_v": "3",  # MindSpore's log level: errors only
}


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Send file descriptors 1 and 2 to /dev/null inside the block; after it, the libraries log
    errors only. ``xrand.quiet()`` for a program of one's own (load pipelines inside it).

    transformers (imported by mindone) prints "Config not found for parakeet" at import and
    model-loading time, diffusers prints loading progress bars, MindSpore and mindone warn of
    deprecations; errors still raise. The environment variables that quiet the libraries'
    logs (``TRANSFORMERS_VERBOSITY``, ``GLOG_v``...) are set where unset, for libraries imported later.

    A Ctrl-C that raises KeyboardInterrupt while the block ends, after its last statement (Python
    raises it at the next call), still leaves 1 and 2 where they were: before, ``xrand compare``
    interrupted just then printed what it kept to /dev/null (3 runs in 48 with Ctrl-C at the start
    of torch's stage: its import of diffusers, done before, is a block of microseconds).
    """
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            yield
    finally:  # each step in a finally of its own: a Ctrl-C can raise at any call, here too
        try:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os.dup2(saved[1], 2)  # stderr first: where an interrupted command says what it kept
        finally:
            try:
                os.dup2(saved[0], 1)
            finally:
                for fd in saved + [devnull]:
                    os.close(fd)
    for name in ("diffusers.utils.logging", "mindone.diffusers.utils.logging", "transformers.utils.logging"):
        module = sys.modules.get(name)
        # only when it changes: each change clears the cache of every logger
        if module is not None and module.get_verbosity() < logging.ERROR:
            module.set_verbosity_error()
