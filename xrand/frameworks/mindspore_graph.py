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

A bias without index tables: MindSpore's CPU Add of two tensors of different shapes, neither of
one value (a row of biases added to a matrix), fills two tables of one 8-byte index per output
value when it first runs and keeps them as long as its graph lives, four times a float32 output
(``ArithmeticCpuTypeFunc::InitBroadCast``, MindSpore 2.10). Each Linear layer's bias added with
``+`` was such an Add: an SD-1.5-sized UNet at 256 px held 1.08 GiB of them, 102 kernels (found by
recording the large blocks a graph-mode run left allocated, with their call stacks). Inside
:func:`linear_as_in_pynative` a float32 or float64 bias is added with BiasAdd, which keeps nothing:
the same sums, PyNative's bits (tests/test_graph_cache.py). Not float16: there BiasAdd's sums round
otherwise than PyNative's. That model's whole comparison in graph mode, its graphs from the compile
cache, peaked at 5.52 GiB against 6.50 GiB before; compiling them, 6.55 against 7.53 GiB. The Adds
mindone writes itself stay as they are (a ResNet block's time embedding: about 0.1 GB of tables
at that size).

No per-call walk: in graph mode every call of a Cell (the denoiser, once per step) goes through
MindSpore's compile, which finds the graph already compiled but first sets ``compile_phase`` on
the Cell, whose setter sets it again on every sub-cell through ``Cell.__setattr__`` (a walk of
every sub-cell at every step; its share of a run: benchmarks/RESULTS.md, figure 5, measured
with cProfile on MindSpore 2.10). Inside :func:`direct_phase_setter` the setter writes the same
attribute of the same cells directly (a string attribute's ``Cell.__setattr__`` ends in
``object.__setattr__``), so nothing a graph computes changes.

Division without memory left in the C heap: after a graph's Div and Divs kernels (``a / b`` of a
tensor and a tensor or a number) have run, the process holds two to four times their output more
each (80 MB each in a chain of ``x / 2 + 1`` on 21 MB; less on constant arrays), where RealDiv, Mul
and Add leave nothing past the memory pool's reuse, and PyNative nothing per call (MindSpore 2.10,
CPU). It is memory the kernels freed and glibc's malloc kept: ``malloc_trim`` gives it back (13
divisions of an 8 MiB tensor: 0.31 GiB held, 0.02 GiB after it), and a fixed mmap threshold
(``MALLOC_MMAP_THRESHOLD_=131072``, as a comparison's own processes fix it:
xrand.compare.stages.large_blocks_unmapped_when_freed) never keeps it (0.04 GiB); but it is held
while the graph runs, so the run's peak grows with it.
Inside :func:`division_as_real_div` a float32 or float64 tensor divided by a tensor of its dtype or
by a number compiles to RealDiv, the number cast to the tensor's dtype first, as PyNative's Div
casts it: the same bits (tests/test_graph_cache.py). Not float16: one float16 RealDiv in a graph
gives PyNative's bits, but two in a row did not (4266 of 16384 values differed for ``x / a / row``),
so float16 keeps Div.

Transposes: after a graph's Transpose kernels a process held more too (12 swaps of two axes of an
8 MiB tensor, each pair followed by a product, in a process of their own: 243 MB against 31 MB with
mint.transpose's kernel; not in every process, and a later run of the same chain held 0.046 GiB,
0.039 after ``malloc_trim``, so whether it is glibc's too was not settled). mindone's attention
swaps the heads' axes of every query, key and value with ``Tensor.swapaxes``; inside
:func:`swapaxes_as_transpose` a graph's ``swapaxes`` is ``mint.transpose``, the same values moved.
ReduceMean and ReduceSum kernels were seen to leave memory too (not measured since); they are
left as they are.

