"""A recipe: everything that differs from one pipeline class to the next, and nothing else.

Running a side, recording it, lockstep, layers and the noise floor are written once, outside
recipes; they reach the pipeline's denoiser and scheduler at the boundary a recipe names. A
recipe says:

- ``pipeline``: the class name, the same in diffusers and mindone.diffusers;
- ``denoiser``: the component that predicts (``"unet"``, ``"transformer"``) and the classes it may
  be; ``components`` the folder must hold, ``optional_components`` it may hold;
- ``scheduler_kind``: which schedulers fit (:data:`.schedulers.NOISE` or :data:`.schedulers.FLOW`);
- ``inputs``: the :class:`.settings.Settings` inputs the pipeline takes, ``required_inputs``
  those it cannot run without, and ``size_multiple_of`` for height and width;
- ``call_arguments``: the keyword arguments of the library pipeline's call: the inputs given
  (under the call's names, ``call_names``; files as pictures), the batch (``batch_argument``),
  the steps, the generator, ``eta`` where the call takes it (``takes_eta``);
- ``timestep_arguments``: what the library pipeline passes to the scheduler's ``set_timesteps``
  (a scheduler that does not take them cannot drive it);
- ``pynative_only``: why MindSpore cannot compile the pipeline's denoiser on a CPU (None: it can),
  so that a side runs it in PyNative mode instead, as planned;
- ``native_schedulers``: schedulers the library's own pipeline runs as given (None: any). With
  another scheduler the side runs the generic loop (:mod:`..loop`) through ``latent_shape``,
  ``conditioning``, ``denoiser_call`` and ``decode``, because both libraries' ``DDIMPipeline``
  turn any scheduler into DDIM and ``DDPMPipeline`` skips ``init_noise_sigma`` and
  ``scale_model_input``; ``library_dtypes``: the dtypes the library pipeline can run in (in
  others, the generic loop too);
- ``load``: how a side loads it (by default the library's class ``from_pretrained``, or
  ``from_single_file`` for a single file of weights where ``check_single_file`` takes its layout).
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...checks import UsageError
from .. import schedulers
from ..inputs import read_input


def flag(name: str) -> str:
    """The command-line flag of a settings field (``negative_prompt`` -> ``--negative-prompt``)."""
    return "--" + name.replace("_", "-")


class Recipe:
    """An unconditional ``UNet2DModel`` pipeline's recipe; subclasses override what differs."""

    pipeline: str = ""
    denoiser: str = "unet"
    denoiser_classes: Tuple[str, ...] = ("UNet2DModel",)
    components: Tuple[str, ...] = ("unet", "scheduler")
    optional_components: Tuple[str, ...] = ()
    scheduler_kind: str = schedulers.NOISE
    native_schedulers: Optional[Tuple[str, ...]] = ()
    inputs: Tuple[str, ...] = ()
    required_inputs: Tuple[str, ...] = ()
    size_multiple: int = 8
    load_arguments: Mapping[str, Any] = {}
    batch_argument: str = "batch_size"
    #: Settings inputs whose keyword in the pipeline's call has another name.
    call_names: Mapping[str, str] = {"mask": "mask_image", "frames": "num_frames"}
    takes_eta: bool = False
    pynative_only: Optional[str] = None
    #: The dtypes the library pipeline can run in (None: any); in others a side runs the generic loop.
    library_dtypes: Optional[Tuple[str, ...]] = None

    def check(self, settings: Any, folder: Any) -> None:
        """Refuse settings this pipeline cannot run, before any work: an input it does not take,
        a required one missing, a size it cannot make, an eta its call does not take."""
        for name, value in settings.given_inputs().items():
            if name not in self.inputs:
                accepted = ", ".join(flag(n) for n in self.inputs) or "none"
                raise UsageError(f"{self.pipeline} takes no {name} ({flag(name)} {value!r}); its inputs: {accepted}")
        for name in self.required_inputs:
            if getattr(settings, name) is None:
                article = "an" if name[0] in "aeiou" else "a"
                raise UsageError(f"{self.pipeline} needs {article} {name}: give it {flag(name)} "
                                 f"(Settings({name}=...))")
        multiple = self.size_multiple_of(folder)
        for name in ("height", "width"):
            value = getattr(settings, name, None)
            if value is not None and value % multiple:
                raise UsageError(f"{flag(name)} must be a multiple of {multiple} for {self.pipeline}, got {value}")
        if settings.eta and self.native_schedulers is None and not self.takes_eta:
            raise UsageError(f"{self.pipeline} takes no eta (--eta {settings.eta:g}); a scheduler's step() "
                             "argument goes in --scheduler-option eta=X")

    def size_multiple_of(self, folder: Any) -> int:
        """What height and width must be a multiple of, for this folder's components."""
        return self.size_multiple

    def runs_library_pipeline(self, scheduler: str, dtype: str = "float32") -> bool:
        """Whether a run with this scheduler in this dtype calls the library pipeline (else: the
        generic loop, :mod:`..loop`)."""
        if self.library_dtypes is not None and dtype not in self.library_dtypes:
            return False
        return self.native_schedulers is None or scheduler in self.native_schedulers

    def call_arguments(self, settings: Any, generator: Any) -> Dict[str, Any]:
        """Keyword arguments for the library pipeline's ``__call__`` (``return_dict=False`` is added)."""
        return dict(self.input_arguments(settings), **self.run_arguments(settings, generator))

    def run_arguments(self, settings: Any, generator: Any) -> Dict[str, Any]:
        """What every call sets: the batch, the steps, the generator, NumPy output (and eta)."""
        out = {self.batch_argument: settings.batch_size, "generator": generator,
               "num_inference_steps": settings.steps, "output_type": "np"}
        if self.takes_eta:
            out["eta"] = settings.eta
        return out

    def input_arguments(self, settings: Any) -> Dict[str, Any]:
        """The inputs given, by the call's names; input files as the pictures they hold."""
        out = {}
        for name, value in settings.given_inputs().items():
            if name in settings.FILES:
                value = read_input(name, value).image()
            out[self.call_names.get(name, name)] = value
        return out

    def set_keywords(self, settings: Any) -> Tuple[str, ...]:
        """Every keyword of the call this recipe sets, or sets from an input: not a call option."""
        return tuple(self.run_arguments(settings, None)) + tuple(self.call_names.get(n, n) for n in self.inputs) \
            + ("return_dict",)

    def check_call_options(self, settings: Any, parameters: Sequence[str]) -> None:
        """Refuse a call option the library pipeline's call (``parameters``) does not take, or
        one the recipe sets itself (an input's flag says how to set it)."""
        inputs = {self.call_names.get(n, n): n for n in self.inputs}
        taken = [p for p in parameters if p not in self.set_keywords(settings)]
        for key in settings.call_options:
            if key in inputs:
                raise UsageError(f"call option {key!r} is {self.pipeline}'s input {inputs[key]}: give it "
                                 f"{flag(inputs[key])}")
            if key in self.set_keywords(settings):
                raise UsageError(f"call option {key!r} is set by xrand for every run of {self.pipeline} "
                                 "(from --steps, --batch-size, the seed...); accepted: " + ", ".join(taken))
            if key not in parameters:
                raise UsageError(f"{self.pipeline}'s call takes no {key!r} (--call-option {key}=...); accepted: "
                                 + ", ".join(taken))

    def timestep_arguments(self, config: Mapping[str, Any]) -> Tuple[str, ...]:
        """What the library pipeline passes to ``scheduler.set_timesteps`` beyond the step count
        and device, for a scheduler built with ``config``."""
        return ()

    def scheduler_refusal(self, scheduler_cls: type, config: Mapping[str, Any]) -> Optional[str]:
        """Why the library pipeline cannot run this scheduler class (None: it can)."""
        parameters = inspect.signature(scheduler_cls.set_timesteps).parameters
        missing = [name for name in self.timestep_arguments(config) if name not in parameters]
        if missing:
            return (f"{self.pipeline} passes {' and '.join(missing)} to set_timesteps, which "
                    f"{scheduler_cls.__name__} does not take")
        return None

    def load(self, fw: Any, folder: Any, dtype: str, device: Any) -> Any:
        """The pipeline, loaded on framework ``fw`` from the folder (a ``ModelFolder``): its files
        (or their variant), or its single file with the folder's configs."""
        return fw.load_pipeline(self.pipeline, folder.path, dtype, device,
                                {**self.load_arguments, **folder.load_arguments()}, single_file=folder.single_file)

    #: whether ``check_single_file`` takes a single file of the right layout (the pipelines a
    #: refusal names as those that load from one)
    loads_single_file = False

    def check_single_file(self, folder: Any) -> Optional[str]:
        """Why this pipeline is not loaded from the folder's single file (None: it is). Here: no
        pipeline is, until its recipe checks the file's layout against the configs."""
        return f"xrand does not load {self.pipeline} from a single file"

    def denoiser_of(self, pipe: Any) -> Any:
        return getattr(pipe, self.denoiser)

    # -- the generic loop (:mod:`..loop`) ---------------------------------------------------------------------
    def latent_shape(self, settings: Any, folder: Any) -> Tuple[int, ...]:
        config = folder.config(self.denoiser)
        size = config["sample_size"]
        size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
        return (settings.batch_size, config["in_channels"], *size)

    def conditioning(self, fw: Any, pipe: Any, settings: Any) -> Any:
        """What the denoiser needs besides the sample, computed once per run (None here)."""
        return None

    def denoiser_call(self, sample: Any, timestep: Any, cond: Any, settings: Any) -> Tuple[tuple, Dict[str, Any]]:
        """The denoiser's arguments for a sample already through ``scale_model_input``."""
        return (sample, timestep), {"return_dict": False}

    def decode(self, fw: Any, pipe: Any, latents: Any) -> np.ndarray:
        """Final latents -> images in [0, 1], NHWC (as the library pipeline's ``output_type="np"``)."""
        return np.clip(fw.to_numpy(latents) / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)
