"""A comparison in stages, each kept in the output folder as soon as it exists, run holding only
what the stage needs.

Stages: ``sides`` (torch, then MindSpore; each side file written as it finishes), then what the
plan asks for: ``lockstep``, ``layers``, ``floor``. After each stage the caller's ``on_stage``
gets the comparison so far and the stages still missing (the command line writes report.json and
the pictures there). ``stages.json`` ties the folder to the plan: the same plan on the same folder
runs only the missing stages; another plan is refused.

Memory (what a real-sized model needs): the torch pipeline is dropped before MindSpore loads
unless ``layers`` needs both; MindSpore's is dropped before the float64 floor, which runs on the
torch pipeline alone (loaded again if it was dropped).
"""
from __future__ import annotations

import gc
import os
from typing import Any, Callable, Dict, List, Optional

from ..checks import UsageError
from ..files import json_safe, write_json
from ..patch import patched
from .floor import pipeline_floor
from .layers import LayerReport, check_module_names, layers_at_step
from .plan import Plan
from .result import Comparison, compare_sides
from .sidefile import load_side, save_side
from .sides import Everything, Loaded, Side, load, run

STAGES = ("sides", "lockstep", "floor", "layers")
STAGE_FILE = "stages.json"
STAGES_VERSION = 1


def side_file(out_dir: str, framework: str) -> str:
    return os.path.join(out_dir, f"{framework}.safetensors")


def wanted(plan: Plan) -> List[str]:
    """The stages this plan asks for, in the order they run."""
    return ["sides"] + [name for name, asked in (("lockstep", plan.lockstep), ("floor", plan.noise_floor),
                                                 ("layers", plan.layers is not None)) if asked]


def identity(plan: Plan) -> Dict[str, Any]:
    """What the stages' results depend on: a folder that holds another identity is another comparison."""
    return json_safe({**plan.graph_identity(), "seed": plan.settings.seed, "noise": plan.settings.noise,
                      "weights": plan.folder.fingerprint(),
                      "mindspore_mode": plan.mindspore_mode, "devices": dict(plan.devices)})


def _layer_key(plan: Plan) -> Dict[str, Any]:
    o = plan.layers
    return json_safe({"step": o.step, "threshold": o.threshold, "dump": list(o.dump), "dump_dir": o.dump_dir})


