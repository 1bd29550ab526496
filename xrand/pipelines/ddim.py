"""One side of the comparison: the library's own DDIMPipeline on one framework, recorded.

torch runs diffusers' ``DDIMPipeline``; MindSpore runs mindone.diffusers' ``DDIMPipeline``
(with the CPU fallbacks of :mod:`xrand.pipelines.mindspore_cpu` when MindSpore is on a CPU).
Both get noise from an ``xrand.Generator`` through :func:`xrand.patched`, and every
``scheduler.step`` is recorded, so sides can be compared step by step.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np

from ..generator import Generator
from ..patch import patched
from .quiet import silenced

FRAMEWORKS = ("torch", "mindspore")
DTYPES = ("float32", "float16")
MINDSPORE_MODES = ("pynative", "graph")


def check_mindspore_mode(mode: str) -> str:
    if mode not in MINDSPORE_MODES:
        raise ValueError(f"unknown MindSpore mode {mode!r}; accepted: {', '.join(MINDSPORE_MODES)}")
    return mode


@contextlib.contextmanager
def mindspore_mode(mode: str) -> Iterator[None]:
    """MindSpore's execution mode inside the block, the previous one after it.

    ``"graph"`` compiles each Cell (the UNet) on its first call: a few seconds once, then a
    step costs a fraction of PyNative's on a CPU (benchmarks/RESULTS.md, figure 5).
    """
    import mindspore as ms

    wanted = {"pynative": ms.PYNATIVE_MODE, "graph": ms.GRAPH_MODE}[check_mindspore_mode(mode)]
    previous = ms.get_context("mode")
    if wanted != previous:
        ms.set_context(mode=wanted)
    try:
        yield
    finally:
        if ms.get_context("mode") != previous:
            ms.set_context(mode=previous)


@dataclass
class Settings:
    """Everything that must agree for two sides to be comparable."""

    model: str
    steps: int = 50
    seed: int = 0
    batch_size: int = 1
    eta: float = 0.0
    stream: str = "torch-cpu"
    dtype: str = "float32"

    def check(self) -> "Settings":
        from ..checks import check_seed
        from ..streams import stream_factory

        for name in ("steps", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.steps > 1000:
            raise ValueError(f"steps must be at most 1000 (the training schedule's length), got {self.steps}")
        self.seed = check_seed(self.seed)
        if not isinstance(self.eta, (int, float)) or isinstance(self.eta, bool) or not 0.0 <= self.eta <= 1.0:
            raise ValueError(f"eta must be a number in [0, 1], got {self.eta!r}")
        self.eta = float(self.eta)
        stream_factory(self.stream)
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} for the pipelines; accepted: {', '.join(DTYPES)}")
        return self


@dataclass
class Side:
    """What one framework produced: images in [0, 1] (NHWC), the noise and every step."""

    framework: str
    settings: Settings
    images: np.ndarray
    initial_noise: np.ndarray
    states: np.ndarray  # (steps, batch, C, H, W): the sample after each scheduler step
    timesteps: List[int]
    seconds: float
    model_fingerprint: str
    environment: Dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"


def model_fingerprint(model: str) -> str:
    """sha256 of a local model's UNet weights (so sides from two machines can be matched)."""
    path = os.path.join(model, "unet", "diffusion_pytorch_model.safetensors")
    if not os.path.isfile(path):
        return f"hub:{model}"
    stat = os.stat(path)
    return _sha256(os.path.realpath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """Hashed once per file version: both sides of a comparison read the same weights."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def check_model(model: str) -> str:
    """A local folder must hold a diffusers model; anything else is taken for a hub id."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a folder or a hub id, got {model!r}")
    looks_local = os.path.isabs(model) or model.startswith(".") or os.path.exists(model) or model.count("/") > 1
    if looks_local:
        if not os.path.isdir(model):
            raise FileNotFoundError(f"model folder {model!r} does not exist")
        for part in ("unet/config.json", "scheduler/scheduler_config.json"):
            if not os.path.isfile(os.path.join(model, part)):
                raise FileNotFoundError(
                    f"model folder {model!r} has no {part}; expected a diffusers folder written by "
                    "save_pretrained (unet/ and scheduler/)"
                )
        if not os.path.isfile(os.path.join(model, "unet", "diffusion_pytorch_model.safetensors")):
            raise FileNotFoundError(
                f"model folder {model!r} has no unet/diffusion_pytorch_model.safetensors "
                "(mindone reads safetensors weights only)"
            )
    return model


class _StepRecorder:
    """Wraps ``scheduler.step`` on one pipeline instance to keep every input and output."""

    def __init__(self, scheduler: Any, to_numpy: Callable[[Any], np.ndarray]) -> None:
        self.first_input: Optional[np.ndarray] = None
        self.outputs: List[np.ndarray] = []
        self.timesteps: List[int] = []
        original = scheduler.step

        def step(model_output, timestep, sample, *args, **kwargs):
            if self.first_input is None:
                self.first_input = to_numpy(sample)
            out = original(model_output, timestep, sample, *args, **kwargs)
            prev = out.prev_sample if hasattr(out, "prev_sample") else out[0]
            self.outputs.append(to_numpy(prev))
            self.timesteps.append(int(timestep))
            return out

        scheduler.step = step


