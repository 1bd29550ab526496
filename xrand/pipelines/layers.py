"""Where torch and MindSpore part inside one denoiser call: every submodule, global and local error.

:func:`layer_diff` runs a torch denoiser module and a MindSpore denoiser Cell on the same inputs.
Forward hooks on both sides catch every submodule call, matched by qualified name
(``down_blocks.0.resnets.0.conv1``) and call number. Per call: the global error (the outputs as
run, everything upstream included) and the local error: a second MindSpore pass in which every
call, at every depth, is fed the torch call's own captured inputs and hands on the torch call's
outputs (Cell forward hooks), so a module's local error is that of its own operations: its
output, and the inputs its operations compute for its submodules, whatever its submodules or
upstream do. Two MindSpore forward passes in all, not one per module. The culprit is the first call, in
execution order, whose local relative L2 exceeds the threshold while every call nested in it
stays within. Works for any denoiser whose submodules carry the same names on both sides
(diffusers and mindone.diffusers models do); it knows nothing about pipelines or schedulers.

Memory: the torch side's inputs and outputs of one forward pass (tensors shared between
modules are kept once); MindSpore outputs are reduced to metrics as they come, and tensors are
written only for the modules named in ``dump``.
"""
from __future__ import annotations

import difflib
import os
import tempfile
import time
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..checks import UsageError, UsageTypeError

#: The layer threshold, by default, is this many times the denoiser's measured noise floor.
LAYER_FLOOR_MULTIPLE = 10.0

#: A captured tensor: its values (bfloat16 as float32) and its dtype name.
Captured = namedtuple("Captured", "array dtype")


# ----------------------------------------------------------------------------- results

@dataclass
class ModuleDiff:
    """One submodule call: global error (as run) and local error (fed torch's inputs)."""

    name: str
    type: str
    call: int  # 0 for the first call of this module, 1 for the second, ...
    rel_l2: Optional[float]
    local_rel_l2: Optional[float]
    max_abs: Optional[float]
    nested: int = 0  # how many calls follow inside this one (its submodules' calls)
    floor_rel_l2: Optional[float] = None  # torch float32 vs float64 at this call (as run)

    @property
    def label(self) -> str:
        """The qualified name, with ``#k`` for a module's k-th call after its first."""
        return self.name + (f"#{self.call}" if self.call else "")

    def to_dict(self) -> Dict[str, Any]:
        out = {"name": self.name, "type": self.type, "rel_l2": self.rel_l2, "local_rel_l2": self.local_rel_l2,
               "max_abs": self.max_abs}
        if self.floor_rel_l2 is not None:
            out["floor_rel_l2"] = self.floor_rel_l2
        if self.call:
            out["call"] = self.call
        return out


@dataclass
class LayerReport:
    """Everything ``report.json``'s ``"layers"`` holds."""

    threshold: float
    modules: List[ModuleDiff]
    culprit: Optional[str]
    unmatched: Dict[str, List[str]]
    floor: Optional[Dict[str, Any]] = None
    step: Optional[int] = None
    timestep: Optional[float] = None
    seconds: float = 0.0
    dumped: List[str] = field(default_factory=list)
    rule: str = "local_rel_l2 > threshold"
    use_floors: bool = False  # each call's limit is at least LAYER_FLOOR_MULTIPLE x its own torch floor

    def to_dict(self) -> Dict[str, Any]:
        return {"step": self.step, "timestep": self.timestep, "threshold": self.threshold, "culprit": self.culprit,
                "rule": self.rule, "floor": self.floor, "unmatched": self.unmatched, "seconds": self.seconds,
                "modules": [m.to_dict() for m in self.modules]}

    def summary(self) -> str:
        """One line for the console."""
        where = f"at step {self.step} (timestep {self.timestep:g})" if self.step is not None else "in one call"
        if self.culprit is None:
            worst = max((m for m in self.modules if m.local_rel_l2 is not None), key=lambda m: m.local_rel_l2,
                        default=None)
            tail = f"; largest local error {worst.local_rel_l2:.3g} in {worst.label or '(denoiser)'}" if worst else ""
            return (f"layers {where}: no culprit, every one of {len(self.modules)} module calls within "
                    f"{self.threshold:.3g}{tail}")
        m = next(m for m in self.modules if m.label == self.culprit)
        limit = module_limit(m, self.threshold, self.use_floors)
        why = f" ({LAYER_FLOOR_MULTIPLE:g}x torch's own float32-vs-float64 error there)" if limit > self.threshold else ""
        return (f"layers {where}: MindSpore parts from torch at {self.culprit} ({m.type}), local relative L2 "
                f"{m.local_rel_l2:.3g} > {limit:.3g}{why}, its submodules within")