class StageFolder:
    """``out_dir/stages.json`` (the plan's identity and the finished stages' results) and the side files."""

    def __init__(self, out_dir: str, plan: Plan) -> None:
        self.out_dir, self.plan = out_dir, plan
        self.path = os.path.join(out_dir, STAGE_FILE)
        self.identity = identity(plan)
        self.results: Dict[str, Any] = {}
        if os.path.isfile(self.path):
            import json

            try:
                with open(self.path) as f:
                    data = json.load(f)
                written, results = data["identity"], dict(data["done"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise UsageError(f"--out {out_dir!r}: {STAGE_FILE} is unreadable ({exc}); use another folder") from None
            if written != self.identity:
                diffs = _differences(written, self.identity)
                raise UsageError(f"--out {out_dir!r} holds a comparison of other settings (differing: "
                                 f"{', '.join(diffs)}); use another folder or the same settings")
            self.results = results

    def start(self) -> None:
        """Tie the folder to the plan before anything is written into it."""
        os.makedirs(self.out_dir, exist_ok=True)
        self._write()

    def _write(self) -> None:
        write_json(self.path, {"xrand_stages": STAGES_VERSION, "identity": self.identity, "done": self.results})

    def side(self, framework: str) -> Optional[Side]:
        """The side file of this plan written by an earlier run, if any."""
        path = side_file(self.out_dir, framework)
        if not (self.results.get(framework) and os.path.isfile(path)):
            return None
        return load_side(path)

    def save_side(self, side: Side) -> None:
        save_side(side, side_file(self.out_dir, side.framework))
        self.results[side.framework] = True
        self._write()

    def done(self, stage: str) -> bool:
        if stage == "sides":
            return bool(self.results.get("torch") and self.results.get("mindspore"))
        if stage == "layers":
            return self.plan.layers is not None and \
                (self.results.get("layers") or {}).get("options") == _layer_key(self.plan)
        return stage in self.results

    def save(self, stage: str, value: Any) -> None:
        self.results[stage] = json_safe(value)
        self._write()


def _differences(a: Dict[str, Any], b: Dict[str, Any], prefix: str = "") -> List[str]:
    """The keys (``settings.steps``) whose values differ, one level of nesting deep."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict) and not prefix:
            out += _differences(x, y, key + ".")
        elif x != y:
            out.append(f"{prefix}{key} {x!r} vs {y!r}" if not isinstance(x, (dict, list)) else prefix + key)
    return out


def _free(pipes: Dict[str, Loaded], name: str) -> None:
    """Drop a framework's pipeline (its weights are most of a side's memory). A torch pipeline's
    modules are moved to the meta device first, so that their memory goes even while a caller's
    frame still refers to them (:func:`.layers.layers_at_step` drops torch's mid-call)."""
    loaded = pipes.pop(name, None)
    if loaded is None:
        return
    if name == "torch":
        import torch

        for component in (getattr(loaded.pipe, "components", None) or {}).values():
            if isinstance(component, torch.nn.Module):
                component.to("meta")
    del loaded
    gc.collect()
    if name == "mindspore":
        import mindspore

        # Graph mode keeps each compiled cell's graph and runtime memory (and so the cell) until
        # told: about 10 GB for a Stable-Diffusion-1.5-sized UNet at 256x256 (benchmarks/bench_scale.py)
        mindspore.ms_memory_recycle()
        gc.collect()
    _trim_heap()


def _trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc keeps freed blocks for reuse)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def compare_in_stages(plan: Plan, out_dir: str, on_stage: Callable[[Comparison, List[str]], None],
                      quiet: bool = True, say: Callable[[str], None] = lambda text: None) -> Comparison:
    """Run the plan's missing stages into ``out_dir``, calling ``on_stage(comparison, missing)``
    after each; return the whole comparison."""
    from ..pipelines.environment import fingerprint

    folder = StageFolder(out_dir, plan)
    stages = wanted(plan)
    todo = [s for s in stages if not folder.done(s)]
    if len(todo) < len(stages):
        say(f"xrand: {out_dir}/ holds this comparison's {', '.join(s for s in stages if s not in todo)}; "
            f"running {', '.join(todo) or 'nothing more'}")
    pipes: Dict[str, Loaded] = {}

    def loaded(name: str) -> Loaded:
        if name not in pipes:
            pipes[name] = load(plan, name, quiet)
        return pipes[name]

    if plan.layers is not None and plan.layers.dump and "layers" in todo:  # before anything is written
        check_module_names(plan.recipe.denoiser_of(loaded("torch").pipe), plan.layers.dump)
    folder.start()
    lockstep, layers = "lockstep" in todo, "layers" in todo
    a, recording = folder.side("torch"), None
    if a is None or lockstep or layers:  # a torch run, or its recording for the stages that need it
        record_calls = Everything() if lockstep else {plan.layers.step} if layers else None
        with patched():
            ran = run(loaded("torch"), plan, record_calls=record_calls, record_steps=lockstep)
        recording = ran.recording
        if a is None:
            a = ran
            a.environment = {**fingerprint(["torch"]), **a.environment}
            folder.save_side(a)
    _free(pipes, "torch")  # MindSpore's side runs alone
    b = folder.side("mindspore")
    if b is None:
        with patched():
            b = run(loaded("mindspore"), plan)
        b.environment = {**fingerprint(["mindspore"]), **b.environment}  # with the mode and cache that ran
        folder.save_side(b)
        # lockstep compiles graphs of its own: the side's would stay beside them (4 GB more for an
        # SD-1.5-sized UNet at 256x256), so they go, and lockstep loads the pipeline again
        _free(pipes, "mindspore")

    def comparison_so_far() -> Comparison:
        c = compare_sides(a, b, plan.tolerance, folder.results.get("lockstep", {}).get("local_steps"))
        if "lockstep_seconds" in folder.results.get("lockstep", {}):
            c.environments["b"] = {**c.environments["b"],
                                   "lockstep_seconds": folder.results["lockstep"]["lockstep_seconds"]}
        if folder.done("layers") and plan.layers is not None:
            c.layers = LayerReport.from_dict(folder.results["layers"]["report"])
        if folder.done("floor") and plan.noise_floor:
            c.noise_floor = folder.results["floor"]
        c.stages = {"done": [s for s in stages if folder.done(s)], "missing": [s for s in stages if not folder.done(s)]}
        return c

    def report() -> None:
        on_stage(comparison_so_far(), [s for s in stages if not folder.done(s)])

    report()
    if lockstep:
        import time

        start = time.perf_counter()
        with patched():
            local = run(loaded("mindspore"), plan, feed=recording).local_steps
        folder.save("lockstep", {"local_steps": local, "lockstep_seconds": time.perf_counter() - start})
        report()
    _free(pipes, "mindspore")
    if "floor" in todo:  # torch alone, widened to float64
        with patched():
            folder.save("floor", pipeline_floor(loaded("torch"), plan, a.images))
        report()
    if layers:  # torch's passes (float32, float64), then torch dropped, then MindSpore's passes

        def mindspore_alone() -> Loaded:
            _free(pipes, "torch")
            return loaded("mindspore")

        with patched():
            result = layers_at_step(loaded("torch"), mindspore_alone, plan, recording, a.timesteps)
        folder.save("layers", {"options": _layer_key(plan), "report": result.to_dict()})
        report()
    recording = None
    _free(pipes, "mindspore")
    _free(pipes, "torch")
    return comparison_so_far()


__all__ = ["STAGES", "STAGE_FILE", "StageFolder", "compare_in_stages", "side_file", "wanted"]