def load_torch_pipeline(model: str, dtype: str = "float32", device: str = "cpu", quiet: bool = False):
    check_model(model)
    with silenced():
        import torch
        from diffusers import DDIMPipeline

    with silenced(), _load_errors(model, "diffusers"):
        pipe = DDIMPipeline.from_pretrained(model, torch_dtype=getattr(torch, dtype))
    pipe.to(device)
    pipe.set_progress_bar_config(disable=quiet, desc="torch")
    return pipe


def load_mindspore_pipeline(model: str, dtype: str = "float32", quiet: bool = False):
    check_model(model)
    with silenced():
        import mindspore as ms
        from mindone.diffusers import DDIMPipeline

    from . import mindspore_cpu

    mindspore_cpu.install()  # no-op unless MindSpore runs on a CPU
    # Synchronous launch: about 10x faster per step on a CPU (see benchmarks/RESULTS.md, figure 5);
    # it can be set once per process, so a process that already chose otherwise keeps its choice.
    mindspore_cpu.tune_cpu_runtime()
    with silenced(), _load_errors(model, "mindone.diffusers"):
        pipe = DDIMPipeline.from_pretrained(model, mindspore_dtype=getattr(ms, dtype))
    pipe.set_progress_bar_config(disable=quiet, desc="mindspore")
    return pipe


@contextlib.contextmanager
def _load_errors(model: str, library: str) -> Iterator[None]:
    """A model that fails to load (corrupt weights, bad config, no hub) is a user error."""
    try:
        yield
    except (OSError, ValueError, KeyError, EnvironmentError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{library} could not load the model {model!r}: {first_line}") from exc


def torch_to_numpy(tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def mindspore_to_numpy(tensor) -> np.ndarray:
    return tensor.float().asnumpy()


def run_pipeline(framework: str, pipe: Any, settings: Settings, device: str = "cpu",
                 mode: str = "pynative") -> Side:
    """Run an already loaded pipeline from the settings' seed and record it.

    ``mode`` is MindSpore's execution mode (``"pynative"`` or ``"graph"``); torch ignores it.
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; accepted: {', '.join(FRAMEWORKS)}")
    check_mindspore_mode(mode)
    to_numpy = torch_to_numpy if framework == "torch" else mindspore_to_numpy
    recorder = _StepRecorder(pipe.scheduler, to_numpy)
    generator = Generator(settings.seed, stream=settings.stream)
    kwargs = dict(batch_size=settings.batch_size, generator=generator, eta=settings.eta,
                  num_inference_steps=settings.steps, output_type="np")
    start = time.perf_counter()
    try:
        with patched():
            if framework == "torch":
                images = pipe(**kwargs).images
            else:
                with mindspore_mode(mode):
                    images = pipe(**kwargs, return_dict=False)[0]
    finally:
        del pipe.scheduler.step  # drop the instance wrapper, back to the class method
    seconds = time.perf_counter() - start
    return Side(
        framework=framework,
        settings=settings,
        images=np.asarray(images, dtype=np.float32),
        initial_noise=recorder.first_input,
        states=np.stack(recorder.outputs),
        timesteps=recorder.timesteps,
        seconds=seconds,
        model_fingerprint=model_fingerprint(settings.model),
        device=device,
    )


def run_side(framework: str, settings: Settings, device: Optional[str] = None, quiet: bool = False,
             mode: str = "pynative") -> Side:
    """Load the model on ``framework`` and run it (the whole of ``xrand run``)."""
    from .environment import fingerprint

    settings.check()
    check_mindspore_mode(mode)
    if framework == "torch":
        device = device or "cpu"
        pipe = load_torch_pipeline(settings.model, settings.dtype, device, quiet)
    elif framework == "mindspore":
        device = _mindspore_device(device)
        pipe = load_mindspore_pipeline(settings.model, settings.dtype, quiet)
    else:
        raise ValueError(f"unknown framework {framework!r}; accepted: {', '.join(FRAMEWORKS)}")
    side = run_pipeline(framework, pipe, settings, device, mode)
    side.environment = fingerprint([framework])
    if framework == "mindspore":
        side.environment["mindspore_mode"] = mode
    return side


def _mindspore_device(device: Optional[str]) -> str:
    import mindspore as ms

    if device is not None:
        kind = device.partition(":")[0]
        if kind.lower() not in ("cpu", "gpu", "ascend"):
            raise ValueError(f"unknown MindSpore device {device!r}; accepted: CPU, GPU, Ascend")
        names = {"cpu": "CPU", "gpu": "GPU", "ascend": "Ascend"}
        ms.set_context(device_target=names[kind.lower()])
    return ms.get_context("device_target")