def module_limit(m: ModuleDiff, threshold: float, use_floors: bool) -> float:
    """The local error a call may reach: the threshold, or more where torch itself varies more there."""
    if use_floors and m.floor_rel_l2 is not None:
        return max(threshold, LAYER_FLOOR_MULTIPLE * m.floor_rel_l2)
    return threshold


def find_culprit(modules: Sequence[ModuleDiff], threshold: float, use_floors: bool = False) -> Optional[ModuleDiff]:
    """The first call (execution order) over its limit locally whose nested calls all stay within.

    The limit is ``threshold``; with ``use_floors`` it is at least :data:`LAYER_FLOOR_MULTIPLE`
    times the call's own torch float32-vs-float64 error (a module that torch itself computes
    loosely, such as a sinusoidal embedding of a large timestep, is judged by that).
    """
    over = [m.local_rel_l2 is not None and m.local_rel_l2 > module_limit(m, threshold, use_floors)
            for m in modules]
    for i, m in enumerate(modules):
        if over[i] and not any(over[i + 1: i + 1 + m.nested]):
            return m
    return None


# ----------------------------------------------------------------------------- checks

def check_threshold(value: Any, what: str = "layer tolerance") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageTypeError(f"{what} must be a number > 0, got {value!r}")
    if not (value > 0 and np.isfinite(value)):
        raise UsageError(f"{what} must be a finite number > 0, got {value!r}")
    return float(value)


def check_module_names(torch_module: Any, names: Iterable[str]) -> List[str]:
    """The names, if each is a submodule of ``torch_module``; else UsageError naming the first unknown."""
    known = [n for n, _ in torch_module.named_modules() if n]
    known_set = set(known)
    names = list(names)
    for name in names:
        if not isinstance(name, str) or name not in known_set:
            close = difflib.get_close_matches(str(name), known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UsageError(f"unknown module {name!r} for --layers-dump; accepted: qualified submodule names of "
                             f"the {type(torch_module).__name__} such as {known[0]!r} ({len(known)} modules){hint}")
    return names


def check_dump_dir(path: Any) -> str:
    """A folder the dump can be written to (created if missing); UsageError if it cannot be."""
    if not isinstance(path, str) or not path:
        raise UsageTypeError(f"--layers-dump folder must be a path, got {path!r}")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".xrand-write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"--layers-dump folder {path!r} cannot be written: {exc.strerror or exc}") from None
    return path


# ----------------------------------------------------------------------------- conversions

def flatten(value: Any, tensor_type: type) -> List[Any]:
    """The tensors in an output, in order: tuples, lists, dicts and diffusers' BaseOutput walked."""
    if isinstance(value, tensor_type):
        return [value]
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v, tensor_type)]
    return []


def _map(value: Any, leaf) -> Any:
    if isinstance(value, Captured):
        return leaf(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, leaf) for k, v in value.items()}
    return leaf(value)


