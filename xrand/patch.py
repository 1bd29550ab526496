"""Let diffusers and mindone.diffusers pipelines and schedulers take ``xrand.Generator``.

Both libraries import ``randn_tensor`` by name into every pipeline and scheduler module
(``from ...utils.torch_utils import randn_tensor``), so the patch replaces the name in the
defining module (covering modules imported later) and in every module already imported.
Native ``torch.Generator`` / ``numpy.random.Generator`` arguments go to the original function.
Each target's own parameters are mapped by name, positional or keyword (mindone's
``randn_tensor(shape, generator, dtype)`` has no ``device``).

Patching mindone.diffusers while MindSpore targets the CPU also puts :mod:`xrand.mindspore_cpu`'s
stand-ins for the kernels a CPU lacks in place (and takes them out with the patch), so mindone's
own pipelines run here as written, and launches MindSpore's operators synchronously, as a
comparison does (MindSpore takes that before its first operator only: patch before loading).
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections import abc
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .checks import check_choice, loaded_modules
from .generator import Generator
from .registry import use_backend

# (defining module, function name, its parameters in order, backend, library package prefix)
TARGETS = (
    ("diffusers.utils.torch_utils", "randn_tensor", ("shape", "generator", "device", "dtype", "layout"),
     "torch", "diffusers"),
    ("mindone.diffusers.utils.mindspore_utils", "randn_tensor", ("shape", "generator", "dtype"),
     "mindspore", "mindone.diffusers"),
    ("mindone.diffusers.utils.mindspore_utils", "randn", ("size", "generator", "dtype"),
     "mindspore", "mindone.diffusers"),
)
LIBRARIES = tuple(dict.fromkeys(prefix for *_, prefix in TARGETS))  # "diffusers", "mindone.diffusers"

_lock = threading.Lock()
_originals: Dict[Tuple[str, str], Callable] = {}
_STANDINS_FOR = "mindone.diffusers"
_standins_ours = False  # whether patch() put xrand.mindspore_cpu's stand-ins in place


def _is_xrand(generator: Any) -> bool:
    if isinstance(generator, (list, tuple)):
        return bool(generator) and isinstance(generator[0], Generator)
    return isinstance(generator, Generator)


def _wrap(original: Callable, params: Tuple[str, ...], backend_name: str) -> Callable:
    @functools.wraps(original)
    def randn_tensor(*args, **kwargs):
        given = dict(zip(params, args))
        if len(args) > len(params) or not given.keys().isdisjoint(kwargs) or not set(kwargs) <= set(params):
            return original(*args, **kwargs)  # the library's own error for a bad call
        given.update(kwargs)
        generator = given.get("generator")
        if not _is_xrand(generator):
            return original(*args, **kwargs)
        from .noise import randn_tensor as xrand_randn_tensor

        with use_backend(backend_name):
            return xrand_randn_tensor(given.get(params[0]), generator, device=given.get("device"),
                                      dtype=given.get("dtype"), layout=given.get("layout"))

    randn_tensor.__xrand_original__ = original
    return randn_tensor


def _replace_everywhere(replacements: List[Tuple[str, str, Callable, Callable]]) -> None:
    """Each (package prefix, name, old, new): rebind ``name`` from old to new in every loaded
    module of the package, in one pass over ``sys.modules`` (thousands of modules once torch,
    MindSpore and transformers are loaded)."""
    prefixes = tuple({prefix for prefix, _, _, _ in replacements})
    for module_name, module in loaded_modules(prefixes):
        for prefix, name, old, new in replacements:
            if module_name != prefix and not module_name.startswith(prefix + "."):
                continue
            # the module's own names: getattr would also run lazy modules' __getattr__ (slow)
            if getattr(module, "__dict__", {}).get(name) is old:
                setattr(module, name, new)


def _check_libraries(libraries: Optional[Iterable[str]]) -> Optional[frozenset]:
    if libraries is None:
        return None
    names = [libraries] if isinstance(libraries, str) or not isinstance(libraries, abc.Iterable) else libraries
    return frozenset(check_choice(name, LIBRARIES, "library to patch") for name in names)


def patch(libraries: Optional[Iterable[str]] = None) -> List[Tuple[str, str]]:
    """Patch the installed libraries of TARGETS (importing them): all, or those named in
    ``libraries`` (``"diffusers"``, ``"mindone.diffusers"``). Calling it twice is harmless;
    returns the (module, function) pairs patched now."""
    import importlib
    import importlib.util

    from .frameworks.collector import imports_uncollected

    libraries = _check_libraries(libraries)
    with _lock:
        replacements, done = [], []
        for module_name, name, params, backend_name, prefix in TARGETS:
            if (module_name, name) in _originals or (libraries is not None and prefix not in libraries):
                continue
            top = module_name.split(".")[0]
            if importlib.util.find_spec(top) is None:
                continue
            try:
                with imports_uncollected():
                    module = importlib.import_module(module_name)
            except ImportError:
                continue  # e.g. mindone installed without a working MindSpore
            original = getattr(module, name)
            _originals[(module_name, name)] = original
            done.append((module_name, name))
            replacements.append((prefix, name, original, _wrap(original, params, backend_name)))
        if replacements:
            _replace_everywhere(replacements)
        if any(prefix == _STANDINS_FOR for prefix, *_ in replacements):
            _install_standins()
        return done


def _install_standins() -> None:
    """mindone's stand-ins for the MindSpore kernels a CPU lacks, and MindSpore's launch as the
    compare has it (nothing off the CPU target)."""
    global _standins_ours
    from . import mindspore_cpu

    if not mindspore_cpu.installed() and mindspore_cpu.install():
        _standins_ours = True
    mindspore_cpu.launch_synchronously()  # takes effect before MindSpore's first operator only


def _uninstall_standins() -> None:
    global _standins_ours
    if _standins_ours:
        from . import mindspore_cpu

        mindspore_cpu.uninstall()
        _standins_ours = False


def unpatch(targets: Optional[Iterable[Tuple[str, str]]] = None) -> None:
    """Put the original functions back (all, or those of the (module, function) pairs
    ``targets``), also in modules imported while patched."""
    with _lock:
        replacements = []
        for (module_name, name), original in list(_originals.items()):
            if targets is not None and (module_name, name) not in targets:
                continue
            prefix = next(p for m, n, _, _, p in TARGETS if (m, n) == (module_name, name))
            current = getattr(sys.modules[module_name], name)
            if getattr(current, "__xrand_original__", None) is original:
                replacements.append((prefix, name, current, original))
            del _originals[(module_name, name)]
        if replacements:
            _replace_everywhere(replacements)
        if not any(module_name.startswith(_STANDINS_FOR) for module_name, _ in _originals):
            _uninstall_standins()


def is_patched() -> bool:
    return bool(_originals)


@contextlib.contextmanager
def patched(libraries: Optional[Iterable[str]] = None) -> Iterator[None]:
    """``with xrand.patched():`` pipelines accept xrand generators inside the block (those of
    ``libraries`` only, when given, as :func:`patch`); what was patched before stays patched."""
    done = patch(libraries)
    try:
        yield
    finally:
        unpatch(done)
