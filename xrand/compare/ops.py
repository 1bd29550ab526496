"""Which operator inside one module call parts torch and MindSpore (``xrand compare --ops MODULE``).

Torch's side runs the component ``--layers`` looks at (the denoiser at the step, or the VAE
decode, a text encoder...) and records, inside call ``k`` of the module (``MODULE#k``; the first
without it), every operator called from Python (:meth:`.frameworks.base.Framework.operators_recorded`):
its name, inputs and outputs, and the module call's own inputs and outputs. MindSpore's side
calls its cell of that name on torch's inputs, recording its operators the same way. The two
sequences are matched in order (:func:`align`: difflib over names brought to one vocabulary,
``FlashAttentionScore`` as ``scaled_dot_product_attention``, ``mint.nn.Conv2d`` as ``conv2d``);
each pair's local error is MindSpore's operator run again on torch's inputs (cast to the dtypes
MindSpore's operator was given), against torch's output; where the inputs do not line up, the
two outputs as run. A pair is over its limit past ``--layer-tolerance``, else past
:data:`OP_EPS_MULTIPLE` times the machine epsilon of the less precise of the two outputs.
"""
from __future__ import annotations

import contextlib
import difflib
import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..checks import UsageError
from ..frameworks import framework
from .component_call import DENOISER, PER_STEP, call_name
from .layers import call_module, layers_module, recorded_call, tensor_values
from .metrics import Errors
from .records import RecordReader, RecordWriter
from .trees import Capture, Captured, arrays, convertible, leaves, map_leaves, restore

#: An operator's limit, without ``--layer-tolerance``: this many times the machine epsilon of the
#: less precise of its two outputs' dtypes (1.2e-5 in float32, 0.098 in float16).
OP_EPS_MULTIPLE = 100.0

#: names (brought to snake case, underscores stripped) that mean the same operator on both sides
SAME = {"flash_attention_score": "scaled_dot_product_attention", "dense": "linear", "radd": "add", "iadd": "add",
        "rsub": "sub", "isub": "sub", "rmul": "mul", "imul": "mul", "truediv": "div", "rtruediv": "div",
        "itruediv": "div", "astype": "to", "float": "to", "half": "to", "type": "to", "swapaxes": "transpose",
        "swapdims": "transpose", "view": "reshape", "bmm": "matmul", "dropout_ext": "dropout",
        "split_with_sizes": "split", "expand_dims": "unsqueeze"}


def op_key(name: str) -> str:
    """An operator's name in one vocabulary for both sides: ``mint.nn.Conv2d`` -> ``conv2d``,
    ``Tensor.__add__`` -> ``add``, ``nn_ops.FlashAttentionScore`` -> ``scaled_dot_product_attention``."""
    last = name.rsplit(".", 1)[-1].strip("_")
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", last).lower()
    return SAME.get(snake, snake)


def split_label(label: str) -> Tuple[str, int]:
    """``"vae.decoder.mid_block.attentions.0#1"`` -> ``("vae.decoder.mid_block.attentions.0", 1)``."""
    name, sep, call = label.rpartition("#")
    if sep and call.isdigit():
        return name, int(call)
    return label, 0


def check_ops_module(names: Sequence[str], label: str, what: str) -> str:
    """``label`` (``NAME`` or ``NAME#k``) if NAME is among ``names`` (a component's submodules);
    else UsageError naming close ones."""
    name, _ = split_label(label)
    known = [n for n in names if n]
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        raise UsageError(f"--ops {label!r} is not a module of the {what}; accepted: a qualified submodule name as "
                         f"--layers prints it, such as {known[0]!r}"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))
    return label


# ----------------------------------------------------------------------------- results

