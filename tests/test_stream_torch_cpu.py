"""The torch-cpu stream: torch.randn on a CPU generator, bit for bit, with every engine.

With torch installed everything is compared against torch itself; without it, the golden
vectors in tests/golden/torch_cpu.json (recorded from torch by scripts/make_golden.py) check
the pure-NumPy engine.
"""
import ctypes
import importlib.util
import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from xrand.streams import make_stream, pages
from xrand.streams import torch_cpu
from xrand.streams.torch_cpu import stream as torch_cpu_stream
from xrand.streams.torch_cpu import (
    TORCH_STATE_SIZE, TorchCPUStream, libm_function, parse_torch_state, seed_key, torch_state_bytes,
)
from conftest import assert_forked_child_continues, run_python

DTYPES = ("float32", "float64", "float16", "bfloat16")
SEEDS = (0, 1, 2**32 - 1, 2**32 + 5, 2**64 - 1)
NUMELS = (0, *range(1, 16), 16, 17, 31, 32, 100, 1000, 4099)
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_NUMBA = importlib.util.find_spec("numba") is not None
GOLDEN = json.loads((Path(__file__).parent / "golden" / "torch_cpu.json").read_text())

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
needs_numba = pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
ENGINES = ["numpy", pytest.param("numba", marks=needs_numba), pytest.param("numba-parallel", marks=needs_numba)]
ALL_ENGINES = ENGINES + [pytest.param("torch", marks=needs_torch)]


def torch_randn(generator, shape, dtype):
    """torch.randn as the stream returns it (bfloat16 widened to float32)."""
    import torch

    x = torch.randn(shape, generator=generator, dtype=getattr(torch, dtype))
    return (x.float() if dtype == "bfloat16" else x).numpy()


def torch_generator(seed):
    import torch

    return torch.Generator("cpu").manual_seed(seed)


def assert_same_bits(ours, theirs, what=""):
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, what
    mismatch = ours.reshape(-1).view(np.uint8) != theirs.reshape(-1).view(np.uint8)
    assert not mismatch.any(), f"{what}: {int(np.count_nonzero(mismatch))} bytes differ"


# -- against torch -------------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_numel_matches_torch(engine, dtype):
    for numel in NUMELS:
        stream = TorchCPUStream(3, engine=engine)
        assert_same_bits(stream.normal((numel,), dtype), torch_randn(torch_generator(3), (numel,), dtype),
                         f"{engine} {dtype} numel {numel}")


@needs_torch
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shape", [(), (2, 3, 4), (1, 4, 8, 8), (3, 0, 2), (1, 1, 17), (5, 7)])
def test_shapes_match_torch(engine, shape):
    for dtype in DTYPES:
        stream = TorchCPUStream(11, engine=engine)
        assert_same_bits(stream.normal(shape, dtype), torch_randn(torch_generator(11), shape, dtype),
                         f"{engine} {dtype} {shape}")


@needs_torch
@pytest.mark.parametrize("engine", ALL_ENGINES)
@pytest.mark.parametrize("seed", SEEDS)
def test_consecutive_calls_carry_the_state_and_the_cached_normal(engine, seed):
    # an odd small call leaves a cached value; large calls neither use nor clear it
    calls = [((3,), "float32"), ((16,), "float32"), ((5,), "float64"), ((1,), "float16"),
             ((17,), "bfloat16"), ((2,), "bfloat16"), ((100,), "float16"), ((7,), "float32"),
             ((33,), "float64"), ((1,), "float64")]
    stream, generator = TorchCPUStream(seed, engine=engine), torch_generator(seed)
    for shape, dtype in calls:
        assert_same_bits(stream.normal(shape, dtype), torch_randn(generator, shape, dtype), f"{shape} {dtype}")
    assert stream.get_state() == parse_torch_state(generator.get_state())


@needs_torch
def test_float16_tail_follows_the_last_full_block():
    # float/double redraw the tail after filling all n slots; half/bfloat16 draw 16 at a time
    for numel in (16, 32, 64):
        half = TorchCPUStream(5, engine="numpy").normal((numel,), "float16")
        single = TorchCPUStream(5, engine="numpy").normal((numel,), "float32")
        assert np.array_equal(half, single.astype(np.float16))
    half = TorchCPUStream(5, engine="numpy").normal((40,), "float16")
    single = TorchCPUStream(5, engine="numpy").normal((40,), "float32").astype(np.float16)
    assert np.array_equal(half[:24], single[:24]) and not np.array_equal(half[24:], single[24:])
    assert_same_bits(half, torch_randn(torch_generator(5), (40,), "float16"))


