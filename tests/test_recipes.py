"""Any pipeline and scheduler both libraries ship: recipes, scheduler swaps, lockstep, bad input.

Tests of the torch side alone run without MindSpore; those that take the ``mindone`` or ``ms``
fixture (conftest.py), or a pair of sides, skip there."""
import dataclasses
import json
import shutil

import numpy as np
import pytest

import xrand

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from conftest import make_tiny_model, run_python  # noqa: E402
from xrand.compare import compare_loaded, compare_sides, load_pair, make_plan  # noqa: E402
from xrand.compare.sides import Everything, load, run  # noqa: E402
from xrand.pipelines import schedulers  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402

PROMPT = dict(prompt="a red circle", negative_prompt="blue")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("recipes") / "model")


@pytest.fixture(scope="module")
def tiny_pair(tiny_model, mindone):
    return load_pair(Settings(model=tiny_model, steps=2, batch_size=1))


@pytest.fixture(scope="module")
def tiny_torch(tiny_model):
    """The torch side alone (as ``tiny_pair.torch``)."""
    return load(make_plan(Settings(model=tiny_model, steps=2, batch_size=1), frameworks=["torch"]), "torch")


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory):
    from xrand.models.tiny_sd import build_tiny_sd

    return str(build_tiny_sd(tmp_path_factory.mktemp("sd") / "model", seed=0))


def tiny(model, **kw):
    return Settings(**dict(dict(model=model, steps=2, seed=1, batch_size=1), **kw))


def plan(model, mode="pynative", lockstep=False, **kw):
    """PyNative unless a test is about graph mode (conftest.PYNATIVE says why)."""
    return make_plan(tiny(model, **kw), mindspore_mode=mode, lockstep=lockstep)


# -- the scheduler a folder declares is the one that runs ---------------------------------------------------------
@pytest.fixture(scope="module")
def euler_a_folder(tiny_model, tmp_path_factory):
    """The tiny DDIMPipeline folder, its scheduler_config.json declaring EulerAncestral."""
    folder = tmp_path_factory.mktemp("euler-a") / "model"
    shutil.copytree(tiny_model, folder)
    path = folder / "scheduler" / "scheduler_config.json"
    config = json.loads(path.read_text())
    config["_class_name"] = "EulerAncestralDiscreteScheduler"
    path.write_text(json.dumps(config))
    index = json.loads((folder / "model_index.json").read_text())
    index["_class_name"], index["scheduler"] = "DDIMPipeline", ["diffusers", "EulerAncestralDiscreteScheduler"]
    (folder / "model_index.json").write_text(json.dumps(index))
    return str(folder)


def test_folder_declaring_euler_ancestral_runs_euler_ancestral_not_ddim(euler_a_folder, mindone, tmp_path):
    from xrand.compare import compare_frameworks
    from xrand.report.compare import write_report

    c = compare_frameworks(tiny(euler_a_folder, steps=3), mindspore_mode="pynative")
    for side in ("a", "b"):
        assert c.ran[side]["scheduler"] == "EulerAncestralDiscreteScheduler"
        assert c.ran[side]["pipeline"] == "denoising_loop"  # DDIMPipeline would turn it into DDIM
        assert c.ran[side]["noise_draws"] == 3 * 64  # one 8x8 draw per ancestral step
    # the same draws; x init_noise_sigma (14.6, computed by each library) differs in the last float32 bits
    assert c.passed and c.initial_noise["rel_l2"] < 1e-6, c.verdict()
    report = json.load(open(write_report(c, str(tmp_path))["report.json"]))
    assert report["settings"]["ran"]["a"]["scheduler"] == "EulerAncestralDiscreteScheduler"
    assert report["settings"]["ran"]["b"]["scheduler_config"]["timestep_spacing"] == "leading"


def test_generic_loop_equals_diffusers_own_pipeline_for_euler_ancestral(tiny_model):
    """The loop does what a library pipeline that honours the scheduler does (as StableDiffusion's)."""
    from diffusers import EulerAncestralDiscreteScheduler, UNet2DModel

    p = plan(tiny_model, scheduler="euler-a", steps=3)
    side = run(load(p, "torch"), p)
    unet = UNet2DModel.from_pretrained(tiny_model, subfolder="unet")
    scheduler = EulerAncestralDiscreteScheduler.from_pretrained(tiny_model, subfolder="scheduler")
    scheduler.set_timesteps(3)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn((1, 1, 8, 8), generator=generator) * scheduler.init_noise_sigma
    with torch.no_grad():
        for t in scheduler.timesteps:
            eps = unet(scheduler.scale_model_input(x, t), t).sample
            x = scheduler.step(eps, t, x, generator=generator).prev_sample
    np.testing.assert_array_equal(side.states[-1], x.numpy())