def to_torch(value: Any, device: Any, float_dtype: Any) -> Any:
    """NumPy arrays (or Captured) in ``value`` as torch tensors; floating ones in ``float_dtype`` if given."""
    import torch

    def leaf(v):
        if isinstance(v, Captured):
            return torch.from_numpy(np.ascontiguousarray(v.array)).to(device=device, dtype=getattr(torch, v.dtype))
        if isinstance(v, (np.ndarray, np.generic)):
            t = torch.from_numpy(np.ascontiguousarray(v)).to(device)
            return t.to(float_dtype) if float_dtype is not None and t.is_floating_point() else t
        return v

    return _map(value, leaf)


def to_mindspore(value: Any, float_dtype: Any = None) -> Any:
    """NumPy arrays (or Captured) in ``value`` as MindSpore tensors."""
    import mindspore as ms

    def leaf(v):
        if isinstance(v, Captured):
            return ms.tensor(v.array, dtype=ms.bool_ if v.dtype == "bool" else getattr(ms, v.dtype))
        if isinstance(v, (np.ndarray, np.generic)):
            a = np.asarray(v)
            if float_dtype is not None and np.issubdtype(a.dtype, np.floating):
                return ms.tensor(a, dtype=float_dtype)
            return ms.tensor(a)
        return v

    return _map(value, leaf)


class _TorchCapture:
    """NumPy copies of torch tensors, made once per tensor version (a tensor passed on is kept once)."""

    def __init__(self) -> None:
        self._seen: Dict[int, Tuple[Any, int, Captured]] = {}

    def tensor(self, t) -> Captured:
        key = id(t)
        hit = self._seen.get(key)
        if hit is not None and hit[0] is t and hit[1] == t._version:
            return hit[2]
        dtype = str(t.dtype).replace("torch.", "")
        src = t.detach()
        array = (src.float() if dtype == "bfloat16" else src).cpu().numpy().copy()
        captured = Captured(array, dtype)
        self._seen[key] = (t, t._version, captured)  # the reference keeps id(t) from being reused
        return captured

    def tree(self, value: Any) -> Any:
        import torch

        return _map(value, lambda v: self.tensor(v) if isinstance(v, torch.Tensor) else v)


def _ms_arrays(value: Any) -> List[np.ndarray]:
    import mindspore as ms

    return [t.float().asnumpy() if t.dtype == ms.bfloat16 else t.asnumpy() for t in flatten(value, ms.Tensor)]


def _captured_arrays(value: Any) -> List[np.ndarray]:
    """The arrays in a captured input, in the order :func:`flatten` walks MindSpore's."""
    if isinstance(value, Captured):
        return [value.array]
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _captured_arrays(v)]
    return []


def _replace_tensors(value: Any, arrays) -> Any:
    """``value`` (a MindSpore output) with each tensor replaced by the next array, in its dtype."""
    import mindspore as ms

    if isinstance(value, ms.Tensor):
        return ms.tensor(next(arrays), dtype=value.dtype)
    if isinstance(value, Mapping):
        replaced = {k: _replace_tensors(v, arrays) for k, v in value.items()}
        return type(value)(**replaced) if type(value) is not dict else replaced
    if isinstance(value, (list, tuple)):
        return type(value)(_replace_tensors(v, arrays) for v in value)
    return value


