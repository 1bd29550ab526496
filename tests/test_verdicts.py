"""What a newcomer reads: each line of a verdict, alone, says what the numbers mean. The steps
that ran and why, the measured cause of a ratio or a FAIL where one is known for what ran, and a
layers culprit under a PASS as the start of a within-tolerance difference, not a failure. (The
same lines from real runs: tests/test_families.py, tests/test_html_report.py.)"""
import pytest

from xrand.compare.known import known_causes
from xrand.compare.layers import LayerReport, ModuleDiff
from xrand.compare.result import Comparison
from xrand.pipelines.settings import Settings

CPU = {"mindone": "0.5.0", "mindspore_device_target": "CPU"}


def comparison(pipeline="FluxPipeline", dtype="float32", rel_l2=6.6e-6, timesteps=(1000, 750, 500, 250), steps=4,
               strength=None, scheduler="FlowMatchEulerDiscreteScheduler", environment=CPU, layers=None):
    """A Comparison as compare_sides makes it, of a run that ran ``timesteps``."""
    numbers = {"rel_l2": rel_l2, "max_abs": 1e-5, "psnr_db": 109.0}
    return Comparison(
        settings=Settings(model="folder", steps=steps, dtype=dtype, strength=strength),
        frameworks=["torch", "mindspore"], tolerance=5e-3, final=numbers, initial_noise=numbers, global_steps=[numbers] * len(timesteps),
        local_steps=None, timesteps=list(timesteps), seconds={"torch": 1.0, "mindspore": 1.0},
        environments={"a": {}, "b": dict(environment)}, noise_floor={"rel_l2": rel_l2 / 18.8},
        ran={side: {"recipe": pipeline, "scheduler": scheduler} for side in ("a", "b")}, layers=layers)


# ---------------------------------------------------------------- known causes, keyed by what ran

def test_the_flux_float32_ratio_names_its_measured_cause_on_the_console():
    lines = comparison().summary_lines()
    assert lines[0].startswith("PASS: torch vs mindspore after 4 steps")
    assert "18.8x torch's own float32 floor" in lines[0]
    assert lines[1].startswith("known cause: mindone's sinusoidal timestep and guidance embeddings on MindSpore's CPU")
    assert len(lines) == 2


@pytest.mark.parametrize("pipeline, dtype, passed, environment, cause", [
    ("FluxImg2ImgPipeline", "float32", True, CPU, "get_timestep_embedding"),
    ("LTXPipeline", "float32", True, CPU, "scaled_dot_product_attention computes float32 attention in float16"),
    ("StableDiffusion3Pipeline", "float32", True, CPU, "sinusoidal timestep embedding"),
    ("WanPipeline", "bfloat16", False, CPU, "Wan VAE attention calls FlashAttentionScore with its default scale 1.0"),
    ("FluxPipeline", "float16", True, CPU, None),  # measured in float32 only: its ratio is about 1 in float16
    ("FluxPipeline", "float32", False, CPU, None),  # a cause of a small ratio does not explain a FAIL
    ("FluxPipeline", "float32", True, dict(CPU, mindone="0.6.0"), None),  # another version may differ
    ("FluxPipeline", "float32", True, dict(CPU, mindspore_device_target="Ascend"), None),  # not MindSpore's CPU
    ("WanPipeline", "float32", True, CPU, None),
    ("StableDiffusionPipeline", "float32", True, CPU, None),
])
def test_a_cause_is_given_only_for_the_runs_it_was_measured_on(pipeline, dtype, passed, environment, cause):
    causes = known_causes(pipeline, dtype, passed, environment)
    assert (causes == []) if cause is None else (len(causes) == 1 and cause in causes[0]), causes


def test_the_cause_comes_from_the_mindspore_sides_environment_whichever_side_it_is():
    c = comparison()
    c.frameworks, c.environments = ["mindspore", "torch"], {"a": dict(CPU), "b": {}}
    assert len(c.known_causes()) == 1
    c.environments = {"a": {}, "b": dict(CPU)}
    assert c.known_causes() == []


# ---------------------------------------------------------------- the steps that ran

@pytest.mark.parametrize("timesteps, steps, strength, scheduler, said", [
    ((801, 601, 401, 201, 1), 5, None, "DDIMScheduler", "after 5 steps,"),
    ((501, 401, 301, 201, 101, 1), 10, 0.5, "PNDMScheduler",
     "after 6 scheduler steps (--steps 10: --strength 0.5 runs only the last part of the schedule),"),
    ((901, 801, 801, 701, 601), 4, None, "PNDMScheduler",
     "after 5 scheduler steps (--steps 4: PNDMScheduler steps twice at 1 timestep),"),
])
def test_the_verdict_says_the_scheduler_steps_that_ran_and_why_they_are_not_the_steps_asked(timesteps, steps, strength,
                                                                                            scheduler, said):
    c = comparison("StableDiffusionImg2ImgPipeline", timesteps=timesteps, steps=steps, strength=strength,
                   scheduler=scheduler)
    assert said in c.verdict()


def test_the_pipelines_default_strength_is_named_when_no_strength_was_given():
    c = comparison("StableDiffusionImg2ImgPipeline", timesteps=range(8), steps=10, scheduler="DDIMScheduler")
    assert c.steps_ran() == {"count": 8, "asked": 10,
                             "why": "the pipeline's default strength runs only the last part of the schedule"}


# ---------------------------------------------------------------- a layers culprit under a PASS

def layer_report():
    modules = [ModuleDiff("", "UNet2DModel", 0, 3e-6, 1e-7, 1e-5, nested=1, limit=1e-6),
               ModuleDiff("time_proj", "Timesteps", 0, 4e-5, 4e-5, 1e-4, limit=3e-5)]
    return LayerReport(threshold=1e-6, modules=modules, culprit="time_proj", unmatched={}, step=0, timestep=999.0)


def test_under_a_pass_the_culprit_is_where_the_within_tolerance_difference_starts():
    line = comparison(layers=layer_report()).summary_lines()[-1]
    assert line.startswith("layers at step 0 (timestep 999): the run passes: its difference from torch, within "
                           "tolerance, starts at time_proj (Timesteps), local relative L2 4e-05 > 3e-05")
    assert "parts from" not in line


def test_under_a_fail_the_culprit_is_where_mindspore_parts_from_torch():
    line = comparison(rel_l2=0.1, layers=layer_report()).summary_lines()[-1]
    assert line.startswith("layers at step 0 (timestep 999): MindSpore parts from torch at time_proj (Timesteps)")
    assert layer_report().summary().startswith("layers at step 0 (timestep 999): MindSpore parts from torch at")