def test_ddpm_pipeline_agrees_in_lockstep(mindone, tiny_model):
    """DDPMPipeline itself (its scheduler, DDPM, as the folder's config builds it): noise at every step."""
    from xrand.compare import compare_frameworks

    c = compare_frameworks(plan(tiny_model, lockstep=True, pipeline="DDPMPipeline", scheduler="ddpm"))
    assert c.ran["a"]["pipeline"] == c.ran["b"]["pipeline"] == "DDPMPipeline"
    assert c.ran["a"]["noise_draws"] == c.ran["b"]["noise_draws"] == 64  # one 8x8 draw per step but the last
    assert c.passed and all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps), c.verdict()


def test_sides_whose_classes_differ_are_not_comparable(tiny_pair, tiny_model):
    c = compare_loaded(tiny_pair, plan(tiny_model, scheduler="euler"))
    assert c.passed
    a = run(tiny_pair.torch, plan(tiny_model, scheduler="euler"))
    b = run(tiny_pair.mindspore, plan(tiny_model, scheduler="euler"))
    b.ran = dict(b.ran, scheduler="HeunDiscreteScheduler")
    with pytest.raises(xrand.UsageError, match="scheduler run: 'EulerDiscreteScheduler' vs 'HeunDiscreteScheduler'"):
        compare_sides(a, b)


# -- every scheduler, lockstep included --------------------------------------------------------------------------
@pytest.mark.parametrize("name, options, draws", [
    ("HeunDiscreteScheduler", {}, 0),  # second order: 2 * steps - 1 step calls
    ("KDPM2AncestralDiscreteScheduler", {}, 64),  # noise in the second half of a step, none in the last
    ("EulerDiscreteScheduler", {"s_churn": 1.0}, 2 * 64),  # a step() argument
    ("DDIMScheduler", {"eta": 1.0}, 2 * 64),  # DDIMPipeline itself, with eta as a step option
    ("UnCLIPScheduler", {"beta_schedule": "squaredcos_cap_v2"}, 64),  # prev_timestep as UnCLIPPipeline passes it
])
def test_lockstep_for_any_scheduler(tiny_pair, tiny_model, name, options, draws):
    c = compare_loaded(tiny_pair, plan(tiny_model, lockstep=True, scheduler=name, scheduler_options=options))
    assert c.passed, c.verdict()
    assert c.ran["a"]["pipeline"] == ("DDIMPipeline" if name == "DDIMScheduler" else "denoising_loop")
    assert c.ran["a"]["noise_draws"] == c.ran["b"]["noise_draws"] == draws
    second_order = name.startswith(("Heun", "KDPM2"))
    assert len(c.local_steps) == len(c.timesteps) == (3 if second_order else 2)
    assert all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps)


_KDPM2A_TIMESTEPS = """
import os, json
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core: MindSpore's kernels on one thread
from xrand.mindspore_cpu import tune_cpu_runtime
tune_cpu_runtime()
from xrand.patch import patched
with patched(["mindone.diffusers"]):
    from mindone.diffusers import KDPM2AncestralDiscreteScheduler
    scheduler = KDPM2AncestralDiscreteScheduler.from_config(json.loads(os.environ["KDPM2A_CONFIG"]))
    scheduler.set_timesteps(4)
    print(json.dumps(scheduler.timesteps.asnumpy().astype(float).tolist()))
"""


def test_kdpm2_ancestral_timesteps_are_the_same_schedule_with_mindspore_on_one_thread(mindone, tiny_model):
    """mindone's KDPM2 ancestral timesteps, MindSpore's kernels on one thread (a sweep worker's
    count): its interpolated sigmas round otherwise (sqrt of a cancellation), its last
    interpolated timestep is 0.00117 where diffusers' is 0 on this machine: the same schedule
    (result.same_timesteps). A whole timestep apart is another schedule."""
    import diffusers

    from xrand.compare.result import same_timesteps

    config = json.load(open(f"{tiny_model}/scheduler/scheduler_config.json"))  # the matrix's model's
    torch_side = diffusers.KDPM2AncestralDiscreteScheduler.from_config(config)
    torch_side.set_timesteps(4)
    expected = torch_side.timesteps.numpy().astype(float).tolist()
    done = run_python(_KDPM2A_TIMESTEPS, env={"KDPM2A_CONFIG": json.dumps(config)})
    assert done.returncode == 0, done.stderr
    one_thread = json.loads(done.stdout.strip().splitlines()[-1])
    assert same_timesteps(expected, one_thread), (expected, one_thread)
    assert not same_timesteps([999.0, 750.0], [999.0, 749.0])
    assert not same_timesteps(expected, expected[:-1])


