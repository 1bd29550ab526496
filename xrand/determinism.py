"""Full-determinism switches for every installed framework, with an exact restore."""
from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, Optional

from .checks import UsageError
from .registry import backend, backend_names

_lock = threading.Lock()
_saved: Optional[Dict[str, Dict[str, Any]]] = None


def _targets(frameworks: Optional[Iterable[str]]):
    names = backend_names() if frameworks is None else list(frameworks)
    for name in names:
        b = backend(name)
        if frameworks is None and b.unavailable_reason() is not None:
            continue  # not installed here: nothing to configure
        if frameworks is not None and b.unavailable_reason() is not None:
            raise UsageError(f"cannot make {name!r} deterministic: {b.unavailable_reason()}")
        yield b


def enable_full_determinism(frameworks: Optional[Iterable[str]] = None) -> None:
    """Deterministic kernels for the installed frameworks (or just ``frameworks``).

    torch: the settings of diffusers' ``enable_full_determinism`` (``CUDA_LAUNCH_BLOCKING=1``,
    ``CUBLAS_WORKSPACE_CONFIG=:16:8``, deterministic algorithms, cuDNN deterministic and no
    benchmark, no TF32 matmul). MindSpore: ``deterministic="ON"`` and synchronous PyNative, as
    mindone's ``enable_full_determinism``. Calling it twice keeps the first saved state.
    """
    global _saved
    with _lock:
        targets = list(_targets(frameworks))
        saved = {} if _saved is None else _saved
        for b in targets:
            if b.name not in saved:
                saved[b.name] = b.determinism_state()
            b.enable_determinism()
        _saved = saved


def disable_full_determinism() -> None:
    """Restore every setting exactly as :func:`enable_full_determinism` found it."""
    global _saved
    with _lock:
        saved, _saved = _saved, None
        for name, state in (saved or {}).items():
            backend(name).restore_determinism(state)


def full_determinism_enabled() -> bool:
    return _saved is not None