@dataclass
class OpRow:
    """One row of the table: a torch operator, a MindSpore one, or a pair of them."""

    torch: Optional[Dict[str, Any]]  # {"name", "in", "out", "shape", "params"}
    mindspore: Optional[Dict[str, Any]]
    paired: bool = False
    rel_l2: Optional[float] = None  # local error (``how`` "fed"), or the outputs' as run ("as run")
    how: Optional[str] = None
    limit: Optional[float] = None

    @property
    def over(self) -> bool:
        return self.rel_l2 is not None and self.limit is not None and self.rel_l2 > self.limit

    def to_dict(self) -> Dict[str, Any]:
        return {"torch": self.torch, "mindspore": self.mindspore, "paired": self.paired, "rel_l2": self.rel_l2,
                "how": self.how, "limit": self.limit, "over": self.over}


@dataclass
class OpsReport:
    """Everything ``report.json``'s ``"ops"`` holds."""

    module: Optional[str]  # the module call looked at (``NAME#k``); None: --layers found no culprit
    type: str = ""
    component: str = DENOISER
    step: Optional[int] = None
    rows: List[OpRow] = field(default_factory=list)
    output_rel_l2: Optional[float] = None  # the module's output, MindSpore's cell fed torch's inputs
    threshold: Optional[float] = None  # --layer-tolerance; None: OP_EPS_MULTIPLE x eps per operator
    seconds: float = 0.0

    @property
    def paired(self) -> int:
        return sum(r.paired for r in self.rows)

    @property
    def first_over(self) -> Optional[int]:
        """The index of the first row over its limit."""
        return next((i for i, r in enumerate(self.rows) if r.over), None)

    def to_dict(self) -> Dict[str, Any]:
        return {"module": self.module, "type": self.type, "component": self.component, "step": self.step,
                "output_rel_l2": self.output_rel_l2, "threshold": self.threshold, "seconds": self.seconds,
                "paired": self.paired, "first_over": self.first_over,
                "counts": {"torch": sum(r.torch is not None for r in self.rows),
                           "mindspore": sum(r.mindspore is not None for r in self.rows)},
                "rows": [r.to_dict() for r in self.rows]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OpsReport":
        def number(value: Any) -> Optional[float]:
            return None if value is None else float(value)  # json_safe wrote "inf" and "nan" as text

        rows = [OpRow(r["torch"], r["mindspore"], r["paired"], number(r["rel_l2"]), r["how"], number(r["limit"]))
                for r in data["rows"]]
        return cls(data["module"], data["type"], data["component"], data["step"], rows, number(data["output_rel_l2"]),
                   number(data["threshold"]), float(data["seconds"]))

    def where(self) -> str:
        at = call_name(self.component) if self.component != DENOISER else "the denoiser"
        return at + (f" at step {self.step}" if self.step is not None else "")

    def summary(self) -> str:
        """The console's line: the module, how many operators paired, the first over its limit."""
        if self.module is None:
            return "ops: --layers found no culprit, so there is no module to look into; name one with --ops MODULE"
        counts = self.to_dict()["counts"]
        head = (f"ops in {self.module} ({self.type}), {self.where()}: {counts['torch']} torch and "
                f"{counts['mindspore']} MindSpore operators, {self.paired} paired")
        if not self.paired:
            return head + "; no operator pairs with another: the two sequences are side by side in the table"
        i = self.first_over
        if i is None:
            return head + "; every pair within its limit" + (
                f" (the module's output {self.output_rel_l2:.3g})" if self.output_rel_l2 is not None else "")
        r = self.rows[i]
        how = "fed torch's inputs" if r.how == "fed" else "the outputs as run"
        return (head + f"; the first over its limit: row {i + 1}, torch {describe(r.torch)} against MindSpore "
                f"{describe(r.mindspore)}, relative L2 {r.rel_l2:.3g} > {r.limit:.3g} ({how})")

    def table(self) -> List[str]:
        """The rows as console lines: torch's operator and dtypes beside MindSpore's, the error."""
        width = max([len(describe(r.torch, params=False)) for r in self.rows] + [5])
        lines = [f"  {'#':>3}  {'torch':<{width}}  {'in -> out':<24} {'MindSpore':<{width}}  {'in -> out':<24} "
                 f"{'shape':<18} {'rel L2':>9}  how"]
        for i, r in enumerate(self.rows):
            err = "" if r.rel_l2 is None else f"{r.rel_l2:9.3g}"
            mark = " OVER" if r.over else ("" if r.paired else " (unpaired)")
            shape = (r.torch or r.mindspore or {}).get("shape")
            lines.append(f"  {i + 1:>3}  {describe(r.torch, params=False):<{width}}  {dtypes(r.torch):<24} "
                         f"{describe(r.mindspore, params=False):<{width}}  {dtypes(r.mindspore):<24} "
                         f"{str(tuple(shape)) if shape is not None else '':<18} {err:>9}  {r.how or ''}{mark}")
        return lines


def describe(op: Optional[Mapping[str, Any]], params: bool = True) -> str:
    """``nn_ops.FlashAttentionScore(head_num=1, scale_value=1.0, ...)``; ``-`` for no operator."""
    if op is None:
        return "-"
    given = op.get("params") or {}
    return op["name"] + (f"({', '.join(f'{k}={v!r}' for k, v in given.items())})" if params and given else "")


def dtypes(op: Optional[Mapping[str, Any]]) -> str:
    if op is None:
        return ""
    return f"{','.join(short(d) for d in op['in']) or '-'} -> {','.join(short(d) for d in op['out'])}"


def short(dtype: str) -> str:
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
            "int32": "i32", "bool": "bool"}.get(dtype, dtype)


