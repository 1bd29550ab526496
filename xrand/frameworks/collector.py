"""Python's cyclic garbage collector and the frameworks' imports.

Importing torch, MindSpore, diffusers and mindone.diffusers with a Stable Diffusion pipeline's
modules makes about 1.1 million objects that live as long as the process. The collector walks all
of them at each full collection: 9 times while they are imported (each time the objects it holds
grew by a quarter), and again at every ``gc.collect()`` after (xrand's own where a pipeline is
dropped, MindSpore's at each graph compile), 0.38 s each. Measured on a 2-core machine: those
imports 6.8 s with the collector on, 5.2 s with it off; they leave 507 objects of garbage.

So the imports run with the collector off (:func:`imports_uncollected`), and in xrand's own
processes (its command line's, a comparison's stage process, a sweep's worker:
:func:`freeze_imports`) what they made is frozen out of every later walk (``gc.freeze``). In a
process of the user's (xrand's Python API) nothing is frozen: the collector is only put back as
it was.
"""
from __future__ import annotations

import contextlib
import gc
import sys
from typing import Iterator

_own = False


def freeze_imports() -> None:
    """In this process (xrand's own), freeze what :func:`imports_uncollected` blocks import."""
    global _own
    _own = True


@contextlib.contextmanager
def imports_uncollected() -> Iterator[None]:
    """The collector off while the block imports, then as it was; in xrand's own process, where the
    block imported a module, every object then alive frozen (``gc.freeze``: never walked again,
    never collected). Only then: the blocks are the first imports of a library, a pipeline's
    modules or the patched ones, and a block that imports nothing new may run while a pipeline is
    loaded, whose memory a collection must give back when it is dropped."""
    enabled, modules = gc.isenabled(), len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if _own and len(sys.modules) > modules:
            gc.freeze()
        if enabled:
            gc.enable()
