"""MindSpore's graph-mode compile cache, in a folder keyed by everything that changes a compiled graph.

Graph mode compiles each Cell a pipeline calls (the denoiser, and the text encoders and VAE of
text-to-image pipelines) on its first call: seconds per model. MindSpore can save the compiled graphs and load them in a later process
(``MS_COMPILER_CACHE_ENABLE``, ``MS_COMPILER_CACHE_PATH``), but on MindSpore 2.10 it

- names the graphs of a folder by the order a process compiles them (``compile_cache_0.mindir``...)
  and loads whatever file has that number, without checking that it is the same network;
- checks only a hash of the entry script and the local files it imports (so ``xrand``,
  ``python -m xrand`` and pytest would each miss the others' graphs), not the model or library;
- reads the folder once per process: a second folder set later in the same process is ignored.

So xrand keys the folder itself (:func:`cache_key`: the versions of xrand, MindSpore, mindone and
Python, a digest of xrand's own source, which holds the CPU fallbacks compiled into the graph,
the instruction set MindSpore's oneDNN runs, which picks the conv fallback,
the model folder's configs and tokenizer files, the pipeline, the scheduler and every setting but
the seed) and tells MindSpore to trust it (``MS_DEV_FORCE_USE_COMPILE_CACHE``). The weights are
not part of a graph: they stay parameters, read from the loaded model at every call (tested
with two models of one config). Only the first graph-mode run of a process uses the cache, so
its graphs are numbered from 0 as in the process that saved them; later runs in the process
compile as usual (:data:`OFF_TAKEN`). A folder is written under a temporary name and renamed
when the run succeeds, so no process reads a half-written one.

The folder is ``$XRAND_CACHE_DIR/mindspore-graphs/KEY`` (default ``$XDG_CACHE_HOME/xrand``,
else ``~/.cache/xrand``). When it cannot be written, the run compiles without the cache and the
report says why (``mindspore_compile_cache``); the numbers are the same either way.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from typing import Any, Dict, Iterator, Mapping, Optional

CACHE_DIR_VARIABLE = "XRAND_CACHE_DIR"
SUBFOLDER = "mindspore-graphs"
OFF_TAKEN = ("off: MindSpore reads one compile-cache folder per process, and an earlier run of this process "
             "used it; compiled now")
_MINDSPORE_VARIABLES = ("MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH", "MS_DEV_FORCE_USE_COMPILE_CACHE")

_taken: Optional[str] = None  # the key of the process's first cached run


def cache_root() -> str:
    """Where the keyed folders go: ``$XRAND_CACHE_DIR/mindspore-graphs`` or the XDG cache's."""
    base = os.environ.get(CACHE_DIR_VARIABLE)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "xrand")
    return os.path.join(os.path.abspath(base), SUBFOLDER)


def source_digest() -> str:
    """sha256 over every .py file of the installed xrand package (its CPU fallbacks, its recipes...)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


def key_parts(identity: Mapping[str, Any]) -> Dict[str, Any]:
    """Everything :func:`cache_key` hashes, readable: the run's ``identity`` (the model folder's
    digest, the pipeline, the scheduler, every setting but the seed; made by the plan) and what
    this process compiles with."""
    import mindone
    import mindspore as ms

    from .._version import __version__
    from ..mindspore_cpu import onednn_isa

    return {
        "xrand": __version__, "xrand_source": source_digest(),
        "mindspore": ms.__version__, "mindone": mindone.__version__,
        "python": "%d.%d" % sys.version_info[:2], "machine": platform.machine(),
        "device_target": ms.get_context("device_target"), "onednn_isa": onednn_isa(),
        **identity,
    }


def cache_key(identity: Mapping[str, Any]) -> str:
    text = json.dumps(key_parts(identity), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _mindspore_cache_set_elsewhere() -> bool:
    import mindspore as ms

    return os.environ.get("MS_COMPILER_CACHE_ENABLE") == "1" or bool(ms.get_context("enable_compile_cache"))


@contextlib.contextmanager
def _mindspore_cache(path: str) -> Iterator[None]:
    """MindSpore's compile cache on, in ``path``, trusting xrand's key; off again after the block."""
    from mindspore.graph import api

    from .. import _version

    saved = {name: os.environ.get(name) for name in _MINDSPORE_VARIABLES}
    os.environ.update(MS_COMPILER_CACHE_ENABLE="1", MS_COMPILER_CACHE_PATH=path, MS_DEV_FORCE_USE_COMPILE_CACHE="1")
    # At every compile MindSpore parses the entry script (sys.argv[0]) and the local files it
    # imports, for a hash the forced cache ignores; `python -c` has no script and fails there.
    # A fixed file with no imports stands in for it (a private name of MindSpore 2.10's).
    entry = getattr(api, "entry_script_path", None)
    api.entry_script_path = os.path.abspath(_version.__file__)
    try:
        yield
    finally:
        api.entry_script_path = entry
        os.environ["MS_COMPILER_CACHE_ENABLE"] = "0"  # read at every compile: nothing more goes in
        for name, value in saved.items():
            if name != "MS_COMPILER_CACHE_ENABLE":
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _has_files(folder: str) -> bool:
    return any(files for _, _, files in os.walk(folder))


@contextlib.contextmanager
def compile_cache(identity: Mapping[str, Any]) -> Iterator[Dict[str, str]]:
    """Around one graph-mode run: MindSpore's compile cache in this run's keyed folder.

    Yields a dict whose ``"status"`` says what the cache did, for the report's
    ``mindspore_compile_cache``: ``"loaded FOLDER"``, ``"saved FOLDER"`` or ``"off: why"``.
    """
    global _taken
    state: Dict[str, str] = {}
    if _taken is not None:
        state["status"] = OFF_TAKEN
        yield state
        return
    if _mindspore_cache_set_elsewhere():
        state["status"] = "off: MindSpore's own compile cache is on (MS_COMPILER_CACHE_ENABLE), xrand leaves it"
        yield state
        return
    root = cache_root()
    key = cache_key(identity)
    folder = os.path.join(root, key)
    if os.path.isdir(folder):
        _taken = key
        with _mindspore_cache(folder):
            state["status"] = f"loaded {folder}"
            yield state
        return
    try:
        os.makedirs(root, exist_ok=True)
        partial = tempfile.mkdtemp(prefix=key + ".partial-", dir=root)
    except OSError as exc:
        state["status"] = f"off: cannot write {root} ({exc.strerror or type(exc).__name__}); compiled now"
        yield state
        return
    _taken = key
    try:
        with _mindspore_cache(partial):
            yield state
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if not _has_files(partial):  # the graphs were compiled before (in memory): nothing to keep
        shutil.rmtree(partial, ignore_errors=True)
        state["status"] = "off: nothing compiled (the graphs were already in memory)"
        return
    try:
        os.rename(partial, folder)
        state["status"] = f"saved {folder}"
    except OSError:  # another process saved the same key first: keep its folder
        shutil.rmtree(partial, ignore_errors=True)
        state["status"] = f"saved {folder} (by another process first)"