def test_the_reference_run_records_each_denoiser_call_and_step_and_lockstep_feeds_them(tiny_pair, tiny_model):
    p = plan(tiny_model, scheduler="lms")
    side = run(tiny_pair.torch, p, record_calls=Everything(), record_steps=True)
    recording = side.recording
    assert len(recording.calls) == len(recording.steps) == 2
    calls = [recording.call(0), recording.call(1)]
    steps = [recording.step(0), recording.step(1)]
    assert set(calls[0]) == {"sample", "timestep", "return_dict"}  # by parameter name
    assert calls[1]["sample"].array.shape == (1, 1, 8, 8) and calls[1]["sample"].dtype == "float32"
    assert float(calls[1]["timestep"].array) == side.timesteps[1]
    np.testing.assert_array_equal(steps[1]["sample"], side.states[0])
    np.testing.assert_array_equal(steps[1]["prev_sample"], side.states[1])
    # torch fed its own recording reproduces itself exactly; MindSpore fed it stays local
    for loaded, limit in ((tiny_pair.torch, 0.0), (tiny_pair.mindspore, 1e-5)):
        fed = run(loaded, p, feed=side.recording).local_steps
        assert [r["timestep"] for r in fed] == side.timesteps
        assert all(r["sample"]["rel_l2"] <= limit and r["model_output"]["rel_l2"] <= limit for r in fed), fed


# -- text to image --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sd_pair(tiny_sd, mindone):
    return load_pair(tiny(tiny_sd, **PROMPT))


@pytest.mark.parametrize("scheduler", [None, "euler-a", "dpm++-2m-sde"])
def test_stable_diffusion_agrees_with_guidance_and_lockstep(sd_pair, tiny_sd, scheduler):
    c = compare_loaded(sd_pair, plan(tiny_sd, lockstep=True, scheduler=scheduler, guidance_scale=7.5, **PROMPT))
    assert c.ran["a"]["pipeline"] == c.ran["b"]["pipeline"] == "StableDiffusionPipeline"
    assert c.ran["a"]["scheduler"] == (schedulers.resolve(scheduler)[0] if scheduler else "PNDMScheduler")
    # the same draws (x init_noise_sigma, computed by each library, for Euler-type schedulers)
    assert c.initial_noise["max_abs"] == 0.0 if scheduler is None else c.initial_noise["rel_l2"] < 1e-6
    assert c.images["a"].shape == (1, 32, 32, 3)
    assert c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    assert all(r["model_output"]["rel_l2"] < 1e-4 and r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps)
    if scheduler:  # ancestral and SDE samplers draw one latent-sized noise per step from the xrand generator
        assert c.ran["a"]["noise_draws"] == c.ran["b"]["noise_draws"] == 2 * 4 * 16 * 16


def test_stable_diffusion_in_graph_mode_gives_pynatives_bits(sd_pair, tiny_sd):
    """Text encoder, UNet and VAE compiled; their Linear layers as PyNative's (xrand.frameworks.mindspore_graph)."""
    graph = run(sd_pair.mindspore, plan(tiny_sd, "graph", guidance_scale=7.5, **PROMPT))
    pynative = run(sd_pair.mindspore, plan(tiny_sd, "pynative", guidance_scale=7.5, **PROMPT))
    np.testing.assert_array_equal(graph.images, pynative.images)


def test_stable_diffusion_guidance_changes_the_images(tiny_sd):
    guided = plan(tiny_sd, guidance_scale=7.5, **PROMPT)
    sd_torch = load(guided, "torch")
    plain = run(sd_torch, plan(tiny_sd, guidance_scale=1.0, **PROMPT))
    guided = run(sd_torch, guided)
    assert np.abs(guided.images - plain.images).max() > 1e-3


def test_stable_diffusion_without_prompt_is_a_usage_error(tiny_sd):
    with pytest.raises(xrand.UsageError, match=r"StableDiffusionPipeline needs a prompt: give it --prompt"):
        plan(tiny_sd)


def test_an_input_the_pipeline_does_not_take_is_refused_naming_the_ones_it_takes(tiny_model):
    with pytest.raises(xrand.UsageError, match=r"DDIMPipeline takes no prompt \(--prompt 'a cat'\); its inputs: none"):
        plan(tiny_model, prompt="a cat")


# -- bad input --------------------------------------------------------------------------------------------------------
def test_unknown_scheduler_option_names_it_and_the_accepted_keys(tiny_model):
    with pytest.raises(xrand.UsageError, match=r"EulerDiscreteScheduler has no option 'karras'; accepted: config keys "
                                               r"num_train_timesteps, .*use_karras_sigmas.*; step arguments s_churn"):
        plan(tiny_model, scheduler="euler", scheduler_options={"karras": True})