class _Errors:
    """rel_l2 (and max_abs) of outputs against torch's captured arrays, each array's squared norm
    computed once: an array is a reference up to four times (MindSpore as run, MindSpore fed
    torch's inputs, as a later call's input, torch in float64)."""

    def __init__(self) -> None:
        self._sq_norms: Dict[int, Tuple[np.ndarray, float]] = {}

    def _sq_norm(self, a: np.ndarray) -> float:
        hit = self._sq_norms.get(id(a))
        if hit is None or hit[0] is not a:
            a64 = a.astype(np.float64)
            hit = self._sq_norms[id(a)] = (a, float(np.vdot(a64, a64)))  # the array kept: its id stays its own
        return hit[1]

    def __call__(self, reference: List[np.ndarray], other: List[np.ndarray],
                 max_abs: bool = False) -> Optional[Dict[str, float]]:
        """rel_l2 over all tensors of an output, and max_abs if asked; None when the outputs' structures differ."""
        if len(reference) != len(other) or any(a.shape != b.shape for a, b in zip(reference, other)):
            return None
        sq_diff = sq_ref = 0.0
        largest = 0.0
        for a, b in zip(reference, other):
            d = np.subtract(a, b, dtype=np.float64)
            sq_diff += float(np.vdot(d, d))
            sq_ref += self._sq_norm(a)
            if max_abs and d.size:
                largest = max(largest, float(np.max(np.abs(d))))
        rel = float(np.sqrt(sq_diff / sq_ref)) if sq_ref > 0 else float(np.sqrt(sq_diff))
        return {"rel_l2": rel, "max_abs": largest} if max_abs else {"rel_l2": rel}


def _convertible(value: Any) -> bool:
    """Whether every leaf of a captured input can be handed to MindSpore."""
    if isinstance(value, (list, tuple)):
        return all(_convertible(v) for v in value)
    if isinstance(value, dict):
        return all(_convertible(v) for v in value.values())
    return value is None or isinstance(value, (Captured, bool, int, float, str, np.ndarray, np.generic))


def _safe_file_name(name: str) -> str:
    return name or "_denoiser"


def _dump_entries(prefix: str, args: Any, kwargs: Mapping[str, Any], out: List[Tuple[str, np.ndarray]]) -> None:
    def walk(path: str, v: Any) -> None:
        if isinstance(v, Captured):
            out.append((path, v.array))
        elif isinstance(v, np.ndarray):
            out.append((path, v))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{path}.{i}", x)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(f"{path}.{k}", x)

    walk(prefix + ".input", list(args))
    walk(prefix + ".input", dict(kwargs))


# ----------------------------------------------------------------------------- the comparison

@dataclass
class _Call:
    name: str
    type: str
    call: int
    args: Any = None
    kwargs: Any = None
    outputs: List[np.ndarray] = field(default_factory=list)
    nested: int = 0
    ms_global: Optional[Dict[str, float]] = None
    ms_local: Optional[Dict[str, float]] = None
    ms_local_inputs: float = 0.0  # largest error in the inputs this call's own operations gave its submodules


