"""Write docs/pipelines.md: every pipeline class both diffusers and mindone.diffusers ship, and
for each whether xrand compares it (with the test that does) or why not yet.

    python scripts/pipeline_coverage.py [--out docs/pipelines.md]

Read from the installed libraries: the pipeline classes each exports, each class's components
(its ``__init__``) and call (its ``__call__``). A pipeline is compared when xrand has a recipe
for it (``xrand.pipelines.recipes.RECIPES``) and a test compares it end to end (:data:`TESTS`);
otherwise the line says what a recipe would have to handle: its denoiser, and the keywords of its
call beyond xrand's settings.
"""
from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: pipeline class -> the test that compares it end to end on torch and MindSpore.
TESTS: Dict[str, str] = {
    "DDIMPipeline": "tests/test_pipelines.py::test_eta1_within_tolerance_with_lockstep",
    "DDPMPipeline": "tests/test_recipes.py::test_ddpm_pipeline_agrees_in_lockstep",
    "StableDiffusionPipeline": "tests/test_recipes.py::test_stable_diffusion_agrees_with_guidance_and_lockstep",
    "StableDiffusionImg2ImgPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module"
                                      "[sd-img2img]",
    "StableDiffusionInpaintPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module"
                                      "[sd-inpaint]",
    "StableDiffusionXLPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module[sdxl]",
    "StableDiffusionXLImg2ImgPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module"
                                        "[sdxl-img2img]",
    "StableDiffusionXLInpaintPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module"
                                        "[sdxl-inpaint]",
    "StableDiffusion3Pipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module[sd3]",
    "FluxPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module[flux]",
    "FluxImg2ImgPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module"
                           "[flux-img2img]",
    "FluxKontextPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module"
                           "[flux-kontext]",
    "PixArtSigmaPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module[pixart]",
    "WanPipeline": "tests/test_families.py::test_wan_video_per_frame_and_mindones_unscaled_vae_attention",
    "LTXPipeline": "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module[ltx]",
    "SanaPipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep[sana]",
    "Lumina2Pipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep"
                       "[lumina2]",
    "CogView4Pipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep"
                        "[cogview4]",
    "ChromaPipeline": "tests/test_next_families.py::test_chroma_differs_by_mindones_float_mask_attention_and_agrees_"
                      "with_its_math_branch[chroma]",
    "ChromaImg2ImgPipeline": "tests/test_next_families.py::test_chroma_differs_by_mindones_float_mask_attention_and_"
                             "agrees_with_its_math_branch[chroma-img2img]",
    "WanImageToVideoPipeline": "tests/test_next_families.py::test_wan_image_and_video_to_video_part_at_mindones_unscaled_vae_"
                               "attention_and_agree_scaled[wan-i2v]",
    "WanVideoToVideoPipeline": "tests/test_next_families.py::test_wan_image_and_video_to_video_part_at_mindones_unscaled_vae_"
                               "attention_and_agree_scaled[wan-v2v]",
    "CogVideoXPipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep[cogvideox]",
    "CogVideoXImageToVideoPipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep"
                                     "[cogvideox-i2v]",
    "QwenImagePipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep"
                         "[qwenimage]",
    "AnimateDiffPipeline": "tests/test_next_families.py::test_animatediff_agrees_but_mindone_leaves_the_motion_"
                           "modules_saved_position_table_unloaded",
    "CogVideoXVideoToVideoPipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep"
                                     "[cogvideox-v2v]",
    "HunyuanVideoPipeline": "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep"
                            "[hunyuan-video]",
    "StableDiffusionControlNetPipeline": "tests/test_controlnet.py::test_each_controlnet_pipeline_agrees_end_to_end_and_"
                                         "in_lockstep[sd]",
    "StableDiffusionXLControlNetPipeline": "tests/test_controlnet.py::test_each_controlnet_pipeline_agrees_end_to_end_"
                                           "and_in_lockstep[sdxl]",
    "FluxControlNetPipeline": "tests/test_controlnet.py::test_each_controlnet_pipeline_agrees_end_to_end_and_in_lockstep"
                              "[flux]",
}