def test_a_value_the_scheduler_refuses_is_a_usage_error(tiny_torch, tiny_model):
    with pytest.raises(xrand.UsageError, match="DPMSolverMultistepScheduler refused its config"):
        run(tiny_torch, plan(tiny_model, scheduler="dpm++-2m", scheduler_options={"algorithm_type": "nope"}))


def test_pndm_with_too_few_steps_says_why(tiny_model):
    with pytest.raises(xrand.UsageError, match="PNDMScheduler with Runge-Kutta steps needs at least 4 steps, got 2"):
        plan(tiny_model, scheduler="pndm")


def test_folder_missing_a_component_names_it(tiny_model):
    with pytest.raises(xrand.UsageError, match=r"declares no vae in model_index.json; StableDiffusionPipeline needs "
                                               r"unet, vae, text_encoder, tokenizer, scheduler \(the folder is a "
                                               r"DDIMPipeline folder\)"):
        plan(tiny_model, pipeline="stablediffusionpipeline", **PROMPT)


def test_a_folder_of_another_pipeline_is_refused_before_work(tiny_model, tiny_sd):
    with pytest.raises(xrand.UsageError, match=r"has a UNet2DConditionModel as its unet; DDIMPipeline takes "
                                               r"UNet2DModel \(the folder is a StableDiffusionPipeline folder\)"):
        plan(tiny_sd, pipeline="DDIMPipeline")


def test_folder_declaring_a_flow_matching_scheduler_is_refused_before_work(tiny_model, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    path = folder / "scheduler" / "scheduler_config.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), _class_name="FlowMatchEulerDiscreteScheduler")))
    with pytest.raises(xrand.UsageError, match="scheduler FlowMatchEulerDiscreteScheduler cannot drive DDIMPipeline, "
                                               "a noise-prediction .* model: it drives a flow-matching"):
        plan(str(folder))
    with pytest.raises(xrand.UsageError, match="scheduler FlowMatchEulerDiscreteScheduler cannot drive DDIMPipeline"):
        plan(tiny_model, scheduler="FlowMatchEulerDiscrete")


def test_scheduler_names_aliases_and_options():
    assert schedulers.resolve("eulerancestraldiscretescheduler") == ("EulerAncestralDiscreteScheduler", {})
    assert schedulers.resolve("UniPCMultistep") == ("UniPCMultistepScheduler", {})
    assert schedulers.resolve("dpm++-2m-sde") == ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"})
    assert schedulers.parse_option("use_karras_sigmas=true") == ("use_karras_sigmas", True)
    assert schedulers.parse_option("algorithm_type=sde-dpmsolver++") == ("algorithm_type", "sde-dpmsolver++")
    assert schedulers.parse_option("s_churn=1e-1") == ("s_churn", 0.1)
    with pytest.raises(xrand.UsageError, match="expected KEY=VALUE"):
        schedulers.parse_option("karras")


def test_every_listed_scheduler_exists_in_both_libraries(mindone):
    import diffusers.schedulers as pt_schedulers
    import mindone.diffusers.schedulers as ms_schedulers

    for name in schedulers.known_names():
        assert hasattr(pt_schedulers, name) and hasattr(ms_schedulers, name), name
    assert {name for name, _ in schedulers.MATRIX} == set(schedulers.NOISE_SCHEDULERS)
    for kind, matrix in schedulers.MATRICES.items():
        assert all(schedulers.kind_of(name, options) == kind for name, options in matrix)


def test_mindspore_device_target_and_mode_are_restored_after_a_run(tiny_pair, tiny_model, ms):
    before = (ms.get_context("device_target"), ms.get_context("mode"))
    loaded = dataclasses.replace(tiny_pair.mindspore, device="CPU")
    run(loaded, plan(tiny_model, "graph"))
    assert (ms.get_context("device_target"), ms.get_context("mode")) == before


def test_side_files_carry_the_scheduler_and_what_ran(tiny_pair, tiny_model, tmp_path):
    from xrand.compare.sidefile import load_side, save_side

    p = plan(tiny_model, scheduler="dpm++-2m-sde", scheduler_options={"use_karras_sigmas": True})
    a = load_side(save_side(run(tiny_pair.torch, p), str(tmp_path / "pt.safetensors")))
    b = load_side(save_side(run(tiny_pair.mindspore, p), str(tmp_path / "ms.safetensors")))
    assert a.settings == p.settings
    assert a.ran["scheduler"] == "DPMSolverMultistepScheduler" and a.ran["scheduler_config"]["use_karras_sigmas"]
    assert compare_sides(a, b).passed
    other = load_side(save_side(run(tiny_pair.mindspore, plan(tiny_model, scheduler="euler")),
                                str(tmp_path / "euler.safetensors")))
    with pytest.raises(xrand.UsageError, match="not comparable: scheduler: 'DPMSolverMultistepScheduler' vs "
                                               "'EulerDiscreteScheduler'"):
        compare_sides(a, other)
