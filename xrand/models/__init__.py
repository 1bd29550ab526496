"""Models for tests and comparisons: the embedded digits model, and tiny random-weight folders of
the pipeline families people port, built offline (nothing is downloaded).

``build_tiny(name, folder, seed=0)`` writes one of :data:`TINY_MODELS`; each entry says which
pipeline classes load it (the same names in diffusers and mindone.diffusers) and the call
arguments a tiny run needs beyond the prompt and the steps.

    from xrand.models import TINY_MODELS, build_tiny
    folder = build_tiny("flux", "/tmp/tiny-flux")
    pipe = diffusers.FluxPipeline.from_pretrained(folder)
    images = pipe("a cat", num_inference_steps=2, **TINY_MODELS["flux"].call).images
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

from ..checks import check_choice
from . import (tiny_animatediff, tiny_chroma, tiny_cogvideox, tiny_cogview4, tiny_controlnet, tiny_flux,
               tiny_hunyuan_video, tiny_ltx, tiny_lumina2, tiny_pixart, tiny_qwenimage, tiny_sana, tiny_sd, tiny_sd3,
               tiny_sdxl, tiny_wan, tiny_wan_i2v)
from .folders import PathLike

#: The digits model shipped inside the package (trained by scripts/train_digits.py): the default model.
DIGITS = str(Path(__file__).resolve().parent / "digits")


@dataclass(frozen=True)
class TinyModel:
    """One tiny family: its builder, the pipeline classes that run its folder, a tiny run's arguments."""

    build: Callable[..., Path]
    pipelines: Tuple[str, ...]
    call: Dict[str, Any] = field(default_factory=dict)

    def settings(self) -> Dict[str, Any]:
        """The tiny run's arguments as xrand settings: its size and frames (``--frames``), the
        rest call options (``--call-option``)."""
        call = dict(self.call)
        values = {key: call.pop(key) for key in ("height", "width") if key in call}
        if "num_frames" in call:
            values["frames"] = call.pop("num_frames")
        return {**values, "call_options": call}


TINY_MODELS: Dict[str, TinyModel] = {
    "sd": TinyModel(tiny_sd.build_tiny_sd, ("StableDiffusionPipeline", "StableDiffusionImg2ImgPipeline"),
                    tiny_sd.CALL),
    "sd-inpaint": TinyModel(tiny_sd.build_inpaint, ("StableDiffusionInpaintPipeline",), tiny_sd.CALL),
    "sdxl": TinyModel(tiny_sdxl.build, ("StableDiffusionXLPipeline",), tiny_sdxl.CALL),
    "sd3": TinyModel(tiny_sd3.build, ("StableDiffusion3Pipeline",), tiny_sd3.CALL),
    "flux": TinyModel(tiny_flux.build, ("FluxPipeline",), tiny_flux.CALL),
    "pixart": TinyModel(tiny_pixart.build, ("PixArtSigmaPipeline",), tiny_pixart.CALL),
    "wan": TinyModel(tiny_wan.build, ("WanPipeline", "WanVideoToVideoPipeline"), tiny_wan.CALL),
    # takes an image too (--image: the first frame)
    "wan-i2v": TinyModel(tiny_wan_i2v.build, ("WanImageToVideoPipeline",), tiny_wan_i2v.CALL),
    # video to video takes a video too (--video: an animated GIF, PNG or WebP)
    "cogvideox": TinyModel(tiny_cogvideox.build, ("CogVideoXPipeline", "CogVideoXVideoToVideoPipeline"),
                           tiny_cogvideox.CALL),
    # takes an image too (--image: the first frame)
    "cogvideox-i2v": TinyModel(tiny_cogvideox.build_i2v, ("CogVideoXImageToVideoPipeline",), tiny_cogvideox.CALL),
    "qwenimage": TinyModel(tiny_qwenimage.build, ("QwenImagePipeline",), tiny_qwenimage.CALL),
    "animatediff": TinyModel(tiny_animatediff.build, ("AnimateDiffPipeline",), tiny_animatediff.CALL),
    "ltx": TinyModel(tiny_ltx.build, ("LTXPipeline",), tiny_ltx.CALL),
    "hunyuan-video": TinyModel(tiny_hunyuan_video.build, ("HunyuanVideoPipeline",), tiny_hunyuan_video.CALL),
    "sana": TinyModel(tiny_sana.build, ("SanaPipeline",), tiny_sana.CALL),
    "lumina2": TinyModel(tiny_lumina2.build, ("Lumina2Pipeline",), tiny_lumina2.CALL),
    "cogview4": TinyModel(tiny_cogview4.build, ("CogView4Pipeline",), tiny_cogview4.CALL),
    "chroma": TinyModel(tiny_chroma.build, ("ChromaPipeline", "ChromaImg2ImgPipeline"), tiny_chroma.CALL),
    # each takes a 32x32 control image too (--control-image; the call's image, Flux's control_image)
    "sd-controlnet": TinyModel(tiny_controlnet.build_sd, ("StableDiffusionControlNetPipeline",),
                               tiny_controlnet.SD_CALL),
    "sdxl-controlnet": TinyModel(tiny_controlnet.build_sdxl, ("StableDiffusionXLControlNetPipeline",),
                                 tiny_controlnet.SDXL_CALL),
    "flux-controlnet": TinyModel(tiny_controlnet.build_flux, ("FluxControlNetPipeline",), tiny_controlnet.FLUX_CALL),
    # text_encoder_2 wider than text_encoder, as SDXL's single-file layout needs (checkpoints.save_single_file)
    "sdxl-wide": TinyModel(tiny_sdxl.build_wide, ("StableDiffusionXLPipeline",), tiny_sdxl.CALL),
    # variants of the folders above, for pipelines whose denoiser takes more (or other) inputs;
    # InstructPix2Pix's call takes no size (the input image's)
    "sd-pix2pix": TinyModel(tiny_sd.build_pix2pix, ("StableDiffusionInstructPix2PixPipeline",)),
    "sdxl-pix2pix": TinyModel(tiny_sdxl.build_pix2pix, ("StableDiffusionXLInstructPix2PixPipeline",), tiny_sdxl.CALL),
    "sd-lcm": TinyModel(tiny_sd.build_lcm, ("LatentConsistencyModelPipeline", "LatentConsistencyModelImg2ImgPipeline"),
                        tiny_sd.CALL),
    # Flux's tiny folder with a wider transformer input: the masked image and mask / the control image
    "flux-fill": TinyModel(tiny_flux.build_fill, ("FluxFillPipeline",), tiny_flux.CALL),
    "flux-control": TinyModel(tiny_flux.build_control, ("FluxControlPipeline", "FluxControlImg2ImgPipeline",
                                                        "FluxControlInpaintPipeline"), tiny_flux.CALL),
    "cogview4-control": TinyModel(tiny_cogview4.build_control, ("CogView4ControlPipeline",), tiny_cogview4.CALL),
}


def build_tiny(name: str, folder: PathLike, seed: int = 0) -> Path:
    """Write the tiny random-weight folder ``name`` (a key of :data:`TINY_MODELS`) and return its path.

    ``seed`` fixes every weight; the folder may exist but must not hold a model_index.json.
    """
    return TINY_MODELS[check_choice(name, tuple(TINY_MODELS), "tiny model")].build(folder, seed)
