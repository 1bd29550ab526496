"""Bad input to randn_tensor gets a typed exception that names the value and what is accepted."""
import numpy as np
import pytest

import xrand


def pcg(seed=0):
    return xrand.Generator(seed, stream="pcg64")


@pytest.mark.parametrize(
    "shape, error, match",
    [
        ((2, -1), ValueError, r"non-negative integers, got \(2, -1\)"),
        ((2, 1.5), TypeError, r"entry 1.5 is a float"),
        ("abc", TypeError, "shape must be a tuple or list"),
        (None, TypeError, "shape must be a tuple or list"),
        ((True, 2), TypeError, "entry True is a bool"),
        ((2**31, 2**31), ValueError, "more than the limit"),
    ],
)
def test_bad_shapes(shape, error, match):
    with xrand.use_backend("numpy"), pytest.raises(error, match=match):
        xrand.randn_tensor(shape, generator=pcg())


def test_huge_numel_is_refused_before_allocating():
    # 2**40 values would be 4 TiB: the check must come before any allocation.
    with xrand.use_backend("numpy"), pytest.raises(ValueError, match="more than the limit"):
        xrand.randn_tensor((2**20, 2**20, 2), generator=pcg())


@pytest.mark.parametrize("generator", [lambda: pcg(), lambda: np.random.default_rng(0)])
def test_tensor_larger_than_memory_is_refused_before_allocating(generator):
    from xrand.checks import physical_memory

    too_many = physical_memory() // 4 + 1
    with xrand.use_backend("numpy"), pytest.raises(ValueError, match="GiB of memory"):
        xrand.randn_tensor((too_many,), generator=generator())
    with pytest.raises(ValueError, match="GiB of memory"):
        pcg().normal((too_many,))


@pytest.mark.parametrize("dtype", ["int8", "float8", "complex64", np.int32])
def test_unknown_dtype(dtype):
    with xrand.use_backend("numpy"), pytest.raises(ValueError, match="unknown dtype .*accepted: float16, bfloat16"):
        xrand.randn_tensor((2,), generator=pcg(), dtype=dtype)


def test_unknown_device_on_numpy():
    with xrand.use_backend("numpy"), pytest.raises(ValueError, match="unknown device 'cuda' for the numpy backend"):
        xrand.randn_tensor((2,), generator=pcg(), device="cuda")


def test_unknown_device_on_torch():
    pytest.importorskip("torch")
    with xrand.use_backend("torch"), pytest.raises(ValueError, match="unknown device 'gpu0' for the torch backend"):
        xrand.randn_tensor((2,), generator=pcg(), device="gpu0")


def test_mindspore_device_must_be_the_context_target():
    pytest.importorskip("mindspore")
    with xrand.use_backend("mindspore"):
        with pytest.raises(ValueError, match="unknown MindSpore device .tpu."):
            xrand.randn_tensor((2,), generator=pcg(), device="tpu")
        with pytest.raises(ValueError, match="device 'Ascend' is not MindSpore's device_target 'CPU'"):
            xrand.randn_tensor((2,), generator=pcg(), device="Ascend")
        assert xrand.randn_tensor((2,), generator=pcg(), device="CPU").shape == (2,)


@pytest.mark.parametrize("n", [2, 4])
def test_generator_list_must_match_batch(n):
    with xrand.use_backend("numpy"), pytest.raises(ValueError, match=f"got {n} generators for a batch of 3"):
        xrand.randn_tensor((3, 4), generator=[pcg(i) for i in range(n)])


def test_empty_generator_list():
    with xrand.use_backend("numpy"), pytest.raises(ValueError, match="generator list is empty"):
        xrand.randn_tensor((3, 4), generator=[])


def test_mixed_generator_kinds():
    with xrand.use_backend("numpy"), pytest.raises(TypeError, match=r"mixes kinds \['numpy', 'xrand'\]"):
        xrand.randn_tensor((2, 4), generator=[pcg(), np.random.default_rng(0)])


@pytest.mark.parametrize("generator", [42, "seed", np.random.RandomState(0)])
def test_not_a_generator(generator):
    with xrand.use_backend("numpy"), pytest.raises(TypeError, match="generator must be an xrand.Generator"):
        xrand.randn_tensor((2,), generator=generator)


def test_mindspore_generator_is_not_accepted():
    ms = pytest.importorskip("mindspore")
    with pytest.raises(TypeError, match="generator must be an xrand.Generator.*got .*Generator"):
        xrand.randn_tensor((2,), generator=ms.Generator())


def test_layout_only_on_torch():
    with xrand.use_backend("numpy"), pytest.raises(ValueError, match="layout='strided' is only accepted by the torch"):
        xrand.randn_tensor((2,), generator=pcg(), layout="strided")


def test_torch_generator_without_torch_installed_is_impossible_but_backend_without_framework_is_clear():
    class Missing(xrand.backends.Backend):
        name, module = "missing", "no_such_framework_here"

    xrand.register_backend("missing", Missing)
    with xrand.use_backend("missing"), pytest.raises(xrand.UsageError, match="no_such_framework_here is not installed"):
        xrand.randn_tensor((2,), generator=pcg())


def test_spawn_count():
    with pytest.raises(ValueError, match="non-negative integer count, got -1"):
        pcg().spawn(-1)


def test_differing_names_each_differing_key_as_deep_as_asked():
    """What a folder of other settings is refused with (compare's and sweep's --out)."""
    from xrand.checks import differing

    written = {"settings": {"steps": 1, "scheduler": {"eta": 0}}, "seed": 0, "gone": 1}
    now = {"settings": {"steps": 2, "scheduler": {"eta": 1}}, "seed": 0}
    assert differing(written, now) == [("gone", 1, None), ("settings.scheduler.eta", 0, 1), ("settings.steps", 1, 2)]
    assert differing(written, now, depth=1) == [("gone", 1, None), ("settings.scheduler", {"eta": 0}, {"eta": 1}),
                                                ("settings.steps", 1, 2)]
    assert differing(written, written) == []
