"""Brownian-tree noise from the xrand stream: a real Brownian motion, the same draws in diffusers
and mindone, no global RNG touched, and the SDE schedulers agreeing across frameworks."""
import numpy as np
import pytest

import xrand
from xrand.brownian import BrownianNoiseSampler, BrownianPath

SDE_SCHEDULERS = ["DPMSolverSDEScheduler", "CosineDPMSolverMultistepScheduler"]


# ---------------------------------------------------------------- the path itself

def test_the_first_time_is_the_reference_and_a_chain_of_intervals_costs_one_draw_each():
    g, twin = xrand.Generator(3), xrand.Generator(3)
    sampler = BrownianNoiseSampler((2, 3), g)
    for s, t in [(14.6, 9.0), (9.0, 3.5), (3.5, 0.0)]:  # Cosine's pattern: adjacent intervals, downwards
        np.testing.assert_array_equal(sampler(s, t), twin.normal((2, 3)))


def test_increments_add_up_and_repeated_times_reuse_their_value():
    path = BrownianPath((4,), xrand.Generator(0))
    whole = path.increment(10.0, 1.0)
    parts = path.increment(10.0, 4.0) + path.increment(4.0, 1.0)  # 4.0 is bridged inside (1, 10)
    np.testing.assert_allclose(parts, whole, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(path.value(4.0 * (1 + 1e-7)), path.value(4.0))  # within tol
    assert path.times == [1.0, 4.0, 10.0]


def test_overlapping_increments_have_brownian_covariances_as_torchsde_does():
    """DPMSolverSDE asks (sigma, sigma_mid), then (sigma, sigma_next): their normalised noises
    correlate as sqrt((sigma - sigma_mid) / (sigma - sigma_next)); torchsde's tree agrees."""
    torch = pytest.importorskip("torch")
    torchsde = pytest.importorskip("torchsde")
    sigma, mid, nxt, n = 10.0, 6.0, 2.0, 200_000
    expected = np.sqrt((sigma - mid) / (sigma - nxt))
    ours = BrownianNoiseSampler((n,), xrand.Generator(1))
    a, b = ours(sigma, mid), ours(sigma, nxt)
    tree = torchsde.BrownianInterval(t0=nxt, t1=sigma, size=(n,), dtype=torch.float64, entropy=1, tol=1e-6,
                                     pool_size=24, halfway_tree=True)
    ta = (-tree(mid, sigma) / np.sqrt(sigma - mid)).numpy()  # diffusers' sign flip for t0 > t1
    tb = (-tree(nxt, sigma) / np.sqrt(sigma - nxt)).numpy()
    for x, y in ((a, b), (ta, tb)):
        assert abs(x.std() - 1) < 0.01 and abs(y.std() - 1) < 0.01
        assert abs(np.corrcoef(x, y)[0, 1] - expected) < 0.01
    assert abs(np.corrcoef(a, b)[0, 1] - np.corrcoef(ta, tb)[0, 1]) < 0.01


def test_one_generator_per_batch_item_gives_each_item_its_own_path():
    batched = BrownianNoiseSampler((2, 5), [xrand.Generator(1), xrand.Generator(2)])
    single = BrownianNoiseSampler((5,), xrand.Generator(2))
    for s, t in [(3.0, 2.0), (3.0, 1.0)]:
        np.testing.assert_array_equal(batched(s, t)[1], single(s, t))


def test_bad_input_is_refused_with_a_usage_error():
    with pytest.raises(xrand.UsageError, match="xrand.Generator"):
        BrownianPath((2,), np.random.default_rng(0))
    with pytest.raises(xrand.UsageError, match="3 generators"):
        BrownianNoiseSampler((2, 4), [xrand.Generator(i) for i in range(3)])
    with pytest.raises(xrand.UsageError, match="finite"):
        BrownianNoiseSampler((2,), xrand.Generator(0))(float("nan"), 1.0)


# ---------------------------------------------------------------- both libraries' schedulers

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("torchsde")

from scheduler_loop import digits_unets, generic_loop, rel_l2, scheduler as _scheduler  # noqa: E402


@pytest.fixture(scope="module")
def unets():
    pytest.importorskip("mindspore")
    pytest.importorskip("mindone")
    from xrand import mindspore_cpu

    mindspore_cpu.install()
    mindspore_cpu.tune_cpu_runtime()
    yield digits_unets()
    mindspore_cpu.uninstall()


def _run(framework, unets, name, brownian_seed, record=None):
    from xrand.pipelines.brownian import use_xrand_brownian

    scheduler = _scheduler(framework, name)
    if brownian_seed is not False:
        generator = None if brownian_seed is None else xrand.Generator(brownian_seed)
        if generator is not None and record is not None:
            draw = generator.normal
            generator.normal = lambda *a: record.append(draw(*a)) or record[-1]
        assert use_xrand_brownian(scheduler, generator) is True
    with xrand.patched():
        return generic_loop(framework, unets[framework], scheduler, seed=5)


@pytest.mark.parametrize("name", SDE_SCHEDULERS)
def test_both_libraries_draw_the_same_numbers_and_agree(unets, name):
    draws = {"torch": [], "mindspore": []}
    out = {fw: _run(fw, unets, name, 11, draws[fw]) for fw in ("torch", "mindspore")}
    assert len(draws["torch"]) == len(draws["mindspore"]) > 0
    for a, b in zip(draws["torch"], draws["mindspore"]):
        np.testing.assert_array_equal(a, b)
    assert rel_l2(out["torch"], out["mindspore"]) < 5e-3  # measured 1.3e-6 (SDE), 8.3e-7 (Cosine)
    # without the shared noise the two libraries are far apart (measured 0.76 and 1.4)
    assert rel_l2(out["torch"], _run("mindspore", unets, name, False)) > 5e-3


@pytest.mark.parametrize("name", SDE_SCHEDULERS)
def test_the_noise_each_step_gets_is_the_same_on_both_sides(unets, name, monkeypatch):
    from xrand.pipelines import brownian

    noise = {"torch": [], "mindspore": []}
    call = brownian.XrandNoiseSampler.__call__

    def recording(self, sigma, sigma_next):
        tensor = call(self, sigma, sigma_next)
        noise[self.framework].append(tensor.numpy() if self.framework == "torch" else tensor.asnumpy())
        return tensor

    monkeypatch.setattr(brownian.XrandNoiseSampler, "__call__", recording)
    for fw in ("torch", "mindspore"):
        _run(fw, unets, name, 11)
    assert len(noise["torch"]) == len(noise["mindspore"]) > 0
    for a, b in zip(noise["torch"], noise["mindspore"]):
        if name == "CosineDPMSolverMultistepScheduler":  # adjacent intervals: one draw each, same bits
            np.testing.assert_array_equal(a, b)
        else:  # second-order steps bridge between the sides' own sigmas (a few float32 ulps apart)
            np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)


