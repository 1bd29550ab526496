"""randn_tensor against the real diffusers and mindone.diffusers randn_tensor."""
import numpy as np
import pytest

import xrand

SHAPES = [(1,), (4,), (15,), (16,), (17,), (2, 3, 5), (1, 4, 8, 8), (3, 4, 8, 8), (2, 3, 17, 3)]


# -- torch.Generator: exactly diffusers ------------------------------------------------------------
@pytest.fixture(scope="module")
def diffusers_randn():
    pytest.importorskip("torch")
    return pytest.importorskip("diffusers.utils.torch_utils").randn_tensor


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [None, "float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("per_item", [False, True])
def test_torch_generator_matches_diffusers(diffusers_randn, shape, dtype, per_item):
    import torch

    torch_dtype = None if dtype is None else getattr(torch, dtype)

    def gens():
        if per_item:
            return [torch.Generator("cpu").manual_seed(100 + i) for i in range(shape[0])]
        return torch.Generator("cpu").manual_seed(1234)

    expected = diffusers_randn(shape, generator=gens(), device=torch.device("cpu"), dtype=torch_dtype)
    got = xrand.randn_tensor(shape, generator=gens(), device="cpu", dtype=dtype)
    assert got.dtype == expected.dtype and got.device == expected.device
    assert torch.equal(got, expected)


def test_torch_generator_list_of_one_and_consecutive_calls(diffusers_randn):
    import torch

    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    for shape in [(3,), (1, 20), (2, 2), (1, 33)]:
        assert torch.equal(xrand.randn_tensor(shape, generator=[g1]), diffusers_randn(shape, generator=[g2]))


def test_torch_generator_wins_over_active_backend(diffusers_randn):
    import torch

    with xrand.use_backend("numpy"):
        got = xrand.randn_tensor((2, 3), generator=torch.Generator().manual_seed(0))
    assert isinstance(got, torch.Tensor)


def test_cuda_generator_with_cpu_target_is_refused():
    torch = pytest.importorskip("torch")

    class CudaLikeGenerator(torch.Generator):  # a CPU-only build cannot make a real one
        @property
        def device(self):
            return torch.device("cuda")

    with pytest.raises(ValueError, match="Cannot generate a cpu tensor from a generator of type cuda"):
        xrand.randn_tensor((1, 4), generator=CudaLikeGenerator(), device="cpu")


# -- numpy.random.Generator: exactly mindone.diffusers --------------------------------------------
@pytest.fixture(scope="module")
def mindone_randn():
    pytest.importorskip("mindspore")
    return pytest.importorskip("mindone.diffusers.utils.mindspore_utils").randn_tensor


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [None, "float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("per_item", [False, True])
def test_numpy_generator_matches_mindone(mindone_randn, shape, dtype, per_item):
    import mindspore as ms

    ms_dtype = None if dtype is None else getattr(ms, dtype)

    def gens():
        if per_item:
            return [np.random.default_rng(100 + i) for i in range(shape[0])]
        return np.random.default_rng(1234)

    expected = mindone_randn(shape, generator=gens(), dtype=ms_dtype)
    with xrand.use_backend("mindspore"):
        got = xrand.randn_tensor(shape, generator=gens(), dtype=dtype)
    assert isinstance(got, ms.Tensor)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    as_np = (lambda t: t.float().asnumpy()) if dtype == "bfloat16" else (lambda t: t.asnumpy())
    np.testing.assert_array_equal(as_np(got), as_np(expected))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_numpy_generator_same_numbers_on_every_backend(dtype):
    values = {}
    for name in [b.name for b in xrand.available_backends() if b.available]:
        with xrand.use_backend(name):
            tensor = xrand.randn_tensor((2, 3, 5), generator=np.random.default_rng(42), dtype=dtype)
            values[name] = xrand.backend(name).to_numpy(tensor)
    assert len(values) >= 1
    reference = np.random.default_rng(42).standard_normal((2, 3, 5)).astype(np.float32 if dtype == "bfloat16" else dtype)
    for name, got in values.items():
        if dtype != "bfloat16":
            np.testing.assert_array_equal(got, reference, err_msg=name)
        np.testing.assert_array_equal(got, values["numpy"], err_msg=name)


@pytest.mark.parametrize("stream", ["pcg64"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_xrand_generator_same_numbers_on_every_backend(stream, dtype):
    values = {}
    for name in [b.name for b in xrand.available_backends() if b.available]:
        with xrand.use_backend(name):
            tensor = xrand.randn_tensor((3, 4, 5), generator=[xrand.Generator(s, stream=stream) for s in (1, 2, 3)],
                                        dtype=dtype)
            values[name] = xrand.backend(name).to_numpy(tensor)
    for name, got in values.items():
        np.testing.assert_array_equal(got, values["numpy"], err_msg=name)


def test_pcg64_stream_is_what_mindone_draws(mindone_randn):
    import mindspore as ms

    expected = mindone_randn((2, 4, 8, 8), generator=np.random.default_rng(99), dtype=ms.float16)
    with xrand.use_backend("mindspore"):
        got = xrand.randn_tensor((2, 4, 8, 8), generator=xrand.Generator(99, stream="pcg64"), dtype="float16")
    np.testing.assert_array_equal(got.asnumpy(), expected.asnumpy())


def test_pcg64_torch_tensor_equals_mindspore_tensor():
    torch = pytest.importorskip("torch")
    ms = pytest.importorskip("mindspore")
    with xrand.use_backend("torch"):
        t = xrand.randn_tensor((1, 4, 16, 16), generator=xrand.Generator(5, stream="pcg64"), dtype=torch.float32)
    with xrand.use_backend("mindspore"):
        m = xrand.randn_tensor((1, 4, 16, 16), generator=xrand.Generator(5, stream="pcg64"), dtype=ms.float32)
    np.testing.assert_array_equal(t.numpy(), m.asnumpy())


# -- generator=None: the backend's global state ------------------------------------------------------
def test_none_on_torch_is_torch_global_state():
    torch = pytest.importorskip("torch")
    xrand.manual_seed(11)
    with xrand.use_backend("torch"):
        got = xrand.randn_tensor((2, 5))
    torch.manual_seed(11)
    assert torch.equal(got, torch.randn((2, 5)))


@pytest.mark.parametrize("name", ["numpy", "mindspore"])
def test_none_on_numpy_generator_backends_follows_manual_seed(name):
    if not [b for b in xrand.available_backends() if b.name == name and b.available]:
        pytest.skip(f"{name} not installed")
    with xrand.use_backend(name):
        xrand.manual_seed(3)
        a = xrand.backend().to_numpy(xrand.randn_tensor((4,)))
        xrand.manual_seed(3)
        b = xrand.backend().to_numpy(xrand.randn_tensor((4,)))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, np.random.default_rng(3).standard_normal(4))