An SD-1.5-sized model's MindSpore side at 256 px in graph mode peaked, compiling its graphs, at
9.32 GB before these, 8.36 GB with RealDiv, 7.89 GB with mint.transpose too and 7.55 GB with the
GELU stand-in dividing with ``/`` (xrand.mindspore_cpu.ops); with its graphs from the compile cache
at 7.28, 6.91 and 6.55 GB for the last three (``benchmarks/bench_scale.py --speed``, one run each;
a whole compare: benchmarks/RESULTS.md, figure 16).

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
from mindspore import mint, nn, ops
from mindspore.ops import functional

try:  # the graph's "/" (MindSpore 2.10's private names; another MindSpore divides as it does)
    from mindspore.ops.composite.multitype_ops.div_impl import _div_tensor, div as _div
    from mindspore.ops.composite.multitype_ops.div_impl import _tensor_div_scalar as _tensor_div_number
except ImportError:  # pragma: no cover
    _div = None

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


_BIAS_ADD_DTYPES = (ms.float32, ms.float64)  # float16: see the module


def _linear_construct(self, x):
    """``nn.Linear.construct`` as PyNative's Dense kernel computes it (see the module)."""
    weight = self.weight if self.weight_transposed else self.weight.T
    out = ops.matmul(x.reshape(-1, x.shape[-1]), weight)
    if self.has_bias:
        out = ops.bias_add(out, self.bias) if out.dtype in _BIAS_ADD_DTYPES else out + self.bias
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
def _replaced(owner, name: str, value) -> Iterator[None]:
    """Inside the block, ``owner.name`` is ``value``; the original after it (nothing to do where it
    is ``value`` already: inside such a block)."""
    original = vars(owner)[name]
    if original is value:
        yield
        return
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def linear_as_in_pynative():
    """Inside the block, ``nn.Linear`` cells compile to PyNative's arithmetic (see the module)."""
    return _replaced(nn.Linear, "construct", _linear_construct)


_real_div = ops.operations.RealDiv()
_REAL_DIV_DTYPES = (ms.float32, ms.float64)  # float16: see the module


def _tensor_real_div_tensor(x, y):
    """``x / y`` of two tensors in a graph: RealDiv where both are float32 or both float64 (see the module)."""
    if x.dtype == y.dtype and x.dtype in _REAL_DIV_DTYPES:
        return _real_div(x, y)
    return _div_tensor(x, y)


def _tensor_real_div_number(x, y):
    """``x / y`` of a tensor and a number in a graph: RealDiv by the number in the tensor's dtype."""
    if x.dtype in _REAL_DIV_DTYPES:
        return _real_div(x, ops.scalar_to_tensor(y, x.dtype))
    return _tensor_div_number(x, y)


@contextlib.contextmanager
def division_as_real_div() -> Iterator[None]:
    """Inside the block, a graph divides floating tensors with RealDiv (see the module)."""
    if _div is None or getattr(_div, "xrand_real_div", False):
        yield  # another MindSpore, or already inside such a block
        return
    entries = len(_div.entries)
    _div.register("Tensor", "Tensor")(_tensor_real_div_tensor)
    _div.register("Tensor", "Number")(_tensor_real_div_number)
    _div.xrand_real_div = True
    try:
        yield
    finally:
        _div.register("Tensor", "Tensor")(_div_tensor)
        _div.register("Tensor", "Number")(_tensor_div_number)
        del _div.entries[entries:]
        _div.xrand_real_div = False


def _swapaxes(input, axis0, axis1):
    """``Tensor.swapaxes`` in a graph: mint.transpose (see the module)."""
    return mint.transpose(input, axis0, axis1)


def swapaxes_as_transpose():
    """Inside the block, a graph swaps two axes with mint.transpose's kernel (see the module)."""
    return _replaced(functional, "swapaxes", _swapaxes)


@contextlib.contextmanager
def graph_mode_calls() -> Iterator[None]:
    """The blocks above, all but the phase setter's on a CPU only (other devices have their own kernels)."""
    with direct_phase_setter():
        if ms.get_context("device_target") != "CPU":
            yield
            return
        with linear_as_in_pynative(), division_as_real_div(), swapaxes_as_transpose():
            yield
