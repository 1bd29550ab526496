"""Putting the stand-ins of :mod:`.ops` in place on a CPU target, and every original back."""
from __future__ import annotations

import contextlib

import mindspore as ms

from ..checks import loaded_modules
from . import ops
from .ops import half_targets, targets

# (owner, attribute name, original object) for every attribute install() replaced.
_patched: list[tuple[object, str, object]] = []
# Stands for an attribute the owner only inherits (Tensor.lerp comes from the C++ TensorPy):
# uninstall() deletes the override instead of setting anything back.
_INHERITED = object()
# The original objects and the fallback that replaces each, keyed by id(original).
_replacements: dict[int, tuple[object, object]] = {}

# Modules scanned for names bound to a replaced operator (``from mindspore.mint import x``
# or ``pad = mint.nn.functional.pad`` at import time, as mindone's layers_compat does).
_SCANNED_PREFIXES = ("mindone.", "mindspore.mint")

def on_cpu() -> bool:
    return ms.get_context("device_target") == "CPU"


def installed() -> bool:
    """Whether the CPU fallbacks are in place."""
    return bool(_patched)


def _set(owner, name, value, original) -> None:
    _patched.append((owner, name, original))
    setattr(owner, name, value)


def install() -> bool:
    """Put the CPU fallbacks in place if MindSpore's device target is CPU; returns whether they are.

    Idempotent. Call it before or after importing mindone: names that mindone modules
    already bound to an original operator are replaced too.
    """
    if _patched:
        return True
    if not on_cpu():
        return False
    for owner, name, fallback in targets():
        original = vars(owner).get(name, _INHERITED)
        if original is not _INHERITED:
            _replacements[id(original)] = (original, fallback)
        _set(owner, name, fallback, original)
    for module in _scanned_modules():
        for name, value in list(vars(module).items()):
            entry = _replacements.get(id(value))
            if entry is not None and value is entry[0]:
                _set(module, name, entry[1], value)
    return True


def uninstall() -> None:
    """Restore every original operator (idempotent).

    Names bound to a fallback by modules imported while it was installed are restored too.
    """
    if not _patched:
        return
    for owner, name, original in reversed(_patched):
        if original is _INHERITED:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    by_fallback = {id(fb): orig for orig, fb in _replacements.values()}
    for module in _scanned_modules():
        for name, value in list(vars(module).items()):
            if id(value) in by_fallback:
                setattr(module, name, by_fallback[id(value)])
    _patched.clear()
    _replacements.clear()


@contextlib.contextmanager
def cpu_fallbacks():
    """Context manager: the CPU fallbacks inside the block (if the target is CPU), not after.

    Leaves them in place when they were already installed on entry.
    """
    already = installed()
    install()
    try:
        yield
    finally:
        if not already:
            uninstall()


def _scanned_modules():
    return [module for _, module in loaded_modules(_SCANNED_PREFIXES)]


@contextlib.contextmanager
def half_precision():
    """Context manager: inside the block (on a CPU target, PyNative), the bfloat16 stand-ins of
    :func:`.ops.half_targets` in place over whatever is there (the CPU fallbacks included), and
    every name mindone bound to a replaced operator too. Yields a dict, filled when the block
    ends: kernel -> the dtypes that ran through its stand-in (empty where none ran)."""
    ran: dict = {}
    if not on_cpu():
        yield ran
        return
    undo: list = []
    replaced: dict = {}
    for owner, name, stand_in in half_targets():
        original = vars(owner).get(name, _INHERITED)
        if original is not _INHERITED:
            replaced[id(original)] = (original, stand_in)
        undo.append((owner, name, original))
        setattr(owner, name, stand_in)
    for module in _scanned_modules():
        for name, value in list(vars(module).items()):
            entry = replaced.get(id(value))
            if entry is not None and value is entry[0]:
                undo.append((module, name, value))
                setattr(module, name, entry[1])
    ops.reset_half_ran()
    try:
        yield ran
    finally:
        ran.update(ops.half_ran)
        for owner, name, original in reversed(undo):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
