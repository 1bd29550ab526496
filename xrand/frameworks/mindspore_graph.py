"""MindSpore graph-mode calls: PyNative's numbers, without a per-call walk of the sub-cells.

PyNative's numbers: on a CPU, graph mode runs ``mindspore.nn.Linear`` (``mint.nn.Linear``) as a
MatMul with a transposed second input plus a BiasAdd, while PyNative's Dense kernel computes as
``ops.matmul(x.reshape(-1, in_features), weight.T)`` does. For some inputs the two round
differently: with MindSpore's oneDNN at AVX-512, those of up to 8 rows (every UNet's time
embedding), about 2e-7 relative L2 for one layer and 1e-7 to 1e-6 for a whole UNet call (README,
"graph mode"); at AVX2 (mindspore_cpu.cap_onednn_isa)
others, such as one row of 128 or 256 rows of 256 (MindSpore 2.10). Inside
:func:`linear_as_in_pynative` Linear's construct is that matmul plus the bias, and graph mode
gives PyNative's bits (tests/test_graph_cache.py: Linear layers of 2 to 4 dimensions and 1 to
256 rows, a UNet; tests/test_recipes.py: Stable Diffusion).

Without a transposed copy of every weight: a graph computing ``weight.T`` holds its result for
every Linear layer, two to three times the layer's weight. Around a pipeline's run,
:func:`linear_weights_transposed` stores each Linear weight transposed in its own parameter
(the same parameter and buffer, :func:`_transpose`), and Linear's construct then multiplies by
it as it is: the same product as PyNative's, bit for bit (the transpose PyNative's kernel makes
is that array), with nothing held per layer. The weights are put back after the run. An
SD-1.5-sized model's MindSpore side at 256 px in graph mode: 9.4 GB at its peak, 12.0 GB
before (benchmarks/RESULTS.md, figure 10).

No per-call walk: in graph mode every call of a Cell (the denoiser, once per step) goes through
MindSpore's compile, which finds the graph already compiled but first sets ``compile_phase`` on
the Cell, whose setter sets it again on every sub-cell through ``Cell.__setattr__`` (a walk of
every sub-cell at every step; its share of a run: benchmarks/RESULTS.md, figure 5, measured
with cProfile on MindSpore 2.10). Inside :func:`direct_phase_setter` the setter writes the same
attribute of the same cells directly (a string attribute's ``Cell.__setattr__`` ends in
``object.__setattr__``), so nothing a graph computes changes.

A module apart from :mod:`.mindspore`, imported when graph mode is first asked for: it imports
MindSpore at its top, since graph mode compiles :func:`_linear_construct` from its source and
finds ``ops`` among this module's globals.
"""
from __future__ import annotations

import collections
import contextlib
from typing import Any, Dict, Iterable, Iterator, List

import mindspore as ms
import numpy as np
from mindspore import nn, ops

#: Whether a Linear cell's weight is stored transposed (:func:`linear_weights_transposed`).
nn.Linear.weight_transposed = False


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
    original = nn.Cell.__dict__.get("compile_phase")
    if not isinstance(original, property) or original.fset is None or original.fset is _set_compile_phase:
        yield  # another MindSpore, or already inside such a block
        return
    nn.Cell.compile_phase = property(original.fget, _set_compile_phase, original.fdel, original.__doc__)
    try:
        yield
    finally:
        nn.Cell.compile_phase = original


def _linear_construct(self, x):
    """``nn.Linear.construct`` as PyNative's Dense kernel computes it (see the module)."""
    weight = self.weight if self.weight_transposed else self.weight.T
    out = ops.matmul(x.reshape(-1, x.shape[-1]), weight)
    if self.has_bias:
        out = out + self.bias
    return out.reshape(x.shape[:-1] + (weight.shape[1],))


def _transpose(parameter) -> None:
    """The parameter's matrix transposed, written over its own buffer: a graph that ran with the
    parameter holds that buffer, so a new one would hold the weight twice."""
    values = parameter.asnumpy()  # the parameter's buffer on a CPU
    flat = values.reshape(-1)
    flat[:] = np.ascontiguousarray(values.T).reshape(-1)
    parameter.set_data(ms.Tensor.from_numpy(flat.reshape(values.shape[::-1])))


def _buffer(parameter) -> int:
    return parameter.asnumpy().__array_interface__["data"][0]


@contextlib.contextmanager
def linear_weights_transposed(modules: Iterable[Any]) -> Iterator[None]:
    """Inside the block, the weight of every ``nn.Linear`` cell of ``modules`` (and their
    sub-cells) is stored transposed, as :func:`_linear_construct` reads it (see the module); a
    weight some other kind of cell also holds, or whose buffer another parameter shares, is left
    as it is."""
    owners: Dict[int, List[Any]] = {}
    parameters = {}
    seen = set()
    for module in modules:
        if not isinstance(module, nn.Cell):
            continue
        for _, cell in module.cells_and_names():
            if id(cell) in seen:
                continue
            seen.add(id(cell))
            for parameter in cell._params.values():
                if parameter is not None:
                    owners.setdefault(id(parameter), []).append(cell)
                    parameters[id(parameter)] = parameter
    buffers = collections.Counter(_buffer(p) for p in parameters.values() if p.size)
    linear = [key for key, cells in owners.items()
              if all(isinstance(c, nn.Linear) and c.weight is parameters[key] and not c.weight_transposed
                     for c in cells) and buffers[_buffer(parameters[key])] == 1]
    done = []
    try:
        for key in linear:
            _transpose(parameters[key])
            done.append(key)
            for cell in owners[key]:
                cell.weight_transposed = True
        yield
    finally:
        for key in done:
            for cell in owners[key]:
                cell.weight_transposed = False
            _transpose(parameters[key])


@contextlib.contextmanager
def linear_as_in_pynative() -> Iterator[None]:
    """Inside the block, ``nn.Linear`` cells compile to PyNative's arithmetic (see the module)."""
    original = nn.Linear.__dict__["construct"]
    if original is _linear_construct:
        yield  # already inside such a block
        return
    nn.Linear.construct = _linear_construct
    try:
        yield
    finally:
        nn.Linear.construct = original


@contextlib.contextmanager
def graph_mode_calls() -> Iterator[None]:
    """Both blocks above, Linear's on a CPU only (other devices have their own kernels)."""
    with direct_phase_setter():
        if ms.get_context("device_target") != "CPU":
            yield
            return
        with linear_as_in_pynative():
            yield