def test_bfloat16_values_are_exact_bfloat16():
    x = TorchCPUStream(9, engine="numpy").normal((50,), "bfloat16")
    assert x.dtype == np.float32 and not (x.view(np.uint32) & 0xFFFF).any()


def test_only_the_low_32_bits_of_the_seed_count():
    a, b = TorchCPUStream(5, engine="numpy"), TorchCPUStream(2**32 + 5, engine="numpy")
    assert np.array_equal(a.normal((40,), "float32"), b.normal((40,), "float32"))
    assert a.get_state()["seed"] == 5 and b.get_state()["seed"] == 2**32 + 5


@pytest.mark.parametrize("seed", [0, 2**64 - 1])
def test_engines_agree(seed):
    engines = ["numpy"] + (["numba", "numba-parallel"] if HAVE_NUMBA else []) + (["torch"] if HAVE_TORCH else [])
    streams = [TorchCPUStream(seed, engine=e) for e in engines]
    for shape, dtype in [((3,), "float64"), ((4099,), "float32"), ((31,), "float16"), ((1,), "bfloat16"),
                         ((100,), "float64"), ((2, 9), "bfloat16")]:
        first, *rest = [s.normal(shape, dtype) for s in streams]
        for engine, other in zip(engines[1:], rest):
            assert_same_bits(other, first, f"{engine} vs numpy, {shape} {dtype}")
    assert all(s.get_state() == streams[0].get_state() for s in streams)


# -- property test ---------------------------------------------------------------------------

_shapes = st.lists(st.integers(0, 40), min_size=0, max_size=3).filter(lambda s: math.prod(s) <= 1200)
_calls = st.lists(st.tuples(_shapes, st.sampled_from(DTYPES)), min_size=1, max_size=5)
_seeds = st.one_of(st.sampled_from(SEEDS), st.integers(0, 2**64 - 1))


@needs_torch
@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=200, deadline=None)
@given(seed=_seeds, calls=_calls)
def test_random_call_sequences_match_torch(engine, seed, calls):
    stream, generator = TorchCPUStream(seed, engine=engine), torch_generator(seed)
    for shape, dtype in calls:
        shape = tuple(shape)
        assert_same_bits(stream.normal(shape, dtype), torch_randn(generator, shape, dtype), f"{shape} {dtype}")
    assert stream.get_state() == parse_torch_state(generator.get_state())


# -- state -----------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_state_round_trips_through_json_and_across_engines(engine):
    stream = TorchCPUStream(77, engine=engine)
    stream.normal((3,), "float32")  # leaves a cached normal
    stream.normal((700,), "float32")
    state = json.loads(json.dumps(stream.get_state()))
    assert state["cached_normal"] is not None and 1 <= state["pos"] <= 624
    expected = stream.normal((1, 20), "float64"), stream.normal((1,), "float32")
    other = TorchCPUStream(0, engine="numpy")
    other.set_state(state)
    assert_same_bits(other.normal((1, 20), "float64"), expected[0])
    assert_same_bits(other.normal((1,), "float32"), expected[1])
    assert other.get_state() == stream.get_state()


def test_seeding_matches_mt19937_init_genrand():
    state = TorchCPUStream(5489, engine="numpy").get_state()
    assert state["pos"] == 624 and state["cached_normal"] is None
    assert state["key"][:3] == [5489, 1301868182, 2938499221]  # std::mt19937 default seeding
    assert state["key"] == seed_key(2**32 + 5489).tolist()


@needs_torch
def test_torch_state_bytes_convert_both_ways():
    generator = torch_generator(2**32 + 17)
    torch_randn(generator, (3,), "float32")
    torch_randn(generator, (40,), "float32")
    data = bytes(generator.get_state().numpy())
    assert len(data) == TORCH_STATE_SIZE
    state = parse_torch_state(generator.get_state())
    assert state["seed"] == 2**32 + 17 and state["cached_normal"] is not None
    assert torch_state_bytes(state) == data  # byte for byte, padding included

    stream = TorchCPUStream.from_torch_generator(generator, engine="numpy")
    assert_same_bits(stream.normal((9,), "float64"), torch_randn(generator, (9,), "float64"))
    again = stream.to_torch_generator()
    assert_same_bits(torch_randn(again, (20,), "float32"), stream.normal((20,), "float32"))


