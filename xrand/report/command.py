"""The ``xrand`` command that makes a result again: report.json's ``reproduce`` and the pages'
Reproduce line. The settings' flags come from :mod:`xrand.pipelines.flags`; this module adds the
options of the command itself (tolerance, lockstep, layers, the floor, MindSpore's mode, devices).

``absolute``: paths that exist here (model folder, input files, dump folder) written as absolute
paths, so that the command runs the same from any folder; a command is derived with it where the
result is written (the run's own working folder), without it from a report read later.
"""
from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..pipelines.flags import settings_args


def _digits(model: Any) -> bool:
    return str(model).replace("\\", "/").rstrip("/").endswith("xrand/models/digits")


def _number(value: float) -> str:
    return repr(float(value))


def _settings(settings: Mapping[str, Any], absolute: bool, **changes: Any) -> List[str]:
    """The settings' flags; the embedded digits model is the default model (wherever it was installed)."""
    values = {**settings, **changes}
    if _digits(values.get("model")):
        values["model"] = None
    return settings_args(values, absolute)


def _path(path: str, absolute: bool) -> str:
    return os.path.abspath(path) if absolute and os.path.exists(path) else path


def command(settings: Mapping[str, Any], tolerance: float, lockstep: bool = False,
            layers: Optional[Mapping[str, Any]] = None, noise_floor: bool = True,
            mindspore_mode: Optional[str] = None, devices: Optional[Mapping[str, Optional[str]]] = None,
            absolute: bool = False) -> str:
    """``xrand compare`` with these settings (a dict of Settings' fields) and options; ``layers``:
    ``step`` and, where given, ``threshold``, ``dump`` (module names), ``dump_dir``, ``scope``,
    ``component``, ``modules`` (False: ``--ops`` alone), ``ops``."""
    args = ["xrand", "compare"] + _settings(settings, absolute) + ["--tolerance", _number(tolerance)]
    if lockstep:
        args.append("--lockstep")
    if layers is not None:
        args += (["--layers"] if layers.get("modules", True) else []) + ["--layers-step", str(layers.get("step") or 0)]
        if layers.get("component") not in (None, "denoiser"):
            args += ["--layers-component", layers["component"]]
        if layers.get("ops") is not None:  # "": --layers' culprit
            args += ["--ops"] + ([layers["ops"]] if layers["ops"] else [])
        if layers.get("threshold") is not None:
            args += ["--layer-tolerance", _number(layers["threshold"])]
        if layers.get("dump"):
            args += ["--layers-module", ",".join(layers["dump"])]
        if layers.get("dump_dir"):
            args += ["--layers-dump", _path(layers["dump_dir"], absolute)]
        if layers.get("scope"):
            args += ["--layers-scope", ",".join(layers["scope"])]
    if not noise_floor:
        args.append("--no-noise-floor")
    if mindspore_mode:
        args += ["--mindspore-mode", mindspore_mode]
    for framework, device in sorted((devices or {}).items()):
        if device:
            args += ["--device", f"{framework}={device}"]
    return shlex.join(args)


def plan_command(plan: Any, noise_floor: Optional[bool] = None,
                 manifest: Optional[Mapping[str, Any]] = None) -> str:
    """The ``xrand compare`` command of a :class:`xrand.compare.plan.Plan`, with absolute paths:
    what report.json keeps as ``reproduce`` for a command-line run (``noise_floor``: whether the
    comparison asks for the floor, where the plan of one machine's stages does not say;
    ``manifest``: its folder's, which says where the other machine's framework ran)."""
    from dataclasses import asdict

    o = plan.layers
    layers = None if o is None else {"step": o.step, "threshold": o.threshold, "dump": list(o.dump),
                                     "dump_dir": o.dump_dir, "scope": list(o.scope), "component": o.component,
                                     "modules": o.modules, "ops": o.ops}
    devices = {**(_devices_ran(manifest) if manifest is not None else {}), **plan.devices}
    return command(asdict(plan.settings), plan.tolerance, plan.lockstep, layers,
                   plan.noise_floor if noise_floor is None else noise_floor, plan.mindspore_mode, devices,
                   absolute=True)