@pytest.mark.parametrize("name", SDE_SCHEDULERS)
def test_no_global_random_state_is_read_or_changed(unets, name):
    np.random.seed(0)
    torch.manual_seed(0)
    np_state, torch_state = np.random.get_state(), torch.random.get_rng_state()
    first = {fw: _run(fw, unets, name, None) for fw in ("torch", "mindspore")}  # unseeded: OS entropy
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    after = np.random.get_state()
    assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and after[2:] == np_state[2:]
    np.random.seed(0)
    torch.manual_seed(0)
    again = {fw: _run(fw, unets, name, None) for fw in ("torch", "mindspore")}
    for fw in first:  # the same global seeds, different noise: unseeded runs do not depend on them
        assert rel_l2(first[fw], again[fw]) > 5e-3


def test_the_sampler_is_rebuilt_after_set_timesteps_and_continues_the_stream(unets):
    from xrand.pipelines.brownian import use_xrand_brownian

    outs = {}
    for fw in ("torch", "mindspore"):
        scheduler = _scheduler(fw, "DPMSolverSDEScheduler")
        use_xrand_brownian(scheduler, xrand.Generator(2))
        with xrand.patched():
            outs[fw] = [generic_loop(fw, unets[fw], scheduler, seed=5, steps=3) for _ in range(2)]
    assert rel_l2(outs["torch"][0], outs["torch"][1]) > 5e-3  # new noise on the second run...
    for i in range(2):  # ...and the same on both sides
        assert rel_l2(outs["torch"][i], outs["mindspore"][i]) < 5e-3


def test_schedulers_without_a_brownian_tree_are_left_alone():
    from xrand.pipelines.brownian import use_xrand_brownian

    scheduler = _scheduler("torch", "EulerAncestralDiscreteScheduler")
    step = scheduler.step
    assert use_xrand_brownian(scheduler, xrand.Generator(0)) is False
    assert scheduler.step == step
    with pytest.raises(xrand.UsageError, match="xrand.Generator"):
        use_xrand_brownian(_scheduler("torch", "DPMSolverSDEScheduler"), 7)
