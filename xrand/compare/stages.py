"""One comparison, one runner: the stages each framework runs, what each needs and what it leaves.

A comparison is a list of stages, always run in this order (the ones the plan asks for):

    stage             runs on    needs           leaves
    torch weights     torch      -               torch's loaded weights against the files: per
                                                 tensor its shape, dtype, sha256 and largest
                                                 |difference|; its values where not the files'
    torch             torch      -               torch's side; its recorded denoiser calls and
                                                 steps (lockstep) and the call at the layers step
    torch layers      torch      torch           every module's input and output at that call,
                                                 and torch's own float64 error per module
    floor             torch      torch           torch's float64 run against its side
    mindspore weights mindspore  torch weights   the same of MindSpore's, and the two matched
                                                 (:mod:`.weights`): a FAIL before any step
    mindspore         mindspore  -               MindSpore's side
    mindspore layers  mindspore  torch layers    the layers report
    torch ops         torch      torch           the operators inside one module call (``--ops``),
                                                 their inputs and outputs; after mindspore layers
                                                 when the module is its culprit
    mindspore ops     mindspore  torch ops       the ops report
    lockstep          mindspore  torch           the local error per step

:func:`run_stages` runs them whether both pipelines are held at once (:class:`Held`: the Python
API, matrix rows and sweep cells; what stages leave stays in memory) or one framework at a time
into a comparison folder (:class:`Loading`; the command line), where every stage's output is
written as it is made and listed, with each file's sha256, in ``manifest.json``. The folder is
what travels between two machines: torch's stages on one, MindSpore's on the other (without
torch installed), and the report from the folder anywhere. A stage already in the folder for
the same plan is not run again; a folder of another plan or other weights is refused.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import time

import numpy as np
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..checks import UsageError, differing
from ..files import json_safe, write_json
from ..frameworks import framework
from ..frameworks.base import library_class
from ..frameworks.collector import freeze_imports
from ..frameworks.interrupts import ctrl_c_ignored, end_process
from ..frameworks.threads import helper, measure as measure_load, users_thread_count_inherited
from ..patch import patched
from ..pipelines.components import model_components
from ..pipelines.flags import path_flags
from ..pipelines.folder import component_digests
from ..pipelines.lora import adapter_name
from ..pipelines.settings import Settings
from .boundary import Recording
from .floor import floor_kept, pipeline_floor
from .component_call import DENOISER, PER_STEP
from .layers import (LayerOptions, LayerReport, TorchLayers, check_module_names, check_scope, layers_module,
                     mindspore_layers_at_step, torch_layers_at_step)
from .ops import OpsReport, TorchOps, check_ops_module, mindspore_ops_at_step, torch_ops_at_step
from .plan import DEFAULT_TOLERANCE, OWN_PROCESS_BYTES, Plan, make_plan
from .records import RecordReader, RecordWriter, check_file, file_entry
from .result import Comparison, compare_sides
from .sidefile import load_side, save_side
from .sides import Everything, Loaded, Side, fingerprinted, load, run
from .weights import SideWeights, compare_weights, side_weights

MANIFEST = "manifest.json"
TORCH_WEIGHTS = "torch-weights.safetensors"  # torch's loaded values where they are not the files'
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Stage:
    name: str
    framework: str  # the framework that runs it
    needs: Tuple[str, ...]  # stages whose outputs it reads


STAGES = (Stage("torch weights", "torch", ()), Stage("torch", "torch", ()),
          Stage("torch layers", "torch", ("torch",)), Stage("floor", "torch", ("torch",)),
          Stage("mindspore weights", "mindspore", ("torch weights",)), Stage("mindspore", "mindspore", ()),
          Stage("mindspore layers", "mindspore", ("torch layers",)), Stage("torch ops", "torch", ("torch",)),
          Stage("mindspore ops", "mindspore", ("torch ops",)), Stage("lockstep", "mindspore", ("torch",)))
BY_NAME = {s.name: s for s in STAGES}


@dataclass(frozen=True)
class Asks:
    """What a comparison asks for beyond both sides: lockstep, layers (a LayerOptions), the floor,
    the check of the loaded weights."""

    lockstep: bool = False
    layers: Optional[LayerOptions] = None
    noise_floor: bool = False
    weights: bool = True

    @classmethod
    def of(cls, plan: Plan) -> "Asks":
        return cls(plan.lockstep, plan.layers, plan.noise_floor, plan.weights_check)

    def stages(self) -> List[str]:
        """The stages these asks need, in the order they run."""
        modules = self.layers is not None and self.layers.modules
        ops = self.layers is not None and self.layers.ops is not None
        asked = {"torch layers": modules, "floor": self.noise_floor, "mindspore layers": modules,
                 "torch ops": ops, "mindspore ops": ops, "lockstep": self.lockstep,
                 "torch weights": self.weights, "mindspore weights": self.weights}
        names = [s.name for s in STAGES if asked.get(s.name, True)]
        if ops and self.layers.ops:  # a module named: torch's operators recorded with torch's other stages
            names.remove("torch ops")
            names.insert(names.index("floor" if self.noise_floor else "torch") + 1, "torch ops")
        return names

    def key(self, stage: str) -> Dict[str, Any]:
        """What a stage's output depends on beyond the comparison's identity: an output made for
        another key is made again (torch's records for lockstep, the layers' step and scope)."""
        o = self.layers
        if stage == "torch":
            per_step = o is not None and o.component in (DENOISER,) + PER_STEP  # the step picks the call
            return {"lockstep": self.lockstep, "layers_step": o.step if per_step else None,
                    "layers_component": None if o is None else o.component}
        if stage == "torch layers":
            return {"step": o.step, "floors": o.threshold is None, "scope": list(o.scope), "component": o.component}
        if stage == "mindspore layers":
            return json_safe({"step": o.step, "threshold": o.threshold, "dump": list(o.dump), "dump_dir": o.dump_dir,
                              "scope": list(o.scope), "component": o.component})
        if stage in ("torch ops", "mindspore ops"):
            return json_safe({"step": o.step, "component": o.component, "module": o.ops,
                              **({"threshold": o.threshold} if stage == "mindspore ops" else {})})
        return {}

    def to_dict(self) -> Dict[str, Any]:
        return json_safe({"lockstep": self.lockstep, "noise_floor": self.noise_floor, "weights": self.weights,
                          "layers": None if self.layers is None else asdict(self.layers)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Asks":
        layers = data.get("layers")
        return cls(bool(data["lockstep"]), None if layers is None else LayerOptions(**layers).check(),
                   bool(data["noise_floor"]), bool(data.get("weights", False)))  # False: a folder from before the check


def _covers(done: Mapping[str, Any], wanted: Mapping[str, Any], stage: str) -> bool:
    """Whether an output made for key ``done`` serves key ``wanted`` (torch's records for lockstep
    serve a run without lockstep too)."""
    if stage == "torch":
        return (done["lockstep"] or not wanted["lockstep"]) and \
            (wanted["layers_step"] is None or done["layers_step"] == wanted["layers_step"]) and \
            (wanted["layers_component"] in (None, DENOISER) or
             done.get("layers_component") == wanted["layers_component"])
    return done == wanted


def planned(plan: Plan) -> Dict[str, Any]:
    """The plan as the manifest keeps it: enough to make it again on the other machine."""
    from ..models import DIGITS

    return json_safe({"settings": asdict(plan.settings), "tolerance": plan.tolerance if plan.tolerance_given else None,
                      "mindspore_mode": plan.mindspore_mode_asked,
                      "embedded_model": os.path.realpath(plan.folder.path) == os.path.realpath(DIGITS)})


def plan_from_manifest(manifest: Mapping[str, Any], frameworks: Sequence[str],
                       paths: Optional[Mapping[str, Any]] = None, devices: Optional[Mapping[str, str]] = None,
                       mindspore_mode: Optional[str] = None, default_model: Optional[str] = None) -> Plan:
    """The plan a comparison folder was made with, for ``frameworks`` on this machine. ``paths``:
    the files and folders here where they differ from the manifest's (Settings field -> value: the
    model, a single file's config folder, the input image and mask, LoRA files matched to the
    manifest's by file name, at the manifest's scale); ``default_model``: this machine's copy of
    the embedded model, which the manifest names as such. Their contents are checked as the
    comparison's identity."""
    saved = manifest["plan"]
    flags = {field: flag for flag, field in path_flags().items()}
    here = {field: value for field, value in (paths or {}).items() if value not in (None, (), [])}
    if "model" not in here and saved.get("embedded_model"):
        here["model"] = default_model
    if "loras" in here:  # each given file in place of the manifest's of the same name, at the manifest's scale
        loras = saved["settings"].get("loras") or ()
        given = {adapter_name(path): path for path, _ in here["loras"]}
        names = [adapter_name(path) for path, _ in loras]
        for name in given:
            if name not in names:
                raise UsageError(f"--lora {given[name]!r}: this comparison has no LoRA named {name!r} "
                                 f"({', '.join(names) or 'none'}); --lora here gives the path of one of its own")
        here["loras"] = tuple((given.get(adapter_name(path), path), scale) for path, scale in loras)
    for field, flag in flags.items():
        there = here.get(field, saved["settings"].get(field))
        for path in ([p for p, _ in there or ()] if field == "loras" else [there]):
            if path is not None and not os.path.exists(path):
                raise UsageError(f"the {'LoRA' if field == 'loras' else field} {path!r} that {MANIFEST} names is not "
                                 f"on this machine; give its path here with {flag}")
    settings = Settings(**{**saved["settings"], **here})
    asks = Asks.from_dict(manifest["asks"])
    return make_plan(settings, frameworks=frameworks, devices=devices, tolerance=saved["tolerance"],
                     mindspore_mode=mindspore_mode or saved["mindspore_mode"], lockstep=asks.lockstep,
                     layers=asks.layers, noise_floor=asks.noise_floor and "torch" in frameworks,
                     weights_check=asks.weights)