def manifest_command(manifest: Mapping[str, Any], tolerance: float) -> str:
    """The ``xrand compare`` command of a comparison folder's manifest.json (its settings, what it
    asks, where each framework's stages ran), with absolute paths: report.json's ``reproduce``
    where no framework runs (``tolerance``: the comparison's)."""
    asks, mindspore = manifest["asks"], manifest.get("runtime", {}).get("mindspore") or {}
    return command(manifest["plan"]["settings"], tolerance, asks["lockstep"], asks["layers"], asks["noise_floor"],
                   mindspore.get("mode"), _devices_ran(manifest), absolute=True)


def _devices_ran(manifest: Mapping[str, Any]) -> Dict[str, Optional[str]]:
    return {fw: runtime.get("device") for fw, runtime in manifest.get("runtime", {}).items()}


def compare_command(report: Mapping[str, Any], absolute: bool = False) -> str:
    """``report["reproduce"]`` (or an older report's ``command``) when the report has it, else the
    ``xrand compare`` command that makes this report again, from its settings and what it measured."""
    if report.get("reproduce") or report.get("command"):
        return str(report.get("reproduce") or report["command"])
    layers = report.get("layers")
    if layers:  # the threshold as given; one measured from the floor was not
        layers = {"step": layers.get("step"), "threshold": layers["threshold"] if layers.get("floor") is None else None}
    return command(report["settings"], report["tolerance"]["value"],
                   lockstep=any("local" in row for row in report.get("steps", [])), layers=layers or None,
                   noise_floor="noise_floor" in report,
                   mindspore_mode=(report.get("environment", {}).get("b") or {}).get("mindspore_mode"),
                   absolute=absolute)


def matrix_command(matrix: Mapping[str, Any], absolute: bool = False) -> str:
    """``matrix["command"]``, else the ``xrand compare --scheduler all`` command of this matrix."""
    if matrix.get("command"):
        return str(matrix["command"])
    args = ["xrand", "compare", "--scheduler", "all"] + _settings(matrix["settings"], absolute, scheduler=None)
    args += ["--tolerance", _number(matrix["tolerance"]["value"])]
    rows = matrix.get("rows", [])
    if any(r.get("max_local_rel_l2") is not None for r in rows):
        args.append("--lockstep")
    mode = next((r["mindspore_mode"] for r in rows if r.get("mindspore_mode")), None)
    if mode:
        args += ["--mindspore-mode", mode]
    return shlex.join(args)


def seed_ranges(seeds: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 7]`` as ``0-3,7`` (what ``--seeds`` takes)."""
    parts: List[str] = []
    ordered = sorted(set(int(s) for s in seeds))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def sweep_command(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], absolute: bool = False) -> str:
    """``summary["command"]``, else the ``xrand sweep`` command of these cells (``--out`` is the
    folder the sweep was written to: DIR here)."""
    if summary.get("command"):
        return str(summary["command"])
    from ..pipelines.schedulers import MATRIX, split_label

    s = summary["settings"]
    args = ["xrand", "sweep", "--seeds", seed_ranges([r["seed"] for r in rows])]
    args += _settings(s, absolute, scheduler=None, seed=None)
    names = list(summary.get("schedulers", {}))
    if len(names) == len(MATRIX) and len(names) > 1:
        args += ["--scheduler", "all"]
    elif names:
        args += ["--scheduler", ",".join(dict.fromkeys(split_label(n)[0] for n in names))]
    if isinstance(s.get("tolerance"), (int, float)):  # a dtype sweep's tolerance is each dtype's (a dict)
        args += ["--tolerance", _number(s["tolerance"])]
    if s.get("mindspore_mode"):
        args += ["--mindspore-mode", s["mindspore_mode"]]
    return shlex.join(args + ["--out", "DIR"])


__all__ = ["command", "compare_command", "manifest_command", "matrix_command", "plan_command", "seed_ranges", "sweep_command"]
