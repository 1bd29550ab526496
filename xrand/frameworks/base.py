"""The contract for a framework a comparison runs: everything that differs between torch and
MindSpore above the noise layer lives in a :class:`Framework` subclass (``torch.py``, ``mindspore.py``).

A recipe, the generic loop, recording and lockstep never ask which framework they drive: they
call ``fw.load_pipeline``, ``fw.randn``, ``fw.tensor``, ``fw.to_numpy``, ``fw.running`` and the
library's own classes from ``fw.import_library()`` (``diffusers`` on torch,
``mindone.diffusers`` on MindSpore, which use the same class names); ``--layers`` hooks every
submodule of a denoiser through ``fw.submodules`` and ``fw.hooked``.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, Tuple

import numpy as np

from ..checks import UsageError, module_installed
from ..registry import backend
from .collector import imports_uncollected
from .quiet import silenced
from .threads import Load


_PARAMETERS: Dict[type, Optional[set]] = {}  # a module class -> the names its forward takes (None: any)


def library_class(library: Any, name: str) -> Any:
    """``library.NAME``, a pipeline class of diffusers or mindone.diffusers: a lazy attribute whose
    first use imports the pipeline's modules, which print; so quietly, and with the collector off
    (:func:`.collector.imports_uncollected`)."""
    with silenced(), imports_uncollected():
        return getattr(library, name)


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
    forward: str = ""  # the method a module's call runs: torch's "forward", MindSpore's "construct"

    def import_library(self) -> Any:
        """The diffusion library; a usage error saying what to install where it cannot be imported."""
        try:
            with silenced(), imports_uncollected():
                self.before_import()
                return importlib.import_module(self.library)
        except ImportError as exc:
            raise self._not_here(exc) from None

    def before_import(self) -> None:
        """What this framework does before its library is first imported."""

    def installed(self) -> bool:
        """Whether the library's package is installed here, without importing it."""
        return module_installed(self.library.split(".")[0])

    def check_installed(self) -> None:
        """:meth:`import_library`'s usage error where the library's package is not installed, without
        importing it: for a process that only hands the work to others (a sweep's, whose workers
        import it; an install that is there but broken is named by the first worker's import)."""
        if not self.installed():
            raise self._not_here(f"No module named '{self.library.split('.')[0]}'")

    def _not_here(self, why: Any) -> UsageError:
        return UsageError(f"{self.library} cannot be imported here ({why}); the {self.name} side needs "
                          f"pip install 'xrand[{self.extras}]'")

    def dtype(self, name: str) -> Any:
        return backend(self.name).dtype(name)

    def check_device(self, device: Optional[str]) -> Optional[str]:
        """The device as this framework names it (refused with the accepted ones)."""
        return device

    def device_name(self, device: Optional[str]) -> str:
        """The device a side ran on, for the report."""
        raise NotImplementedError

    def compiles_on_cpu(self, device: Optional[str], here: bool = True) -> bool:
        """Whether a run on ``device`` (checked by :meth:`check_device`) compiles its graphs for a
        CPU, where some operators have no kernel (MindSpore's graph mode; torch never compiles).
        ``here=False``: the side runs in another process, so this one need not import its framework to tell."""
        return False

    def ask_compiles_on_cpu(self, device: Optional[str], here: bool = True) -> None:
        """:meth:`compiles_on_cpu` with these arguments may be asked later: start finding out now
        where that takes a while (MindSpore's answer from a new process), so it is ready then."""

    def load_pipeline(self, cls_name: str, path: str, dtype: str, device: Optional[str],
                      arguments: Mapping[str, Any], single_file: Optional[str] = None) -> Any:
        """``cls_name.from_pretrained(path)`` from the library, in ``dtype`` on ``device``; or, for
        a single file of weights, ``from_single_file(single_file, config=path)`` (offline)."""
        library = self.import_library()
        with self.running(device, "pynative"), silenced(), self.loading():
            self.prepare()
            cls = library_class(library, cls_name)
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

    def loading(self) -> contextlib.AbstractContextManager:
        """Around every ``from_pretrained``: how the library reads the weights (as it does here)."""
        return contextlib.nullcontext()

    def single_file_loading(self) -> contextlib.AbstractContextManager:
        """Around ``from_single_file``: what the library needs to read one (nothing here)."""
        return contextlib.nullcontext()

    def load_component(self, cls: type, path: str, subfolder: str, dtype: str, device: Optional[str],
                       variant: Optional[str] = None) -> Any:
        """One component of a pipeline folder, ``cls.from_pretrained(path, subfolder=...)`` in ``dtype``
        (from the ``variant``'s files where it has them)."""
        with self.running(device, "pynative"), silenced(), self.loading(), _load_errors(path, self.library):
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
        """The method a module's call runs (:attr:`forward`)."""
        return getattr(module, self.forward)

    def module_class(self) -> type:
        """The framework's module class (torch's ``nn.Module``, MindSpore's ``nn.Cell``)."""
        raise NotImplementedError

    def pipeline_device(self, pipe: Any) -> Any:
        """Where the pipeline's tensors are made (None: the framework's context decides)."""
        return None

    def is_module(self, value: Any) -> bool:
        """Whether ``value`` is a module of this framework (:meth:`module_class`)."""
        return isinstance(value, self.module_class())

    def submodules(self, module: Any) -> Iterable[Tuple[str, Any]]:
        """``(qualified name, submodule)`` for ``module`` itself (named ``""``) and every module
        inside it, parents first (``down_blocks.0.resnets.0.conv1``)."""
        raise NotImplementedError

    def weights(self, module: Any) -> Iterable[Tuple[str, Any]]:
        """``(name, tensor)`` of every parameter of a loaded module and of the buffers its library
        saves with it, named as that library names them."""
        raise NotImplementedError

    def module_device(self, module: Any) -> Any:
        """Where a module's (first) weights are, and so its inputs go (None: the framework's context decides)."""
        return None

    @contextlib.contextmanager
    def hooked(self, named: Iterable[Tuple[str, Any]], pre: Optional[Callable[..., Any]] = None,
               post: Optional[Callable[..., Any]] = None) -> Iterator[None]:
        """Inside the block, every call of each ``(name, module)`` of ``named`` (from :meth:`submodules`)
        runs ``pre(name, module, args, kwargs)`` before it and ``post(name, module, args, kwargs, output)``
        after it, through the modules' forward hooks (removed after the block). What ``pre`` returns,
        an ``(args, kwargs)`` pair, replaces the call's inputs, and what ``post`` returns its output
        (None: they stay). The block runs eagerly, where hooks see every call: torch without
        gradients, MindSpore in PyNative mode (:meth:`_eager`)."""
        handles = []
        for name, module in named:
            if pre is not None:
                handles.append(module.register_forward_pre_hook(functools.partial(pre, name), with_kwargs=True))
            if post is not None:
                handles.append(module.register_forward_hook(functools.partial(post, name), with_kwargs=True))
        try:
            with self._eager():
                yield
        finally:
            for h in handles:
                h.remove()

    def operators_recorded(self, module: Any, on_op: Callable[..., None]) -> contextlib.AbstractContextManager:
        """Inside the block, each operator call made from Python (not those inside another one):
        ``on_op(name, call, args, kwargs, output, params)``, ``name``
        as users write it (``F.linear``, ``Tensor.permute``, ``nn_ops.FlashAttentionScore``),
        ``call`` what runs it again on other inputs (``call(*args, **kwargs)``), ``params`` the
        settings it was made with (a primitive's; else empty). ``module``: the module about to run
        (MindSpore records its own library's cells in it as operators). For ``--ops``."""
        raise NotImplementedError

    def _eager(self) -> contextlib.AbstractContextManager:
        """Around the calls :meth:`hooked` sees."""
        raise NotImplementedError

    def takes(self, module: Any, kwargs: Mapping[str, Any]) -> bool:
        """Whether ``module``'s forward (:meth:`forward_of`) takes these keyword arguments: a text
        encoder's blocks may name theirs otherwise on the two sides (mindone's transformers'
        UMT5Block lacks torch's ``past_key_values``)."""
        params = _PARAMETERS.get(type(module))
        if params is None:
            found = inspect.signature(self.forward_of(module)).parameters.values()
            params = _PARAMETERS[type(module)] = None if any(p.kind is p.VAR_KEYWORD for p in found) else \
                {p.name for p in found}
        return params is None or all(k in params for k in kwargs)

    def running(self, device: Optional[str], mode: str, identity: Optional[Mapping[str, Any]] = None
                ) -> contextlib.AbstractContextManager:
        """Everything set around loading and running (no gradients; MindSpore's target, mode and
        compile cache). Yields a dict the run's environment is read from (:meth:`environment`)."""
        raise NotImplementedError

    def laid_out(self, pipe: Any, mode: str) -> contextlib.AbstractContextManager:
        """Around a run of ``pipe`` in ``mode``, inside :meth:`running`: its weights laid out as that
        mode's kernels read them, put back after the block."""
        return contextlib.nullcontext()

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