def read_manifest(out_dir: str) -> Optional[Dict[str, Any]]:
    """``out_dir/manifest.json``, or None where there is none; UsageError if it is unreadable."""
    import json

    path = os.path.join(out_dir, MANIFEST)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            data = json.load(f)
        if data.get("xrand_comparison") != MANIFEST_VERSION:
            raise ValueError(f"version {data.get('xrand_comparison')!r}, this xrand reads {MANIFEST_VERSION}")
        data["identity"], data["stages"], data["plan"], data["asks"]  # noqa: B018 (present)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--out {out_dir!r}: {MANIFEST} is unreadable ({exc}); use another folder") from None
    return data


# ----------------------------------------------------------------------------- where outputs go

class Store:
    """What the stages leave: in memory (``folder`` None) or in a comparison folder, whose
    ``manifest.json`` lists each finished stage with its key, its small results and its files."""

    def __init__(self, plan: Plan, asks: Asks, folder: Optional[str] = None) -> None:
        self.plan, self.asks, self.folder = plan, asks, folder
        self.tolerance = plan.tolerance
        self.held: Dict[str, Any] = {}  # stage -> what it left, in memory (a folder's: read back when asked)
        self.manifest: Dict[str, Any] = {"xrand_comparison": MANIFEST_VERSION, "identity": plan.identity(),
                                         "plan": planned(plan), "asks": asks.to_dict(), "components": {},
                                         "runtime": {}, "stages": {}}
        if folder is not None:
            written = read_manifest(folder)
            if written is not None:
                self._check_same(written)
                self.manifest.update(stages=written["stages"], components=written["components"],
                                     runtime=written.get("runtime", {}))

    @classmethod
    def as_written(cls, folder: str, manifest: Dict[str, Any], plan: Optional[Plan] = None,
                   asks: Optional[Asks] = None) -> "Store":
        """The store of ``folder`` with its ``manifest`` as written there, unchecked: one that another
        process of this comparison started and checked (``plan`` and ``asks``: this one's), or one
        read on a machine that runs neither framework, for the report (no plan)."""
        store = cls.__new__(cls)
        store.plan, store.folder, store.held, store.manifest = plan, folder, {}, manifest
        store.asks = asks if asks is not None else Asks.from_dict(manifest["asks"])
        saved = manifest["plan"]
        if plan is not None:
            store.tolerance = plan.tolerance
        elif saved["tolerance"] is not None:
            store.tolerance = saved["tolerance"]
        else:
            store.tolerance = DEFAULT_TOLERANCE[saved["settings"]["dtype"]]
        return store

    def _check_same(self, written: Mapping[str, Any]) -> None:
        here = component_digests(self.plan.folder)
        there = written["components"]
        for name in sorted(set(here) & set(there)):
            if here[name] != there[name]:
                raise UsageError(f"the weights of {name} in {self.plan.folder.path!r} are not the ones "
                                 f"{self.folder}/ was made with (sha256 {here[name][:12]}... vs {there[name][:12]}...); "
                                 f"give the same model folder")
        if written["identity"] != self.manifest["identity"]:
            diffs = [key if isinstance(x, (dict, list)) else f"{key} {x!r} vs {y!r}"
                     for key, x, y in differing(written["identity"], self.manifest["identity"], depth=1)]
            raise UsageError(f"--out {self.folder!r} holds a comparison of other settings (differing: "
                             f"{', '.join(diffs)}); use another folder or the same settings")

    # -- the manifest
    def start(self, frameworks: Sequence[str]) -> None:
        """Tie the folder to the plan before anything is written into it; the runtime each framework
        here runs in (device, MindSpore mode) is checked against stages already done elsewhere."""
        for fw in frameworks:
            runtime = {"device": self.plan.devices.get(fw)}
            if fw == "mindspore":
                runtime["mode"] = self.plan.mindspore_mode
            before = self.manifest["runtime"].get(fw)
            done = [s.name for s in STAGES if s.framework == fw and s.name in self.manifest["stages"]]
            if before is not None and before != runtime and done:
                raise UsageError(f"--out {self.folder!r}: {fw}'s stages ({', '.join(done)}) ran with {before}, this run "
                                 f"asks {runtime}; use another folder or the same --device and --mindspore-mode")
            self.manifest["runtime"][fw] = runtime
        if self.folder is None:
            return
        if not self.manifest["components"]:
            self.manifest["components"] = component_digests(self.plan.folder)
        os.makedirs(self.folder, exist_ok=True)
        self._write()

    def _write(self) -> None:
        if self.folder is not None:
            self.manifest["asks"] = self.asks.to_dict()
            write_json(os.path.join(self.folder, MANIFEST), self.manifest)

    def reread(self, stages: Sequence[str]) -> None:
        """The folder's manifest read back after another process ran ``stages`` into it."""
        written = read_manifest(self.folder)
        if written is not None:
            self.manifest["stages"] = written["stages"]
        for stage in stages:
            self.held.pop(stage, None)

    def done(self, stage: str) -> bool:
        entry = self.manifest["stages"].get(stage)
        return entry is not None and _covers(entry["key"], self.asks.key(stage), stage)

    def finish(self, stage: str, result: Any = None, files: Optional[Dict[str, Any]] = None,
               held: Any = None, seconds: float = 0.0) -> None:
        """A stage is done: its small ``result`` (JSON), its ``files`` ({name: sha256 and size}) and,
        in memory, what it ``held``. The stages that read an output made anew are to run again."""
        for s in STAGES:
            if stage in s.needs:
                self.manifest["stages"].pop(s.name, None)
        if stage == "mindspore layers" and self.asks.layers.ops == "":  # the culprit torch's operators are of
            for s in ("torch ops", "mindspore ops"):
                self.manifest["stages"].pop(s, None)
        self.manifest["stages"][stage] = json_safe({"key": self.asks.key(stage), "result": result,
                                                    "files": files or {}, "seconds": seconds})
        if held is not None:
            self.held[stage] = held
        self._write()

    def result(self, stage: str) -> Any:
        return self.manifest["stages"][stage]["result"]

    def files(self, stage: str) -> Dict[str, Any]:
        return self.manifest["stages"][stage]["files"]

    def bytes(self) -> Dict[str, int]:
        """The folder's size per finished stage."""
        return {name: sum(f["bytes"] for f in entry["files"].values())
                for name, entry in self.manifest["stages"].items()}

    # -- outputs
    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def side_path(self, framework: str) -> str:
        return os.path.join(self.folder, f"{framework}.safetensors")

    def save_side(self, side: Side) -> Dict[str, Any]:
        if self.folder is None:
            return {}
        save_side(side, self.side_path(side.framework))
        return {f"{side.framework}.safetensors": file_entry(self.side_path(side.framework))}

    def side(self, framework: str) -> Optional[Side]:
        if not self.done(framework):
            return None
        if framework in self.held:
            return self.held[framework]
        name = f"{framework}.safetensors"
        check_file(self.folder, name, self.files(framework)[name], framework)
        self.held[framework] = load_side(self.side_path(framework))
        return self.held[framework]

    def writer(self, name: str) -> RecordWriter:
        return RecordWriter(name, self.folder)

    def recording(self) -> Recording:
        """Torch's recorded denoiser calls and steps."""
        side = self.held.get("torch")
        if side is not None and side.recording is not None:
            return side.recording
        return Recording(reader=RecordReader.open(self.folder, "torch-run", _record_files(self.files("torch"), "torch-run"),
                                                  "torch"))

    def torch_layers(self) -> TorchLayers:
        if "torch layers" in self.held:
            return self.held["torch layers"]
        files = self.files("torch layers")
        return TorchLayers(RecordReader.open(self.folder, "layers", files, "torch layers"),
                           self.result("torch layers"), files)


    def torch_ops(self) -> TorchOps:
        if "torch ops" in self.held:
            return self.held["torch ops"]
        files = self.files("torch ops")
        return TorchOps(RecordReader.open(self.folder, "ops", files, "torch ops") if files else None,
                        self.result("torch ops"), files)


