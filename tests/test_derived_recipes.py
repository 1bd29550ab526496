"""Recipes read from the pipeline class (xrand.pipelines.recipes.derived): the derivation
reproduces every hand-written recipe but for the differences named here, and says what it
cannot decide."""
import pytest

import xrand

pytest.importorskip("diffusers")

from xrand.pipelines import schedulers  # noqa: E402
from xrand.pipelines.recipes import RECIPES, derived  # noqa: E402
from xrand.pipelines.recipes.derived import FIELDS, DerivedRecipe, derive, derived_recipe  # noqa: E402

#: Fields compared as sets (their order says nothing).
AS_SETS = ("components", "optional_components", "inputs", "required_inputs")
_SDXL = ("components", "optional_components")  # a refiner folder has no first text encoder
#: hand-written recipe -> the fields where it says more than its class (anything else must agree).
DIFFERENCES = {
    "StableDiffusionInpaintPipeline": ("size_multiple",),  # check_inputs: height % self.vae_scale_factor
    "StableDiffusionXLPipeline": _SDXL,
    "StableDiffusionXLImg2ImgPipeline": _SDXL,
    "StableDiffusionXLInpaintPipeline": _SDXL,
    "StableDiffusion3Pipeline": ("components", "optional_components",  # runs without its T5
                                 "size_multiple"),  # check_inputs: an expression
    "FluxPipeline": ("size_multiple",), "FluxImg2ImgPipeline": ("size_multiple",),
    "FluxKontextPipeline": ("size_multiple",), "FluxControlNetPipeline": ("size_multiple",),
    "WanPipeline": ("optional_components",),  # Wan 2.2's second transformer is not taken
    # their check_inputs does not check the size: the recipes keep Stable Diffusion's multiple of 8
    "StableDiffusionControlNetPipeline": ("size_multiple",),
    "StableDiffusionXLControlNetPipeline": _SDXL + ("size_multiple",),
}
HAND_WRITTEN = [name for name, recipe in RECIPES.items() if not isinstance(recipe, DerivedRecipe)]


def _value(recipe, field):
    try:
        value = getattr(recipe, field)
    except xrand.UsageError as exc:
        return f"undecided: {exc}"
    return set(value) if field in AS_SETS else value


def test_every_family_of_the_first_release_is_hand_written_and_checked():
    assert len(HAND_WRITTEN) == 18 and set(DIFFERENCES) <= set(HAND_WRITTEN)


@pytest.mark.parametrize("pipeline", HAND_WRITTEN)
def test_the_derivation_reproduces_each_hand_written_recipe_but_its_named_differences(pipeline):
    hand, read = RECIPES[pipeline], derived_recipe(pipeline)
    differs = {field for field in FIELDS if _value(hand, field) != _value(read, field)}
    assert differs == set(DIFFERENCES.get(pipeline, ())), {f: (_value(hand, f), _value(read, f)) for f in differs}
    given = {field: getattr(type(hand), field) for field in differs}
    assert all(_value(derived_recipe(pipeline, **given), f) == _value(hand, f) for f in FIELDS)


def test_what_the_derivation_reads_from_the_classes():
    ddim, ddpm, pixart = derived_recipe("DDIMPipeline"), derived_recipe("DDPMPipeline"), \
        derived_recipe("PixArtSigmaPipeline")
    assert ddim.native_schedulers == ("DDIMScheduler",)  # its __init__ turns any scheduler into DDIM
    assert ddpm.native_schedulers == ("DDPMScheduler",)  # its call skips scale_model_input
    assert ddim.takes_eta and not ddpm.takes_eta and ddim.batch_argument == "batch_size"
    # PixArt's library marks its text encoder optional; a prompted run needs it
    assert {"text_encoder", "tokenizer"} <= set(pixart.components) and pixart.scheduler_kind == schedulers.NOISE
    wan = derived_recipe("WanImageToVideoPipeline")
    assert (wan.denoiser, wan.batch_argument, wan.scheduler_kind) == ("transformer", "num_videos_per_prompt",
                                                                      schedulers.FLOW)
    assert set(wan.required_inputs) == {"prompt", "image"} and "frames" in wan.inputs
    assert {"transformer_2", "image_encoder", "image_processor"} <= set(wan.optional_components)
    assert derived_recipe("FluxKontextPipeline").required_inputs == ("prompt",)  # its image is optional
    # a ControlNet pipeline's control image is required; SD's call names it image, Flux's control_image
    sd_controlnet = derived_recipe("StableDiffusionControlNetPipeline")
    assert set(sd_controlnet.required_inputs) == {"prompt", "control_image"} and "image" not in sd_controlnet.inputs
    assert sd_controlnet.call_names["control_image"] == "image"
    assert "control_image" not in derived_recipe("FluxControlNetPipeline").call_names
    img2img = derived_recipe("StableDiffusionControlNetImg2ImgPipeline")  # an input image and a control image
    assert set(img2img.required_inputs) == {"prompt", "image", "control_image"}
    assert "control_image" not in img2img.call_names


def test_what_the_derivation_cannot_decide_is_listed_and_refused_until_the_recipe_says_it():
    assert set(derive("SanaPipeline").undecided) == {"scheduler_kind"}  # DPM-Solver drives either kind
    assert "DPMSolverMultistepScheduler" in derive("SanaPipeline").undecided["scheduler_kind"]
    sana = derived_recipe("SanaPipeline")
    assert set(sana.undecided()) == {"scheduler_kind"}
    with pytest.raises(xrand.UsageError, match="the recipe of SanaPipeline must say its scheduler_kind: it "
                                               "declares DPMSolverMultistepScheduler"):
        sana.scheduler_kind
    assert derived_recipe("SanaPipeline", scheduler_kind=schedulers.FLOW).undecided() == {}
    sd3 = derive("StableDiffusion3Pipeline").undecided
    assert sd3 == {"size_multiple": "check_inputs asks height % (self.vae_scale_factor * self.patch_size)"}
    # CogVideoX's own samplers are the third kind, read from its class
    assert derive("CogVideoXPipeline").values["scheduler_kind"] == schedulers.COGVIDEOX
    assert "AmusedScheduler, which is of none of" in derive("AmusedPipeline").undecided["scheduler_kind"]


def test_a_method_given_in_place_of_a_field_settles_it():
    from xrand.pipelines.recipes.stable_diffusion_3 import StableDiffusion3Recipe

    assert derived_recipe("StableDiffusion3Pipeline", base=StableDiffusion3Recipe).undecided() == {}


def test_a_size_rule_on_the_vae_scale_factor_is_read_from_the_folder_or_the_class(tiny_folder):
    from xrand.pipelines.folder import read_folder

    flux = read_folder(tiny_folder("flux"))  # a 2x VAE: Flux packs latents 2x2
    assert derived_recipe("FluxPipeline").size_multiple_of(flux) == RECIPES["FluxPipeline"].size_multiple_of(flux) == 4
    # Lumina2Pipeline sets its vae_scale_factor to 8 whatever its VAE, and asks for multiples of twice that
    assert derived_recipe("Lumina2Pipeline").size_multiple_of(flux) == 16


def test_every_registered_derived_recipe_decides_everything():
    registered = [r for r in RECIPES.values() if isinstance(r, DerivedRecipe)]
    assert {r.pipeline: r.undecided() for r in registered} == {r.pipeline: {} for r in registered}


def test_a_class_neither_library_ships_is_a_usage_error():
    with pytest.raises(xrand.UsageError, match="neither diffusers nor mindone.diffusers here ships NopePipeline"):
        derived.pipeline_class("NopePipeline")
