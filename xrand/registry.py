"""Which backend makes the tensors: a registry of backends and the choice of the active one.

The active backend is, in order: the innermost ``use_backend`` of this thread or asyncio task,
else the process-wide ``set_backend``, else the ``XRAND_BACKEND`` environment variable, else
"torch" when torch is installed, else "numpy" (those two read once, at the first need).
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import threading
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Union

from .backends import Backend
from .checks import UsageError, UsageTypeError, module_installed, module_loaded

ENV_VAR = "XRAND_BACKEND"
ENTRY_POINT_GROUP = "xrand.backends"

_BUILTIN = {
    "numpy": "xrand.backends.numpy:NumpyBackend",
    "torch": "xrand.backends.torch:TorchBackend",
    "mindspore": "xrand.backends.mindspore:MindSporeBackend",
}
#: The framework module each backend needs, where known without creating the backend.
_modules: Dict[str, str] = {"numpy": "", "torch": "torch", "mindspore": "mindspore"}

_factories: Dict[str, Union[str, Callable[[], Backend]]] = dict(_BUILTIN)
_instances: Dict[str, Backend] = {}
_lock = threading.Lock()
_entry_points_loaded = False

_process_default: Optional[str] = None
#: bumped whenever a backend is registered, so caches of backend choices know to start again
generation = 0
_default: Optional[str] = None  # XRAND_BACKEND or what is installed, decided at the first need
_context_choice: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("xrand_backend", default=None)


class BackendInfo(NamedTuple):
    """One row of :func:`available_backends`."""

    name: str
    available: bool
    reason: Optional[str]


def register_backend(name: str, factory: Callable[[], Backend], module: Optional[str] = None) -> None:
    """Add (or replace) a backend: ``factory()`` returns a :class:`xrand.backends.Backend`.

    ``module`` names the framework it needs (its ``Backend.module``), so that
    :func:`xrand.manual_seed` can seed an imported framework without creating the backend.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise UsageError(f"backend name must be an identifier-like string, got {name!r}")
    if not callable(factory):
        raise UsageTypeError(f"backend factory for {name!r} must be callable, got {factory!r}")
    global generation
    with _lock:
        _factories[name] = factory
        _instances.pop(name, None)
        generation += 1
        if module is None:
            _modules.pop(name, None)
        else:
            _modules[name] = module


def _load_entry_points() -> None:
    """Register the backends that installed packages declare in the ``xrand.backends`` group."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    eps = entry_points()
    group = eps.select(group=ENTRY_POINT_GROUP) if hasattr(eps, "select") else eps.get(ENTRY_POINT_GROUP, [])
    for ep in group:
        if ep.name not in _factories:
            _factories[ep.name] = f"{ep.value}"


def backend_names() -> List[str]:
    _load_entry_points()
    return sorted(_factories)


def _factory(name: str) -> Callable[[], Backend]:
    entry = _factories[name]
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        entry = obj
    return entry


def backend(name: Optional[str] = None) -> Backend:
    """The backend object named ``name`` (the active one when None); its framework is not imported."""
    if name is None:
        name = get_backend()
    instance = _instances.get(name) if type(name) is str else None
    if instance is not None:  # the usual call: no lock, so dispatch stays cheap
        return instance
    name = _check_name(name)
    with _lock:
        instance = _instances.get(name)
        if instance is None:
            try:
                instance = _factory(name)()
            except Exception as exc:  # a third-party plug-in that fails to load
                raise RuntimeError(f"backend {name!r} could not be created: {exc}") from exc
            if not isinstance(instance, Backend):
                raise UsageTypeError(f"backend factory for {name!r} returned {instance!r}, not an xrand.backends.Backend")
            _instances[name] = instance
    return instance


def usable_backend(name: Optional[str] = None) -> Backend:
    """Like :func:`backend`, but a :class:`~xrand.checks.UsageError` when its framework is missing here."""
    b = backend(name)
    reason = b.unavailable_reason()
    if reason is not None:
        raise UsageError(f"backend {b.name!r} cannot be used here: {reason}")
    return b


def loaded_backends() -> List[Backend]:
    """The backends whose framework is imported in this process, without creating any other.

    A backend whose framework module is known (built in, or registered with ``module=``) is
    created only when that module is imported; any other only if it was created already.
    """
    rows = []
    for name in list(_factories):
        instance = _instances.get(name)
        if instance is None and name in _modules and (not _modules[name] or module_loaded(_modules[name])):
            instance = backend(name)
        if instance is not None and instance.loaded():
            rows.append(instance)
    return rows


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise UsageTypeError(f"backend name must be a string, got {name!r} ({type(name).__name__})")
    if name not in _factories:
        _load_entry_points()
    if name not in _factories:
        raise UsageError(f"unknown backend {name!r}; known backends: {', '.join(backend_names())}")
    return name


def available_backends() -> List[BackendInfo]:
    """Every known backend, whether it can be used here, and if not, why."""
    rows = []
    for name in backend_names():
        try:
            reason = backend(name).unavailable_reason()
        except Exception as exc:  # keep listing the others
            reason = str(exc)
        rows.append(BackendInfo(name, reason is None, reason))
    return rows


def _default_name() -> str:
    """XRAND_BACKEND, else torch when installed, else numpy; read once per process."""
    global _default
    if _default is not None:
        return _default
    env = os.environ.get(ENV_VAR)
    if env:
        try:
            name = _check_name(env)
        except ValueError:
            raise UsageError(
                f"environment variable {ENV_VAR}={env!r} names no backend; known backends: "
                f"{', '.join(backend_names())}"
            ) from None
    else:
        name = "torch" if module_installed("torch") else "numpy"
    _default = name
    return name


def check_backend_variable() -> None:
    """``UsageError`` (one line) when ``XRAND_BACKEND`` names no backend; the command line checks it
    first for every command, as the first draw would."""
    _default_name()


def get_backend() -> str:
    """The name of the active backend."""
    return _context_choice.get() or _process_default or _default_name()


def set_backend(name: str) -> None:
    """Make ``name`` the process-wide backend (``use_backend`` blocks still take precedence)."""
    global _process_default
    _process_default = _check_name(name)


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[Backend]:
    """Use ``name`` inside the block, for this thread or asyncio task only."""
    token = _context_choice.set(_check_name(name))
    try:
        yield backend(name)
    finally:
        _context_choice.reset(token)