def framework_of(stage: str) -> str:
    return BY_NAME[stage].framework


def _record_files(files: Mapping[str, Any], record: str) -> Dict[str, Any]:
    return {name: entry for name, entry in files.items() if os.path.basename(name).startswith(record + ".")
            or os.path.basename(name).startswith(record + "-")}


# ----------------------------------------------------------------------------- pipelines

class Held:
    """Both pipelines loaded once and kept (a matrix, a sweep): stages use them as they are."""

    def __init__(self, torch: Loaded, mindspore: Loaded) -> None:
        self.pipes = {"torch": torch, "mindspore": mindspore}

    def get(self, framework: str) -> Loaded:
        return self.pipes[framework]

    def release(self, framework: str) -> None:
        pass


class Loading:
    """One framework's pipeline at a time, loaded when a stage needs it and dropped before the
    other framework's loads (a real-sized model: what one framework holds is most of the memory)."""

    def __init__(self, plan: Plan, quiet: bool = True) -> None:
        self.plan, self.quiet = plan, quiet
        self.pipes: Dict[str, Loaded] = {}

    def get(self, framework: str) -> Loaded:
        for other in list(self.pipes):
            if other != framework:
                self.release(other)
        if framework not in self.pipes:
            self.pipes[framework] = load(self.plan, framework, self.quiet)
        return self.pipes[framework]

    def release(self, framework: str) -> None:
        """Drop a framework's pipeline and give its memory back."""
        loaded = self.pipes.pop(framework, None)
        if loaded is None:
            return
        fw = loaded.fw
        fw.unload(loaded.pipe)
        del loaded
        gc.collect()
        fw.unloaded()
        trim_heap()


