"""The denoiser boundary: every call of a side's denoiser and of its scheduler's ``step``, seen,
recorded, or fed the reference side's values.

Whatever pipeline runs (the library's own ``__call__`` or the generic loop), it reaches its
model through two doors: ``denoiser(*args, **kwargs)`` and ``scheduler.step(model_output,
timestep, sample, ...)``. :class:`Boundary` stands at both for one run:

- always, it keeps every step's output (the trajectory), the first sample and the timesteps,
  and adds the step options (``s_churn``...) to each ``step`` call, and the run's generator
  where ``step`` takes one and the pipeline passed none (SD3, Flux and Wan call ``step``
  without it, so an SDE solver's noise would come from each framework's global RNG);
- recording (the torch side), it keeps each denoiser call's inputs and output as
  :class:`.trees.Captured` values, nested structure and all, and each step's inputs;
- feeding (the other side, lockstep), it hands the denoiser the recorded inputs of the same
  call instead of its own, and ``step`` the recorded sample (and what a sampler carries from its
  previous step, :data:`CARRIED`): each call's error is then local, the framework's own
  operations on identical inputs.

A new recipe gets recording, lockstep and layers without code of its own.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Container, Dict, Iterator, List, Mapping, Optional

import numpy as np

from .components import prompt_inputs
from .metrics import metrics
from .nonfinite import first_seen
from .records import RecordReader, RecordWriter
from .trees import Capture, Captured, arrays, convertible, leaves, restore


#: ``step`` inputs a sampler carries from its previous step, recorded and fed as the sample is:
#: CogVideoXDPMScheduler's previous predicted original sample (the pipeline hands it back in).
CARRIED = ("old_pred_original_sample",)


class Recording:
    """What the reference side's denoiser and scheduler saw and gave, call by call, kept in a
    record (:mod:`.records`: in memory, or in the comparison folder as it is made).

    :meth:`call` ``(i)``: the inputs of the i-th denoiser call by parameter name (None where it was
    not kept); :meth:`step` ``(j)``: the j-th ``step`` call's ``model_output``, ``sample`` and
    ``prev_sample`` (float32 arrays)."""

    def __init__(self, writer: Optional[RecordWriter] = None, reader: Optional[RecordReader] = None) -> None:
        self.writer, self.reader = writer, reader
        tree = reader.tree if reader is not None else {"calls": [], "steps": []}
        self.calls: List[Any] = tree["calls"]
        self.steps: List[Dict[str, Any]] = tree["steps"]
        self.component: Any = tree.get("component")  # another component's call (.component_call)

    def add_call(self, index: int, inputs: Dict[str, Any]) -> None:
        self.calls.extend([None] * (index + 1 - len(self.calls)))
        self.calls[index] = self.writer.encode(inputs)

    def add_step(self, **arrays: np.ndarray) -> None:
        self.steps.append({name: self.writer.encode(a) for name, a in arrays.items()})

    def add_prev_sample(self, prev: np.ndarray) -> None:
        self.steps[-1]["prev_sample"] = self.writer.encode(prev)

    def close(self) -> Dict[str, Any]:
        """Done recording: write what is left (a folder's record); the files written."""
        files = self.writer.close({"calls": self.calls, "steps": self.steps, "component": self.component})
        self.reader = RecordReader.of(self.writer) if self.writer.folder is None else \
            RecordReader.open(self.writer.folder, self.writer.name, files, "torch")
        return files

    def call(self, index: int) -> Optional[Dict[str, Any]]:
        given = self.calls[index] if index < len(self.calls) else None
        return None if given is None else self.reader.decode(given)

    def component_call(self) -> Optional[Dict[str, Any]]:
        """The inputs of the component call kept (:mod:`.component_call`), or None."""
        return None if self.component is None else self.reader.decode(self.component)

    def step(self, index: int) -> Dict[str, np.ndarray]:
        return {name: self.reader.decode(v) for name, v in self.steps[index].items()}


def call_signature(fw: Any, module: Any) -> inspect.Signature:
    return inspect.signature(fw.forward_of(module))


def named_inputs(signature: inspect.Signature, args: tuple, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """A call's arguments by parameter name (``**kwargs`` parameters spread out)."""
    bound = signature.bind(*args, **kwargs)
    named: Dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            named.update({f"*{i}": v for i, v in enumerate(value)})
        else:
            named[name] = value
    return named


def as_call(signature: inspect.Signature, named: Dict[str, Any]) -> tuple:
    """``named`` (from :func:`named_inputs` of another framework's call) as ``(args, kwargs)`` for
    a module of ``signature``; a named value it does not take is refused unless it is None."""
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    args = [named[k] for k in sorted((k for k in named if k.startswith("*")), key=lambda k: int(k[1:]))]
    kwargs = {}
    for name, value in named.items():
        if name.startswith("*"):
            continue
        if name in params or takes_any:
            kwargs[name] = value
        elif value is not None:
            raise TypeError(f"the other framework's denoiser takes no argument {name!r}")
    if args:  # positional-only values first: the named ones go in by position before them
        ordered = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        args = [kwargs.pop(p.name) for p in ordered if p.name in kwargs] + args
    return tuple(args), kwargs


def substitute(own: Any, given: Any, fw: Any) -> Any:
    """``given`` (captured from the reference) in the form of ``own`` (this framework's value):
    each captured tensor becomes a tensor of ``own``'s dtype and shape there (a 0-d timestep stays
    0-d), or a Python number where ``own`` is one, and a container stays mutable where ``own`` is
    (:meth:`.Framework.like`), so a MindSpore graph compiled for the side's own calls serves the
    fed ones instead of compiling another per call."""
    return fw.like(own, _substitute(own, given, fw))


def _substitute(own: Any, given: Any, fw: Any) -> Any:
    if isinstance(given, Captured):
        if fw.is_tensor(own):
            array = given.array
            if array.size == int(np.prod(own.shape)):
                array = array.reshape(tuple(own.shape))
            return fw.tensor(array, fw.dtype_of(own))
        if isinstance(own, (int, float)) and not isinstance(own, bool) and given.array.size == 1:
            return type(own)(given.array.item())
        return fw.tensor(given.array, given.dtype)
    if isinstance(given, Mapping) and isinstance(own, Mapping) and set(given) == set(own):
        items = {k: substitute(own[k], v, fw) for k, v in given.items()}
        return items if type(own) is dict else type(own)(**items)
    if isinstance(given, (list, tuple)) and isinstance(own, (list, tuple)) and len(given) == len(own):
        return type(own)(substitute(o, g, fw) for o, g in zip(own, given))
    return restore(given, fw)


def fed_call(signature: inspect.Signature, args: tuple, kwargs: Dict[str, Any], given: Dict[str, Any],
             fw: Any) -> tuple:
    """The side's own call ``(args, kwargs)`` with every input replaced by the reference's value of
    the same parameter (:func:`substitute`), in the same form (positional stays positional); a
    tensor the reference passed that this call left out is added by name."""
    names = [p.name for p in signature.parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:len(args)]
    fed_args = tuple(substitute(a, given[n], fw) if n in given else a for n, a in zip(names, args)) + \
        tuple(args[len(names):])
    fed_kwargs = {k: substitute(v, given[k], fw) if k in given else v for k, v in kwargs.items()}
    for name, value in given.items():
        if name not in names and name not in kwargs and not name.startswith("*") and \
                any(isinstance(leaf, Captured) for leaf in leaves(value)):
            fed_kwargs[name] = restore(value, fw)
    return fed_args, fed_kwargs


_AROUND: Dict[int, Callable[..., Any]] = {}  # id(obj) -> its ``around``, while intercepted
_WRAPPERS: Dict[type, type] = {}  # a class -> its intercepting subclass, made once


def _wrapper(cls: type) -> type:
    """``cls``'s subclass of the same name whose ``__call__`` goes through the object's ``around``.
    One per class: MindSpore keys compiled graphs by the cell's class too, so a class made anew
    for every run would compile the denoiser again."""
    if cls not in _WRAPPERS:
        def __call__(self, *args, **kwargs):
            return _AROUND[id(self)](lambda *a, **k: cls.__call__(self, *a, **k), args, kwargs)

        _WRAPPERS[cls] = type(cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__,
                                                      "__qualname__": cls.__qualname__})
    return _WRAPPERS[cls]


@contextlib.contextmanager
def intercepted(obj: Any, around: Callable[[Callable[..., Any], tuple, Dict[str, Any]], Any]) -> Iterator[None]:
    """Inside the block every call ``obj(*args, **kwargs)`` is ``around(call, args, kwargs)``.

    ``obj``'s class is swapped for a subclass of the same name whose ``__call__`` goes through
    ``around``, so ``isinstance`` holds, attribute reads are untouched, and torch's forward and
    MindSpore's construct (graph mode included) run as before; the class is put back after.
    """
    cls = type(obj)
    _AROUND[id(obj)] = around
    object.__setattr__(obj, "__class__", _wrapper(cls))
    try:
        yield
    finally:
        object.__setattr__(obj, "__class__", cls)
        del _AROUND[id(obj)]


class Boundary:
    """The two doors of one run (see the module). ``record_calls``: which denoiser calls to keep
    (a container of indices, or None for none); ``record_steps``: keep each step's inputs;
    ``feed``: the reference's :class:`Recording`, to run fed (lockstep)."""

    def __init__(self, fw: Any, step_options: Dict[str, Any], generator: Any,
                 record_calls: Optional[Container[int]] = None, record_steps: bool = False,
                 feed: Optional[Recording] = None, add_generator: bool = True,
                 record: Optional[RecordWriter] = None) -> None:
        self.fw = fw
        self.step_options = dict(step_options)
        self.generator = generator
        self.record_calls = record_calls
        self.record_steps = record_steps
        self.feed = feed
        self.first_input: Optional[np.ndarray] = None
        self.prompt: Dict[str, np.ndarray] = {}  # the prompt embeddings the first denoiser call got
        self.nonfinite: Optional[Dict[str, Any]] = None  # where a NaN or Inf was first seen (.nonfinite)
        self.drawn_before_steps = 0
        self.outputs: List[np.ndarray] = []
        self.timesteps: List[float] = []
        recording = record_calls is not None or record_steps
        self.recording = Recording(record or RecordWriter("run")) if recording else None
        self.local: List[Dict[str, Any]] = []  # fed: per step, the local error of its model output and sample
        self.generator_added = False  # whether step() got the generator from here (the pipeline passed none)
        self.add_generator = add_generator  # False: step() gets what the pipeline passes (--noise native)
        self._calls = 0
        self._capture = Capture(fw)

    @contextlib.contextmanager
    def attached(self, denoiser: Any, scheduler: Any) -> Iterator["Boundary"]:
        signature = call_signature(self.fw, denoiser)
        original = scheduler.step
        step_signature = inspect.signature(original)

        @functools.wraps(original)  # pipelines inspect step's signature for eta and generator
        def step(*args, **kwargs):
            return self._step(original, step_signature.bind(*args, **kwargs))

        scheduler.step = step
        try:
            with intercepted(denoiser, lambda call, a, kw: self._denoise(call, signature, a, kw)):
                yield self
        finally:
            del scheduler.step  # the instance wrapper gone, back to the class method

    def _denoise(self, call: Callable[..., Any], signature: inspect.Signature, args: tuple,
                 kwargs: Dict[str, Any]) -> Any:
        index, self._calls = self._calls, self._calls + 1
        if self.feed is not None:
            given = self.feed.call(index)
            if given is None or not convertible(given):
                raise RuntimeError(f"lockstep: the reference side recorded no usable denoiser call {index}")
            args, kwargs = fed_call(signature, args, kwargs, given, self.fw)
        if self.record_calls is not None and index in self.record_calls:
            self.recording.add_call(index, self._capture(named_inputs(signature, args, kwargs)))
        if index == 0:
            self.prompt = prompt_inputs(named_inputs(signature, args, kwargs), self.fw)
            self.watch("prompt embeddings", self.prompt.values())
        out = call(*args, **kwargs)
        if self.nonfinite is None:
            self.watch("denoiser output", [self.fw.to_numpy(v) for v in leaves(out) if self.fw.is_tensor(v)],
                       call=index)
        return out

    def watch(self, component: str, values: Any, **where: Any) -> None:
        """Keep the first place a NaN or Inf shows (``step``: the scheduler step it belongs to)."""
        if self.nonfinite is None:
            self.nonfinite = first_seen(component, values, **{"step": len(self.outputs), **where})

    def _step(self, original: Callable[..., Any], bound: inspect.BoundArguments) -> Any:
        index = len(self.outputs)
        given = self.feed.step(index) if self.feed is not None and index < len(self.feed.steps) else None
        if given is not None:
            bound.arguments["sample"] = self.fw.tensor(given["sample"], self.fw.dtype_of(bound.arguments["sample"]))
            for name in CARRIED:
                if name in given and bound.arguments.get(name) is not None:
                    bound.arguments[name] = self.fw.tensor(given[name], self.fw.dtype_of(bound.arguments[name]))
        sample, model_output = bound.arguments["sample"], bound.arguments["model_output"]
        if self.first_input is None:
            self.first_input = self.fw.to_numpy(sample)
            self.drawn_before_steps = getattr(self.generator, "drawn", 0)
        if self.record_steps:
            carried = {name: self.fw.to_numpy(bound.arguments[name]) for name in CARRIED
                       if bound.arguments.get(name) is not None}
            self.recording.add_step(model_output=self.fw.to_numpy(model_output), sample=self.fw.to_numpy(sample),
                                    **carried)
        bound.arguments.update(self.step_options)  # step_options are keys of step's signature
        if self.add_generator and "generator" in bound.signature.parameters \
                and bound.arguments.get("generator") is None:
            bound.arguments["generator"] = self.generator
            self.generator_added = True
        out = original(*bound.args, **bound.kwargs)
        prev = out.prev_sample if hasattr(out, "prev_sample") else out[0]
        self.outputs.append(self.fw.to_numpy(prev))
        self.watch("latents", [self.outputs[-1]], step=index)
        self.timesteps.append(float(bound.arguments["timestep"]))
        if given is not None:
            self.local.append({"timestep": self.timesteps[-1],
                               "model_output": metrics(given["model_output"], self.fw.to_numpy(model_output)),
                               "sample": metrics(given["prev_sample"], self.outputs[-1])})
        elif self.record_steps:
            self.recording.add_prev_sample(self.outputs[-1])
        return out


def largest_local_error(local_steps: Optional[List[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """Lockstep's largest local errors (None without lockstep): of one step (``sample``: the
    relative L2 of the sample the step gave from the reference's inputs) and of the denoiser's
    output (``model_output``), each with its ``step`` (from 0) and ``timestep``."""
    if not local_steps:
        return None
    out: Dict[str, Any] = {}
    for kind in ("sample", "model_output"):
        step = max(range(len(local_steps)), key=lambda i: local_steps[i][kind]["rel_l2"])
        out[kind] = {"rel_l2": local_steps[step][kind]["rel_l2"], "step": step,
                     "timestep": local_steps[step]["timestep"]}
    return out


def local_error_text(local_steps: Optional[List[Dict[str, Any]]]) -> str:
    """The verdict's words for :func:`largest_local_error`, steps numbered as the report's table
    numbers them: 'lockstep's largest local error 2.5e-06 (step 3, timestep 401), of the denoiser
    output 1.7e-05 (step 0)'; '' without lockstep."""
    largest = largest_local_error(local_steps)
    if largest is None:
        return ""
    step, output = largest["sample"], largest["model_output"]
    return (f"lockstep's largest local error {step['rel_l2']:.3g} (step {step['step']}, timestep "
            f"{step['timestep']:g}), of the denoiser output {output['rel_l2']:.3g} (step {output['step']})")


__all__ = ["Boundary", "Captured", "Recording", "arrays", "as_call", "intercepted", "largest_local_error",
           "local_error_text", "named_inputs"]
