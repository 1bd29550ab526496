"""MindSpore's operators seen one by one while a cell runs (``xrand compare --ops``).

MindSpore has no function mode; in PyNative mode mindone calls its operators from Python as
``mint.*`` and ``ops.*`` functions, Tensor methods, primitives it makes on the spot
(``ops.operations.nn_ops.FlashAttentionScore(1, input_layout="BNSD")(q, k, v, ...)`` in
autoencoder_kl_wan.py) and MindSpore's own cells (``mint.nn.Conv2d``, whose construct calls a
primitive held since it was built). :func:`operators_recorded` wraps each of these for the
block, looked up where callers look them up at call time (module and class attributes), and puts
every one back afterwards, also on error.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator, List, Tuple

#: modules whose public functions are wrapped (mindone calls ``mint.x``, ``ops.x``, ``mint.nn.functional.x``)
FUNCTION_MODULES = ("mindspore.mint", "mindspore.mint.nn.functional", "mindspore.ops")
#: modules whose primitive classes are wrapped: a primitive made during the block is recorded when called
PRIMITIVE_MODULES = ("mindspore.ops.operations.nn_ops",)
#: Tensor arithmetic written as operators (``x + h``)
DUNDERS = ("__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__", "__imul__",
           "__truediv__", "__rtruediv__", "__itruediv__", "__matmul__", "__neg__", "__pow__", "__getitem__")
#: Tensor methods that read values out or describe the tensor, not operators
NOT_OPERATORS = {"asnumpy", "numpy", "item", "tolist", "dim", "size", "numel", "nelement", "has_init", "init_data",
                 "is_contiguous", "is_floating_point", "is_complex", "is_signed", "data_ptr", "storage_offset",
                 "stride", "element_size", "ndimension", "set_dtype", "assign_value", "register_hook",
                 "asnumpy_of_slice_persistent_data", "is_persistent_data", "is_init"}


class _State:
    depth = 0  # > 0 inside a recorded operator (or while recording one): calls there are not recorded


def _record(state: _State, on_op: Callable[..., None], name: str, call: Callable[..., Any], args: tuple,
            kwargs: dict, params: dict) -> Any:
    if state.depth:
        return call(*args, **kwargs)
    state.depth += 1
    try:
        out = call(*args, **kwargs)
        on_op(name, call, args, kwargs, out, params)
    finally:
        state.depth -= 1
    return out


def _function(state, on_op, name, original):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return _record(state, on_op, name, original, args, kwargs, {})

    return wrapper


def _primitive(state, on_op, name, cls):
    """``cls`` (a primitive's class) as a function making it; calls of what it makes are recorded,
    with the arguments it was made with, defaults included (``scale_value=1.0``)."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        signature = None

    def make(*args, **kwargs):
        made = cls(*args, **kwargs)
        params = {}
        if signature is not None:
            try:
                bound = signature.bind(None, *args, **kwargs)
                bound.apply_defaults()
                params = {k: v for k, v in list(bound.arguments.items())[1:]
                          if isinstance(v, (bool, int, float, str, type(None)))}
            except TypeError:
                pass

        def call(*a, **kw):
            return _record(state, on_op, name, made, a, kw, params)

        return call

    return make


def _cell_hooks(state, on_op, cell) -> List[Any]:
    """Hooks making one of MindSpore's own cells (``mint.nn.Conv2d``) an operator."""
    name = "mint.nn." + type(cell).__name__ if type(cell).__module__.startswith("mindspore.mint") else \
        "nn." + type(cell).__name__
    entered = []

    def pre(c, args, kwargs):
        entered.append(state.depth == 0)
        state.depth += 1

    def post(c, args, kwargs, output):
        state.depth -= 1
        if entered.pop():
            state.depth += 1
            try:
                on_op(name, c, args, kwargs, output, {})
            finally:
                state.depth -= 1

    return [cell.register_forward_pre_hook(pre, with_kwargs=True),
            cell.register_forward_hook(post, with_kwargs=True)]


def _targets() -> List[Tuple[Any, str, str, str]]:
    """(owner, attribute, name shown, kind) of everything :func:`operators_recorded` wraps."""
    import importlib

    import mindspore as ms

    out = []
    for path in FUNCTION_MODULES:
        module = importlib.import_module(path)
        shown = path.replace("mindspore.", "", 1)
        for attribute in dir(module):
            value = getattr(module, attribute, None)
            if not attribute.startswith("_") and (inspect.isfunction(value) or inspect.isbuiltin(value)):
                out.append((module, attribute, f"{shown}.{attribute}", "function"))
    for path in PRIMITIVE_MODULES:
        module = importlib.import_module(path)
        for attribute in dir(module):
            if attribute[:1].isupper() and inspect.isclass(getattr(module, attribute, None)):
                out.append((module, attribute, f"{path.rsplit('.', 1)[1]}.{attribute}", "primitive"))
    for attribute in dir(ms.Tensor):
        if attribute in NOT_OPERATORS or (attribute.startswith("_") and attribute not in DUNDERS):
            continue
        static = inspect.getattr_static(ms.Tensor, attribute, None)
        if not (inspect.isfunction(static) or inspect.ismethoddescriptor(static)) or isinstance(static, property):
            continue
        out.append((ms.Tensor, attribute, f"Tensor.{attribute}", "method"))
    return out


@contextlib.contextmanager
def operators_recorded(cell: Any, on_op: Callable[..., None]) -> Iterator[None]:
    """:meth:`.base.Framework.operators_recorded` for MindSpore (see the module)."""
    state = _State()
    saved = []  # (owner, attribute, what its own __dict__ held: None where it inherited it)
    hooks: List[Any] = []
    try:
        for owner, attribute, name, kind in _targets():
            original = getattr(owner, attribute)
            make = _primitive if kind == "primitive" else _function
            saved.append((owner, attribute, vars(owner).get(attribute)))
            setattr(owner, attribute, make(state, on_op, name, original))
        for _, sub in cell.cells_and_names():
            if sub is not cell and type(sub).__module__.startswith("mindspore."):
                hooks += _cell_hooks(state, on_op, sub)
        yield
    finally:
        for h in hooks:
            h.remove()
        for owner, attribute, own in reversed(saved):
            if own is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, own)


__all__ = ["operators_recorded"]