def _glibc() -> Any:
    """The C library through ctypes where it is glibc, else None."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc keeps freed blocks for reuse)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def large_blocks_unmapped_when_freed() -> None:
    """From now on in this process glibc's malloc serves each block of 128 KiB or more from a mapping
    of its own, unmapped when it is freed. By default glibc raises that threshold (up to 32 MiB) each
    time such a block is freed, and keeps the larger blocks freed after it in its heap, where memory
    MindSpore's CPU kernels free stays held while a run goes on (xrand.frameworks.mindspore_graph,
    "Division"). For the processes of a comparison's own stages, which end after them."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)


# ----------------------------------------------------------------------------- the stages

def _weights(framework: str, plan: Plan, pipes: Any, against: Optional[Mapping[str, Any]] = None) -> SideWeights:
    """A side's loaded weights against the files (:func:`.weights.side_weights`), once per loaded pipeline."""
    loaded = pipes.get(framework)
    if loaded.weights is None:
        loaded.weights = side_weights(loaded.fw, loaded.pipe, plan.folder, model_components(plan.folder), against)
    return loaded.weights


def _torch_weights(plan: Plan, store: Store, pipes: Any) -> None:
    side = _weights("torch", plan, pipes)
    files = {}
    if store.folder is not None and side.kept:  # torch's values where they are not the files' (LoRA fused)
        from safetensors.numpy import save_file

        save_file({k: np.ascontiguousarray(v) for k, v in side.kept.items()}, store.path(TORCH_WEIGHTS))
        files[TORCH_WEIGHTS] = file_entry(store.path(TORCH_WEIGHTS))
    store.finish("torch weights", side.to_dict(), files, held=side, seconds=side.seconds)