# ----------------------------------------------------------------------------- matching

def align(torch_names: Sequence[str], ms_names: Sequence[str]) -> List[Tuple[Optional[int], Optional[int], bool]]:
    """``(torch index, MindSpore index, paired)`` rows: the two sequences matched in order by
    :func:`op_key` (difflib); a stretch where they differ is shown side by side, unpaired."""
    matcher = difflib.SequenceMatcher(None, [op_key(n) for n in torch_names], [op_key(n) for n in ms_names],
                                      autojunk=False)
    rows: List[Tuple[Optional[int], Optional[int], bool]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [(i, j, True) for i, j in zip(range(i1, i2), range(j1, j2))]
        else:
            rows += [(i, j, False) for i, j in itertools.zip_longest(range(i1, i2), range(j1, j2))]
    return rows


def _matched_outputs(reference: Sequence[np.ndarray], other: Sequence[np.ndarray]) -> Optional[List[np.ndarray]]:
    """``other``'s arrays that line up with ``reference``'s: all of them in order where they have
    the same shapes, else for each reference array the last unused one of its shape
    (FlashAttentionScore returns its softmax statistics before the attention output); None if any lacks one."""
    if [a.shape for a in reference] == [b.shape for b in other]:
        return list(other)
    left, out = list(other), []
    for a in reference:
        found = next((k for k in range(len(left) - 1, -1, -1) if left[k].shape == a.shape), None)
        if found is None:
            return None
        out.append(left.pop(found))
    return out


#: machine epsilon per floating dtype
EPS = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def _limit(torch_op: Mapping[str, Any], ms_op: Mapping[str, Any], threshold: Optional[float]) -> float:
    if threshold is not None:
        return threshold
    return OP_EPS_MULTIPLE * max([EPS[d] for d in torch_op["out"] + ms_op["out"] if d in EPS] or [EPS["float32"]])


# ----------------------------------------------------------------------------- torch's part

@dataclass
class TorchOps:
    """Torch's part of ``--ops``: its operators inside the module call, in a record."""

    reader: RecordReader
    meta: Dict[str, Any]  # module (label), type, component, step
    files: Dict[str, Any] = field(default_factory=dict)


def _summary(fw: Any, name: str, args: Any, kwargs: Any, out: Any, params: Mapping[str, Any]) -> Dict[str, Any]:
    """What the table shows of one operator: its name, input and output dtypes, first output's shape."""
    given = [v for v in leaves((list(args), dict(kwargs))) if fw.is_tensor(v)]
    made = [v for v in leaves(out) if fw.is_tensor(v)]
    return {"name": name, "in": [fw.dtype_of(v) for v in given], "out": [fw.dtype_of(v) for v in made],
            "shape": list(made[-1].shape) if made else None, "params": dict(params)}


def torch_ops(torch_module: Any, args: Sequence[Any], kwargs: Mapping[str, Any], label: str,
              writer: Optional[RecordWriter] = None) -> TorchOps:
    """torch's operators inside call ``k`` of the module ``label`` names (``NAME#k``), while
    ``torch_module`` runs on ``args`` and ``kwargs``, with their inputs and outputs, in a record."""
    pt = framework("torch")
    name, k = split_label(label)
    modules = dict(pt.submodules(torch_module))
    check_ops_module(list(modules), label, type(torch_module).__name__)
    writer = writer or RecordWriter("ops")
    capture = Capture(pt)
    ops: List[Dict[str, Any]] = []
    call: Dict[str, Any] = {"count": 0}
    recording = contextlib.ExitStack()

    def on_op(op_name, function, a, kw, out, params):
        if not any(pt.is_tensor(v) for v in leaves(out)):  # a shape, a flag: not an operator's result
            return
        ops.append({**_summary(pt, op_name, a, kw, out, params), "inputs": writer.encode(capture((list(a), dict(kw)))),
                    "outputs": writer.encode(arrays(capture(out)))})

    def pre(n, module, a, kw):
        if call["count"] == k:
            call["inputs"] = writer.encode(capture((list(a), dict(kw))))
            recording.enter_context(pt.operators_recorded(module, on_op))

    def post(n, module, a, kw, output):
        if call["count"] == k:
            recording.close()
            call["outputs"] = writer.encode(arrays(capture(output)))
        call["count"] += 1

    with recording, pt.hooked([(name, modules[name])], pre, post):
        call_module(pt, torch_module, args, kwargs)
    if "outputs" not in call:
        raise UsageError(f"--ops {label!r}: torch's {name} ran {call['count']} times in this call; accepted: "
                         f"{name}#0 to #{call['count'] - 1}" if call["count"] else
                         f"--ops {label!r}: torch's {type(torch_module).__name__} did not call {name} here")
    files = writer.close({"ops": ops, "inputs": call["inputs"], "outputs": call["outputs"]})
    reader = RecordReader.of(writer) if writer.folder is None else \
        RecordReader.open(writer.folder, writer.name, files, "torch ops")
    meta = {"module": label, "type": type(modules[name]).__name__}
    return TorchOps(reader, meta, files)


# ----------------------------------------------------------------------------- MindSpore's part

@dataclass
class _MsOp:
    summary: Dict[str, Any]
    call: Any
    args: tuple
    kwargs: dict
    outputs: List[np.ndarray]


def _fed(ms: Any, op: _MsOp, given: Sequence[Captured], errors: Errors, reference: List[np.ndarray]
         ) -> Optional[float]:
    """MindSpore's operator run again with its first tensor inputs replaced by torch's (each in the
    dtype MindSpore's operator was given): the relative L2 of its output against torch's, or None
    where the inputs or outputs do not line up."""
    own = [v for v in leaves((list(op.args), dict(op.kwargs))) if ms.is_tensor(v)]
    if len(given) < len(own) or any(tuple(g.array.shape) != tuple(o.shape) for g, o in zip(given, own)):
        return None
    replacements = iter(given)
    args, kwargs = map_leaves(lambda v: ms.tensor(next(replacements).array, ms.dtype_of(v)) if ms.is_tensor(v) else v,
                              (list(op.args), dict(op.kwargs)))
    try:
        out = tensor_values(ms, op.call(*args, **kwargs))
    except Exception:  # an operator that cannot run again outside its module (it read a cache)
        return None
    matched = _matched_outputs(reference, out)
    err = errors(reference, matched) if matched is not None else None
    return None if err is None else err["rel_l2"]


def mindspore_ops(reader: RecordReader, meta: Mapping[str, Any], ms_cell: Any,
                  threshold: Optional[float] = None) -> OpsReport:
    """MindSpore's cell of the same name called on torch's inputs, its operators recorded, and the
    two sequences matched and judged (see the module)."""
    start = time.perf_counter()
    ms = framework("mindspore")
    label = meta["module"]
    name, _ = split_label(label)
    cells = dict(ms.submodules(ms_cell))
    if name not in cells:
        raise UsageError(f"--ops {label!r}: mindone's {type(ms_cell).__name__} has no cell {name!r}")
    cell = cells[name]
    tree = reader.tree
    given_args, given_kwargs = reader.decode(tree["inputs"])
    if not (convertible(given_args) and convertible(given_kwargs)) or not ms.takes(cell, given_kwargs):
        raise UsageError(f"--ops {label!r}: torch's inputs to {name} cannot be given to MindSpore's cell "
                         f"({type(cell).__name__}); look into a module inside it or around it")
    recorded: List[_MsOp] = []

    def on_op(op_name, function, a, kw, out, params):
        if not any(ms.is_tensor(v) for v in leaves(out)):
            return
        recorded.append(_MsOp(_summary(ms, op_name, a, kw, out, params), function, a, kw, tensor_values(ms, out)))

    with ms.operators_recorded(cell, on_op):
        output = call_module(ms, cell, restore(given_args, ms), restore(given_kwargs, ms))
    errors = Errors()
    module_err = errors(reader.decode(tree["outputs"]), tensor_values(ms, output))

    torch_ops = tree["ops"]
    rows = []
    for i, j, paired in align([o["name"] for o in torch_ops], [o.summary["name"] for o in recorded]):
        t = None if i is None else {key: torch_ops[i][key] for key in ("name", "in", "out", "shape", "params")}
        m = None if j is None else recorded[j].summary
        row = OpRow(t, m, paired)
        if paired:
            reference = reader.decode(torch_ops[i]["outputs"])
            given = [v for v in leaves(reader.decode(torch_ops[i]["inputs"])) if isinstance(v, Captured)]
            row.rel_l2, row.how = _fed(ms, recorded[j], given, errors, reference), "fed"
            if row.rel_l2 is None:
                matched = _matched_outputs(reference, recorded[j].outputs)
                err = errors(reference, matched) if matched is not None else None
                row.rel_l2, row.how = (err["rel_l2"], "as run") if err is not None else (None, None)
            row.limit = _limit(t, m, threshold)
        rows.append(row)
    return OpsReport(label, meta["type"], rows=rows, output_rel_l2=module_err and module_err["rel_l2"],
                     threshold=threshold, seconds=time.perf_counter() - start)


__all__ = ["OP_EPS_MULTIPLE", "OpRow", "OpsReport", "TorchOps", "align", "check_ops_module", "mindspore_ops",
           "op_key", "split_label", "torch_ops"]


# ----------------------------------------------------------------------------- at the layers step

def torch_ops_at_step(torch_side: Any, plan: Any, recording: Any, module: Optional[str],
                      writer: Optional[RecordWriter] = None) -> TorchOps:
    """:func:`torch_ops` on the call ``--layers`` looks at (:func:`.layers.recorded_call`);
    ``module`` None (``--layers`` found no culprit): nothing recorded."""
    if module is None:
        return TorchOps(None, {"module": None, "type": ""})
    torch_module, args, kwargs = recorded_call(torch_side, plan, recording)
    with torch_side.fw.running(torch_side.device, "pynative"):
        return torch_ops(torch_module, args, kwargs, module, writer)


def mindspore_ops_at_step(ms_side: Any, plan: Any, torch_part: TorchOps) -> OpsReport:
    """:func:`mindspore_ops` on the loaded MindSpore side, over torch's record."""
    options = plan.layers
    ms = framework("mindspore")
    if torch_part.meta["module"] is None:
        report = OpsReport(None)
    else:
        with ms.running(plan.devices.get("mindspore"), "pynative"), ms.half_precision(plan.settings.dtype):
            report = mindspore_ops(torch_part.reader, torch_part.meta, layers_module(ms, ms_side.pipe, plan),
                                   threshold=options.threshold)
    report.component = options.component
    report.step = options.step if options.component in (DENOISER,) + PER_STEP else None
    return report
