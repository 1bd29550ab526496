"""The families whose recipes are read from their pipeline classes (:mod:`.derived`): each says
only what its class does not (a measured CPU gap, a size rule, what it hands ``set_timesteps``)."""
from __future__ import annotations

from typing import Tuple

from .. import schedulers
from .base import Recipe
from .conditional import TextToVideoRecipe
from .derived import derived_recipe
from .flux import FluxRecipe
from .ltx import LTXRecipe
from .pixart import REPEAT_INTERLEAVE_ON_CPU, PixArtSigmaRecipe
from .stable_diffusion import StableDiffusionControlNetRecipe, StableDiffusionRecipe
from .stable_diffusion_3 import CHUNK_ON_CPU, StableDiffusion3Recipe
from .stable_diffusion_xl import StableDiffusionXLControlNetRecipe, StableDiffusionXLRecipe
from .wan import WanRecipe

#: Why MindSpore runs the Gemma-2 families PyNative on a CPU (measured with mindone 0.5.0, Sana).
GEMMA2_GRAPH = ("MindSpore 2.10's graph mode compiles mindone.transformers' Gemma-2 text encoder with PyExecute "
                "nodes (Python inside the graph), which it cannot export to the compile cache (MindIR)")
#: Why MindSpore runs CogVideoX PyNative on a CPU (measured with mindone 0.5.0, its first graph).
COGVIDEOX_T5_GRAPH = ("MindSpore 2.10's graph mode compiles mindone.transformers' T5 encoder, as CogVideoX's "
                      "encode_prompt calls it, with PyExecute nodes (Python inside the graph), which it cannot export "
                      "to the compile cache (MindIR)")

#: Why MindSpore runs Qwen-Image PyNative on a CPU (measured with mindone 0.5.0, its first graph).
QWEN25VL_GRAPH = ("MindSpore 2.10's graph mode cannot compile mindone.transformers' Qwen2.5-VL text encoder "
                  "(\"For 'TupleGetItem', input[0] should be Sequence, but got Bool\")")

#: Why MindSpore runs HunyuanVideo PyNative on a CPU (measured with mindone 0.5.0).
LLAMA_GRAPH = ("MindSpore 2.10's graph mode compiles the causal mask copy of mindone.transformers' LlamaModel "
               "(causal_mask.clone(), models/llama/modeling_llama.py) to the Clone primitive, which has no CPU kernel")