_FAMILY = "tests/test_families.py::test_each_family_agrees_end_to_end_in_lockstep_and_module_by_module[{}]"
_SD3_IMG2IMG = "tests/test_families.py::test_sd3_img2img_differs_by_mindones_vae_sample_without_the_generator[{}]"
_CONTROLNET = "tests/test_controlnet.py::test_each_controlnet_variant_agrees_end_to_end_and_in_lockstep[{}]"
_NEXT = "tests/test_next_families.py::test_each_next_family_agrees_end_to_end_and_in_lockstep[{}]"
#: The variants of the families above, their recipes derived (xrand/pipelines/recipes/families.py).
TESTS.update({
    "StableDiffusion3Img2ImgPipeline": _SD3_IMG2IMG.format("sd3-img2img"),
    "StableDiffusion3PAGImg2ImgPipeline": _SD3_IMG2IMG.format("sd3-pag-img2img"),
    **{pipeline: _FAMILY.format(case) for pipeline, case in (
        ("StableDiffusion3InpaintPipeline", "sd3-inpaint"), ("FluxInpaintPipeline", "flux-inpaint"),
        ("PixArtAlphaPipeline", "pixart-alpha"), ("LTXImageToVideoPipeline", "ltx-i2v"),
        ("StableDiffusionPAGPipeline", "sd-pag"), ("StableDiffusionXLPAGPipeline", "sdxl-pag"),
        ("PixArtSigmaPAGPipeline", "pixart-pag"), ("StableDiffusion3PAGPipeline", "sd3-pag"),
        ("StableDiffusionPAGImg2ImgPipeline", "sd-pag-img2img"),
        ("StableDiffusionPAGInpaintPipeline", "sd-pag-inpaint"),
        ("StableDiffusionXLPAGImg2ImgPipeline", "sdxl-pag-img2img"),
        ("StableDiffusionXLPAGInpaintPipeline", "sdxl-pag-inpaint"), ("StableDiffusionSAGPipeline", "sd-sag"),
        ("StableDiffusionPanoramaPipeline", "sd-panorama"), ("FluxFillPipeline", "flux-fill"),
        ("FluxControlPipeline", "flux-control"), ("FluxControlImg2ImgPipeline", "flux-control-img2img"),
        ("FluxControlInpaintPipeline", "flux-control-inpaint"), ("FluxKontextInpaintPipeline", "flux-kontext-inpaint"),
        ("LatentConsistencyModelPipeline", "sd-lcm"), ("LatentConsistencyModelImg2ImgPipeline", "sd-lcm-img2img"),
        ("StableDiffusionInstructPix2PixPipeline", "sd-pix2pix"),
        ("StableDiffusionXLInstructPix2PixPipeline", "sdxl-pix2pix"))},
    **{pipeline: _CONTROLNET.format(case) for pipeline, case in (
        ("StableDiffusionControlNetImg2ImgPipeline", "sd-img2img"),
        ("StableDiffusionControlNetInpaintPipeline", "sd-inpaint"),
        ("StableDiffusionXLControlNetImg2ImgPipeline", "sdxl-img2img"),
        ("StableDiffusionXLControlNetInpaintPipeline", "sdxl-inpaint"),
        ("FluxControlNetImg2ImgPipeline", "flux-img2img"), ("FluxControlNetInpaintPipeline", "flux-inpaint"),
        ("StableDiffusionControlNetPAGPipeline", "sd-pag"),
        ("StableDiffusionControlNetPAGInpaintPipeline", "sd-pag-inpaint"),
        ("StableDiffusionXLControlNetPAGPipeline", "sdxl-pag"),
        ("StableDiffusionXLControlNetPAGImg2ImgPipeline", "sdxl-pag-img2img"))},
    "SanaPAGPipeline": _NEXT.format("sana-pag"),
    "CogView4ControlPipeline": "tests/test_next_families.py::test_cogview4_control_draws_its_control_latents_from_the_"
                               "global_rng_in_both_libraries",
})

#: Why a pipeline the families issue named is not compared yet, beyond "no recipe yet".
NOT_YET: Dict[str, str] = {
    "Lumina2Text2ImgPipeline": "diffusers 0.35.2 refuses to build it: the deprecation of this old name of "
                               "Lumina2Pipeline expired in 0.34 and now raises (diffusers/utils/deprecation_utils.py)",
}

