"""The two frameworks a comparison runs, each behind the same calls: everything that differs
between torch and MindSpore above the noise layer lives in these two classes.

A recipe, the generic loop, recording and lockstep never ask which framework they drive: they
call ``fw.load_pipeline``, ``fw.randn``, ``fw.tensor``, ``fw.to_numpy``, ``fw.running`` and the
library's own classes from ``fw.import_library()`` (``diffusers`` on torch,
``mindone.diffusers`` on MindSpore, which use the same class names).
"""
from __future__ import annotations

import contextlib
import gc
import importlib
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from ..checks import UsageError, check_choice
from ..registry import backend
from .quiet import silenced
from .threads import Load, choose as choose_threads, measure as measure_load

#: The frameworks a comparison runs, in report order (the torch side is the reference).
FRAMEWORKS: Tuple[str, ...] = ("torch", "mindspore")
MINDSPORE_MODES: Tuple[str, ...] = ("pynative", "graph")
#: Why a bfloat16 run of MindSpore on a CPU runs PyNative (xrand.mindspore_cpu.ops, half precision).
BFLOAT16_ON_CPU = ("MindSpore's CPU kernels lack bfloat16 (MatMul, Conv2D, GroupNorm, Sigmoid, Div, Pow, ...); "
                   "xrand's stand-ins compute those in float32 and round to bfloat16, in PyNative")
#: What a comparison runs MindSpore in unless told otherwise: graph mode, its compiled graphs
#: kept between processes by .graph_cache (PyNative's bits on a CPU, see .graph_calls; faster
#: per step on small models, benchmarks/RESULTS.md figure 5) ...
DEFAULT_MINDSPORE_MODE = "graph"
#: ... but PyNative for a model folder of more weights than this on a CPU: there graph mode holds
#: about three times the weights in memory and PyNative about twice (figure 10), so that a
#: real-sized comparison fits half the machine; faster steps in graph mode are the user's choice.
PYNATIVE_ABOVE_BYTES = 1 << 30


def large_model_pynative(weights_bytes: int) -> str:
    """Why a large model runs MindSpore PyNative on a CPU, unless graph mode is asked for."""
    return (f"the model's weights are {weights_bytes / 1e9:.1f} GB: on a CPU graph mode would hold about 3x that in "
            "memory, PyNative about 2x; --mindspore-mode graph runs it anyway (faster per step once compiled)")


def check_framework(framework: Any) -> str:
    return check_choice(framework, FRAMEWORKS, "framework")


def check_mindspore_mode(mode: Any) -> str:
    return check_choice(mode, MINDSPORE_MODES, "MindSpore mode")


@contextlib.contextmanager
def mindspore_mode(mode: str) -> Iterator[None]:
    """MindSpore's execution mode inside the block, the previous one after it.

    ``"graph"`` compiles each Cell (the denoiser) on its first call (or loads it from
    :mod:`.graph_cache` around a run); on a CPU its Linear layers compute as PyNative's do, and
    its calls skip a per-call walk of the sub-cells (:mod:`.graph_calls`).
    """
    import mindspore as ms

    from .graph_calls import graph_mode_calls

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


