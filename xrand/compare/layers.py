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
(diffusers and mindone.diffusers models do); it knows nothing about pipelines or schedulers:
:func:`layers_at_step` hands it the denoiser call the reference side recorded at one step.

Memory: the torch side's inputs and outputs of one forward pass (tensors shared between
modules are kept once); MindSpore outputs are reduced to metrics as they come, and tensors are
written only for the modules named in ``dump``.
"""
from __future__ import annotations

import difflib
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..checks import UsageError, UsageTypeError
from ..frameworks import framework
from ..frameworks.torch import widened
from ..registry import backend
from .boundary import as_call, call_signature
from .component_call import DENOISER, METHODS, PER_STEP, entry, root_label, where
from .metrics import Errors, module_metrics
from .nonfinite import nonfinite_count
from .records import RecordReader, RecordWriter
from .trees import Capture, Captured, arrays, convertible, leaves, map_leaves, named_leaves, restore

#: The layer threshold, by default, is this many times the denoiser's measured noise floor.
LAYER_FLOOR_MULTIPLE = 10.0


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
    floor_rel_l2: Optional[float] = None  # torch at the run's dtype vs float64 at this call (as run)
    limit: Optional[float] = None  # the local error it may reach (module_limit)
    msprobe: Dict[str, float] = field(default_factory=dict)  # metrics.module_metrics of the outputs as run

    @property
    def over(self) -> bool:
        """Whether its local error passes its limit."""
        return self.local_rel_l2 is not None and self.limit is not None and self.local_rel_l2 > self.limit

    @property
    def label(self) -> str:
        """The qualified name, with ``#k`` for a module's k-th call after its first."""
        return self.name + (f"#{self.call}" if self.call else "")

    def to_dict(self) -> Dict[str, Any]:
        out = {"name": self.name, "type": self.type, "rel_l2": self.rel_l2, "local_rel_l2": self.local_rel_l2,
               "max_abs": self.max_abs, "limit": self.limit, "over": self.over, **self.msprobe}
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
    dtype: str = "float32"  # the denoiser's dtype on both sides: each floor is torch in it vs float64
    scope: List[str] = field(default_factory=list)  # module prefixes compared (--layers-scope); empty: all
    nonfinite: Optional[Dict[str, Any]] = None  # MindSpore's first call (as run) whose output holds NaN or Inf
    component: str = DENOISER  # whose call (--layers-component): the denoiser's at the step, or another's

    @property
    def over(self) -> List[ModuleDiff]:
        """Every call over its limit, in execution order."""
        return [m for m in self.modules if m.over]

    @property
    def worst(self) -> Optional[ModuleDiff]:
        """The call furthest over its limit (local error / limit)."""
        return max(self.over, key=lambda m: m.local_rel_l2 / m.limit if m.limit else math.inf, default=None)

    def to_dict(self) -> Dict[str, Any]:
        worst = self.worst
        return {"step": self.step, "timestep": self.timestep, "threshold": self.threshold, "culprit": self.culprit,
                "over": [m.label for m in self.over], "worst": worst.label if worst else None,
                "rule": self.rule, "use_floors": self.use_floors, "dtype": self.dtype, "floor": self.floor,
                "unmatched": self.unmatched, "scope": self.scope,
                "seconds": self.seconds, "nonfinite": self.nonfinite, "component": self.component,
                "modules": [m.to_dict() for m in self.modules]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LayerReport":
        """The report :meth:`to_dict` wrote (``report.json``'s, ``manifest.json``'s), read back."""
        known = {"name", "type", "rel_l2", "local_rel_l2", "max_abs", "limit", "over", "floor_rel_l2", "call"}

        def number(value: Any) -> Optional[float]:
            return None if value is None else float(value)  # json_safe wrote "inf" and "nan" as text

        modules = [ModuleDiff(m["name"], m["type"], m.get("call", 0), number(m["rel_l2"]), number(m["local_rel_l2"]),
                              number(m["max_abs"]), floor_rel_l2=number(m.get("floor_rel_l2")),
                              limit=number(m["limit"]),
                              msprobe={k: number(v) for k, v in m.items() if k not in known})
                   for m in data["modules"]]
        return cls(threshold=float(data["threshold"]), modules=modules, culprit=data["culprit"],
                   unmatched=dict(data["unmatched"]), floor=data["floor"], step=data["step"],
                   timestep=number(data["timestep"]), seconds=float(data["seconds"]), rule=data["rule"],
                   use_floors=bool(data["use_floors"]), dtype=data.get("dtype", "float32"),
                   scope=list(data.get("scope") or []), nonfinite=data.get("nonfinite"),
                   component=data.get("component", DENOISER))

    def summary(self, passed: Optional[bool] = None) -> str:
        """The console's lines: the culprit (the first call over its limit whose submodules stay
        within), how many calls are over, and the worst of them. ``passed``: the comparison's
        verdict; where it passed, the culprit is where its within-tolerance difference starts."""
        at, root = where(self.component, self.step, self.timestep), root_label(self.component)
        if self.culprit is None:
            largest = max((m for m in self.modules if m.local_rel_l2 is not None), key=lambda m: m.local_rel_l2,
                          default=None)
            tail = (f"; largest local error {largest.local_rel_l2:.3g} in {largest.label or root}"
                    if largest else "")
            return f"layers {at}: no culprit, every one of {len(self.modules)} module calls within its limit{tail}"
        m = next(m for m in self.modules if m.label == self.culprit)
        why = (f" ({LAYER_FLOOR_MULTIPLE:g}x torch's own {self.dtype}-vs-float64 error there)"
               if m.limit > self.threshold else "")
        parts = (f"the run passes: its difference from torch, within tolerance, starts at {self.culprit}" if passed
                 else f"MindSpore parts from torch at {self.culprit}")
        line = (f"layers {at}: {parts} ({m.type}), local relative L2 {m.local_rel_l2:.3g} > {m.limit:.3g}{why}, "
                f"its submodules within")
        over, worst = self.over, self.worst
        if len(over) > 1:
            line += (f"\nlayers: {len(over)} module calls over their limits; the worst {worst.label or root} "
                     f"({worst.type}), local relative L2 {worst.local_rel_l2:.3g} = {worst.local_rel_l2 / worst.limit:.3g}"
                     f"x its limit {worst.limit:.3g}; all of them in report.json, layers.csv and report.html")
        return line


def module_limit(m: ModuleDiff, threshold: float, use_floors: bool) -> float:
    """The local error a call may reach: the threshold, or more where torch itself varies more there."""
    if use_floors and m.floor_rel_l2 is not None:
        return max(threshold, LAYER_FLOOR_MULTIPLE * m.floor_rel_l2)
    return threshold


def find_culprit(modules: Sequence[ModuleDiff], threshold: float, use_floors: bool = False) -> Optional[ModuleDiff]:
    """The first call (execution order) over its limit locally whose nested calls all stay within.

    The limit is ``threshold``; with ``use_floors`` it is at least :data:`LAYER_FLOOR_MULTIPLE`
    times the call's own torch error, at the run's dtype against float64 (a module that torch
    itself computes loosely, such as a sinusoidal embedding of a large timestep, is judged by that).
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
    known = [n for n, _ in framework("torch").submodules(torch_module) if n]
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

def tensor_values(fw: Any, value: Any) -> List[np.ndarray]:
    """The tensors of framework ``fw`` in ``value``, as arrays (bfloat16 as float32), in :func:`leaves` order."""
    return [backend(fw.name).to_numpy(t) for t in leaves(value) if fw.is_tensor(t)]


def _with_values(fw: Any, value: Any, values: Iterable[np.ndarray]) -> Any:
    """``value`` (an output of framework ``fw``) with each tensor replaced by the next array, in its dtype."""
    it = iter(values)
    return map_leaves(lambda v: fw.tensor(next(it), fw.dtype_of(v)) if fw.is_tensor(v) else v, value)


def call_module(fw: Any, module: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                dtype: Optional[str] = None) -> Any:
    """``module`` of framework ``fw`` called on ``args`` and ``kwargs`` made its tensors, floating
    arrays in ``dtype`` (default: the module's weights'), where its weights are."""
    dtype, device = dtype or fw.module_dtype(module), fw.module_device(module)
    return module(*restore(list(args), fw, device, dtype), **restore(dict(kwargs), fw, device, dtype))


def _dump_entries(prefix: str, args: Any, kwargs: Mapping[str, Any]) -> List[Tuple[str, np.ndarray]]:
    """``(name, array)`` for every tensor of a call's inputs: ``call0.input.0``, ``call0.input.temb``."""
    found = named_leaves(list(args), prefix + ".input") + named_leaves(dict(kwargs), prefix + ".input")
    return [(path, v.array if isinstance(v, Captured) else v) for path, v in found
            if isinstance(v, (Captured, np.ndarray))]


def _safe_file_name(name: str) -> str:
    return name or "_denoiser"


# ----------------------------------------------------------------------------- the comparison

class _Call:
    """One submodule call as torch recorded it (its inputs and outputs read from the record when
    asked for), and what MindSpore made of it."""

    def __init__(self, recorded: Mapping[str, Any], reader: RecordReader, floor: Optional[float] = None) -> None:
        self.name, self.type, self.call, self.nested = (recorded[k] for k in ("name", "type", "call", "nested"))
        self.recorded, self.reader, self.floor = recorded, reader, floor
        self.ms_global: Optional[Dict[str, float]] = None
        self.ms_metrics: Dict[str, float] = {}
        self.ms_local: Optional[Dict[str, float]] = None
        self.ms_local_inputs = 0.0  # largest error in the inputs this call's own operations gave its submodules

    @property
    def args(self) -> Any:
        return self.reader.decode(self.recorded["args"])

    @property
    def kwargs(self) -> Any:
        return self.reader.decode(self.recorded["kwargs"])

    @property
    def outputs(self) -> List[np.ndarray]:
        return self.reader.decode(self.recorded["outputs"])


def in_scope(name: str, scope: Sequence[str]) -> bool:
    """Whether module ``name`` is recorded under ``--layers-scope`` (the denoiser itself always is)."""
    return not scope or name == "" or any(name == p or name.startswith(p + ".") for p in scope)


def check_scope(names: Iterable[str], scope: Sequence[str], what: str) -> None:
    """Each prefix names a module among ``names``; else UsageError naming it and close names."""
    known = [n for n in names if n]
    for prefix in scope:
        if prefix not in known:
            close = difflib.get_close_matches(prefix, known, n=3)
            raise UsageError(f"--layers-scope {prefix!r} is not a module of the {what}; accepted: qualified "
                             f"submodule names such as {known[0]!r}" + (f"; did you mean {', '.join(close)}?"
                                                                        if close else ""))


@dataclass
class TorchLayers:
    """Torch's part of ``--layers``: every submodule call's inputs and outputs in a record, and
    (``floors``) each call's own error in the run's dtype against float64, in call order."""

    reader: RecordReader
    meta: Dict[str, Any]  # what the MindSpore part reads beside the record: dtype, module, scope, floors
    files: Dict[str, Any] = field(default_factory=dict)


def torch_layers(torch_module: Any, args: Sequence[Any], kwargs: Optional[Mapping[str, Any]] = None, *,
                 floors: bool = True, scope: Sequence[str] = (), writer: Optional[RecordWriter] = None,
                 ) -> TorchLayers:
    """1. torch: every submodule call (under ``scope``) recorded with its inputs and outputs, in
    execution order; with ``floors``, the same call once more in float64 (:func:`_torch_floors`).
    ``writer``: where the record goes (a comparison folder's, or memory)."""
    pt = framework("torch")
    scope = list(scope)
    if scope:
        check_scope((n for n, _ in pt.submodules(torch_module)), scope, type(torch_module).__name__)
    writer = writer or RecordWriter("layers")
    kwargs = dict(kwargs or {})
    calls = _torch_calls(torch_module, args, kwargs, writer, scope)
    files = writer.close({"calls": calls})
    reader = RecordReader.of(writer) if writer.folder is None else \
        RecordReader.open(writer.folder, writer.name, files, "torch layers")
    meta = {"dtype": pt.module_dtype(torch_module), "module": type(torch_module).__name__, "scope": scope,
            "floors": _torch_floors(torch_module, args, kwargs, calls, reader) if floors else None}
    return TorchLayers(reader, meta, files)


def layer_diff(torch_module: Any, ms_cell: Any, args: Sequence[Any], kwargs: Optional[Mapping[str, Any]] = None, *,
               threshold: Optional[float] = None,
               dump: Sequence[str] = (), dump_dir: Optional[str] = None,
               step: Optional[int] = None, timestep: Optional[float] = None, scope: Sequence[str] = ()) -> LayerReport:
    """Compare every submodule call of ``torch_module`` and ``ms_cell`` on one set of inputs.

    ``args``/``kwargs``: the denoiser call's inputs as NumPy arrays, :class:`.trees.Captured`
    tensors or plain values, the same for both sides (floating arrays are cast to each side's
    parameter dtype; captured tensors keep theirs), e.g. ``(sample, np.array(timestep))`` for a
    UNet2DModel. ``threshold``: the layer threshold, a plain limit on every local error; None
    measures torch's own noise floor on this call (the module run once more in float64, per
    submodule call) and judges each call by :data:`LAYER_FLOOR_MULTIPLE` times the larger of the
    denoiser's floor and its own (:func:`find_culprit`). ``dump``: module names whose input and
    output tensors go to ``dump_dir`` as safetensors (both sides; MindSpore's ``local_output``
    too). ``scope``: module name prefixes; only the modules under them (and the denoiser) are
    recorded and compared. ``step``/``timestep`` are only recorded. MindSpore runs in PyNative
    mode here (Cell hooks). ``ms_cell`` may be a function returning the cell, called once torch's
    passes are done (a caller can then drop torch's weights first: only the record is needed).
    """
    if threshold is not None:
        threshold = check_threshold(threshold)
    dump = check_module_names(torch_module, dump) if dump else []
    if dump:
        if dump_dir is None:
            raise UsageError("dump names modules but dump_dir is None; pass the folder to write them to")
        check_dump_dir(dump_dir)
    start = time.perf_counter()
    # Torch's float64 pass (the floor) right after its pass in the run's dtype, before MindSpore runs, so
    # that torch's thread pool does not start while MindSpore's may still hold the cores.
    recorded = torch_layers(torch_module, args, kwargs, floors=threshold is None, scope=scope)
    if not framework("mindspore").is_module(ms_cell):  # a function making it, now that torch's passes are done
        ms_cell = ms_cell()
    report = mindspore_layers(recorded.reader, recorded.meta, ms_cell, threshold=threshold, dump=dump,
                              dump_dir=dump_dir, step=step, timestep=timestep)
    report.seconds = time.perf_counter() - start
    return report


def mindspore_layers(reader: RecordReader, meta: Mapping[str, Any], ms_cell: Any, *,
                     threshold: Optional[float] = None, dump: Sequence[str] = (), dump_dir: Optional[str] = None,
                     step: Optional[int] = None, timestep: Optional[float] = None) -> LayerReport:
    """2. and 3.: MindSpore's passes over torch's record (:func:`torch_layers`), judged: the
    culprit, every call over its limit, the unmatched names (see :func:`layer_diff`)."""
    start = time.perf_counter()
    scope = meta.get("scope") or []
    floors = meta.get("floors")
    use_floors = threshold is None
    if use_floors and floors is None:
        raise UsageError("the torch layers record has no floors (made with a --layer-tolerance): give one, or "
                         "run torch's layers stage again without it")
    calls = [_Call(c, reader, None if floors is None else floors[i]) for i, c in enumerate(reader.tree["calls"])]
    missing = [name for name in dump if name not in {c.name for c in calls}]
    if missing:
        raise UsageError(f"--layers-module {missing[0]!r} is not among the modules torch's layers record holds "
                         f"({len(calls)} calls); accepted: a module under --layers-scope {scope or 'everything'}")
    index = {(c.name, c.call): c for c in calls}
    root_args, root_kwargs = calls[0].args, calls[0].kwargs  # the denoiser's own call, as torch made it
    cells = {name: cell for name, cell in framework("mindspore").submodules(ms_cell) if in_scope(name, scope)}
    errors = Errors()
    dumps: Dict[str, List[Tuple[str, np.ndarray]]] = {}
    nonfinite: Dict[str, Any] = {}
    ms_called = _ms_as_run(ms_cell, cells, index, errors, root_args, root_kwargs, set(dump), dumps, nonfinite)
    _ms_fed(ms_cell, cells, index, errors, root_args, root_kwargs, set(dump), dumps)

    rows = []
    for c in calls:
        g, local = c.ms_global, c.ms_local
        if local is not None:
            local = dict(local, rel_l2=max(local["rel_l2"], c.ms_local_inputs))
        rows.append(ModuleDiff(c.name, c.type, c.call, g and g["rel_l2"], local and local["rel_l2"],
                               g and g["max_abs"], c.nested, c.floor, msprobe=c.ms_metrics))
    floor_info = None
    if use_floors:
        root = rows[0]
        floor_info = {"rel_l2": root.floor_rel_l2,
                      "how": f"torch {meta['dtype']} vs torch float64 on one {meta['module']} call, same inputs"}
        threshold = LAYER_FLOOR_MULTIPLE * (root.floor_rel_l2 or 0.0)
        if threshold == 0:  # torch came out exact: any difference is over it
            threshold = float(np.finfo(np.float32).tiny)
    for row in rows:
        row.limit = module_limit(row, threshold, use_floors)
    culprit = find_culprit(rows, threshold, use_floors)

    torch_called = {c.name for c in calls}
    unmatched = {"torch": sorted(n for n in torch_called if n not in cells),
                 "mindspore": sorted(n for n in ms_called if n not in torch_called)}
    if dump:
        _write_dump(dump, dump_dir, calls, dumps)
    rule = (f"local_rel_l2 > max(threshold, {LAYER_FLOOR_MULTIPLE:g} x floor_rel_l2)" if use_floors
            else "local_rel_l2 > threshold")
    return LayerReport(threshold=threshold, modules=rows, culprit=culprit.label if culprit else None,
                       unmatched=unmatched, floor=floor_info, step=step, timestep=timestep,
                       seconds=time.perf_counter() - start, dumped=list(dump), rule=rule,
                       use_floors=use_floors, dtype=meta["dtype"], scope=list(scope), nonfinite=nonfinite or None)


def _torch_calls(torch_module: Any, args: Sequence[Any], kwargs: Mapping[str, Any], writer: RecordWriter,
                 scope: Sequence[str]) -> List[Dict[str, Any]]:
    """torch: every submodule call's inputs and outputs (under ``scope``), stored by ``writer`` as
    they are made, in execution order (pre-order)."""
    pt = framework("torch")
    capture = Capture(pt)
    calls: List[Dict[str, Any]] = []
    stack: List[int] = []
    counts: Dict[str, int] = {}

    def pre(name, module, a, kw):
        k = counts.get(name, 0)
        counts[name] = k + 1
        calls.append({"name": name, "type": type(module).__name__, "call": k,
                      "args": writer.encode(capture(a)), "kwargs": writer.encode(capture(kw))})
        stack.append(len(calls) - 1)

    def post(name, module, a, kw, output):
        i = stack.pop()
        calls[i]["nested"] = len(calls) - 1 - i
        calls[i]["outputs"] = writer.encode(arrays(capture(output)))

    with pt.hooked(((n, m) for n, m in pt.submodules(torch_module) if in_scope(n, scope)), pre, post):
        call_module(pt, torch_module, args, kwargs)
    return calls


def _ms_as_run(ms_cell: Any, cells: Mapping[str, Any], index: Mapping[Tuple[str, int], _Call], errors: Errors,
               args: Sequence[Any], kwargs: Mapping[str, Any], dump: set,
               dumps: Dict[str, List[Tuple[str, np.ndarray]]], nonfinite: Dict[str, Any]) -> set:
    """2. MindSpore as run: each call's global error (and msprobe's metrics), reduced at once;
    returns the names of the cells that ran. ``nonfinite`` gets the first call (in the order calls
    end: the innermost first) whose output holds NaN or Inf, and whether its inputs did."""
    ms = framework("mindspore")
    counts: Dict[str, int] = {}
    stack: List[Tuple[str, int]] = []
    inputs: List[Any] = []
    called = set()

    def pre(name, cell, a, kw):
        k = counts.get(name, 0)
        counts[name] = k + 1
        stack.append((name, k))
        inputs.append((a, kw))
        called.add(name)
        if name in dump:
            values = map_leaves(lambda v: backend("mindspore").to_numpy(v) if ms.is_tensor(v) else v, (list(a), dict(kw)))
            dumps.setdefault(name, []).extend(_dump_entries(f"call{k}", *values))

    def post(name, cell, a, kw, output):
        key, given = stack.pop(), inputs.pop()
        outputs = tensor_values(ms, output)
        if not nonfinite and nonfinite_count(outputs):
            nonfinite.update(module=key[0] + (f"#{key[1]}" if key[1] else ""), type=type(cell).__name__,
                             inputs_finite=not nonfinite_count(tensor_values(ms, given)))
        c = index.get(key)
        if c is not None:
            c.ms_global = errors(c.outputs, outputs, max_abs=True)
            if c.ms_global is not None:
                c.ms_metrics = module_metrics(c.outputs, outputs)
        if name in dump:
            dumps[name].extend((f"call{key[1]}.output.{i}", o) for i, o in enumerate(outputs))

    with ms.hooked(cells.items(), pre, post):
        call_module(ms, ms_cell, args, kwargs)
    return called


def _ms_fed(ms_cell: Any, cells: Mapping[str, Any], index: Mapping[Tuple[str, int], _Call], errors: Errors,
            args: Sequence[Any], kwargs: Mapping[str, Any], dump: set,
            dumps: Dict[str, List[Tuple[str, np.ndarray]]]) -> None:
    """3. MindSpore once more, every call fed the torch call's inputs and handing on the torch call's
    outputs: a call's local error is its own operations' (its output, and the inputs its own
    operations computed for its submodules)."""
    ms = framework("mindspore")
    counts: Dict[str, int] = {}
    stack: List[Optional[_Call]] = []

    def pre(name, cell, a, kw):
        k = counts.get(name, 0)
        counts[name] = k + 1
        c = index.get((name, k))
        parent = next((p for p in reversed(stack) if p is not None), None)
        stack.append(c)
        if c is None:
            return None
        given_args, given_kwargs = c.args, c.kwargs
        # a cell whose construct names its keyword arguments otherwise runs on its own inputs
        if not (convertible(given_args) and convertible(given_kwargs)) or not ms.takes(cell, given_kwargs):
            return None
        if parent is not None:  # what the parent's own operations made of torch's values
            made = errors(arrays((given_args, given_kwargs)), tensor_values(ms, (list(a), dict(kw))))
            if made is not None and made["rel_l2"] > parent.ms_local_inputs:
                parent.ms_local_inputs = made["rel_l2"]
        return tuple(restore(list(given_args), ms)), restore(dict(given_kwargs), ms)

    def post(name, cell, a, kw, output):
        c = stack.pop()
        if c is None:
            return None
        outputs, reference = tensor_values(ms, output), c.outputs
        c.ms_local = errors(reference, outputs)
        if name in dump:
            dumps.setdefault(name, []).extend((f"call{c.call}.local_output.{i}", o) for i, o in enumerate(outputs))
        if c.ms_local is None or not stack:
            return None
        return _with_values(ms, output, reference)  # hand on torch's outputs

    with ms.hooked(cells.items(), pre, post):
        call_module(ms, ms_cell, args, kwargs)


def _write_dump(names: Sequence[str], folder: str, calls: Sequence[_Call],
                dumps: Mapping[str, List[Tuple[str, np.ndarray]]]) -> None:
    """The named modules' inputs and outputs, both sides, as ``NAME.torch.safetensors`` and
    ``NAME.mindspore.safetensors``."""
    from safetensors.numpy import save_file

    for name in names:
        torch_entries: List[Tuple[str, np.ndarray]] = []
        for c in calls:
            if c.name == name:
                torch_entries.extend(_dump_entries(f"call{c.call}", c.args, c.kwargs))
                torch_entries.extend((f"call{c.call}.output.{i}", o) for i, o in enumerate(c.outputs))
        for side, entries in (("torch", torch_entries), ("mindspore", dumps.get(name, []))):
            path = os.path.join(folder, f"{_safe_file_name(name)}.{side}.safetensors")
            save_file({k: np.ascontiguousarray(v) for k, v in entries}, path, metadata={"module": name})


def _torch_floors(torch_module: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                  calls: Sequence[Mapping[str, Any]], reader: RecordReader) -> List[Optional[float]]:
    """Per recorded call: relative L2 of torch's outputs against the module run in float64 on the
    same inputs (None where the outputs do not match up).

    Each submodule is cast to float64 while it runs and back after it (exact: every float32 value
    is a float64 value) by :func:`xrand.frameworks.torch.widened`, under which float32
    pinned inside the model (and the captured inputs' float32) widens too.
    """
    pt = framework("torch")
    errors = Errors()
    index = {(c["name"], c["call"]): i for i, c in enumerate(calls)}
    floors: List[Optional[float]] = [None] * len(calls)
    counts: Dict[str, int] = {}

    def post(name, module, a, kw, output):
        k = counts.get(name, 0)
        counts[name] = k + 1
        i = index.get((name, k))
        if i is not None:
            err = errors(reader.decode(calls[i]["outputs"]), tensor_values(pt, output))
            if err is not None:
                floors[i] = err["rel_l2"]

    recorded = ((n, m) for n, m in pt.submodules(torch_module) if (n, 0) in index)
    with pt.hooked(recorded, post=post), widened([torch_module]):
        call_module(pt, torch_module, args, kwargs, "float64")  # float64 throughout, one module's copy at a time
    return floors


def unet_inputs(sample: np.ndarray, timestep: Any, encoder_hidden_states: Optional[np.ndarray] = None,
                **extra: Any) -> Tuple[list, dict]:
    """``(args, kwargs)`` for a diffusers-style UNet call: ``(sample, timestep[, encoder_hidden_states])``."""
    args = [np.asarray(sample), np.asarray(timestep)]
    if encoder_hidden_states is not None:
        args.append(np.asarray(encoder_hidden_states))
    return args, dict(extra)


@dataclass(frozen=True)
class LayerOptions:
    """What ``xrand compare --layers`` asks for: the step, the threshold, the modules to dump, the scope."""

    step: int = 0
    threshold: Optional[float] = None  # None: from torch's measured noise floor
    dump: Sequence[str] = ()
    dump_dir: Optional[str] = None
    scope: Sequence[str] = ()  # module prefixes to record and compare (--layers-scope); empty: every module
    component: str = DENOISER  # whose call to look at (--layers-component): the denoiser, vae, text_encoder...
    modules: bool = True  # compare every module (--layers); False: --ops alone
    ops: Optional[str] = None  # the module call whose operators --ops compares ("": --layers' culprit)

    def check(self, steps: Optional[int] = None) -> "LayerOptions":
        """These options, checked: UsageError naming the value for a step outside ``range(steps)``
        (the run's denoiser calls; None: only a negative step) or a bad threshold or folder."""
        if isinstance(self.step, bool) or not isinstance(self.step, int):
            raise UsageTypeError(f"--layers-step must be an integer, got {self.step!r}")
        if self.step < 0 and steps is None:
            raise UsageError(f"--layers-step {self.step} is outside the schedule; accepted: 0 or more")
        if steps is not None and not 0 <= self.step < steps:
            raise UsageError(f"--layers-step {self.step} is outside the schedule; accepted: 0 to {steps - 1} "
                             f"(the run has {steps} steps)")
        if self.component != DENOISER and self.component not in METHODS:
            raise UsageError(f"--layers-component {self.component!r} is not one xrand looks into; accepted: "
                             f"{', '.join((DENOISER,) + tuple(METHODS))}")
        if self.ops is not None and not isinstance(self.ops, str):
            raise UsageTypeError(f"--ops must be a module name, got {self.ops!r}")
        if self.ops == "" and not self.modules:
            raise UsageError("--ops without a module name looks into --layers' culprit: add --layers, or name the "
                             "module (--ops down_blocks.1.attentions.0)")
        if self.threshold is not None:
            object.__setattr__(self, "threshold", check_threshold(self.threshold))  # frozen: normalised once
        object.__setattr__(self, "dump", tuple(self.dump))
        object.__setattr__(self, "scope", tuple(self.scope))
        bad = [p for p in self.scope if not isinstance(p, str) or not p.strip(".")]
        if bad:
            raise UsageError(f"--layers-scope {bad[0]!r} is not a module name; accepted: a qualified submodule "
                             "name of the denoiser such as down_blocks.1")
        if self.dump and self.dump_dir is None:
            raise UsageError(f"modules {list(self.dump)!r} to dump but no folder; pass --layers-dump DIR")
        if self.dump_dir is not None:
            if not self.dump:
                raise UsageError(f"--layers-dump {self.dump_dir!r} names no module; add --layers-module NAME "
                                 "(e.g. down_blocks.0.resnets.0.conv1)")
            check_dump_dir(self.dump_dir)
        return self


def torch_layers_at_step(torch_side: Any, plan: Any, recording: Any, writer: Optional[RecordWriter] = None
                         ) -> TorchLayers:
    """:func:`torch_layers` on the loaded torch side's denoiser, fed the call its pipeline made at
    ``plan.layers.step`` (``recording``: the torch run's, which kept that call): the very tensors
    torch's pipeline built there, for any recipe."""
    options = plan.layers
    torch_denoiser, args, kwargs = recorded_call(torch_side, plan, recording)
    with torch_side.fw.running(torch_side.device, "pynative"):
        return torch_layers(torch_denoiser, args, kwargs, floors=options.threshold is None, scope=options.scope,
                            writer=writer)


def recorded_call(torch_side: Any, plan: Any, recording: Any) -> Tuple[Any, list, dict]:
    """``(module, args, kwargs)``: what ``--layers`` and ``--ops`` look into on the loaded torch
    side (:func:`layers_module`) and the call torch's pipeline made of it at ``plan.layers.step``
    (``recording``: the torch run's, which kept that call): the very tensors it built there."""
    options, k = plan.layers, plan.layers.step
    if options.component != DENOISER:
        given = recording.component_call()
        if given is None:
            raise RuntimeError(f"the torch side made no call of its {options.component}")
    else:
        given = recording.call(k) if k < len(recording.calls) else None
    if given is None:
        raise RuntimeError(f"the torch side made no denoiser call {k}")
    module = layers_module(torch_side.fw, torch_side.pipe, plan)
    args, kwargs = as_call(call_signature(torch_side.fw, module), given)
    return module, args, kwargs


def mindspore_layers_at_step(ms_side: Any, plan: Any, torch_part: TorchLayers, timesteps: Sequence[float]
                             ) -> LayerReport:
    """:func:`mindspore_layers` on the loaded MindSpore side's denoiser, over torch's record."""
    options, k = plan.layers, plan.layers.step
    ms = framework("mindspore")
    denoiser = options.component in (DENOISER,) + PER_STEP  # a call of the step
    with ms.running(plan.devices.get("mindspore"), "pynative"), ms.half_precision(plan.settings.dtype):
        report = mindspore_layers(torch_part.reader, torch_part.meta, layers_module(ms, ms_side.pipe, plan),
                                  threshold=options.threshold, dump=options.dump, dump_dir=options.dump_dir,
                                  step=k if denoiser else None,
                                  timestep=timesteps[k] if denoiser and k < len(timesteps) else None)
    report.component = options.component
    return report


def layers_module(fw: Any, pipe: Any, plan: Any) -> Any:
    """What ``--layers`` hooks: the denoiser, or the component ``--layers-component`` names,
    wrapped so that its call is the one looked at (:func:`.component_call.entry`)."""
    component = plan.layers.component
    return plan.recipe.denoiser_of(pipe) if component == DENOISER else entry(fw, pipe, component)


def layers_at_step(torch_side: Any, ms_side: Any, plan: Any, recording: Any, timesteps: Sequence[float]
                   ) -> LayerReport:
    """Both halves in one process, the record in memory: :func:`torch_layers_at_step`, then
    :func:`mindspore_layers_at_step` (as the stages of :mod:`.stages` run them)."""
    torch_part = torch_layers_at_step(torch_side, plan, recording)
    report = mindspore_layers_at_step(ms_side, plan, torch_part, timesteps)
    return report
