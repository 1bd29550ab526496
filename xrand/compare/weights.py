"""The weights as each library holds them after loading, checked before any step.

Each side (:func:`side_weights`) walks every component's parameters as its library loaded them
(a variant, a single file, LoRA fused or not) and compares each, by name, with the weight files
on disk that both sides read (cast to the loaded dtype as both libraries cast: round to nearest
even), keeping per tensor its shape, dtype, the largest |difference| from the file and a sha256
of the loaded values. Where torch's tensor is not the file's (LoRA fused into it), torch's values
are kept (:attr:`SideWeights.kept`; a comparison folder's ``torch-weights.safetensors``) so that
MindSpore's side measures against them. :func:`compare_weights` then matches the two small
summaries: a name on one side only, another shape or dtype, or a tensor that differs beyond its
dtype's rounding is a FAIL that names it. Two machines never exchange the model.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Container, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

#: mindone's parameter names where they differ from torch's, by their last part: MindSpore's
#: nn.Embedding holds ``embedding_table``, its nn.LayerNorm ``gamma`` and ``beta`` (mindone.transformers'
#: CLIP text encoder; diffusers' models use torch's names on both sides).
MINDSPORE_NAMES = {"embedding_table": "weight", "gamma": "weight", "beta": "bias"}
#: A dtype's rounding: the spacing of its numbers relative to their size (numpy's finfo; bfloat16's 8 bits).
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}
#: The names of a safetensors header's dtypes as numpy reads them (BF16: the high half of a float32).
_FILE_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": np.uint16}
#: How many names a verdict lists before it says how many more.
NAMED = 3


@dataclass
class SideWeights:
    """One side's summary: component -> tensor name (torch's) -> ``shape``, ``dtype``,
    ``file_max_abs`` (None: no file tensor of that name, e.g. a single file's other layout) and,
    where that is not 0, ``sha256`` and ``scale`` (the largest |value|); ``kept``: name ->
    values where torch's tensor is not the file's."""

    framework: str
    tensors: Dict[str, Dict[str, Dict[str, Any]]]
    seconds: float = 0.0
    kept: Dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def to_dict(self) -> Dict[str, Any]:
        return {"framework": self.framework, "tensors": self.tensors, "seconds": self.seconds,
                "kept": sorted(self.kept)}


def torch_name(framework: str, name: str, saved: Container[str] = ()) -> str:
    """A parameter's name as torch's module holds it (``MINDSPORE_NAMES``); a name the weight
    files hold (``saved``) is its own (Wan's RMS norms call theirs ``gamma`` in both libraries)."""
    if framework != "mindspore" or name in saved:
        return name
    head, _, last = name.rpartition(".")
    return f"{head}.{MINDSPORE_NAMES[last]}" if last in MINDSPORE_NAMES and head else name


def loaded_parameters(fw: Any, module: Any, saved: Container[str] = ()) -> Iterator[Tuple[str, Any]]:
    """``(torch's name, tensor)`` of every parameter of a loaded component, and torch's persistent
    buffers (saved in the files, such as SD3's pos_embed, which MindSpore holds as a parameter)."""
    for name, tensor in fw.weights(module):
        yield torch_name(fw.name, name, saved), tensor


def side_weights(fw: Any, pipe: Any, folder: Any, components: Mapping[str, str],
                 against: Optional[Mapping[str, np.ndarray]] = None) -> SideWeights:
    """Every component's loaded parameters against the folder's weight files (see the module);
    ``against``: torch's kept values (name ``component/tensor``), measured against in their place."""
    import time

    start = time.perf_counter()
    files = {} if folder.single_file else file_index(folder)
    tensors: Dict[str, Dict[str, Dict[str, Any]]] = {}
    kept: Dict[str, np.ndarray] = {}
    for component in components:
        module = getattr(pipe, component, None)
        if module is None:
            continue
        found = tensors.setdefault(component, {})
        for name, tensor in loaded_parameters(fw, module, {n for c, n in files if c == component}):
            dtype = fw.dtype_of(tensor)
            values = np.asarray(fw.capture(tensor)[0]) if dtype == "float64" else fw.to_numpy(tensor)
            key = f"{component}/{name}"
            reference = against.get(key) if against else None
            if reference is None and (component, name) in files:
                reference = rounded(read_tensor(*files[component, name]), dtype)
            entry = {"shape": list(values.shape), "dtype": dtype, "sha256": None, "file_max_abs": None, "scale": None,
                     "in_file": bool(folder.single_file) or (component, name) in files}
            if reference is not None and reference.shape == values.shape:
                entry["file_max_abs"] = max_abs_difference(values, reference)
                if against is not None and key in against:
                    entry["against"] = "torch"  # measured against torch's kept values, not the file
            if entry["file_max_abs"] != 0.0:  # the file's values need neither (the common case: one pass)
                entry.update(sha256=digest(values), scale=float(np.max(np.abs(values))) if values.size else 0.0)
            if fw.name == "torch" and entry["file_max_abs"]:
                kept[key] = np.array(values)
            found[name] = entry
    return SideWeights(fw.name, tensors, time.perf_counter() - start, kept)


def max_abs_difference(values: np.ndarray, reference: np.ndarray) -> float:
    """The largest |values - reference| (0 for the same values, found in one pass without copies)."""
    if values.size == 0 or np.array_equal(values, reference):
        return 0.0
    return float(np.max(np.abs(values.astype(np.float64) - reference)))


def digest(values: np.ndarray) -> str:
    """sha256 of the values widened to float32 (float64 kept): the same on both sides for the same values."""
    wide = values if values.dtype == np.float64 else values.astype(np.float32, copy=False)
    return hashlib.sha256(memoryview(np.ascontiguousarray(wide)).cast("B")).hexdigest()


def rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    """A file's values cast to ``dtype`` as both libraries cast (round to nearest even), held as
    float32 as the loaded values are (float64 for a float64 load)."""
    if dtype == "float64":
        return values.astype(np.float64, copy=False)
    values = values.astype(np.float32, copy=False)
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        bits = values.view(np.uint32)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & np.uint32(0xFFFF0000)
        return bits.view(np.float32)
    return values


def file_index(folder: Any) -> Dict[Tuple[str, str], Tuple[str, Mapping[str, Any], int]]:
    """(component, tensor name) -> (file, header entry, data offset) for every tensor of the
    folder's weight files (read from their headers: no tensor is read)."""
    index = {}
    for path in folder.weights:
        component = os.path.relpath(path, folder.path).split(os.sep)[0]
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                index[component, name] = (path, entry, 8 + size)
    return index


def read_tensor(path: str, entry: Mapping[str, Any], offset: int) -> np.ndarray:
    """One tensor of a safetensors file, mapped from the file (bfloat16 widened to float32), without
    torch or MindSpore."""
    start, end = entry["data_offsets"]
    kind = _FILE_DTYPES.get(entry["dtype"])
    if kind is None:
        raise ValueError(f"{path}: a weight of dtype {entry['dtype']} (xrand reads {', '.join(_FILE_DTYPES)})")
    count = (end - start) // np.dtype(kind).itemsize
    values = np.memmap(path, dtype=kind, mode="r", offset=offset + start, shape=(count,))
    if entry["dtype"] == "BF16":
        values = (values.astype(np.uint32) << 16).view(np.float32)
    return values.reshape(entry["shape"])


def compare_weights(a: Mapping[str, Any], b: Mapping[str, Any]) -> Dict[str, Any]:
    """Two sides' summaries (:meth:`SideWeights.to_dict`, torch's first) made into the table:
    one row per tensor with ``max_abs`` between the sides (``bound``: only known to be at most
    that, from each side's difference from the file), and ``problems``, each naming a tensor."""
    rows: List[Dict[str, Any]] = []
    problems: List[str] = []
    names = (a["framework"], b["framework"])
    for component in sorted(set(a["tensors"]) | set(b["tensors"])):
        ta, tb = a["tensors"].get(component, {}), b["tensors"].get(component, {})
        for name in sorted(set(ta) | set(tb)):
            x, y = ta.get(name), tb.get(name)
            row: Dict[str, Any] = {"component": component, "name": name, "max_abs": None, "bound": False,
                                   "limit": None, "problem": None}
            if x is None or y is None:
                only = names[0] if y is None else names[1]
                row.update(shape=(x or y)["shape"], dtype=(x or y)["dtype"])
                if not (x or y).get("in_file", True):  # made by the model's code (SD3's sinusoidal pos_embed), not loaded
                    row["note"] = f"not in the weight files: {only} makes it as a parameter, the other as a buffer"
                else:
                    row["problem"] = f"only {only} has it"
                    problems.append(f"{component}/{name} only on {only}")
                rows.append(row)
                continue
            same = x["dtype"] == y["dtype"]
            row.update(shape=x["shape"], dtype=x["dtype"] if same else f"{x['dtype']} vs {y['dtype']}")
            if x["shape"] != y["shape"]:
                row["problem"] = f"shape {x['shape']} vs {y['shape']}"
            elif x["dtype"] != y["dtype"]:
                row["problem"] = f"dtype {x['dtype']} vs {y['dtype']}"
            else:
                row.update(_difference(x, y))
                limit = EPS.get(x["dtype"], 0.0) * max(x["scale"] or 0.0, y["scale"] or 0.0)
                row["limit"] = limit
                if row["max_abs"] is None:
                    row["problem"] = "values differ (sha256); no file tensor of this name to measure them by"
                elif row["max_abs"] > limit:
                    row["problem"] = f"differs by {row['max_abs']:.3g} (beyond {x['dtype']} rounding, {limit:.2g})"
            if row["problem"]:
                problems.append(f"{component}/{name}: {row['problem']}")
            rows.append(row)
    return {"passed": not problems, "problems": problems, "tensors": len(rows), "rows": rows,
            "seconds": {names[0]: a.get("seconds", 0.0), names[1]: b.get("seconds", 0.0)},
            "kept": len(a.get("kept") or ())}


def _difference(x: Mapping[str, Any], y: Mapping[str, Any]) -> Dict[str, Any]:
    """The largest |difference| between two sides' tensor: 0 for the same sha256 (None: the file's
    values, not hashed); exact where one
    side's difference was measured against the other's values (the file's, or torch's kept ones);
    else a bound, the two differences from the file added."""
    if x["sha256"] == y["sha256"]:
        return {"max_abs": 0.0}
    if y.get("against") == "torch" or x["file_max_abs"] == 0.0:
        return {"max_abs": y["file_max_abs"]}
    if x["file_max_abs"] is None or y["file_max_abs"] is None:
        return {"max_abs": None}
    return {"max_abs": x["file_max_abs"] + y["file_max_abs"], "bound": True}


def verdict_text(weights: Mapping[str, Any]) -> str:
    """'the weights differ before any step: unet/conv_in.weight: differs by 0.5 (...); and 2 more'."""
    problems = weights["problems"]
    more = f"; and {len(problems) - NAMED} more" if len(problems) > NAMED else ""
    return "the loaded weights differ before any step: " + "; ".join(problems[:NAMED]) + more


__all__ = ["EPS", "MINDSPORE_NAMES", "SideWeights", "compare_weights", "digest", "file_index", "loaded_parameters",
           "read_tensor", "rounded", "side_weights", "torch_name", "verdict_text"]