def _mindspore_weights(plan: Plan, store: Store, pipes: Any) -> None:
    torch_side = store.result("torch weights")
    kept = store.held["torch weights"].kept if "torch weights" in store.held else {}
    if torch_side["kept"] and not kept:
        from safetensors.numpy import load_file

        check_file(store.folder, TORCH_WEIGHTS, store.files("torch weights")[TORCH_WEIGHTS], "torch weights")
        kept = load_file(store.path(TORCH_WEIGHTS))
    summary = _weights("mindspore", plan, pipes, kept).to_dict()
    store.finish("mindspore weights", {"side": summary, "comparison": compare_weights(torch_side, summary)},
                 seconds=summary["seconds"])


def mindspore_in_own_process(store: Store) -> bool:
    """Whether MindSpore's stages of this comparison, run with a :class:`Loading`, run in a process
    of their own (OWN_PROCESS_BYTES): then this process need not import MindSpore."""
    return store.folder is not None and store.plan.folder.weights_bytes > OWN_PROCESS_BYTES


def _own_process(store: Store, pipes: Any) -> bool:
    return isinstance(pipes, Loading) and mindspore_in_own_process(store)


def _torch(plan: Plan, store: Store, pipes: Any) -> None:
    asks = store.asks
    component = asks.layers.component if asks.layers is not None else None
    record_calls = Everything() if asks.lockstep else set() if component not in (None, DENOISER) else \
        {asks.layers.step} if asks.layers is not None else None
    writer = store.writer("torch-run") if record_calls is not None else None
    start = time.perf_counter()
    side = fingerprinted(run(pipes.get("torch"), plan, record_calls=record_calls, record_steps=asks.lockstep,
                             record=writer, record_component=component,
                             component_step=asks.layers.step if asks.layers is not None else 0))
    files = store.save_side(side)
    files.update(writer.files if writer is not None else {})
    store.finish("torch", files=files, held=side, seconds=time.perf_counter() - start)


def _torch_layers(plan: Plan, store: Store, pipes: Any) -> None:
    start = time.perf_counter()
    loaded = pipes.get("torch")
    with loaded.fw.threads(measure_load()):  # its floors' reductions split as the sides' do
        result = torch_layers_at_step(loaded, plan, store.recording(), store.writer("layers"))
    store.finish("torch layers", result.meta, result.files, held=result, seconds=time.perf_counter() - start)


def _floor(plan: Plan, store: Store, pipes: Any) -> None:
    start = time.perf_counter()
    floor = pipeline_floor(pipes.get("torch"), plan, store.side("torch").images)
    store.finish("floor", floor, seconds=time.perf_counter() - start)


def _mindspore(plan: Plan, store: Store, pipes: Any) -> None:
    start = time.perf_counter()
    side = fingerprinted(run(pipes.get("mindspore"), plan))
    store.finish("mindspore", files=store.save_side(side), held=side, seconds=time.perf_counter() - start)


def _mindspore_layers(plan: Plan, store: Store, pipes: Any) -> None:
    start = time.perf_counter()
    torch_part = store.torch_layers()
    report = mindspore_layers_at_step(pipes.get("mindspore"), plan, torch_part, store.side("torch").timesteps)
    report.seconds += store.manifest["stages"]["torch layers"]["seconds"]
    store.finish("mindspore layers", report.to_dict(), held=report, seconds=time.perf_counter() - start)


