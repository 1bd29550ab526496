"""layers.csv: one row per module call of ``report.json``'s ``"layers"``, in the columns of Ascend's
msprobe compare, so that a table from xrand reads like the ones Ascend porting work already uses.

Column names and their meaning are msprobe's (Ascend/msprobe,
``python/msprobe/core/common/const.py``: ``CompareConst.COMPARE_RESULT_HEADER``, ``COSINE``,
``MAX_ABS_ERR``, ``MAX_RELATIVE_ERR``, ``ONE_THOUSANDTH_ERR_RATIO``,
``FIVE_THOUSANDTHS_ERR_RATIO``, ``ERROR_MESSAGE``, ``N_A``; the metrics as
``python/msprobe/core/compare/npy_compare.py`` computes them, ``GetCosineSimilarity``,
``GetMaxAbsErr``, ``GetMaxRelativeErr``, ``GetErrRatio`` and ``get_relative_err``). "NPU" is the
side under test (MindSpore), "Bench" the reference (torch). msprobe compares the outputs as each
side ran them, so its columns here describe the outputs as run (xrand's global error); the
``xrand ...`` columns add what msprobe has no column for: the local error (the module fed torch's
inputs), torch's own floor there (the run's dtype against float64), and the limit the call is judged by.
"""
from __future__ import annotations

import csv
import io
import math
from typing import Any, Dict, List

from ..compare.component_call import DENOISER, root_label
from ..files import atomic_path

#: msprobe's names (CompareConst), in msprobe's order.
MSPROBE_COLUMNS = ["NPU Name", "Bench Name", "Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                   "Five Thousandths Err Ratio", "Err_message"]
#: xrand's own, after msprobe's.
XRAND_COLUMNS = ["xrand type", "xrand call", "xrand rel_l2", "xrand local_rel_l2", "xrand floor_rel_l2",
                 "xrand limit", "xrand over limit"]
COLUMNS = MSPROBE_COLUMNS + XRAND_COLUMNS

#: Per-module keys of ``report.json`` ``"layers"."modules"`` each msprobe column reads; the ones
#: compare/layers.py writes them, computed by :func:`xrand.compare.metrics.module_metrics`.
METRIC_KEYS = {"Cosine": "cosine", "MaxAbsErr": "max_abs", "MaxRelativeErr": "max_rel_err",
               "One Thousandth Err Ratio": "err_ratio_1e-3", "Five Thousandths Err Ratio": "err_ratio_5e-3"}

#: msprobe's word for a value it cannot give (CompareConst.N_A).
NOT_AVAILABLE = "N/A"

def limit_of(module: Dict[str, Any], layers: Dict[str, Any]) -> float:
    """The local error a module call may reach: its ``"limit"`` when layers.py writes one, else
    :func:`.layers.module_limit` of the JSON's threshold and the call's floor (floors are used
    when the layers ran with a measured floor, ``"floor"`` not null)."""
    if module.get("limit") is not None:
        return float(module["limit"])
    from ..compare.layers import ModuleDiff, module_limit

    use_floors = layers.get("use_floors", layers.get("floor") is not None)
    m = ModuleDiff(name=module["name"], type=module.get("type", ""), call=module.get("call", 0), rel_l2=None,
                   local_rel_l2=None, max_abs=None, floor_rel_l2=module.get("floor_rel_l2"))
    return module_limit(m, float(layers["threshold"]), bool(use_floors))


def missing_keys(layers: Dict[str, Any]) -> List[str]:
    """The per-module keys the msprobe columns (and the limit) need that these modules lack."""
    modules = layers.get("modules") or []
    wanted = list(METRIC_KEYS.values()) + ["limit"]
    return [k for k in wanted if modules and any(k not in m for m in modules)]


def _cell(value: Any) -> str:
    if value is None:
        return NOT_AVAILABLE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def layers_csv(layers: Dict[str, Any]) -> str:
    """The CSV text of ``report.json``'s ``"layers"`` dict: a header of :data:`COLUMNS`, then one
    row per module call in execution order. A metric the dict lacks is ``N/A`` and the row's
    ``Err_message`` names the missing key (see :func:`missing_keys`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for m in layers.get("modules") or []:
        label = (m["name"] or root_label(layers.get("component", DENOISER))) + (f"#{m['call']}" if m.get("call") else "")
        absent = [key for key in METRIC_KEYS.values() if key not in m]
        limit = limit_of(m, layers)
        local = None if m.get("local_rel_l2") is None else float(m["local_rel_l2"])  # "nan": json_safe's NaN
        message = f"not in report.json: {', '.join(absent)}" if absent else ""
        writer.writerow([label, label] + [_cell(m.get(key)) for key in METRIC_KEYS.values()] + [message] + [
            m.get("type", ""), m.get("call", 0), _cell(m.get("rel_l2")), _cell(local), _cell(m.get("floor_rel_l2")),
            _cell(limit), _cell(None if local is None else bool(local > limit))])
    return out.getvalue()


def write_layers_csv(path: str, layers: Dict[str, Any]) -> None:
    """:func:`layers_csv` written whole or not at all."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as f:
            f.write(layers_csv(layers))
