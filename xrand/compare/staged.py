"""A comparison in stages, each kept in the output folder as soon as it exists, run holding only
what the stage needs.

Stages: ``sides`` (torch, then MindSpore; each side file written as it finishes), then what the
plan asks for: ``floor``, ``layers``, ``lockstep``. After each stage the caller's ``on_stage``
gets the comparison so far and the stages still missing (the command line writes report.json and
the pictures there). ``stages.json`` ties the folder to the plan: the same plan on the same folder
runs only the missing stages; another plan is refused.

Memory (what a real-sized model needs): one framework's pipeline at a time. The torch pipeline
is dropped before MindSpore loads; MindSpore's side runs in a process of its own for a folder of
more than :data:`OWN_PROCESS_BYTES` of weights (else it is dropped after its side), so the
float64 floor runs on the torch pipeline alone (loaded again, dropped after); ``--layers`` loads
torch for its passes, drops it, then loads MindSpore for its passes, and lockstep runs on that.
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
from .sides import Everything, Loaded, Side, fingerprinted, load, run

STAGES = ("sides", "floor", "layers", "lockstep")
STAGE_FILE = "stages.json"
STAGES_VERSION = 1


def side_file(out_dir: str, framework: str) -> str:
    return os.path.join(out_dir, f"{framework}.safetensors")


def wanted(plan: Plan) -> List[str]:
    """The stages this plan asks for, in the order they run."""
    return ["sides"] + [name for name, asked in (("floor", plan.noise_floor), ("layers", plan.layers is not None),
                                                 ("lockstep", plan.lockstep)) if asked]


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
        self.mark_side(side)

    def mark_side(self, side: Side) -> None:
        """The side's file is written: the side is done."""
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


#: A model folder with more weights than this runs MindSpore's side in a process of its own:
#: MindSpore keeps memory after its pipeline is dropped (in graph mode, about half of what its
#: side held), on which the stages after it would stand; a process that ends gives all of it
#: back. Smaller folders run it here (a new process costs seconds: importing MindSpore and mindone).
OWN_PROCESS_BYTES = 1 << 30


def side_in_own_process(plan: Plan, framework: str, path: str, quiet: bool = True) -> Side:
    """Run one side in a new process that writes its side file to ``path`` and ends; return the
    side read back. Its errors come back as they were raised (a ``UsageError`` stays one)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_side_process, args=(plan, framework, path, quiet, send))
    process.start()
    send.close()
    try:
        outcome = receive.recv()
    except EOFError:  # it ended without a word: killed
        outcome = None
    process.join()
    if outcome == "done" and process.exitcode == 0:
        return load_side(path)
    if isinstance(outcome, tuple) and outcome[0] == "UsageError":
        raise UsageError(outcome[1])
    if isinstance(outcome, tuple):
        raise RuntimeError(f"the {framework} side failed in its process: {outcome[0]}: {outcome[1]}")
    code = process.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"ended with exit code {code}"
    raise RuntimeError(f"the {framework} side's process {how}" + (" (the out-of-memory killer sends signal 9)"
                                                                 if code == -9 else ""))


def _side_process(plan: Plan, framework: str, path: str, quiet: bool, send: Any) -> None:
    try:
        with patched():
            side = fingerprinted(run(load(plan, framework, quiet), plan))
        save_side(side, path)
    except Exception as exc:
        send.send((type(exc).__name__, str(exc)))
        return
    send.send("done")


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
            a = fingerprinted(ran)
            folder.save_side(a)
    _free(pipes, "torch")  # MindSpore's side runs alone
    b = folder.side("mindspore")
    if b is None and plan.folder.weights_bytes > OWN_PROCESS_BYTES:
        b = side_in_own_process(plan, "mindspore", side_file(out_dir, "mindspore"), quiet)
        folder.mark_side(b)
    elif b is None:
        with patched():
            b = fingerprinted(run(loaded("mindspore"), plan))
        folder.save_side(b)
        # the floor runs on torch alone; lockstep compiles graphs of its own, beside which the
        # side's would stay: the pipeline goes, and layers or lockstep load it again
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
        _trim_heap()  # what the stage freed, given back before the next one starts
        on_stage(comparison_so_far(), [s for s in stages if not folder.done(s)])

    report()
    if "floor" in todo:  # torch alone, widened to float64
        with patched():
            folder.save("floor", pipeline_floor(loaded("torch"), plan, a.images))
        # dropped with what its float64 run left behind (the layers load it again, in seconds)
        _free(pipes, "torch")
        report()
    if layers:  # torch's passes (the run's dtype, float64), then torch dropped, then MindSpore's passes

        def mindspore_alone() -> Loaded:
            _free(pipes, "torch")
            return loaded("mindspore")

        with patched():
            result = layers_at_step(loaded("torch"), mindspore_alone, plan, recording, a.timesteps)
        folder.save("layers", {"options": _layer_key(plan), "report": result.to_dict()})
        report()
    if lockstep:
        import time

        _free(pipes, "torch")
        start = time.perf_counter()
        with patched():
            local = run(loaded("mindspore"), plan, feed=recording).local_steps
        folder.save("lockstep", {"local_steps": local, "lockstep_seconds": time.perf_counter() - start})
        report()
    _free(pipes, "mindspore")
    _free(pipes, "torch")
    return comparison_so_far()


__all__ = ["STAGES", "STAGE_FILE", "StageFolder", "compare_in_stages", "side_file", "wanted"]
