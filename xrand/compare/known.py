"""Causes of a difference between diffusers and mindone.diffusers that were measured, so that a
verdict names the cause beside the number it explains (a ratio to torch's floor, a FAIL).

Each cause is keyed by what ran: the pipeline, the dtype, MindSpore's device target, the mindone
version it was measured with (another version may differ: no cause is given then), and the
verdict it explains. The ratios were measured by ``scripts/known_causes.py`` (tiny folders, CPU,
4 steps, seed 0: each MindSpore-side difference removed in turn); README.md's precision section
has the table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Tuple

FLUX = ("FluxPipeline", "FluxImg2ImgPipeline", "FluxKontextPipeline")


@dataclass(frozen=True)
class KnownCause:
    """One measured cause and the runs it applies to (None: any)."""

    pipelines: Tuple[str, ...]
    text: str
    passed: bool  # the verdict it explains: a within-tolerance ratio (True) or a FAIL (False)
    dtype: Optional[str] = None
    device_target: Optional[str] = None  # MindSpore's
    mindone: str = "0.5.0"

    def applies(self, pipeline: Optional[str], dtype: str, passed: bool, environment: Mapping[str, Any]) -> bool:
        return (pipeline in self.pipelines and passed == self.passed and self.dtype in (None, dtype)
                and self.device_target in (None, environment.get("mindspore_device_target"))
                and environment.get("mindone") == self.mindone)


KNOWN_CAUSES = (
    KnownCause(FLUX, "mindone's sinusoidal timestep and guidance embeddings on MindSpore's CPU (embeddings.py "
                     "get_timestep_embedding) make most of the gap to torch's floor, its float32 attention computed "
                     "in float16 the rest (tiny Flux: 18.8x; 3.1x with torch's embedding; 0.7x with float32 "
                     "attention too)",
               passed=True, dtype="float32", device_target="CPU"),
    KnownCause(("FluxControlNetPipeline",), "mindone's sinusoidal timestep and guidance embeddings on MindSpore's CPU "
                                            "(embeddings.py get_timestep_embedding), in the transformer and its "
                                            "ControlNet, make most of the gap to torch's floor, its float32 attention "
                                            "computed in float16 the rest (tiny Flux ControlNet: 21.1x; 1.4x with "
                                            "torch's embedding; 0.37x with float32 attention too)",
               passed=True, dtype="float32", device_target="CPU"),
    KnownCause(("LTXPipeline",), "mindone's scaled_dot_product_attention computes float32 attention in float16 "
                                 "(layers_compat.py; tiny LTX: 20.6x torch's floor, 2.5x with float32 attention)",
               passed=True, dtype="float32", device_target="CPU"),
    KnownCause(("StableDiffusion3Pipeline",), "mindone's sinusoidal timestep embedding on MindSpore's CPU "
                                              "(embeddings.py get_timestep_embedding; tiny SD3: 3.2x torch's floor, "
                                              "1.3x with torch's embedding)",
               passed=True, dtype="float32", device_target="CPU"),
    # tests/test_families.py: given the generator, the sides agree
    KnownCause(("StableDiffusion3Img2ImgPipeline", "StableDiffusion3PAGImg2ImgPipeline"),
               "mindone's SD3 image-to-image pipelines sample the input image's VAE latents without the generator "
               "(pipeline_stable_diffusion_3_img2img.py and pag/pipeline_pag_sd_3_img2img.py, prepare_latents: "
               "retrieve_latents(self.vae, self.vae.encode(image)[0])) where diffusers passes it: the latents the "
               "steps start from differ, the steps agree", passed=False),
    # tests/test_families.py: scaled as diffusers scales, the video agrees
    KnownCause(("WanPipeline",), "mindone's Wan VAE attention calls FlashAttentionScore with its default scale 1.0 "
                                 "where diffusers scales by 1/sqrt(channels) (autoencoder_kl_wan.py): the latents "
                                 "agree, the decoded video does not", passed=False),
    # tests/test_next_families.py: scaled as diffusers scales, the video agrees
    KnownCause(("WanImageToVideoPipeline", "WanVideoToVideoPipeline"),
               "mindone's Wan VAE attention calls FlashAttentionScore with its default scale 1.0 where diffusers "
               "scales by 1/sqrt(channels) (autoencoder_kl_wan.py): the latents of the input image or video and the "
               "decoded video differ", passed=False),
)


@dataclass(frozen=True)
class KnownFailure:
    """A pipeline one library cannot run, as measured: the error its call raises there, and why."""

    pipelines: Tuple[str, ...]
    framework: str
    error: str  # the exception's type name and a part of its message: "IndexError: tuple index out of range"
    text: str
    mindone: str = "0.5.0"


KNOWN_FAILURES = (
    # tests/test_next_families.py: with the hidden states collected as transformers collects them, it agrees
    KnownFailure(("HunyuanVideoPipeline",), "mindspore", "IndexError: tuple index out of range",
                 "mindone 0.5.0's LlamaModel ignores output_hidden_states (mindone/transformers/models/llama/"
                 "modeling_llama.py, line 603), so HunyuanVideoPipeline's text encoding, which reads its third-to-last "
                 "hidden states (pipeline_hunyuan_video.py, line 243: [1][-3]), cannot run on MindSpore's side"),
)


def known_failure(pipeline: Optional[str], framework: str, error: BaseException) -> Optional[str]:
    """Why ``framework``'s run of ``pipeline`` raised ``error``, where that was measured (None: not
    known). Called from MindSpore's side, where mindone is imported."""
    said = f"{type(error).__name__}: {error}"
    for f in KNOWN_FAILURES:
        if pipeline in f.pipelines and framework == f.framework and said.startswith(f.error):
            import mindone

            if mindone.__version__ == f.mindone:
                return f.text
    return None


def known_causes(pipeline: Optional[str], dtype: str, passed: bool, environment: Mapping[str, Any]) -> List[str]:
    """The measured causes that apply to a comparison of ``pipeline`` in ``dtype`` with this
    verdict, ``environment`` being the MindSpore side's (its device target and mindone version)."""
    return [c.text for c in KNOWN_CAUSES if c.applies(pipeline, dtype, passed, environment)]


__all__ = ["KNOWN_CAUSES", "KNOWN_FAILURES", "KnownCause", "KnownFailure", "known_causes", "known_failure"]
