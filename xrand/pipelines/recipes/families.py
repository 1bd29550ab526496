"""The families whose recipes are read from their pipeline classes (:mod:`.derived`): each says
only what its class does not (a measured CPU gap, a size rule, what it hands ``set_timesteps``)."""
from __future__ import annotations

from typing import Tuple

from .. import schedulers
from .base import Recipe
from .derived import derived_recipe
from .flux import FluxRecipe
from .pixart import REPEAT_INTERLEAVE_ON_CPU
from .stable_diffusion_3 import CHUNK_ON_CPU
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
    )