def derived_recipes() -> Tuple[Recipe, ...]:
    """Every derived recipe shipped here, one per pipeline class."""
    return (
        # Chroma: Flux's transformer without CLIP and guidance embedding; Flux's sizes and timesteps
        derived_recipe("ChromaPipeline", FluxRecipe, pynative_only=CHUNK_ON_CPU),
        derived_recipe("ChromaImg2ImgPipeline", FluxRecipe, pynative_only=CHUNK_ON_CPU),
        # Sana: its DPM-Solver runs on flow sigmas (which the class cannot say)
        derived_recipe("SanaPipeline", scheduler_kind=schedulers.FLOW, pynative_only=GEMMA2_GRAPH),
        # Lumina 2 (diffusers 0.35.2 refuses to build Lumina2Text2ImgPipeline, its older name: the
        # deprecation it raises expired in 0.34, diffusers/utils/deprecation_utils.py)
        derived_recipe("Lumina2Pipeline", pynative_only=GEMMA2_GRAPH),
        derived_recipe("CogView4Pipeline", pynative_only=CHUNK_ON_CPU),  # measured: its adaLN chunks
        # variants of the hand-written families: the base recipe keeps its family's size rule, its
        # timestep keywords, its load arguments and why MindSpore runs it PyNative on a CPU
        derived_recipe("StableDiffusion3Img2ImgPipeline", StableDiffusion3Recipe),
        derived_recipe("StableDiffusion3InpaintPipeline", StableDiffusion3Recipe),
        derived_recipe("FluxInpaintPipeline", FluxRecipe),
        # SD's and SDXL's ControlNet image-to-image calls do not check the size: SD's multiple of 8
        derived_recipe("StableDiffusionControlNetImg2ImgPipeline", StableDiffusionControlNetRecipe, size_multiple=8),
        derived_recipe("StableDiffusionControlNetInpaintPipeline", StableDiffusionControlNetRecipe),
        derived_recipe("StableDiffusionXLControlNetImg2ImgPipeline", StableDiffusionXLControlNetRecipe,
                       size_multiple=8),
        derived_recipe("StableDiffusionXLControlNetInpaintPipeline", StableDiffusionXLControlNetRecipe,
                       size_multiple=8),
        derived_recipe("FluxControlNetImg2ImgPipeline", FluxRecipe),
        derived_recipe("FluxControlNetInpaintPipeline", FluxRecipe),
        # PixArt-Alpha: PixArt-Sigma's components; its DPM-Solver drives a noise model
        derived_recipe("PixArtAlphaPipeline", PixArtSigmaRecipe, scheduler_kind=schedulers.NOISE),
        derived_recipe("LTXImageToVideoPipeline", LTXRecipe),
        # perturbed-attention guidance (pag_scale, pag_applied_layers: call and load options)
        derived_recipe("StableDiffusionPAGPipeline", StableDiffusionRecipe),
        derived_recipe("StableDiffusionXLPAGPipeline", StableDiffusionXLRecipe),
        derived_recipe("PixArtSigmaPAGPipeline", PixArtSigmaRecipe),
        derived_recipe("StableDiffusion3PAGPipeline", StableDiffusion3Recipe),
        derived_recipe("StableDiffusionPAGImg2ImgPipeline", StableDiffusionRecipe),
        derived_recipe("StableDiffusionPAGInpaintPipeline", StableDiffusionRecipe),
        derived_recipe("StableDiffusionXLPAGImg2ImgPipeline", StableDiffusionXLRecipe),
        derived_recipe("StableDiffusionXLPAGInpaintPipeline", StableDiffusionXLRecipe),
        derived_recipe("StableDiffusion3PAGImg2ImgPipeline", StableDiffusion3Recipe),
        derived_recipe("StableDiffusionControlNetPAGPipeline", StableDiffusionControlNetRecipe, size_multiple=8),
        derived_recipe("StableDiffusionControlNetPAGInpaintPipeline", StableDiffusionControlNetRecipe),
        derived_recipe("StableDiffusionXLControlNetPAGPipeline", StableDiffusionXLControlNetRecipe, size_multiple=8),
        derived_recipe("StableDiffusionXLControlNetPAGImg2ImgPipeline", StableDiffusionXLControlNetRecipe,
                       size_multiple=8),
        derived_recipe("SanaPAGPipeline", pynative_only=GEMMA2_GRAPH),
        # Stable Diffusion's components with self-attention guidance / a panorama of views
        derived_recipe("StableDiffusionSAGPipeline", StableDiffusionRecipe),
        derived_recipe("StableDiffusionPanoramaPipeline", StableDiffusionRecipe),
        # Flux with a wider transformer input (tiny folders flux-fill, flux-control): their calls
        # give image, mask and control_image defaults of None, but cannot run without them
        derived_recipe("FluxFillPipeline", FluxRecipe, required_inputs=("prompt", "image", "mask")),
        derived_recipe("FluxControlPipeline", FluxRecipe, required_inputs=("prompt", "control_image")),
        derived_recipe("FluxControlImg2ImgPipeline", FluxRecipe, required_inputs=("prompt", "image", "control_image")),
        derived_recipe("FluxControlInpaintPipeline", FluxRecipe,
                       required_inputs=("prompt", "image", "mask", "control_image")),
        derived_recipe("FluxKontextInpaintPipeline", FluxRecipe),
        derived_recipe("CogView4ControlPipeline", pynative_only=CHUNK_ON_CPU,
                       required_inputs=("prompt", "control_image")),
        # latent consistency: their own call runs only LCMScheduler (it never scales the model input)
        derived_recipe("LatentConsistencyModelPipeline", StableDiffusionRecipe),
        derived_recipe("LatentConsistencyModelImg2ImgPipeline", StableDiffusionRecipe),
        # an 8-channel UNet (tiny folder sd-pix2pix): the input image's latents beside the sample's
        derived_recipe("StableDiffusionInstructPix2PixPipeline", StableDiffusionRecipe,
                       required_inputs=("prompt", "image")),
        derived_recipe("StableDiffusionXLInstructPix2PixPipeline", StableDiffusionXLRecipe, size_multiple=8,
                       required_inputs=("prompt", "image")),
        # Wan 2.1 image to video: Wan's frame rule and CPU gap; a CLIP vision encoder (optional in
        # its class: Wan 2.2's image to video has none)
        derived_recipe("WanImageToVideoPipeline", WanRecipe),
        derived_recipe("WanVideoToVideoPipeline", WanRecipe),  # the Wan folder's components, a --video
        # CogVideoX: its own samplers (the third scheduler kind, read from its class)
        derived_recipe("CogVideoXPipeline", pynative_only=COGVIDEOX_T5_GRAPH),
        derived_recipe("CogVideoXImageToVideoPipeline", pynative_only=COGVIDEOX_T5_GRAPH),
        derived_recipe("CogVideoXVideoToVideoPipeline", pynative_only=COGVIDEOX_T5_GRAPH),
        derived_recipe("QwenImagePipeline", pynative_only=QWEN25VL_GRAPH),
        # AnimateDiff: a motion adapter merged into the UNet; its DPM-Solver would drive either kind
        derived_recipe("AnimateDiffPipeline", scheduler_kind=schedulers.NOISE,
                       pynative_only=REPEAT_INTERLEAVE_ON_CPU),  # measured: its motion modules
        # HunyuanVideo: its call hands set_timesteps its own sigmas (linspace(1, 0))
        derived_recipe("HunyuanVideoPipeline", TextToVideoRecipe, timestep_arguments=lambda self, config: ("sigmas",),
                       pynative_only=LLAMA_GRAPH),
    )
