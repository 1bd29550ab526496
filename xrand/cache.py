"""Where xrand keeps what it computed once for later runs: ``$XRAND_CACHE_DIR`` (default
``$XDG_CACHE_HOME/xrand``, else ``~/.cache/xrand``), one subfolder per kind (MindSpore's compiled
graphs, torch's float64 noise floors, weight files' sha256). Everything there is keyed by what
made it, xrand's own source included (:func:`source_digest`), and can be deleted at any time."""
from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any, Mapping, Optional

CACHE_DIR_VARIABLE = "XRAND_CACHE_DIR"


def cache_dir(kind: str) -> str:
    """The folder of one kind of kept results: ``$XRAND_CACHE_DIR/KIND`` or the XDG cache's."""
    base = os.environ.get(CACHE_DIR_VARIABLE)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "xrand")
    return os.path.join(os.path.abspath(base), kind)


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """sha256 over every .py file of the installed xrand package (its CPU fallbacks, its recipes...),
    read once per process."""
    package = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(package)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, package).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def installed_version(name: str) -> Optional[str]:
    """The installed version of the distribution ``name``; None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def key_of(parts: Mapping[str, Any]) -> str:
    """A short hex key over ``parts`` (JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()[:32]