def _torch_ops(plan: Plan, store: Store, pipes: Any) -> None:
    start = time.perf_counter()
    module = plan.layers.ops
    if not module:  # --layers --ops: its culprit
        module = store.result("mindspore layers")["culprit"]
    result = torch_ops_at_step(pipes.get("torch"), plan, store.recording(), module, store.writer("ops"))
    store.finish("torch ops", result.meta, result.files, held=result, seconds=time.perf_counter() - start)


def _mindspore_ops(plan: Plan, store: Store, pipes: Any) -> None:
    start = time.perf_counter()
    report = mindspore_ops_at_step(pipes.get("mindspore"), plan, store.torch_ops())
    report.seconds += store.manifest["stages"]["torch ops"]["seconds"]
    store.finish("mindspore ops", report.to_dict(), held=report, seconds=time.perf_counter() - start)


def _lockstep(plan: Plan, store: Store, pipes: Any) -> None:
    start = time.perf_counter()
    local = run(pipes.get("mindspore"), plan, feed=store.recording()).local_steps
    seconds = time.perf_counter() - start
    store.finish("lockstep", {"local_steps": local, "lockstep_seconds": seconds}, seconds=seconds)


RUNS: Dict[str, Callable[[Plan, Store, Any], None]] = {
    "torch weights": _torch_weights, "mindspore weights": _mindspore_weights, "torch": _torch,
    "torch layers": _torch_layers, "floor": _floor, "mindspore": _mindspore,
    "mindspore layers": _mindspore_layers, "torch ops": _torch_ops, "mindspore ops": _mindspore_ops,
    "lockstep": _lockstep}


def stages_in_own_process(store: Store, names: Sequence[str], quiet: bool = True,
                          started: Optional["OwnProcess"] = None) -> None:
    """Run MindSpore's stages ``names`` of a comparison folder in a new process (``started``: one
    started ahead for them, :func:`stages_process`), which loads its pipeline once for all of them,
    writes what they leave into the folder and ends (giving back everything MindSpore held);
    ``store`` then reads them back. Its errors come back as they were raised (a ``UsageError``
    stays one); stages it finished before one stay in the folder."""
    try:
        (started or stages_process(store, names, quiet)).run()
    finally:
        store.reread(names)


def stages_process(store: Store, names: Sequence[str], quiet: bool = True, ahead: bool = False) -> "OwnProcess":
    """The process of :func:`stages_in_own_process`, started (``ahead``: importing the pipeline's
    modules at once, then waiting)."""
    return OwnProcess(_stages_work, (store.plan, store.asks, store.folder, list(names), quiet),
                      f"MindSpore's {', '.join(names)}", libraries_of(names),
                      functools.partial(_import_pipeline, store.plan) if ahead else None)


class OwnProcess:
    """``work(*args)`` in a new process that ends after it, with ``libraries`` patched there; what
    :meth:`run` returns is what it returned (small: it is pickled). Started ``ahead`` (a callable:
    while this process runs torch's stages), the new process imports and patches its libraries,
    calls ``ahead()`` and waits for :meth:`run`. Its CPU time is this command's own
    (:func:`..frameworks.threads.helper`), not load that torch's side would leave a core to. Ctrl-C
    is this process's to handle: the new one ignores it, and is ended by :meth:`stop` (also where
    :meth:`run` is cut short)."""

    def __init__(self, work: Callable[..., Any], args: Tuple[Any, ...], what: str, libraries: Sequence[str],
                 ahead: Optional[Callable[[], None]] = None) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.what = what
        self._receive, send = context.Pipe(duplex=False)
        wait, self._go = context.Pipe(duplex=False) if ahead is not None else (None, None)
        self.process = context.Process(target=_child, args=(work, args, send, list(libraries), ahead, wait))
        with users_thread_count_inherited(), ctrl_c_ignored():
            self.process.start()
        for end in (send, wait):
            if end is not None:
                end.close()
        self._running = False
        self._helping = contextlib.ExitStack()
        self._helping.enter_context(helper(self.process.pid))

    def run(self) -> Any:
        self._running = True
        try:
            if self._go is not None:
                try:
                    self._go.send(True)
                except OSError:  # it ended already: its outcome says how
                    pass
            try:
                outcome = self._receive.recv()
            except EOFError:  # it ended without a word: killed
                outcome = None
            self.process.join()
        finally:
            self.stop()
        if isinstance(outcome, tuple) and outcome[0] == "done" and self.process.exitcode == 0:
            return outcome[1]
        if isinstance(outcome, tuple) and outcome[0] == "UsageError":
            raise UsageError(outcome[1])
        if isinstance(outcome, tuple):
            raise RuntimeError(f"{self.what} failed in its process: {outcome[0]}: {outcome[1]}")
        code = self.process.exitcode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"ended with exit code {code}"
        raise RuntimeError(f"{self.what}'s process {how}" +
                           (" (the out-of-memory killer sends signal 9)" if code == -9 else ""))

    def stop(self) -> None:
        """End the process where it still runs (unrun, or cut short here) and wait for it. Running
        its work, it is given :data:`STOP_SECONDS` to end through its exit handlers, which take back
        what it holds outside itself (multiprocessing's semaphores: killed inside MindSpore's stages,
        it left one that multiprocessing warned of at the command's end); unrun, it is killed."""
        if self.process.exitcode is None and self._running:
            self.process.terminate()
            self.process.join(STOP_SECONDS)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
        self._helping.close()