@needs_torch
def test_a_freshly_seeded_torch_state_converts():
    # torch keeps next=0 until the first twist; ours writes next=624, which torch reads the same
    generator = torch_generator(123)
    stream = TorchCPUStream(0, engine="numpy")
    stream.set_torch_state(generator.get_state())
    assert stream.get_state() == TorchCPUStream(123, engine="numpy").get_state()
    again = stream.to_torch_generator()
    assert_same_bits(torch_randn(again, (50,), "float32"), torch_randn(generator, (50,), "float32"))


def _good_state():
    return TorchCPUStream(1, engine="numpy").get_state()


@pytest.mark.parametrize("change, message", [
    (lambda s: "not a dict", "must be a dict"),
    (lambda s: {k: v for k, v in s.items() if k != "pos"}, "missing keys \\['pos'\\]"),
    (lambda s: {**s, "extra": 1}, "unknown keys \\['extra'\\]"),
    (lambda s: {**s, "stream": "pcg64"}, "not 'torch-cpu'"),
    (lambda s: {**s, "seed": -1}, "'seed'"),
    (lambda s: {**s, "seed": 2**64}, "'seed'"),
    (lambda s: {**s, "key": s["key"][:-1]}, "'key'"),
    (lambda s: {**s, "key": [1.5] * 624}, "'key'"),
    (lambda s: {**s, "key": [2**32] + s["key"][1:]}, "'key'"),
    (lambda s: {**s, "key": "abc"}, "'key'"),
    (lambda s: {**s, "pos": 0}, "'pos'"),
    (lambda s: {**s, "pos": 625}, "'pos'"),
    (lambda s: {**s, "pos": True}, "'pos'"),
    (lambda s: {**s, "cached_normal": "x"}, "'cached_normal'"),
    (lambda s: {**s, "cached_normal": float("nan")}, "'cached_normal'"),
])
def test_malformed_states_raise(change, message):
    stream = TorchCPUStream(0, engine="numpy")
    with pytest.raises(ValueError, match=message):
        stream.set_state(change(_good_state()))
    with pytest.raises(ValueError, match=message):
        torch_state_bytes(change(_good_state()))


def test_malformed_torch_bytes_raise():
    good = torch_state_bytes(_good_state())
    with pytest.raises(ValueError, match="5056 bytes"):
        parse_torch_state(good[:-1])
    bad_left = bytearray(good)
    bad_left[8:12] = (0).to_bytes(4, "little")
    with pytest.raises(ValueError, match="left=0"):
        parse_torch_state(bytes(bad_left))
    inconsistent = bytearray(good)
    inconsistent[8:12] = (300).to_bytes(4, "little")
    inconsistent[16:24] = (5).to_bytes(8, "little")
    with pytest.raises(ValueError, match="not made by torch"):
        parse_torch_state(bytes(inconsistent))


# -- options ---------------------------------------------------------------------------------

def test_bad_engine_and_kernel_names_raise():
    with pytest.raises(ValueError, match="'fast'.*auto, torch, numba-parallel, numba, numpy"):
        TorchCPUStream(0, engine="fast")
    with pytest.raises(ValueError, match="'neon'.*avx2, scalar"):
        TorchCPUStream(0, engine="numpy", kernel="neon")


@needs_torch
def test_torch_engine_refuses_the_other_kernel():
    other = "scalar" if torch_cpu.torch_kernel() == "avx2" else "avx2"
    with pytest.raises(ValueError, match="engine 'torch' runs"):
        TorchCPUStream(0, engine="torch", kernel=other)
    assert TorchCPUStream(0, kernel=other).engine != "torch"


def test_options_and_registry():
    stream = make_stream("torch-cpu", 3, engine="numpy", kernel="scalar")
    assert isinstance(stream, TorchCPUStream)
    assert stream.options() == {"engine": "numpy", "kernel": "scalar"}
    assert TorchCPUStream(0).options() == {"engine": "auto", "kernel": "avx2"}
    assert TorchCPUStream(0).engine in ("torch", "numba-parallel", "numpy")
    assert TorchCPUStream(0, threads=2).options() == {"engine": "auto", "kernel": "avx2", "threads": 2}


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_raise(threads):
    with pytest.raises(ValueError, match="threads must be None or an integer >= 1"):
        TorchCPUStream(0, threads=threads)


