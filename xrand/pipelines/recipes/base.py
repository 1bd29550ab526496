"""A recipe: everything that differs from one pipeline class to the next, and nothing else.

Running a side, recording it, lockstep, layers and the noise floor are written once, outside
recipes; they reach the pipeline's denoiser and scheduler at the boundary a recipe names. A
recipe says:

- ``pipeline``: the class name, the same in diffusers and mindone.diffusers;
- ``denoiser``: the component that predicts (``"unet"``, ``"transformer"``) and the classes it may
  be; ``components`` the folder must hold, ``optional_components`` it may hold;
- ``scheduler_kind``: which schedulers fit (:data:`.schedulers.NOISE` or :data:`.schedulers.FLOW`);
- ``inputs``: the :class:`.settings.Settings` inputs the pipeline takes, ``required_inputs``
  those it cannot run without, and ``size_multiple`` for height and width;
- ``call_arguments``: the keyword arguments of the library pipeline's call;
- ``native_schedulers``: schedulers the library's own pipeline runs as given (None: any). With
  another scheduler the side runs the generic loop (:mod:`..loop`) through ``latent_shape``,
  ``conditioning``, ``denoiser_call`` and ``decode``, because both libraries' ``DDIMPipeline``
  turn any scheduler into DDIM and ``DDPMPipeline`` skips ``init_noise_sigma`` and
  ``scale_model_input``;
- ``load``: how a side loads it (by default the library's class ``from_pretrained``).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from ...checks import UsageError
from .. import schedulers


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

    def check(self, settings: Any, folder: Any) -> None:
        """Refuse settings this pipeline cannot run, before any work: an input it does not take,
        a required one missing, a size it cannot make."""
        for name, value in settings.given_inputs().items():
            if name not in self.inputs:
                accepted = ", ".join(flag(n) for n in self.inputs) or "none"
                raise UsageError(f"{self.pipeline} takes no {name} ({flag(name)} {value!r}); its inputs: {accepted}")
        for name in self.required_inputs:
            if getattr(settings, name) is None:
                raise UsageError(f"{self.pipeline} needs a {name}: give it {flag(name)} "
                                 f"(Settings({name}=...))")
        for name in ("height", "width"):
            value = getattr(settings, name, None)
            if value is not None and value % self.size_multiple:
                raise UsageError(f"{flag(name)} must be a multiple of {self.size_multiple} for {self.pipeline}, "
                                 f"got {value}")

    def runs_library_pipeline(self, scheduler: str) -> bool:
        return self.native_schedulers is None or scheduler in self.native_schedulers

    def call_arguments(self, settings: Any, generator: Any) -> Dict[str, Any]:
        """Keyword arguments for the library pipeline's ``__call__`` (``return_dict=False`` is added)."""
        return dict(batch_size=settings.batch_size, generator=generator, num_inference_steps=settings.steps,
                    output_type="np")

    def load(self, fw: Any, folder: Any, dtype: str, device: Any) -> Any:
        """The pipeline, loaded on framework ``fw`` from the folder (a ``ModelFolder``)."""
        return fw.load_pipeline(self.pipeline, folder.path, dtype, device, self.load_arguments)

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