def layer_diff(torch_module: Any, ms_cell: Any, args: Sequence[Any], kwargs: Optional[Mapping[str, Any]] = None, *,
               threshold: Optional[float] = None,
               dump: Sequence[str] = (), dump_dir: Optional[str] = None,
               step: Optional[int] = None, timestep: Optional[float] = None) -> LayerReport:
    """Compare every submodule call of ``torch_module`` and ``ms_cell`` on one set of inputs.

    ``args``/``kwargs``: the denoiser call's inputs as NumPy arrays or plain values, the same
    for both sides (floating arrays are cast to each side's parameter dtype), e.g.
    ``(sample, np.array(timestep))`` for a UNet2DModel, plus ``encoder_hidden_states`` for a
    UNet2DConditionModel. ``threshold``: the layer threshold, a plain limit on every local
    error; None measures torch's own noise floor on this call (the module run once more in
    float64, per submodule call) and judges each call by :data:`LAYER_FLOOR_MULTIPLE` times the
    larger of the denoiser's floor and its own (:func:`find_culprit`). ``dump``: module names
    whose input and output tensors go to ``dump_dir`` as safetensors (both sides; MindSpore's
    ``local_output`` too).
    ``step``/``timestep`` are only recorded. MindSpore runs in PyNative mode here (Cell hooks).
    """
    import torch

    if threshold is not None:
        threshold = check_threshold(threshold)
    kwargs = dict(kwargs or {})
    dump = check_module_names(torch_module, dump) if dump else []
    if dump:
        if dump_dir is None:
            raise UsageError("dump names modules but dump_dir is None; pass the folder to write them to")
        check_dump_dir(dump_dir)
    start = time.perf_counter()
    param = next(torch_module.parameters())
    ms_dtype = next(iter(ms_cell.get_parameters())).dtype

    # 1. torch: every call's inputs and outputs, in execution order (pre-order).
    capture = _TorchCapture()
    calls: List[_Call] = []
    stack: List[int] = []
    counts: Dict[str, int] = {}
    handles = []
    for name, module in torch_module.named_modules():
        def pre(module, a, kw, name=name):
            k = counts.get(name, 0)
            counts[name] = k + 1
            calls.append(_Call(name, type(module).__name__, k, capture.tree(a), capture.tree(kw)))
            stack.append(len(calls) - 1)

        def post(module, a, kw, output):
            i = stack.pop()
            calls[i].nested = len(calls) - 1 - i
            calls[i].outputs = [capture.tensor(t).array for t in flatten(output, torch.Tensor)]

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    try:
        with torch.no_grad():
            torch_module(*to_torch(list(args), param.device, param.dtype),
                         **to_torch(kwargs, param.device, param.dtype))
    finally:
        for h in handles:
            h.remove()
    index = {(c.name, c.call): c for c in calls}
    errors = _Errors()
    use_floors = threshold is None
    # Torch's float64 pass (the floor) right after its float32 one, before MindSpore runs, so
    # that torch's thread pool does not start while MindSpore's may still hold the cores.
    floors = _torch_floors(torch_module, args, kwargs, index, errors) if use_floors else {}

    # 2. MindSpore as run: global error per call, reduced to metrics at once.
    cells = dict(ms_cell.cells_and_names())
    ms_counts: Dict[str, int] = {}
    ms_stack: List[Tuple[str, int]] = []
    ms_called = set()
    dumps: Dict[str, List[Tuple[str, np.ndarray]]] = {}
    dump_set = set(dump)

    def ms_pre(cell, a, kw, name):
        k = ms_counts.get(name, 0)
        ms_counts[name] = k + 1
        ms_stack.append((name, k))
        ms_called.add(name)
        if name in dump_set:
            entries = dumps.setdefault(name, [])
            _dump_entries(f"call{k}", _map(list(a), _ms_leaf), _map(dict(kw), _ms_leaf), entries)

    def ms_post(cell, a, kw, output, name):
        key = ms_stack.pop()
        outputs = _ms_arrays(output)
        c = index.get(key)
        if c is not None:
            c.ms_global = errors(c.outputs, outputs, max_abs=True)
        if name in dump_set:
            dumps[name].extend((f"call{key[1]}.output.{i}", o) for i, o in enumerate(outputs))

    _run_hooked(ms_cell, cells, ms_pre, ms_post, args, kwargs, ms_dtype)

    # 3. MindSpore once more, every call fed the torch call's inputs and handing on the torch call's
    # outputs: a call's local error is its own operations' (its output, and the inputs its own
    # operations computed for its submodules).
    local_counts: Dict[str, int] = {}
    local_stack: List[Optional[_Call]] = []

    def local_pre(cell, a, kw, name):
        k = local_counts.get(name, 0)
        local_counts[name] = k + 1
        c = index.get((name, k))
        parent = next((p for p in reversed(local_stack) if p is not None), None)
        local_stack.append(c)
        if c is None or not (_convertible(c.args) and _convertible(c.kwargs)):
            return None
        if parent is not None:  # what the parent's own operations made of torch's values
            made = errors(_captured_arrays((c.args, c.kwargs)), _ms_arrays((list(a), dict(kw))))
            if made is not None and made["rel_l2"] > parent.ms_local_inputs:
                parent.ms_local_inputs = made["rel_l2"]
        return tuple(to_mindspore(list(c.args))), to_mindspore(dict(c.kwargs))

    def local_post(cell, a, kw, output, name):
        c = local_stack.pop()
        if c is None:
            return None
        outputs = _ms_arrays(output)
        c.ms_local = errors(c.outputs, outputs)
        if name in dump_set:
            dumps.setdefault(name, []).extend((f"call{c.call}.local_output.{i}", o) for i, o in enumerate(outputs))
        if c.ms_local is None or not local_stack:
            return None
        return _replace_tensors(output, iter(c.outputs))  # hand on torch's outputs

    _run_hooked(ms_cell, cells, local_pre, local_post, args, kwargs, ms_dtype)
    rows = []
    for c in calls:
        g, local = c.ms_global, c.ms_local
        if local is not None:
            local = dict(local, rel_l2=max(local["rel_l2"], c.ms_local_inputs))
        rows.append(ModuleDiff(c.name, c.type, c.call, g and g["rel_l2"], local and local["rel_l2"],
                               g and g["max_abs"], c.nested))

    floor_info = None
    if use_floors:
        for row in rows:
            row.floor_rel_l2 = floors.get((row.name, row.call))
        root = rows[0]
        floor_info = {"rel_l2": root.floor_rel_l2,
                      "how": f"torch {str(param.dtype).replace('torch.', '')} vs torch float64 on one "
                             f"{type(torch_module).__name__} call, same inputs"}
        threshold = LAYER_FLOOR_MULTIPLE * (root.floor_rel_l2 or 0.0)
        if threshold == 0:  # torch came out exact: any difference is over it
            threshold = float(np.finfo(np.float32).tiny)
    culprit = find_culprit(rows, threshold, use_floors)

    torch_called = {c.name for c in calls}
    unmatched = {"torch": sorted(n for n in torch_called if n not in cells),
                 "mindspore": sorted(n for n in ms_called if n not in torch_called)}

    if dump:
        from safetensors.numpy import save_file

        for name in dump:
            torch_entries: List[Tuple[str, np.ndarray]] = []
            for c in calls:
                if c.name == name:
                    _dump_entries(f"call{c.call}", c.args, c.kwargs, torch_entries)
                    torch_entries.extend((f"call{c.call}.output.{i}", o) for i, o in enumerate(c.outputs))
            for side, entries in (("torch", torch_entries), ("mindspore", dumps.get(name, []))):
                path = os.path.join(dump_dir, f"{_safe_file_name(name)}.{side}.safetensors")
                save_file({k: np.ascontiguousarray(v) for k, v in entries}, path, metadata={"module": name})

    rule = (f"local_rel_l2 > max(threshold, {LAYER_FLOOR_MULTIPLE:g} x floor_rel_l2)" if use_floors
            else "local_rel_l2 > threshold")
    return LayerReport(threshold=threshold, modules=rows, culprit=culprit.label if culprit else None,
                       unmatched=unmatched, floor=floor_info, step=step, timestep=timestep,
                       seconds=time.perf_counter() - start, dumped=list(dump), rule=rule,
                       use_floors=use_floors)