STOP_SECONDS = 5.0


def _child(work: Callable[..., Any], args: Tuple[Any, ...], send: Any, libraries: Sequence[str],
           ahead: Optional[Callable[[], None]], wait: Optional[Any]) -> None:
    """The new process of an :class:`OwnProcess`."""
    large_blocks_unmapped_when_freed()
    freeze_imports()
    if "diffusers" not in libraries:  # this process runs MindSpore's side only
        from ..frameworks.mindspore import import_transformers_without_torch

        import_transformers_without_torch()
    try:
        with patched(libraries):
            if ahead is not None:
                ahead()
                try:
                    wait.recv()
                except EOFError:  # not to run: the command ended, or stopped it
                    end_process(0)
            signal.signal(signal.SIGTERM, lambda signum, frame: end_process(128 + signum))  # OwnProcess.stop
            outcome = ("done", work(*args))
    except Exception as exc:
        outcome = (type(exc).__name__, str(exc))
    send.send(outcome)
    end_process(0)  # now, not after MindSpore's teardown, which the comparison would wait for


def _stages_work(plan: Plan, asks: Asks, folder: str, names: Sequence[str], quiet: bool) -> None:
    store, pipes = Store.as_written(folder, read_manifest(folder), plan, asks), Loading(plan, quiet)
    for name in names:
        RUNS[name](plan, store, pipes)
        trim_heap()  # what the stage freed, given back before the next one starts
    pipes.release("mindspore")


def _import_pipeline(plan: Plan) -> None:
    """MindSpore's pipeline class of ``plan`` imported (a lazy attribute of mindone.diffusers,
    whose first use imports the pipeline's modules), ahead of its load. Only ahead: where that
    fails, the load says why."""
    try:
        library_class(framework("mindspore").import_library(), plan.pipeline)
    except Exception:
        pass


# ----------------------------------------------------------------------------- the runner

@dataclass
class Outcome:
    """What :func:`run_stages` did: the comparison so far (None until both sides exist), the
    stages done and still missing, and the folder's size per stage."""

    comparison: Optional[Comparison]
    done: List[str]
    missing: List[str]
    bytes: Dict[str, int]


def comparison_of(store: Store) -> Optional[Comparison]:
    """The comparison the store's finished stages make (None until both sides exist)."""
    a, b = store.side("torch"), store.side("mindspore")
    if a is None or b is None:
        return None
    stages = store.asks.stages()
    lockstep = store.result("lockstep") if store.done("lockstep") else {}
    c = compare_sides(a, b, store.tolerance, lockstep.get("local_steps"))
    if "lockstep_seconds" in lockstep:
        c.environments["b"] = {**c.environments["b"], "lockstep_seconds": lockstep["lockstep_seconds"]}
    if store.asks.layers is not None and store.done("mindspore layers"):
        held = store.held.get("mindspore layers")
        c.layers = held if held is not None else LayerReport.from_dict(store.result("mindspore layers"))
    if store.asks.layers is not None and store.done("mindspore ops"):
        held = store.held.get("mindspore ops")
        c.ops = held if held is not None else OpsReport.from_dict(store.result("mindspore ops"))
    if store.asks.weights and store.done("mindspore weights"):
        c.weights = store.result("mindspore weights")["comparison"]
    if store.asks.noise_floor and store.done("floor"):
        c.noise_floor = store.result("floor")
    if store.folder is not None:
        c.stages = {"done": [s for s in stages if store.done(s)], "missing": [s for s in stages if not store.done(s)],
                    "bytes": store.bytes()}
    return c