@contextlib.contextmanager
def _load_errors(model: str, library: str) -> Iterator[None]:
    """A model that fails to load (corrupt weights, bad config) is a usage error."""
    try:
        yield
    except (OSError, ValueError, KeyError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{library} could not load the model {model!r}: {first_line}") from exc


class Framework:
    """One framework and its diffusion library, as the pipelines and comparison layers use them.

    What belongs to the framework itself (its dtypes, reading a tensor) is its xrand backend's;
    this adds what belongs to the diffusion library and to running a pipeline.
    """

    name: str = ""
    library: str = ""  # the diffusion library's package, e.g. "diffusers"
    extras: str = ""  # what pip installs it with

    def import_library(self) -> Any:
        """The diffusion library; a usage error saying what to install where it cannot be imported."""
        try:
            with silenced():
                return importlib.import_module(self.library)
        except ImportError as exc:
            raise UsageError(f"{self.library} cannot be imported here ({exc}); the {self.name} side needs "
                             f"pip install 'xrand[{self.extras}]'") from None

    def dtype(self, name: str) -> Any:
        return backend(self.name).dtype(name)

    def check_device(self, device: Optional[str]) -> Optional[str]:
        """The device as this framework names it (refused with the accepted ones)."""
        return device

    def device_name(self, device: Optional[str]) -> str:
        """The device a side ran on, for the report."""
        raise NotImplementedError

    def compiles_on_cpu(self, device: Optional[str]) -> bool:
        """Whether a run on ``device`` (checked by :meth:`check_device`) compiles its graphs for a
        CPU, where some operators have no kernel (MindSpore's graph mode; torch never compiles)."""
        return False

    def load_pipeline(self, cls_name: str, path: str, dtype: str, device: Optional[str],
                      arguments: Mapping[str, Any], single_file: Optional[str] = None) -> Any:
        """``cls_name.from_pretrained(path)`` from the library, in ``dtype`` on ``device``; or, for
        a single file of weights, ``from_single_file(single_file, config=path)`` (offline)."""
        library = self.import_library()
        with self.running(device, "pynative"), silenced():
            self.prepare()
            cls = getattr(library, cls_name)  # a lazy attribute: imports the pipeline's modules (chatty)
            dtype_argument = {self._dtype_argument: self.dtype(dtype)}
            with _load_errors(single_file or path, self.library):
                if single_file is None:
                    pipe = cls.from_pretrained(path, **dtype_argument, **arguments)
                else:
                    with self.single_file_loading():
                        pipe = cls.from_single_file(single_file, config=path, local_files_only=True, **dtype_argument,
                                                    **arguments)
        return self._placed(pipe, device)

    _dtype_argument = ""

    def single_file_loading(self) -> contextlib.AbstractContextManager:
        """Around ``from_single_file``: what the library needs to read one (nothing here)."""
        return contextlib.nullcontext()

    def load_component(self, cls: type, path: str, subfolder: str, dtype: str, device: Optional[str],
                       variant: Optional[str] = None) -> Any:
        """One component of a pipeline folder, ``cls.from_pretrained(path, subfolder=...)`` in ``dtype``
        (from the ``variant``'s files where it has them)."""
        with self.running(device, "pynative"), silenced(), _load_errors(path, self.library):
            component = cls.from_pretrained(path, subfolder=subfolder, variant=variant,
                                            **{self._dtype_argument: self.dtype(dtype)})
        return self._placed(component, device)

    def module_dtype(self, module: Any) -> Optional[str]:
        """The dtype a module's (first) weights are in, as a name (None: it has none)."""
        raise NotImplementedError

    def cast(self, tensor: Any, dtype: str) -> Any:
        """The tensor in ``dtype`` (a name)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Once before loading a model."""

    def _placed(self, pipe: Any, device: Optional[str]) -> Any:
        return pipe

    def randn(self, shape: Tuple[int, ...], generator: Any, dtype: Any, device: Any = None) -> Any:
        """The library's own ``randn_tensor`` (looked up at call time, so ``xrand.patched()`` applies)."""
        raise NotImplementedError

    def native_generator(self, seed: int) -> Any:
        """The generator the library's docs tell users to pass for ``seed`` (``--noise native``)."""
        raise NotImplementedError

    #: How :meth:`native_generator` makes it, for the report (``{seed}`` filled in).
    native_noise = ""

    def tensor(self, array: np.ndarray, dtype: Optional[str] = None, device: Any = None) -> Any:
        """A tensor of ``array``'s values in ``dtype``, a name such as ``"bfloat16"`` or ``"int64"``
        (None: the array's own)."""
        raise NotImplementedError

    def is_tensor(self, value: Any) -> bool:
        raise NotImplementedError

    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The values as float32 (float16 and bfloat16 widened), whatever the device."""
        return backend(self.name).to_numpy(tensor).astype(np.float32, copy=False)

    def capture(self, tensor: Any) -> Tuple[np.ndarray, str]:
        """``(values, dtype name)``: a copy of the exact values (bfloat16 held as float32) and the
        tensor's dtype, so :meth:`tensor` makes the same tensor again."""
        return np.array(backend(self.name).to_numpy(tensor)), self.dtype_of(tensor)

    def like(self, own: Any, value: Any) -> Any:
        """``value`` (made to replace ``own``, an input of a compiled call) marked as ``own`` is for
        the framework's compiler, so that the call finds the graph ``own`` compiled."""
        return value

    def dtype_of(self, tensor: Any) -> str:
        """A tensor's dtype as a name (``"float32"``, ``"int64"``, ``"bool"``)."""
        raise NotImplementedError

    def forward_of(self, module: Any) -> Any:
        """The method a module's call runs (torch's ``forward``, MindSpore's ``construct``)."""
        raise NotImplementedError

    def pipeline_device(self, pipe: Any) -> Any:
        """Where the pipeline's tensors are made (None: the framework's context decides)."""
        return None

    def running(self, device: Optional[str], mode: str, identity: Optional[Mapping[str, Any]] = None
                ) -> contextlib.AbstractContextManager:
        """Everything set around loading and running (no gradients; MindSpore's target, mode and
        compile cache). Yields a dict the run's environment is read from (:meth:`environment`)."""
        raise NotImplementedError

    def threads(self, load: Load) -> contextlib.AbstractContextManager:
        """Around a side that starts at ``load``: its kernel threads (:mod:`.threads`). Yields what
        the side's environment records: the count and why."""
        return contextlib.nullcontext({})

    def half_precision(self, dtype: str) -> contextlib.AbstractContextManager:
        """Around a run in ``dtype``: stand-ins for the kernels this framework lacks in it here.
        Yields a dict, filled when the block ends: kernel -> dtypes that ran through a stand-in."""
        return contextlib.nullcontext({})

    def environment(self, mode: str, state: Mapping[str, str], mode_reason: Optional[str] = None) -> Dict[str, Any]:
        """What a run in ``mode`` reports beyond versions (MindSpore: its mode, why when it is not
        the one asked, cache, oneDNN)."""
        return {}

    def unload(self, pipe: Any) -> None:
        """Before a pipeline is dropped (its weights are most of a side's memory): what frees its
        memory even while something still refers to it."""

    def unloaded(self) -> None:
        """After a pipeline was dropped and collected: what gives the framework's memory back."""


class Torch(Framework):
    name = "torch"
    library = "diffusers"
    extras = "torch,diffusers"
    _dtype_argument = "torch_dtype"

    def check_device(self, device):
        return device or "cpu"

    def device_name(self, device):
        return str(device or "cpu")

    def _placed(self, pipe, device):
        return pipe.to(device or "cpu")

    def randn(self, shape, generator, dtype, device=None):
        from diffusers.utils import torch_utils

        return torch_utils.randn_tensor(shape, generator=generator, device=device, dtype=dtype)

    native_noise = 'torch.Generator("cpu").manual_seed({seed})'

    def native_generator(self, seed):
        import torch

        return torch.Generator("cpu").manual_seed(seed)

    def tensor(self, array, dtype=None, device=None):
        import torch

        out = torch.from_numpy(np.asarray(array, order="C"))  # ascontiguousarray makes a 0-d array 1-d
        return out.to(device=device, dtype=None if dtype is None else getattr(torch, dtype))

    def is_tensor(self, value):
        import torch

        return isinstance(value, torch.Tensor)

    def dtype_of(self, tensor):
        return str(tensor.dtype).replace("torch.", "")

    def module_dtype(self, module):
        first = next(iter(module.parameters()), None)
        return None if first is None else self.dtype_of(first)

    def cast(self, tensor, dtype):
        import torch

        return tensor.to(getattr(torch, dtype))

    def forward_of(self, module):
        return module.forward

    def pipeline_device(self, pipe):
        return pipe.device

    @contextlib.contextmanager
    def running(self, device, mode, identity=None):
        import torch

        with torch.no_grad():
            yield {}

    @contextlib.contextmanager
    def threads(self, load):
        import torch

        before = torch.get_num_threads()  # torch's default (the physical cores), or the user's count
        count, why = choose_threads(load, most=before)
        torch.set_num_threads(count)
        try:
            yield {"torch_threads": count, "threads_chosen": why}
        finally:
            torch.set_num_threads(before)


    def unload(self, pipe):
        # the modules to the meta device: their memory goes even while a caller's frame still refers to them
        import torch

        for component in (getattr(pipe, "components", None) or {}).values():
            if isinstance(component, torch.nn.Module):
                component.to("meta")


class MindSpore(Framework):
    name = "mindspore"
    library = "mindone.diffusers"
    extras = "mindspore,diffusers"
    _dtype_argument = "mindspore_dtype"

    def check_device(self, device):
        from ..backends.mindspore import device_target

        return None if device is None else device_target(device)

    def device_name(self, device):
        if device is not None:
            return device
        import mindspore as ms

        return ms.get_context("device_target")

    def compiles_on_cpu(self, device):
        return self.device_name(device) == "CPU"

    def prepare(self):
        from .. import mindspore_cpu

        mindspore_cpu.install()  # no-op unless MindSpore runs on a CPU
        # Synchronous launch, the kernel threads (.threads, at the first load) and oneDNN at AVX2
        # (a fast Conv2D): each can be set once per process, so a process that already chose
        # keeps its choice.
        count, why = choose_threads(measure_load()) if mindspore_cpu.threads_to_set() else (None, None)
        mindspore_cpu.tune_cpu_runtime(count, why)

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

    def forward_of(self, module):
        return module.construct

    @contextlib.contextmanager
    def running(self, device, mode, identity=None):
        from ..backends.mindspore import use_device_target

        check_mindspore_mode(mode)
        with use_device_target(device), mindspore_mode(mode):
            if mode != "graph" or identity is None:
                yield {}
                return
            from .graph_cache import compile_cache

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

    def threads(self, load):
        from ..mindspore_cpu import cpu_threads
        from ..mindspore_cpu.install import on_cpu

        if not on_cpu():
            return contextlib.nullcontext({})
        chosen = cpu_threads()
        if chosen is None:
            return contextlib.nullcontext({"mindspore_threads": "unknown: set outside xrand"})
        return contextlib.nullcontext({"mindspore_threads": chosen[0],
                                       "threads_chosen": f"{chosen[1]} (when set: MindSpore sets them once per process)"})

    def half_precision(self, dtype):
        if dtype != "bfloat16":
            return contextlib.nullcontext({})
        from ..mindspore_cpu import half_precision

        return half_precision()  # on a CPU target only

    def unloaded(self):
        import mindspore

        # Graph mode keeps each compiled cell's graph and runtime memory (and so the cell) until
        # told: about 10 GB for a Stable-Diffusion-1.5-sized UNet at 256x256 (benchmarks/bench_scale.py)
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


_FRAMEWORKS = {"torch": Torch(), "mindspore": MindSpore()}


def framework(name: str) -> Framework:
    return _FRAMEWORKS[check_framework(name)]