def _torch_floors(torch_module: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                  index: Mapping[Tuple[str, int], _Call], errors: _Errors) -> Dict[Tuple[str, int], float]:
    """Per call: relative L2 of torch's outputs against the module run in float64 on the same inputs.

    The module is cast to float64 for the call and back after it (exact: every float32 value is
    a float64 value) by :func:`xrand.pipelines.noise_floor.widened`, under which float32 pinned
    inside the model (and the captured inputs' float32) widens too.
    """
    import torch

    param = next(torch_module.parameters())
    floors: Dict[Tuple[str, int], float] = {}
    counts: Dict[str, int] = {}
    handles = []
    for name, module in torch_module.named_modules():
        def post(module, a, output, name=name):
            k = counts.get(name, 0)
            counts[name] = k + 1
            c = index.get((name, k))
            if c is not None:
                err = errors(c.outputs, [t.detach().cpu().numpy() for t in flatten(output, torch.Tensor)])
                if err is not None:
                    floors[(name, k)] = err["rel_l2"]

        handles.append(module.register_forward_hook(post))
    from .noise_floor import widened

    try:
        with torch.no_grad(), widened([torch_module]):  # float64 throughout, cast back after
            torch_module(*to_torch(list(args), param.device, torch.float64),
                         **to_torch(dict(kwargs), param.device, torch.float64))
    finally:
        for h in handles:
            h.remove()
    return floors


