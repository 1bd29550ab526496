"""Every scheduler both libraries share runs on MindSpore's CPU (with the fallbacks) and agrees
with diffusers on the digits model: the same xrand noise, a generic loop, mindone's fp32
limit 5e-3. 4 steps: diffusers' PNDMScheduler (with its default Runge-Kutta warm-up) fails
set_timesteps below 4 ("operands could not be broadcast together with shapes (6,) (8,)" at 3).
Schedulers with a Brownian tree take it from the xrand stream (pipelines.brownian)."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("torchsde")
pytest.importorskip("mindspore")
pytest.importorskip("mindone")

import xrand  # noqa: E402
from scheduler_loop import digits_unets, generic_loop, rel_l2, scheduler  # noqa: E402
from xrand.pipelines import mindspore_cpu  # noqa: E402
from xrand.pipelines.brownian import use_xrand_brownian  # noqa: E402

# (scheduler, config options, step options). The dpmsolver (not ++) variants need a final sigma
# above 0 (their update divides by it).
MATRIX = [
    ("DDIMScheduler", {}, {}), ("DDIMScheduler", {}, {"eta": 1.0}), ("DDIMParallelScheduler", {}, {"eta": 1.0}),
    ("DDPMScheduler", {}, {}), ("DDPMParallelScheduler", {}, {}), ("PNDMScheduler", {}, {}),
    ("IPNDMScheduler", {}, {}), ("EulerDiscreteScheduler", {}, {}), ("EulerDiscreteScheduler", {}, {"s_churn": 1.0}),
    ("EulerAncestralDiscreteScheduler", {}, {}), ("HeunDiscreteScheduler", {}, {}),
    ("KDPM2DiscreteScheduler", {}, {}), ("KDPM2AncestralDiscreteScheduler", {}, {}), ("LMSDiscreteScheduler", {}, {}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}, {}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver", "final_sigmas_type": "sigma_min"}, {}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}, {}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver", "final_sigmas_type": "sigma_min"}, {}),
    ("DPMSolverSinglestepScheduler", {"algorithm_type": "dpmsolver++"}, {}),
    ("DPMSolverSinglestepScheduler", {"algorithm_type": "sde-dpmsolver++"}, {}),
    ("DPMSolverSDEScheduler", {}, {}), ("UniPCMultistepScheduler", {}, {}), ("DEISMultistepScheduler", {}, {}),
    ("LCMScheduler", {}, {}), ("TCDScheduler", {}, {}), ("SASolverScheduler", {}, {}),
    ("EDMEulerScheduler", {}, {}), ("EDMEulerScheduler", {}, {"s_churn": 1.0}),
    ("EDMDPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}, {}),
    ("EDMDPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}, {}),
    ("CosineDPMSolverMultistepScheduler", {}, {}), ("CMStochasticIterativeScheduler", {}, {}),
    ("UnCLIPScheduler", {"beta_schedule": "squaredcos_cap_v2"}, {}),  # the only schedule it accepts
]


@pytest.fixture(scope="module")
def unets():
    if not mindspore_cpu.install():
        pytest.skip("the matrix is about MindSpore's CPU target")
    mindspore_cpu.tune_cpu_runtime()
    yield digits_unets()
    mindspore_cpu.uninstall()


@pytest.mark.parametrize("name, options, step_options", MATRIX,
                         ids=[f"{n}-{'-'.join(map(str, {**o, **s}.values())) or 'default'}" for n, o, s in MATRIX])
def test_scheduler_agrees_across_frameworks(unets, name, options, step_options):
    out = {}
    with xrand.patched():
        for framework in ("torch", "mindspore"):
            s = scheduler(framework, name, **options)
            use_xrand_brownian(s, xrand.Generator(1))  # a no-op for schedulers without a Brownian tree
            out[framework] = generic_loop(framework, unets[framework], s, seed=0, steps=4, **step_options)
    assert rel_l2(out["torch"], out["mindspore"]) < 5e-3
