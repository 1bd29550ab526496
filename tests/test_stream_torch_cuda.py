"""The torch-cuda stream: Philox words, torch's kernel mapping and offsets, state handling.

Without a GPU the values are checked against a literal, one-thread-at-a-time transcription of
torch's grid-stride kernel (values printed on real GPUs: test_torch_cuda_known_answers.py);
with one, against torch.
"""
import importlib.util
import json
import struct
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import assert_forked_child_continues
from xrand.numeric import float32_to_bfloat16_values
from xrand.streams import make_stream
from xrand.streams import torch_cuda
from xrand.streams.torch_cuda import (
    TorchCUDAStream, parse_torch_state, philox4x32_10, torch_state_bytes,
)

DTYPES = ("float16", "bfloat16", "float32", "float64")
HAVE_NUMBA = importlib.util.find_spec("numba") is not None
needs_numba = pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
ENGINES = ["numpy", pytest.param("numba", marks=needs_numba)]


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


# -- Philox4x32-10 known answers (Random123 kat_vectors, cuRAND curand_Philox4x32_10) ---------

@pytest.mark.parametrize("counter, key, expected", [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
])
def test_philox_known_answers(counter, key, expected):
    out = philox4x32_10(np.array(counter, dtype=np.uint32), np.array(key, dtype=np.uint32))
    assert out.dtype == np.uint32
    assert out.tolist() == expected


def test_philox_vectorises_over_counters_and_keys():
    counters = np.array([[0, 0xFFFFFFFF], [0, 0xFFFFFFFF], [0, 0xFFFFFFFF], [0, 0xFFFFFFFF]])
    keys = np.array([[0, 0xFFFFFFFF], [0, 0xFFFFFFFF]])
    out = philox4x32_10(counters, keys)
    assert out[:, 0].tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert out[:, 1].tolist() == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


def test_philox_rejects_bad_words():
    with pytest.raises(ValueError, match="shape"):
        philox4x32_10([0, 0, 0], [0, 0])
    with pytest.raises(ValueError, match="32-bit"):
        philox4x32_10([2**32, 0, 0, 0], [0, 0])


# -- a literal transcription of distribution_elementwise_grid_stride_kernel ----------------------