def run_stages(store: Store, pipes: Any, frameworks: Sequence[str] = ("torch", "mindspore"),
               on_stage: Callable[[Outcome], None] = lambda outcome: None,
               say: Callable[[str], None] = lambda text: None) -> Outcome:
    """Run the missing stages of ``store``'s comparison that ``frameworks`` run here, in order,
    calling ``on_stage`` after each; stages of other frameworks are left missing.

    UsageError, before anything runs, when a stage to run here needs the output of a stage that
    is missing and runs elsewhere (the MindSpore stages before torch's records exist)."""
    plan, asks = store.plan, store.asks
    wanted = asks.stages()
    todo = [s for s in wanted if not store.done(s) and BY_NAME[s].framework in frameworks]
    done_before = [s for s in wanted if store.done(s)]
    for name in todo:
        for need in BY_NAME[name].needs:
            if need in wanted and not store.done(need) and need not in todo:
                raise UsageError(f"the stage '{name}' needs torch's stage '{need}', which is not in "
                                 f"{store.folder or 'this comparison'}/; run it first on a machine with torch: "
                                 f"xrand compare --only {BY_NAME[need].framework} --out {store.folder or 'DIR'} ...")
    if store.folder is not None:  # what the stages to run read, checked before anything runs
        for need in sorted({n for s in todo for n in BY_NAME[s].needs if store.done(n)}):
            for name, entry in store.files(need).items():
                check_file(store.folder, name, entry, need)
    if done_before and store.folder is not None:
        say(f"xrand: {store.folder}/ holds this comparison's {', '.join(done_before)}; "
            f"running {', '.join(todo) or 'nothing more here'}")
    if asks.layers is not None and (asks.layers.dump or asks.layers.scope) and "torch layers" in todo:
        loaded = pipes.get("torch")
        denoiser = layers_module(loaded.fw, loaded.pipe, plan)  # the names checked before anything is written
        check_module_names(denoiser, asks.layers.dump)
        check_scope((name for name, _ in denoiser.named_modules()), asks.layers.scope, type(denoiser).__name__)
    if asks.layers is not None and asks.layers.ops == "" and "torch ops" in todo and \
            not (store.done("mindspore layers") or "mindspore layers" in todo):
        raise UsageError("--layers --ops looks into the culprit MindSpore's layers stage finds, which runs on the "
                         "other machine; on two machines name the module: --ops MODULE")
    if asks.layers is not None and asks.layers.ops and "torch ops" in todo:
        loaded = pipes.get("torch")
        module = layers_module(loaded.fw, loaded.pipe, plan)
        check_ops_module([name for name, _ in loaded.fw.submodules(module)], asks.layers.ops, type(module).__name__)
    if todo:
        store.start(frameworks)

    def outcome() -> Outcome:
        return Outcome(comparison_of(store), [s for s in wanted if store.done(s)],
                       [s for s in wanted if not store.done(s)], store.bytes())

    own, groups = _own_process(store, pipes), _groups(todo)
    ahead = stages_process(store, groups[1], pipes.quiet, ahead=True) if own and _starts_ahead(store, groups) \
        else None
    try:
        # once for every stage (patching scans every loaded module), and only the libraries that
        # run in this process: patching imports them (diffusers imports torch)
        with patched(libraries_of([s for s in todo if not (own and framework_of(s) == "mindspore")])):
            for group in groups:
                runs_it = framework_of(group[0])
                if runs_it == "mindspore" and own:
                    pipes.release("torch")
                    say(f"xrand: running {', '.join(group)} (in a process of their own)")
                    started, ahead = ahead, None
                    stages_in_own_process(store, group, pipes.quiet, started)
                    on_stage(outcome())
                    continue
                for name in group:
                    if store.folder is not None:
                        say(f"xrand: running {name}")
                    RUNS[name](plan, store, pipes)
                    if name == group[-1]:
                        pipes.release(runs_it)
                    trim_heap()  # what the stage freed, given back before the next one starts
                    on_stage(outcome())
    finally:
        if ahead is not None:  # a torch stage failed or was cut short
            ahead.stop()
    for fw in frameworks:
        pipes.release(fw)
    return outcome()


AHEAD_OF = {"torch weights", "torch", "floor"}


def _starts_ahead(store: Store, groups: Sequence[Sequence[str]]) -> bool:
    """Whether MindSpore's own process starts with the torch stages ``groups[0]``, importing its
    libraries beside them (4.5 s of the SD-1.5-sized compare's), for its stages ``groups[1]``: where
    torch's stages are among :data:`AHEAD_OF`, without lockstep's records, and the floor kept or not
    asked. Beside the float64 floor, its 0.6 GB took the compare over 1.5x the weights."""
    if len(groups) < 2 or framework_of(groups[0][0]) != "torch" or store.asks.lockstep:
        return False
    return set(groups[0]) <= AHEAD_OF and ("floor" not in groups[0] or floor_kept(store.plan))


def libraries_of(stages: Sequence[str]) -> List[str]:
    """The diffusion libraries the frameworks of ``stages`` run (what to patch for them)."""
    return sorted({framework(framework_of(name)).library for name in stages})


def _groups(stages: Sequence[str]) -> List[List[str]]:
    """``stages`` in runs of one framework's, in order."""
    groups: List[List[str]] = []
    for name in stages:
        if groups and framework_of(groups[-1][0]) == framework_of(name):
            groups[-1].append(name)
        else:
            groups.append([name])
    return groups


__all__ = ["Asks", "Held", "Loading", "MANIFEST", "OWN_PROCESS_BYTES", "Outcome", "STAGES", "Stage", "Store",
           "comparison_of", "mindspore_in_own_process", "plan_from_manifest", "read_manifest", "run_stages",
           "stages_in_own_process"]
