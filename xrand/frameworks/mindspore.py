"""MindSpore and mindone.diffusers behind :class:`.base.Framework`: its execution modes
(:func:`mindspore_mode`), the one a comparison runs, and graph mode's compile cache
(:func:`compile_cache`, in a folder keyed by everything that changes a compiled graph).
Graph-mode calls with PyNative's numbers: :mod:`.mindspore_graph`.

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
import gc
import os
import platform
import shutil
import sys
import tempfile
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from ..cache import cache_dir, key_of, source_digest
from ..checks import check_choice
from .base import Framework
from .collector import imports_uncollected
from .quiet import silenced
from .threads import choose as choose_threads, measure as measure_load

MINDSPORE_MODES: Tuple[str, ...] = ("pynative", "graph")
#: Why a bfloat16 run of MindSpore on a CPU runs PyNative (xrand.mindspore_cpu.ops, half precision).
BFLOAT16_ON_CPU = ("MindSpore's CPU kernels lack bfloat16 (MatMul, Conv2D, GroupNorm, Sigmoid, Div, Pow, ...); "
                   "xrand's stand-ins compute those in float32 and round to bfloat16, in PyNative")
#: What a comparison runs MindSpore in unless told otherwise: graph mode, its compiled graphs
#: kept between processes by :func:`compile_cache` (PyNative's bits on a CPU, see .mindspore_graph; faster
#: per step on small models, benchmarks/RESULTS.md figure 5) ...
DEFAULT_MINDSPORE_MODE = "graph"
#: ... but PyNative for a model folder of more weights than this on a CPU: there graph mode holds
#: about 1.6x the weights while it compiles its graphs, PyNative about 1.3x (an SD-1.5-sized
#: side at 256x256: 6.06 GiB against 4.98 GiB; with its graphs from the compile cache, 5.03 GiB;
#: at 512x512, 9.23, 8.10 and 8.21 GiB; README, "graph mode"), so that at 256x256 every stage of a
#: real-sized comparison keeps within 1.5x the weights; faster steps in graph mode are the user's choice.
PYNATIVE_ABOVE_BYTES = 1 << 30


def large_model_pynative(weights_bytes: int) -> str:
    """Why a large model runs MindSpore PyNative on a CPU, unless graph mode is asked for."""
    return (f"the model's weights are {weights_bytes / 1e9:.1f} GB: on a CPU graph mode would hold about 1.6x that in "
            "memory while it compiles its graphs, PyNative about 1.3x; --mindspore-mode graph runs it anyway (faster "
            "per step once compiled; with its graphs from the compile cache it holds about what PyNative holds)")


def check_mindspore_mode(mode: Any) -> str:
    return check_choice(mode, MINDSPORE_MODES, "MindSpore mode")


@contextlib.contextmanager
def mindspore_mode(mode: str) -> Iterator[None]:
    """MindSpore's execution mode inside the block, the previous one after it.

    ``"graph"`` compiles each Cell (the denoiser) on its first call (or loads it from
    :func:`compile_cache` around a run); on a CPU its Linear layers compute as PyNative's do, and
    its calls skip a per-call walk of the sub-cells (:mod:`.mindspore_graph`).
    """
    import mindspore as ms

    from .mindspore_graph import graph_mode_calls

    wanted = {"pynative": ms.PYNATIVE_MODE, "graph": ms.GRAPH_MODE}[check_mindspore_mode(mode)]
    previous = ms.get_context("mode")
    if wanted != previous:
        ms.set_context(mode=wanted)
    try:
        with graph_mode_calls() if mode == "graph" else contextlib.nullcontext():
            yield
    finally:
        if ms.get_context("mode") != previous:
            ms.set_context(mode=previous)


def import_transformers_without_torch() -> None:
    """In a process that runs MindSpore's side and nothing else (its stages' own process, the
    command line's ``--only mindspore`` and ``run --backend mindspore``), import transformers, on
    which mindone.transformers builds, with torch hidden from it: where torch is installed too,
    transformers imports it (and sympy) at once, 2.8 s of the 6.6 s mindone.diffusers'
    StableDiffusionPipeline took to import on a 2-core machine. transformers is then as on a
    MindSpore-only machine. Nothing changes where transformers is imported already, is not
    installed, or ``USE_TORCH`` is set."""
    import importlib
    import importlib.util

    if "transformers" in sys.modules or "USE_TORCH" in os.environ or importlib.util.find_spec("transformers") is None:
        return
    os.environ["USE_TORCH"] = "0"  # read once, when transformers is imported
    try:
        with silenced(), imports_uncollected():  # as the library's own import; transformers says it found no torch
            importlib.import_module("transformers")
    except ImportError:  # said in the usual words where mindone imports it
        pass
    finally:
        del os.environ["USE_TORCH"]


# mindone.transformers' __init__ and that of its models package import every model it ships (over
# 700 modules) at once, where a pipeline uses two or three: 7 s of the 17 s a process of MindSpore's
# side alone took to import mindone.diffusers' StableDiffusionPipeline on a 2-core machine.
LAZY_PACKAGES = ("mindone.transformers", "mindone.transformers.models")


def import_models_when_used(packages: Tuple[str, ...] = LAZY_PACKAGES) -> None:
    """Make each of ``packages`` (a package before its subpackages) import a module when a name from
    it is first used: its ``__init__`` runs as written but for its relative imports (``from
    .models.clip import CLIPTextModel``, ``from . import clip``), each name of which the package
    resolves on first use (its ``__getattr__``) to the object the import gives. An ``if`` around some
    of them (mindone's check of the transformers version) is evaluated as the ``__init__`` would.
    Nothing changes where a package is imported already; one whose ``__init__`` fails is left out of
    ``sys.modules``, as by a failed import."""
    for name in packages:
        if name not in sys.modules:
            _import_when_used(name)


def _import_when_used(name: str) -> None:
    import ast
    import importlib
    import importlib.util

    spec = importlib.util.find_spec(name)  # an ImportError where its parent is not installed
    module = importlib.util.module_from_spec(spec)
    later: Dict[str, Tuple[Optional[str], str]] = {}  # a name -> (its module, its name there)

    def run(body):
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                later.update({alias.asname or alias.name: (node.module, alias.name) for alias in node.names})
            elif isinstance(node, ast.If):
                run(node.body if eval(compile(ast.Expression(node.test), spec.origin, "eval"), vars(module))
                    else node.orelse)
            else:
                exec(compile(ast.Module([node], []), spec.origin, "exec"), vars(module))

    def __getattr__(attr):
        if attr not in later:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        where, what = later[attr]
        value = (importlib.import_module(f"{name}.{what}") if where is None  # from . import clip
                 else getattr(importlib.import_module(f"{name}.{where}"), what))
        setattr(module, attr, value)
        return value

    module.__getattr__ = __getattr__
    module.__dir__ = lambda: sorted(set(vars(module)) | set(later))
    sys.modules[name] = module
    try:
        with open(spec.origin) as f:
            run(ast.parse(f.read(), spec.origin).body)
    except BaseException:
        del sys.modules[name]
        raise
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


_DEFAULT_DEVICE_TARGET = "import mindspore; print(mindspore.get_context('device_target'))"
_default_device_target = None
_asking = None  # the process asked for it, while it answers


def ask_default_device_target() -> None:
    """Start asking a new process for :func:`default_device_target`, which then waits only for
    what is left of its answer (it imports MindSpore: 1.4 s, while this process goes on)."""
    global _asking
    if _default_device_target is None and _asking is None:
        import subprocess

        _asking = subprocess.Popen([sys.executable, "-c", _DEFAULT_DEVICE_TARGET], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)


def default_device_target() -> str:
    """MindSpore's default device target on this machine, asked of a new process (once per process):
    for a process that runs none of MindSpore's stages itself, where importing MindSpore would hold
    0.3 GiB for nothing (xrand.compare.plan.OWN_PROCESS_BYTES)."""
    global _default_device_target, _asking
    if _default_device_target is None:
        ask_default_device_target()
        asking, _asking = _asking, None
        lines = asking.communicate()[0].split()
        if asking.returncode != 0 or not lines:  # MindSpore's own error, raised here
            import mindspore as ms

            return ms.get_context("device_target")
        _default_device_target = lines[-1]
    return _default_device_target


class MindSpore(Framework):
    name = "mindspore"
    library = "mindone.diffusers"
    extras = "mindspore,diffusers"
    forward = "construct"
    _dtype_argument = "mindspore_dtype"

    def before_import(self):
        import_models_when_used()

    def check_device(self, device):
        from ..backends.mindspore import device_target

        return None if device is None else device_target(device)

    def device_name(self, device):
        if device is not None:
            return device
        import mindspore as ms

        return ms.get_context("device_target")

    @staticmethod
    def _asks_a_new_process(device, here):
        """Whether the default device is asked of a new process (:func:`default_device_target`)."""
        return device is None and not here and "mindspore" not in sys.modules

    def compiles_on_cpu(self, device, here=True):
        if self._asks_a_new_process(device, here):
            return default_device_target() == "CPU"
        return self.device_name(device) == "CPU"

    def ask_compiles_on_cpu(self, device, here=True):
        if self._asks_a_new_process(device, here):
            ask_default_device_target()

    def prepare(self):
        from .. import mindspore_cpu

        mindspore_cpu.install()  # no-op unless MindSpore runs on a CPU
        # Synchronous launch, the kernel threads (.threads, at the first load) and oneDNN at AVX2
        # (a fast Conv2D): each can be set once per process, so a process that already chose
        # keeps its choice.
        count, why = choose_threads(measure_load()) if mindspore_cpu.threads_to_set() else (None, None)
        mindspore_cpu.tune_cpu_runtime(count, why)

    def loading(self):
        from .mindspore_loading import weights_read_once

        return weights_read_once()  # the weights held once while they load, not twice

    @contextlib.contextmanager
    def single_file_loading(self):
        # mindone/diffusers/loaders/single_file_utils.py create_diffusers_clip_model_from_ldm reads
        # the CLIP text encoder's position_embedding.weight, which mindspore.nn.Embedding (mindone's
        # CLIPTextModel) names embedding_table: without this no single file with a CLIP text encoder loads
        from mindspore import nn

        added = not hasattr(nn.Embedding, "weight")
        if added:
            nn.Embedding.weight = property(lambda embedding: embedding.embedding_table)
        try:
            yield
        finally:
            if added:
                del nn.Embedding.weight

    def randn(self, shape, generator, dtype, device=None):
        from mindone.diffusers.utils import mindspore_utils

        return mindspore_utils.randn_tensor(shape, generator=generator, dtype=dtype)

    native_noise = "np.random.Generator(np.random.PCG64({seed}))"

    def native_generator(self, seed):
        return np.random.Generator(np.random.PCG64(seed))

    def tensor(self, array, dtype=None, device=None):
        import mindspore as ms

        array = np.asarray(array, order="C")  # ascontiguousarray makes a 0-d array 1-d: another graph
        if dtype is None:
            return ms.tensor(array)
        return ms.tensor(array, dtype=ms.bool_ if dtype == "bool" else getattr(ms, dtype))

    def is_tensor(self, value):
        import mindspore as ms

        return isinstance(value, ms.Tensor)

    def dtype_of(self, tensor):
        return str(tensor.dtype).lower()

    def like(self, own, value):
        # Graph mode compiles a tensor inside a tuple, list or dict as a constant, keyed by the
        # tensor object: a new object is a new graph (about 20 s for a tiny SDXL UNet) unless the
        # container is marked mutable, as mindone's SDXL pipelines mark added_cond_kwargs
        # (mindspore/graph/api.py _check_recompile_args).
        if not getattr(own, "__ms_mutable__", False) or getattr(value, "__ms_mutable__", False):
            return value
        import mindspore as ms

        return ms.mutable(value, dynamic_len=getattr(own, "__ms_dynamic_len__", False))

    def module_dtype(self, module):
        first = next(iter(module.get_parameters()), None)
        return None if first is None else self.dtype_of(first)

    def cast(self, tensor, dtype):
        import mindspore as ms

        return tensor.astype(getattr(ms, dtype))

    def module_class(self):
        from mindspore import nn

        return nn.Cell

    def submodules(self, module):
        return module.cells_and_names()

    def weights(self, module):
        return module.parameters_and_names()

    def _eager(self):
        return mindspore_mode("pynative")

    def operators_recorded(self, module, on_op):
        from .mindspore_ops import operators_recorded

        return operators_recorded(module, on_op)

    @contextlib.contextmanager
    def running(self, device, mode, identity=None):
        from ..backends.mindspore import use_device_target

        check_mindspore_mode(mode)
        with use_device_target(device), mindspore_mode(mode):
            if mode != "graph" or identity is None:
                yield {}
                return
            # MindSpore's graph compile calls gc.collect(), which walks every object of the
            # loaded libraries and models; frozen, they are skipped (benchmarks/RESULTS.md,
            # figure 5). Left alone if the caller froze the heap itself.
            freeze = gc.get_freeze_count() == 0
            if freeze:
                gc.freeze()
            try:
                with compile_cache(identity) as state:
                    yield state
            finally:
                if freeze:
                    gc.unfreeze()

    def laid_out(self, pipe, mode):
        import mindspore as ms

        if mode != "graph" or ms.get_context("device_target") != "CPU":
            return contextlib.nullcontext()
        from .mindspore_graph import linear_weights_transposed

        return linear_weights_transposed(vars(pipe).values())

    @contextlib.contextmanager
    def threads(self, load):
        from ..mindspore_cpu import cpu_threads, kernel_threads_pinned
        from ..mindspore_cpu.install import on_cpu

        if not on_cpu():
            yield {}
            return
        chosen = cpu_threads()
        if chosen is None:
            yield {"mindspore_threads": "unknown: set outside xrand"}
            return
        with kernel_threads_pinned() as pinned:
            info = {"mindspore_threads": chosen[0],
                    "threads_chosen": f"{chosen[1]} (when set: MindSpore sets them once per process)"}
            if pinned:
                info["mindspore_threads_pinned"] = ", ".join(f"{name} on CPU {cpu}" for name, cpu in pinned.items())
            yield info

    def half_precision(self, dtype):
        if dtype != "bfloat16":
            return contextlib.nullcontext({})
        from ..mindspore_cpu import half_precision

        return half_precision()  # on a CPU target only

    def unloaded(self):
        import mindspore

        # Graph mode keeps each compiled cell's graph and runtime memory (and so the cell) until
        # told: the pipeline and its graphs' runtime memory, 5.0 GiB for a Stable-Diffusion-1.5-sized one at
        # 256x256 with its graphs from the compile cache (README, "graph mode")
        mindspore.ms_memory_recycle()
        gc.collect()

    def environment(self, mode, state, mode_reason=None):
        from ..mindspore_cpu import onednn_isa

        out: Dict[str, Any] = {"mindspore_mode": mode}
        if mode_reason:
            out["mindspore_mode_reason"] = mode_reason
        if "status" in state:
            out["mindspore_compile_cache"] = state["status"]
        isa = onednn_isa()
        if isa is not None:
            out["mindspore_onednn_isa"] = isa
        return out


# ----------------------------------------------------------------------------- the compile cache

SUBFOLDER = "mindspore-graphs"
OFF_TAKEN = ("off: MindSpore reads one compile-cache folder per process, and an earlier run of this process "
             "used it; compiled now")
_MINDSPORE_VARIABLES = ("MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH", "MS_DEV_FORCE_USE_COMPILE_CACHE")

_taken: Optional[str] = None  # the key of the process's first cached run


def cache_root() -> str:
    """Where the keyed folders go: ``$XRAND_CACHE_DIR/mindspore-graphs`` or the XDG cache's."""
    return cache_dir(SUBFOLDER)


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
    return key_of(key_parts(identity))


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