def _kernel_reference(seed, offset, n, unroll, threads):
    """One thread at a time, as DistributionTemplates.h runs it (slow; small n only)."""
    out = np.full(n, np.nan)
    key = [seed & 0xFFFFFFFF, seed >> 32]
    rounded_size = ((n - 1) // (threads * unroll) + 1) * threads * unroll
    for idx in range(threads):
        counter = offset // 4  # curand_init(seed, subsequence=idx, offset)
        for linear_index in range(idx, rounded_size, threads * unroll):
            word = philox4x32_10([counter & 0xFFFFFFFF, counter >> 32, idx, 0], key)
            words = tuple(np.array([w], dtype=np.uint64) for w in word)
            if unroll == 4:
                rand = [r[0] for r in torch_cuda._normal4_rows(words, 4)]
            else:
                rand = [r[0] for r in torch_cuda._normal2_double_rows(words, 2)]
            counter += 1
            for ii in range(unroll):
                li = linear_index + threads * ii
                if li < n:
                    out[li] = rand[ii]
    return out


def test_components_are_box_muller_of_word_pairs():
    # curand_normal.h: curand_normal4 = (s1 sin v1, s1 cos v1, s2 sin v2, s2 cos v2) from words
    # (x0, x1), (x2, x3); curand_normal2_double = (s sinpi v, s cospi v) from 53-bit u and v.
    seed, threads = 77, 256
    f32 = _small_gpu(seed=seed).normal((threads * 4,), "float32")
    f64 = _small_gpu(seed=seed).normal((threads * 2,), "float64")
    for idx in (0, 1, 255):
        x = philox4x32_10([0, 0, idx, 0], [seed, 0]).astype(np.float64)
        s1, s2 = np.sqrt(-2 * np.log((x[0] + 0.5) / 2**32)), np.sqrt(-2 * np.log((x[2] + 0.5) / 2**32))
        v1, v2 = 2 * np.pi * (x[1] + 0.5) / 2**32, 2 * np.pi * (x[3] + 0.5) / 2**32
        expected = [s1 * np.sin(v1), s1 * np.cos(v1), s2 * np.sin(v2), s2 * np.cos(v2)]
        np.testing.assert_allclose(f32[idx::threads], expected, atol=2e-6)

        w = philox4x32_10([0, 0, idx, 0], [seed, 0]).astype(np.uint64)
        u = ((w[0] ^ (w[1] << np.uint64(21))) * 2 + 1) / 2.0**54
        v = ((w[2] ^ (w[3] << np.uint64(21))) * 2 + 1) / 2.0**53
        s = np.sqrt(-2 * np.log(u))
        expected = [s * np.sin(np.pi * v), s * np.cos(np.pi * v)]
        np.testing.assert_allclose(f64[idx::threads], expected, atol=1e-14)


def _small_gpu(sm_count=1, max_threads_per_sm=256, seed=0, engine="numpy"):
    return TorchCUDAStream(seed, sm_count=sm_count, max_threads_per_sm=max_threads_per_sm, engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("n, dtype", [
    (5000, "float32"),    # 5 iterations of 256 threads x 4, the last one partial
    (2 * 1024 + 100, "float32"),  # last iteration uses 100 threads, component 0 only
    (1500, "float64"),    # unroll 2
    (1100, "float64"),
])
def test_many_iterations_equal_the_kernel_loop(n, dtype, engine):
    stream = _small_gpu(seed=2**40 + 17, engine=engine)
    expected = _kernel_reference(2**40 + 17, 0, n, 2 if dtype == "float64" else 4, 256)
    with mock.patch.object(torch_cuda, "_CHUNK_COUNTERS", 512):  # two iterations per chunk
        got = stream.normal((n,), dtype)
    np.testing.assert_array_equal(got, expected.astype(got.dtype))


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 1300),
    sm_count=st.integers(1, 2),
    blocks_per_sm=st.integers(1, 2),
    seed=st.integers(0, 2**64 - 1),
    offset=st.integers(0, 2**40).map(lambda x: 4 * x),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_vectorised_draw_equals_the_kernel_loop(n, sm_count, blocks_per_sm, seed, offset, dtype):
    stream = _small_gpu(sm_count, 256 * blocks_per_sm, seed)
    stream.set_state(dict(stream.get_state(), offset=offset))
    threads = stream.launch_threads(n)
    expected = _kernel_reference(seed, offset, n, 2 if dtype == "float64" else 4, threads)
    with mock.patch.object(torch_cuda, "_CHUNK_COUNTERS", 256):  # several chunks per draw
        got = stream.normal((n,), dtype)
    np.testing.assert_array_equal(got, expected.astype(got.dtype))


# -- launch geometry and offsets -----------------------------------------------------------------

def test_launch_threads_follow_calc_execution_policy():
    h100 = TorchCUDAStream(0, gpu="H100")
    assert h100.launch_threads(1) == 256
    assert h100.launch_threads(257) == 512
    assert h100.launch_threads(10**9) == 132 * 8 * 256
    assert TorchCUDAStream(0, gpu="T4").launch_threads(10**9) == 40 * 4 * 256
    assert TorchCUDAStream(0, gpu="L4").launch_threads(10**9) == 58 * 6 * 256


@pytest.mark.parametrize("dtype, unroll", [("float32", 4), ("float16", 4), ("float64", 2)])
def test_offset_grows_by_four_per_iteration(dtype, unroll):
    stream = _small_gpu()  # T = 256
    per_iteration = 256 * unroll
    for n, iterations in [(1, 1), (per_iteration, 1), (per_iteration + 1, 2), (5000, -(-5000 // per_iteration))]:
        before = stream.offset
        assert stream.offset_increment(n, dtype) == 4 * iterations
        stream.normal((n,), dtype)
        assert stream.offset - before == 4 * iterations
    before = stream.offset
    assert stream.normal((0, 3), dtype).shape == (0, 3)
    assert stream.offset == before  # torch returns before taking an offset for numel == 0


def test_second_call_uses_the_advanced_offset():
    stream = TorchCUDAStream(3)
    first = stream.normal((2, 3), "float32")
    second = stream.normal((2, 3), "float32")
    assert stream.offset == 8
    again = TorchCUDAStream(3)
    again.set_state(dict(again.get_state(), offset=4))
    np.testing.assert_array_equal(again.normal((2, 3), "float32"), second)
    assert not np.array_equal(first, second)
    # with n <= T the offset moves the Philox counter by one: counter (1, idx)
    np.testing.assert_array_equal(second.ravel(), _kernel_reference(3, 4, 6, 4, 256).astype(np.float32))


def test_gpus_agree_within_one_wave_and_differ_beyond():
    t4_threads = TorchCUDAStream(0, gpu="T4").launch_threads(10**9)  # 40960
    small = {gpu: TorchCUDAStream(0, gpu=gpu).normal((t4_threads,), "float32")
             for gpu in ("T4", "H100", "A100")}
    np.testing.assert_array_equal(small["T4"], small["H100"])
    np.testing.assert_array_equal(small["T4"], small["A100"])

    n = t4_threads + 5000
    t4 = TorchCUDAStream(0, gpu="T4").normal((n,), "float32")
    h100 = TorchCUDAStream(0, gpu="H100").normal((n,), "float32")
    np.testing.assert_array_equal(t4[:t4_threads], h100[:t4_threads])
    # beyond one T4 wave the T4 wraps: element T + i is thread i's second value (s cos v)
    assert not np.any(t4[t4_threads:] == h100[t4_threads:])
    expected = _kernel_reference(0, 0, n, 4, t4_threads)[t4_threads:]
    np.testing.assert_array_equal(t4[t4_threads:], expected.astype(np.float32))


# -- dtypes --------------------------------------------------------------------------------------

def test_float64_path_has_its_own_values_and_shape():
    f64 = TorchCUDAStream(0).normal((2, 3, 5), "float64")
    f32 = TorchCUDAStream(0).normal((2, 3, 5), "float32")
    assert f64.dtype == np.float64 and f64.shape == (2, 3, 5)
    assert not np.allclose(f64, f32, atol=1e-3)  # curand_normal2_double, not a cast of float


def test_half_and_bfloat16_are_float32_cast_down():
    f32 = TorchCUDAStream(5).normal((4, 77), "float32")
    f16 = TorchCUDAStream(5).normal((4, 77), "float16")
    bf16 = TorchCUDAStream(5).normal((4, 77), "bfloat16")
    assert f16.dtype == np.float16 and bf16.dtype == np.float32
    np.testing.assert_array_equal(f16, f32.astype(np.float16))
    np.testing.assert_array_equal(bf16, float32_to_bfloat16_values(f32))


def test_values_look_standard_normal():
    for dtype in ("float32", "float64"):
        x = TorchCUDAStream(11, gpu="L4").normal((200_000,), dtype).astype(np.float64)
        assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.01
        assert np.isfinite(x).all()


def test_draws_too_large_for_one_launch_are_refused():
    with pytest.raises(ValueError, match="2\\*\\*31 bytes"):
        TorchCUDAStream(0).normal((2**29 + 1,), "float32")


# -- construction and state ----------------------------------------------------------------------

def test_gpu_names_and_geometry_options():
    assert TorchCUDAStream(0).options() == {"gpu": "H100-SXM", "engine": "auto"}
    assert TorchCUDAStream(0, gpu="rtx 4090", engine="numpy").options() == {"gpu": "RTX4090", "engine": "numpy"}
    custom = TorchCUDAStream(0, sm_count=7, max_threads_per_sm=1024)
    assert custom.options() == {"sm_count": 7, "max_threads_per_sm": 1024, "engine": "auto"}
    stream = make_stream("torch-cuda", 1, gpu="T4")
    assert isinstance(stream, TorchCUDAStream) and stream.sm_count == 40


@pytest.mark.parametrize("kwargs, message", [
    ({"gpu": "GTX 480"}, "unknown gpu 'GTX 480'; known: A10, A100"),
    ({"gpu": 132}, "unknown gpu 132"),
    ({"gpu": "T4", "sm_count": 40, "max_threads_per_sm": 1024}, "not both"),
    ({"sm_count": 40}, "give both"),
    ({"sm_count": 0, "max_threads_per_sm": 1024}, "sm_count must be an integer >= 1"),
    ({"sm_count": 4, "max_threads_per_sm": 128}, "max_threads_per_sm must be an integer >= 256"),
    ({"engine": "cuda"}, "unknown torch-cuda engine 'cuda'; accepted: auto, numba, numpy"),
])
def test_bad_geometry_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TorchCUDAStream(0, **kwargs)


def test_state_round_trips_through_json():
    stream = TorchCUDAStream(2**64 - 1, gpu="A10")
    stream.normal((4, 100_000), "float32")
    state = json.loads(json.dumps(stream.get_state()))
    assert state == {"stream": "torch-cuda", "seed": 2**64 - 1, "offset": stream.offset, "gpu": "A10",
                     "sm_count": 72, "max_threads_per_sm": 1536, "engine": "auto"}
    other = TorchCUDAStream(0)  # an H100 stream takes the A10 geometry from the state
    other.set_state(state)
    np.testing.assert_array_equal(other.normal((3, 99_999), "float64"), stream.normal((3, 99_999), "float64"))
    custom = TorchCUDAStream(9, sm_count=3, max_threads_per_sm=512)
    custom.normal((5,), "float16")
    restored = TorchCUDAStream(0)
    restored.set_state(custom.get_state())
    assert restored.get_state() == custom.get_state()


def test_seed_restarts_the_offset():
    stream = TorchCUDAStream(4)
    first = stream.normal((8,), "float32")
    stream.seed(4)
    assert stream.offset == 0
    np.testing.assert_array_equal(stream.normal((8,), "float32"), first)


@pytest.mark.parametrize("change, message", [
    ({"stream": "torch-cpu"}, "state is of stream 'torch-cpu'"),
    ({"seed": -1}, "seed must be an integer in \\[0, 2\\*\\*64\\)"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"offset": 6}, "multiple of 4"),
    ({"offset": -4}, "multiple of 4"),
    ({"offset": "8"}, "offset must be an integer"),
    ({"sm_count": 0}, "sm_count must be"),
    ({"max_threads_per_sm": 100}, "max_threads_per_sm must be"),
    ({"gpu": "T4"}, "state names gpu 'T4'"),
    ({"gpu": "Voodoo2"}, "unknown gpu"),
    ({"extra": 1}, "unexpected \\['extra'\\]"),
    ({"engine": "fast"}, "unknown torch-cuda engine 'fast'"),
])
def test_malformed_states_are_refused(change, message):
    stream = TorchCUDAStream(0)
    with pytest.raises(ValueError, match=message):
        stream.set_state(dict(stream.get_state(), **change))
    assert stream.get_state() == TorchCUDAStream(0).get_state()  # unchanged


def test_state_records_the_engine_and_older_states_load():
    stream = TorchCUDAStream(3, engine="numpy")
    stream.normal((1000,), "float32")
    state = stream.get_state()
    assert state["engine"] == "numpy"
    other = TorchCUDAStream(0)
    other.set_state(state)
    assert other.options()["engine"] == "numpy" and other.engine == "numpy"
    older = TorchCUDAStream(0)  # states written before engines existed keep the stream's engine
    older.set_state({k: v for k, v in state.items() if k != "engine"})
    assert older.options()["engine"] == "auto" and older.get_state()["offset"] == state["offset"]


# -- the numba engine gives the NumPy engine's values -------------------------------------------

@needs_numba
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geometry", [{"gpu": "H100"}, {"gpu": "T4"}, {"sm_count": 1, "max_threads_per_sm": 256}])
def test_numba_engine_equals_numpy_engine(dtype, geometry):
    for offset in (0, 4, 2**34 + 8):
        numpy_engine = TorchCUDAStream(2**40 + 3, engine="numpy", **geometry)
        numba_engine = TorchCUDAStream(2**40 + 3, engine="numba", **geometry)
        assert numba_engine.engine == "numba"
        for stream in (numpy_engine, numba_engine):
            stream.set_state(dict(stream.get_state(), offset=offset))
        for shape in [(1,), (3, 5), (1, 4, 64, 64), (1_000_003,), (2, 4, 128, 128)]:
            a, b = numpy_engine.normal(shape, dtype), numba_engine.normal(shape, dtype)
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{shape} {dtype} offset {offset}"
        assert numba_engine.offset == numpy_engine.offset


def test_auto_engine_is_numba_when_installed():
    assert TorchCUDAStream(0).engine == ("numba" if HAVE_NUMBA else "numpy")


@needs_numba
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_numba_engine_works_in_a_forked_child():
    assert_forked_child_continues(
        "from xrand.streams.torch_cuda import TorchCUDAStream\n"
        "s = TorchCUDAStream(8, engine='numba')\n"
        "def reference(state):\n"
        "    r = TorchCUDAStream(0, engine='numpy')\n"
        "    r.set_state(dict(state, engine='numpy'))\n"
        "    return r", 3_000_000)


def test_malformed_state_shapes_are_refused():
    stream = TorchCUDAStream(0)
    with pytest.raises(ValueError, match="missing \\['offset'\\]"):
        stream.set_state({k: v for k, v in stream.get_state().items() if k != "offset"})
    with pytest.raises(ValueError, match="is a dict"):
        stream.set_state([0, 0])


# -- torch generator state bytes (CUDAGeneratorImpl::get_state: uint64 seed, int64 offset) -------

def test_torch_state_bytes_layout_and_round_trip():
    data = torch_state_bytes(2**64 - 2, 12)
    assert data == struct.pack("<Q", 2**64 - 2) + struct.pack("<q", 12) and len(data) == 16
    assert parse_torch_state(data) == (2**64 - 2, 12)
    assert parse_torch_state(np.frombuffer(data, dtype=np.uint8)) == (2**64 - 2, 12)
    assert parse_torch_state(struct.pack("<Q", 7)) == (7, 0)  # seed-only states: offset 0

    stream = TorchCUDAStream(99)
    stream.normal((10,), "float32")
    copy = TorchCUDAStream(0)
    copy.set_torch_state(stream.torch_state())
    assert (copy._seed, copy.offset) == (99, 4)


@pytest.mark.parametrize("data, message", [
    (b"\0" * 15, "has 16 bytes"),
    (struct.pack("<Qq", 1, -4), "multiple of 4"),
    (struct.pack("<Qq", 1, 2), "multiple of 4"),
    (np.zeros(16, dtype=np.int64), "uint8"),
])
def test_bad_torch_states_are_refused(data, message):
    with pytest.raises(ValueError, match=message):
        parse_torch_state(data)


# -- against real torch CUDA, where there is a GPU -----------------------------------------------

@pytest.mark.skipif(not _cuda_available(), reason="needs torch with CUDA")
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_real_torch_cuda(dtype):
    import torch

    from xrand.streams.torch_cuda import device_geometry

    stream = TorchCUDAStream(1234, **device_geometry("cuda"))
    threads = stream.launch_threads(2**40)
    gen = torch.Generator("cuda").manual_seed(1234)
    for shape in [(3, 4), (1, 4, 64, 64), (threads + 5,), (3 * threads + 17,), (2, 4, 96, 96)]:
        ours = stream.normal(shape, dtype).astype(np.float64)
        theirs = torch.randn(shape, generator=gen, device="cuda", dtype=getattr(torch, dtype))
        theirs = theirs.double().cpu().numpy()
        assert parse_torch_state(gen.get_state()) == (1234, stream.offset)
        _assert_gpu_close(ours, theirs, dtype)

    native = stream.normal_torch((7, 300_000), dtype)
    assert parse_torch_state(gen.get_state())[1] < stream.offset
    follow = TorchCUDAStream(1234, **device_geometry("cuda"))
    follow.set_torch_state(torch_state_bytes(1234, parse_torch_state(gen.get_state())[1]))
    expected = follow.normal((7, 300_000), dtype)
    assert follow.offset == stream.offset
    _assert_gpu_close(expected.astype(np.float64), native.double().cpu().numpy(), dtype)


def _assert_gpu_close(ours, theirs, dtype):
    err = np.abs(ours - theirs)
    if dtype == "float64":
        assert err.max() <= 1e-13
    elif dtype == "float32":
        # hardware __sincosf is off by up to ~2**-20.5 (absolute), multiplied by s <= 6.8
        assert err.max() <= 8e-6 and np.quantile(err, 0.999) <= 2e-6
    else:  # a 1e-6 difference can flip the rounding to half / bfloat16: one unit in the last place
        ulp = 2.0**-10 if dtype == "float16" else 2.0**-7
        assert np.all(err <= ulp * np.maximum(np.abs(theirs), 2.0**-14) + 5e-6)
