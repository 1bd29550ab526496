"""The families whose recipes are read from their pipeline classes (:mod:`.derived`): each says
only what its class does not (a measured CPU gap, a size rule, what it hands ``set_timesteps``)."""
from __future__ import annotations

from typing import Tuple

from .. import schedulers
from .base import Recipe
from .conditional import TextToVideoRecipe
from .derived import derived_recipe
from .flux import FluxRecipe
from .stable_diffusion_3 import CHUNK_ON_CPU

#: Why MindSpore runs the Gemma-2 families PyNative on a CPU (measured with mindone 0.5.0, Sana).
GEMMA2_GRAPH = ("MindSpore 2.10's graph mode compiles mindone.transformers' Gemma-2 text encoder with PyExecute "
                "nodes (Python inside the graph), which it cannot export to the compile cache (MindIR)")

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
        # HunyuanVideo: its call hands set_timesteps its own sigmas (linspace(1, 0))
        derived_recipe("HunyuanVideoPipeline", TextToVideoRecipe, timestep_arguments=lambda self, config: ("sigmas",),
                       pynative_only=LLAMA_GRAPH),
    )