def _ms_leaf(v: Any) -> Any:
    import mindspore as ms

    if isinstance(v, ms.Tensor):
        return v.float().asnumpy() if v.dtype == ms.bfloat16 else v.asnumpy()
    return v


def capture_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Tuple[list, dict]:
    """A torch denoiser call's ``(args, kwargs)`` for :func:`layer_diff`: every tensor as a NumPy
    copy that keeps its dtype (so both sides get the very tensors the pipeline built), the rest as is."""
    capture = _TorchCapture()
    return list(capture.tree(list(args))), dict(capture.tree(dict(kwargs)))


def unet_inputs(sample: np.ndarray, timestep: Any, encoder_hidden_states: Optional[np.ndarray] = None,
                **extra: Any) -> Tuple[list, dict]:
    """``(args, kwargs)`` for a diffusers-style UNet call: ``(sample, timestep[, encoder_hidden_states])``."""
    args = [np.asarray(sample), np.asarray(timestep)]
    if encoder_hidden_states is not None:
        args.append(np.asarray(encoder_hidden_states))
    return args, dict(extra)


@dataclass
class LayerOptions:
    """What ``xrand compare --layers`` asks for: the step, the threshold, the modules to dump."""

    step: int = 0
    threshold: Optional[float] = None  # None: from torch's measured noise floor
    dump: Sequence[str] = ()
    dump_dir: Optional[str] = None

    def check(self, steps: Optional[int] = None) -> "LayerOptions":
        """UsageError naming the value for a step outside ``range(steps)`` (the run's scheduler
        steps; None: only a negative step) or a bad threshold or folder."""
        if isinstance(self.step, bool) or not isinstance(self.step, int):
            raise UsageTypeError(f"--layers-step must be an integer, got {self.step!r}")
        if self.step < 0 and steps is None:
            raise UsageError(f"--layers-step {self.step} is outside the schedule; accepted: 0 or more")
        if steps is not None and not 0 <= self.step < steps:
            raise UsageError(f"--layers-step {self.step} is outside the schedule; accepted: 0 to {steps - 1} "
                             f"(the run has {steps} steps)")
        if self.threshold is not None:
            self.threshold = check_threshold(self.threshold)
        if self.dump and self.dump_dir is None:
            raise UsageError(f"modules {list(self.dump)!r} to dump but no folder; pass --layers-dump DIR")
        if self.dump_dir is not None:
            if not self.dump:
                raise UsageError(f"--layers-dump {self.dump_dir!r} names no module; add --layers-module NAME "
                                 "(e.g. down_blocks.0.resnets.0.conv1)")
            check_dump_dir(self.dump_dir)
        return self


def _run_hooked(ms_cell, cells, pre, post, args, kwargs, ms_dtype) -> None:
    """One PyNative MindSpore call with ``pre(cell, args, kwargs, name)`` and
    ``post(cell, args, kwargs, output, name)`` hooked on every named cell, removed afterwards."""
    from .frameworks import mindspore_mode

    handles = []
    for name, cell in cells.items():
        handles.append(cell.register_forward_pre_hook(
            lambda cell, a, kw, name=name: pre(cell, a, kw, name), with_kwargs=True))
        handles.append(cell.register_forward_hook(
            lambda cell, a, kw, out, name=name: post(cell, a, kw, out, name), with_kwargs=True))
    try:
        with mindspore_mode("pynative"):
            ms_cell(*to_mindspore(list(args), ms_dtype), **to_mindspore(kwargs, ms_dtype))
    finally:
        for h in handles:
            h.remove()