@needs_numba
def test_auto_picks_numba_parallel_without_torch():
    code = ("import sys, xrand.streams.torch_cpu as t\n"
            "print(t.TorchCPUStream(0).engine, 'torch' in sys.modules)")
    result = run_python(code)
    assert result.stdout.split() == ["numba-parallel", "False"], result.stderr


def test_importing_does_not_import_torch_or_numba():
    code = ("import sys, xrand, xrand.streams.torch_cpu as t\n"
            "t.TorchCPUStream(1, engine='numpy').normal((40,), 'float16')\n"
            "print('torch' in sys.modules, 'numba' in sys.modules)")
    result = run_python(code)
    assert result.stdout.split() == ["False", "False"], result.stderr


# -- numba-parallel: words in order, blocks of 16 on every thread --------------------------------

# many compiled.PAR_CHUNK chunks (128K values), the last one short, and a partial block
PARALLEL_NUMEL = (1 << 22) + 4096 + 5


@needs_torch
@needs_numba
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_parallel_engine_matches_torch_for_every_thread_count(threads, dtype):
    stream, generator = TorchCPUStream(6, engine="numba-parallel", threads=threads), torch_generator(6)
    for shape in [(PARALLEL_NUMEL,), (3,), (1, 4, 128, 128), (1_100_000 + 7,)]:
        assert_same_bits(stream.normal(shape, dtype), torch_randn(generator, shape, dtype), f"{shape} {dtype}")
    assert stream.get_state() == parse_torch_state(generator.get_state())


@needs_torch
@needs_numba
def test_parallel_engine_matches_torch_on_more_threads_than_cores():
    # 5 threads on a 2-core machine take the chunks in an order of their own
    stream, generator = TorchCPUStream(7, engine="numba-parallel", threads=5), torch_generator(7)
    for numel, dtype in [(PARALLEL_NUMEL, "float32"), (1_100_001, "float64"), (1_200_001, "bfloat16"),
                         (50_000, "float16")]:
        assert_same_bits(stream.normal((numel,), dtype), torch_randn(generator, (numel,), dtype), f"{numel} {dtype}")


@needs_numba
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_parallel_engine_works_in_a_forked_child():
    assert_forked_child_continues(
        "from xrand.streams.torch_cpu import TorchCPUStream\n"
        "s = TorchCPUStream(8, engine='numba-parallel')\n"
        "def reference(state):\n"
        "    r = TorchCPUStream(0, engine='numba')\n"
        "    r.set_state(state)\n"
        "    return r", 1 << 21)


# -- scalar kernel (aarch64, Apple Silicon, ATEN_CPU_CAPABILITY=default) ----------------------

def test_scalar_kernel_is_libm_box_muller():
    words = np.random.MT19937()
    words.state = {"bit_generator": "MT19937", "state": {"key": seed_key(21), "pos": 624}}
    u = (words.random_raw(32) & 0xFFFFFF).astype(np.float32) * np.float32(2.0**-24)
    logf, cosf, sinf = (libm_function(n, ctypes.c_float) for n in ("logf", "cosf", "sinf"))
    expected = np.empty(32, np.float32)
    for b in (0, 16):
        for j in range(8):
            radius = np.sqrt(np.float32(-2) * np.float32(logf(np.float32(1) - u[b + j])))
            theta = float(np.float32(2.0 * math.pi * float(u[b + 8 + j])))
            expected[b + j] = radius * np.float32(cosf(theta)) + np.float32(0)
            expected[b + 8 + j] = radius * np.float32(sinf(theta)) + np.float32(0)
    engines = ["numpy"] + (["numba", "numba-parallel"] if HAVE_NUMBA else [])
    for engine in engines:
        stream = TorchCPUStream(21, engine=engine, kernel="scalar")
        assert_same_bits(stream.normal((32,), "float32"), expected, engine)
    # the two kernels round differently in a good share of values, by an ulp or so
    n = 4096
    scalar = TorchCPUStream(21, engine="numpy", kernel="scalar").normal((n,), "float32")
    avx2 = TorchCPUStream(21, engine="numpy", kernel="avx2").normal((n,), "float32")
    assert 0.1 < np.mean(scalar != avx2) < 0.7 and np.max(np.abs(scalar - avx2)) < 1e-5