#: Keywords of a pipeline's call that every recipe handles alike (xrand sets them, or they carry
#: precomputed tensors a comparison does not give): not inputs a recipe would lack.
COMMON = {
    "self", "kwargs", "prompt", "negative_prompt", "prompt_2", "negative_prompt_2", "prompt_3", "negative_prompt_3",
    "height", "width", "num_inference_steps", "timesteps", "sigmas", "guidance_scale", "num_images_per_prompt",
    "num_videos_per_prompt", "batch_size", "eta", "generator", "latents", "output_type", "return_dict", "callback",
    "callback_steps", "callback_on_step_end", "callback_on_step_end_tensor_inputs", "max_sequence_length",
    "cross_attention_kwargs", "joint_attention_kwargs", "attention_kwargs", "clip_skip", "guidance_rescale",
    "image", "mask_image", "strength", "num_frames", "control_image", "video",
}
#: Components that predict (the denoiser a recipe names), in the order they are looked for.
DENOISERS = ("transformer", "unet", "prior", "decoder", "transformer_2", "unet_2", "vqvae", "denoiser")


def shared_pipelines() -> List[str]:
    """The pipeline classes both libraries export (by name, without importing them), sorted;
    ``DiffusionPipeline``, their base class, left out."""
    import diffusers
    import mindone.diffusers

    def names(library) -> set:
        return {n for n in dir(library) if n.endswith("Pipeline") and n != "DiffusionPipeline"}

    return sorted(names(diffusers) & names(mindone.diffusers))


def describe(name: str) -> Tuple[str, str]:
    """(denoiser, inputs xrand does not take) of diffusers' pipeline class ``name``."""
    import diffusers

    cls = getattr(diffusers, name)
    components = inspect.signature(cls.__init__).parameters
    denoiser = next((f"{c}: {_type_name(components[c].annotation)}" for c in DENOISERS if c in components), "")
    call = inspect.signature(cls.__call__).parameters
    extra = [p for p in call if p not in COMMON and not p.endswith(("_embeds", "_embeds_mask", "_attention_mask"))
             and not p.startswith(("ip_adapter", "negative_ip_adapter"))]
    return denoiser, ", ".join(extra)


def importable(library: str, name: str) -> str:
    """'' if ``library`` imports its class ``name`` here, else why not (a missing package)."""
    import importlib

    try:
        getattr(importlib.import_module(library), name)
    except Exception as exc:  # the lazy module raises RuntimeError around the ImportError
        cause = exc.__cause__ or exc
        return f"{library} cannot import it here ({str(cause).strip().splitlines()[0]})"
    return ""


def _type_name(annotation) -> str:
    """A component's class as its annotation names it (``A or B`` for a Union)."""
    import typing

    if annotation is inspect.Parameter.empty:
        return "?"
    if typing.get_origin(annotation) is typing.Union:
        return " or ".join(_type_name(a) for a in typing.get_args(annotation) if a is not type(None))
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def markdown() -> str:
    from xrand.pipelines.recipes import RECIPES

    pipelines = shared_pipelines()
    compared = [p for p in pipelines if p in RECIPES and p in TESTS]
    lines = [
        "# Pipelines both libraries ship, and which xrand compares",
        "",
        "Written by `python scripts/pipeline_coverage.py` from the installed diffusers and mindone.diffusers "
        f"({_versions()}): {len(pipelines)} pipeline classes both export; xrand compares {len(compared)} of them "
        "end to end (torch and MindSpore from one seed, free running and in lockstep), each with the test named.",
        "",
        "A pipeline not yet compared needs a recipe (`xrand/pipelines/recipes/`: its components, its denoiser, "
        "its inputs) and a tiny folder to test it on; the table says which denoiser it has and which keywords "
        "of its call go beyond xrand's settings (prompts, size, steps, guidance, image, mask, strength, frames, "
        "control image; "
        "`--call-option` passes any other keyword a JSON value can give).",
        "",
        "| pipeline | compared | test, or what it needs |",
        "| --- | --- | --- |",
    ]
    for name in pipelines:
        if name in compared:
            lines.append(f"| {name} | yes | `{TESTS[name]}` |")
            continue
        missing = importable("diffusers", name) or importable("mindone.diffusers", name)
        if missing:
            lines.append(f"| {name} | not yet | {missing} |")
            continue
        denoiser, extra = describe(name)
        why = "recipe, not yet tested" if name in RECIPES else NOT_YET.get(name, "no recipe yet")
        why += f"; denoiser {denoiser}" if denoiser else "; no denoiser component"
        if extra:
            why += f"; its call's keywords beyond xrand's settings: {extra}"
        lines.append(f"| {name} | not yet | {why} |")
    return "\n".join(lines) + "\n"


def _versions() -> str:
    import diffusers
    import mindone

    return f"diffusers {diffusers.__version__}, mindone {mindone.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "pipelines.md"))
    args = parser.parse_args()
    from xrand.frameworks.quiet import silenced

    with silenced():
        text = markdown()
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
