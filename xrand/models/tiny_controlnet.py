"""Tiny random-weight ControlNet folders (``StableDiffusionControlNetPipeline``,
``StableDiffusionXLControlNetPipeline``, ``FluxControlNetPipeline``), built offline.

Each is the family's tiny folder (:mod:`.tiny_sd`, :mod:`.tiny_sdxl`, :mod:`.tiny_flux`) plus a
``controlnet/`` component, written by the library's ControlNet pipeline (its ``model_index.json``
names that class, so both libraries' ``from_pretrained`` load it):

- SD and SDXL: ``ControlNetModel.from_unet(unet)``, the UNet's encoder copied as real ControlNets
  start, with a conditioning embedding of two blocks (``(16, 32)``: the control image downsampled
  2x, as the VAE of two blocks downsamples the image to its latents);
- Flux: ``FluxControlNetModel.from_transformer`` (1 double-stream and 1 single-stream block; no
  conditioning embedding, so the pipeline hands the control image through the VAE, packed).

The layers a ControlNet starts with as zeros (its "zero convolutions" and, in Flux, its input
embedder) are drawn at random instead, from ``seed``, as the library's default initialisation
of the layer draws them: with zeros the ControlNet would add nothing, and a comparison could not
tell whether it ran (the SD and SDXL conditioning embeddings' last layer at
:data:`CONDITIONING_GAIN` times that scale, so that the control image shows). A tiny run takes the
family's call arguments and a 32x32 control image (``control_image``; ``image`` in the SD and SDXL
calls).

Noise: as the family's text to image; Flux draws once more before the steps, the control image's
VAE sample (``retrieve_latents(vae.encode(control_image), generator)``).
"""
from __future__ import annotations

from pathlib import Path

from . import tiny_flux, tiny_sd, tiny_sdxl
from .folders import PathLike, new_model_folder, save, seeded_torch

#: The conditioning embedding's channels: two blocks, one 2x downsampling (the tiny VAEs' factor).
CONDITIONING_CHANNELS = (16, 32)
#: The SD and SDXL conditioning embeddings' last layer is drawn this many times the default scale.
#: Measured (tiny SD, 2 steps, a square against a half as control image): at the default scale the
#: control image moved the final latents by 0.17% (another seed: 139%), at 30x by 4.8%; a run then
#: shows what its control image does. (Flux's, through the VAE: 5.6% at the default scale.)
CONDITIONING_GAIN = 30.0


def randomize_zero_layers(model) -> int:
    """Give every convolution and linear layer whose weights are all zero its library's default
    initialisation (``reset_parameters``); returns how many it drew (call inside :func:`seeded_torch`)."""
    import torch

    drawn = 0
    for module in model.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)) and not module.weight.detach().any():
            module.reset_parameters()
            drawn += 1
    return drawn


def _with_controlnet(family, pipeline_name: str, make_controlnet, folder: PathLike, seed: int) -> Path:
    """The family's tiny components (``family.components``) and a ControlNet made from them, all
    drawn from ``seed``, saved by the ControlNet pipeline ``pipeline_name``."""
    folder, seed = new_model_folder(folder, seed)
    import diffusers

    components = family.components(folder, seed)
    with seeded_torch(seed):
        controlnet = make_controlnet(components)
    return save(getattr(diffusers, pipeline_name)(**components, controlnet=controlnet), folder)


def _from_unet(components: dict):
    from diffusers import ControlNetModel

    import torch

    controlnet = ControlNetModel.from_unet(components["unet"],
                                           conditioning_embedding_out_channels=CONDITIONING_CHANNELS)
    randomize_zero_layers(controlnet)
    with torch.no_grad():
        controlnet.controlnet_cond_embedding.conv_out.weight.mul_(CONDITIONING_GAIN)
    return controlnet


def _from_transformer(components: dict):
    from diffusers import FluxControlNetModel

    controlnet = FluxControlNetModel.from_transformer(
        components["transformer"], num_layers=1, num_single_layers=1,
        attention_head_dim=tiny_flux.TRANSFORMER["attention_head_dim"],
        num_attention_heads=tiny_flux.TRANSFORMER["num_attention_heads"])
    randomize_zero_layers(controlnet)
    return controlnet


def build_sd(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionControlNetPipeline`` folder and return its path."""
    return _with_controlnet(tiny_sd, "StableDiffusionControlNetPipeline", _from_unet, folder, seed)


def build_sdxl(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionXLControlNetPipeline`` folder and return its path."""
    return _with_controlnet(tiny_sdxl, "StableDiffusionXLControlNetPipeline", _from_unet, folder, seed)


def build_flux(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``FluxControlNetPipeline`` folder and return its path."""
    return _with_controlnet(tiny_flux, "FluxControlNetPipeline", _from_transformer, folder, seed)


SD_CALL = tiny_sd.CALL
SDXL_CALL = tiny_sdxl.CALL
FLUX_CALL = tiny_flux.CALL