@needs_numba
@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_scalar_kernel_equals_the_one_thread_kernel(threads):
    # the one-thread scalar kernel is checked against torch in the next test
    one, many = (TorchCPUStream(9, engine=e, kernel="scalar", threads=threads) for e in ("numba", "numba-parallel"))
    for numel, dtype in [(1_100_003, "float32"), (1_100_003, "bfloat16"), (20_000, "float16"), (1_100_000, "float64")]:
        assert_same_bits(many.normal((numel,), dtype), one.normal((numel,), dtype), f"{numel} {dtype}")


@needs_torch
def test_scalar_kernel_matches_torch_without_avx2():
    # ATEN_CPU_CAPABILITY=default makes torch run its non-AVX2 kernels, in a fresh process
    code = ("import torch; g = torch.Generator().manual_seed(8)\n"
            "print(torch.backends.cpu.get_cpu_capability())\n"
            "print(torch.randn(1000, generator=g).numpy().tobytes().hex())\n"
            "print(torch.randn(37, generator=g, dtype=torch.float16).numpy().tobytes().hex())")
    result = run_python(code, env={"ATEN_CPU_CAPABILITY": "default"})
    capability, single, half = result.stdout.split()
    assert capability == "DEFAULT", result.stderr
    for engine in ["numpy"] + (["numba", "numba-parallel"] if HAVE_NUMBA else []):
        stream = TorchCPUStream(8, engine=engine, kernel="scalar")
        assert stream.normal((1000,), "float32").tobytes().hex() == single, engine
        assert stream.normal((37,), "float16").tobytes().hex() == half, engine


# -- golden vectors (recorded from torch; check the engines without torch) -----------------

def _golden_bits(x, dtype):
    if dtype == "bfloat16":
        x = (x.view(np.uint32) >> 16).astype(np.uint16)
    return x.astype(x.dtype.newbyteorder("<")).tobytes().hex()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: f"seed{c['seed']}")
def test_golden_vectors(engine, case):
    stream = TorchCPUStream(case["seed"], engine=engine, kernel=GOLDEN["kernel"])
    for call in case["calls"]:
        x = stream.normal(tuple(call["shape"]), call["dtype"])
        assert x.shape == tuple(call["shape"])
        assert _golden_bits(x, call["dtype"]) == call["hex"], call["shape"]
    state = stream.get_state()
    assert state["pos"] == case["final_state"]["pos"]
    cached = state["cached_normal"]
    assert (None if cached is None else cached.hex()) == case["final_state"]["cached_normal"]


# -- memory ----------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_large_draws_work_in_chunks(engine, dtype, monkeypatch):
    # the output is filled a chunk at a time: peak memory stays near the output's size
    n = (1 << 20) + 5
    whole = TorchCPUStream(4, engine=engine).normal((n,), dtype)
    monkeypatch.setattr(torch_cpu_stream, "_CHUNK", 1 << 12)
    stream = TorchCPUStream(4, engine=engine)
    tracemalloc.start()
    try:
        chunked = stream.normal((n,), dtype)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * chunked.nbytes
    assert_same_bits(chunked, whole)


def _vm_flags(array: np.ndarray) -> list:
    """The VmFlags of the memory mapping that holds ``array``'s second page (/proc/self/smaps)."""
    address = array.ctypes.data + 2 * 4096
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(v, 16) for v in head.split("-"))
                inside = low <= address < high
            elif head == "VmFlags:" and inside:
                return line.split()[1:]
    raise AssertionError("no mapping holds the array")


@pytest.mark.skipif(pages._madvise() is None, reason="huge pages are not given on request here (Linux THP madvise)")
@pytest.mark.parametrize("engine", ENGINES)
def test_a_large_output_gets_torchs_pages_not_numpys_huge_ones(engine):
    n = pages.HUGE_PAGE_REQUEST_BYTES // 4
    numpy_array = np.empty(n, np.float32)  # NumPy asks for huge pages from this size on
    out = TorchCPUStream(0, engine=engine).normal((n,), "float32")
    assert "hg" in _vm_flags(numpy_array)
    assert "nh" in _vm_flags(out) and "hg" not in _vm_flags(out)
