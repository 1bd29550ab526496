"""MindSpore graph-mode calls of a compiled Cell without the per-call walk of its sub-cells.

In graph mode every call of a Cell (the UNet, once per step) goes through MindSpore's compile,
which finds the graph already compiled but first sets ``compile_phase`` on the Cell, whose
setter sets it again on every sub-cell through ``Cell.__setattr__``: 168 cells and 2 ms per
call of the digits UNet on a 2-core CPU, 7% of a cached 50-step run (MindSpore 2.10,
measured with cProfile). Inside :func:`direct_phase_setter` the setter writes the same
attribute of the same cells directly (a string attribute's ``Cell.__setattr__`` ends in
``object.__setattr__``), so nothing a graph computes changes.
"""
from __future__ import annotations

import contextlib
from typing import Iterator


def _set_compile_phase(cell, value) -> None:
    """``Cell.compile_phase = value``, on ``cell`` and all its sub-cells, as MindSpore's setter does."""
    if not isinstance(value, str):
        raise TypeError(f"For 'Cell', 'compile_phase' must be string type, but got type {type(value)}.")
    stack = [cell]
    while stack:
        current = stack.pop()
        current.__dict__["_compile_phase"] = value
        stack.extend(sub for sub in current._cells.values() if sub is not None)


@contextlib.contextmanager
def direct_phase_setter() -> Iterator[None]:
    """Inside the block, ``Cell.compile_phase`` is set without ``Cell.__setattr__`` (see the module)."""
    from mindspore.nn import Cell

    original = Cell.__dict__.get("compile_phase")
    if not isinstance(original, property) or original.fset is None or original.fset is _set_compile_phase:
        yield  # another MindSpore, or already inside such a block
        return
    Cell.compile_phase = property(original.fget, _set_compile_phase, original.fdel, original.__doc__)
    try:
        yield
    finally:
        Cell.compile_phase = original
