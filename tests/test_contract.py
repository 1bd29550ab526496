"""What every backend and every stream must do, as one suite subclassed per implementation.

Modelled on numpy/random/tests/test_direct.py: a ``Base`` class holds the behaviour, a
subclass per backend (a toy plug-in included) or per stream (a toy registered stream
included) says which one. A new backend or stream gets the whole contract by adding a class.
"""
import json
import pickle

import numpy as np
import pytest

import xrand
from xrand.backends import Backend
from xrand.checks import DTYPE_NAMES
from xrand.numeric import cast_float64
from xrand.streams import Stream

SHAPE = (3, 2, 5, 4)  # 120 values: torch's 16-block path with a partial last block


# ----------------------------------------------------------------------------- toy plug-ins

class ToyTensor:
    """The toy framework's tensor: values and a dtype name."""

    def __init__(self, values, dtype):
        self.values, self.dtype = values, dtype


class ToyBackend(Backend):
    """A third-party backend written against the documented base class, nothing more."""

    name = "toy"

    def dtype(self, name):
        return name

    def from_numpy(self, array, dtype, device=None):
        self.device(device)
        dtype = dtype or array.dtype.name
        return ToyTensor(cast_float64(array, dtype) if array.dtype == np.float64 else array, dtype)

    def to_numpy(self, tensor):
        return np.asarray(tensor.values)

    def randn(self, shape, dtype, device=None):  # the base class's signature, without layout
        return self.from_numpy(xrand.backends.global_numpy_generator().standard_normal(shape), dtype, device)


class ToyStream(Stream):
    """A registered stream over NumPy's SFC64 (float64 draw, then cast)."""

    name = "toy-sfc64"

    def seed(self, seed):
        self._bits = np.random.SFC64(seed)

    def normal(self, shape, dtype):
        return cast_float64(np.random.Generator(self._bits).standard_normal(shape), dtype)

    def get_state(self):
        state = self._bits.state
        return {"words": [int(w) for w in state["state"]["state"]], "has_uint32": state["has_uint32"],
                "uinteger": state["uinteger"]}

    def set_state(self, state):
        try:
            self._bits.state = {"bit_generator": "SFC64", "state": {"state": np.array(state["words"], np.uint64)},
                                "has_uint32": state["has_uint32"], "uinteger": state["uinteger"]}
        except (KeyError, TypeError) as exc:
            raise xrand.UsageError(f"malformed toy-sfc64 state {state!r}") from exc


@pytest.fixture(autouse=True)
def _toys():
    xrand.register_backend("toy", ToyBackend)
    xrand.register_stream("toy-sfc64", ToyStream)
    yield
    from xrand import streams
    streams._STREAMS.pop("toy-sfc64", None)


# ----------------------------------------------------------------------------- backends

class BackendContract:
    """Every backend: xrand and NumPy generators give the same numbers, every dtype, lists, None."""

    backend = ""

    @pytest.fixture(autouse=True)
    def _active(self):
        b = xrand.backend(self.backend)
        if b.unavailable_reason():
            pytest.skip(b.unavailable_reason())
        with xrand.use_backend(self.backend):
            self.b = b
            yield

    def values(self, tensor):
        return self.b.to_numpy(tensor)

    @pytest.mark.parametrize("dtype", DTYPE_NAMES)
    def test_xrand_generator_gives_the_stream_in_every_dtype(self, dtype):
        got = self.values(xrand.randn_tensor(SHAPE, generator=xrand.Generator(5, stream="pcg64"), dtype=dtype))
        expected = xrand.Generator(5, stream="pcg64").normal(SHAPE, dtype)
        assert got.shape == SHAPE
        np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))

    def test_xrand_default_dtype_is_float32(self):
        got = self.values(xrand.randn_tensor((4,), generator=xrand.Generator(5)))
        assert got.dtype == np.float32

    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_numpy_generator_is_mindones_float64_draw_then_cast(self, dtype):
        got = self.values(xrand.randn_tensor(SHAPE, generator=np.random.default_rng(3), dtype=dtype))
        expected = cast_float64(np.random.default_rng(3).standard_normal(SHAPE), dtype)
        np.testing.assert_array_equal(got, expected)

    @pytest.mark.parametrize("kind", ["xrand", "numpy"])
    def test_a_list_draws_one_item_per_generator(self, kind):
        def make(seed):
            return xrand.Generator(seed, stream="pcg64") if kind == "xrand" else np.random.default_rng(seed)

        batch = self.values(xrand.randn_tensor(SHAPE, generator=[make(s) for s in (1, 2, 3)], dtype="float32"))
        for k, seed in enumerate((1, 2, 3)):
            item = self.values(xrand.randn_tensor((1,) + SHAPE[1:], generator=make(seed), dtype="float32"))
            np.testing.assert_array_equal(batch[k:k + 1], item)

    def test_generator_none_follows_manual_seed(self):
        xrand.manual_seed(11)
        a = self.values(xrand.randn_tensor(SHAPE, dtype="float32"))
        xrand.manual_seed(11)
        b = self.values(xrand.randn_tensor(SHAPE, dtype="float32"))
        c = self.values(xrand.randn_tensor(SHAPE, dtype="float32"))
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(b, c)

    def test_from_numpy_and_to_numpy_round_trip(self):
        array = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
        np.testing.assert_array_equal(self.values(self.b.from_numpy(array, "float32")), array)

    def test_a_bad_device_is_a_usage_error_naming_it(self):
        with pytest.raises(xrand.UsageError, match="'no-such-device'"):
            xrand.randn_tensor((2,), generator=xrand.Generator(0), device="no-such-device")


class TestNumpyBackend(BackendContract):
    backend = "numpy"


class TestTorchBackend(BackendContract):
    backend = "torch"


class TestMindSporeBackend(BackendContract):
    backend = "mindspore"


class TestToyPluginBackend(BackendContract):
    backend = "toy"


# ----------------------------------------------------------------------------- streams

class StreamContract:
    """Every stream: seeds, state round trips, spawn, every dtype, consecutive calls, pickling."""

    stream = ""
    options: dict = {}

    def make(self, seed=7):
        return xrand.Generator(seed, stream=self.stream, **self.options)

    @pytest.mark.parametrize("dtype", DTYPE_NAMES)
    def test_every_dtype_and_shape(self, dtype):
        out = self.make().normal(SHAPE, dtype)
        assert out.shape == SHAPE
        assert out.dtype == (np.float32 if dtype == "bfloat16" else np.dtype(dtype))
        assert np.isfinite(out).all() and 0.3 < out.astype(np.float64).std() < 3
        if dtype == "bfloat16":
            assert np.array_equal(out.view(np.uint32) & 0xFFFF, np.zeros(SHAPE, np.uint32))

    def test_same_seed_same_numbers_other_seed_other_numbers(self):
        assert np.array_equal(self.make(7).normal(SHAPE), self.make(7).normal(SHAPE))
        assert not np.array_equal(self.make(7).normal(SHAPE), self.make(8).normal(SHAPE))

    def test_consecutive_calls_continue_and_manual_seed_restarts(self):
        g = self.make()
        first, second = g.normal((20,)), g.normal((20,))
        assert not np.array_equal(first, second)
        assert np.array_equal(g.manual_seed(7).normal((20,)), first)

    def test_state_round_trips_through_json(self):
        g = self.make()
        g.normal((5,))
        state = json.loads(json.dumps(g.get_state()))
        expected = g.normal(SHAPE)
        twin = xrand.Generator(0, stream=self.stream, **self.options).set_state(state)
        np.testing.assert_array_equal(twin.normal(SHAPE), expected)

    def test_pickle_continues(self):
        g = self.make()
        g.normal((3,))
        twin = pickle.loads(pickle.dumps(g))
        np.testing.assert_array_equal(twin.normal(SHAPE), g.normal(SHAPE))

    def test_spawn_children_are_independent_and_reproducible(self):
        children = self.make().spawn(3)
        draws = [c.normal((16,)) for c in children]
        assert len({d.tobytes() for d in draws}) == 3
        assert not any(np.array_equal(d, self.make().normal((16,))) for d in draws)
        again = [c.normal((16,)) for c in self.make().spawn(3)]
        assert all(np.array_equal(a, b) for a, b in zip(draws, again))

    def test_a_stream_instance_is_accepted(self):
        from xrand.streams import stream_factory

        instance = stream_factory(self.stream)(7, **self.options)
        np.testing.assert_array_equal(xrand.Generator(stream=instance).normal(SHAPE), self.make(7).normal(SHAPE))
        other = stream_factory(self.stream)(0, **self.options)
        np.testing.assert_array_equal(xrand.Generator(7, stream=other).normal(SHAPE), self.make(7).normal(SHAPE))

    def test_malformed_state_is_a_usage_error(self):
        state = self.make().get_state()
        state["stream_state"] = {"nonsense": 1}
        with pytest.raises(xrand.UsageError):
            self.make().set_state(state)


class TestTorchCPUStream(StreamContract):
    stream = "torch-cpu"


class TestTorchCPUStreamNumpyEngine(StreamContract):
    stream, options = "torch-cpu", {"engine": "numpy"}


class TestTorchCUDAStream(StreamContract):
    stream = "torch-cuda"


class TestPCG64Stream(StreamContract):
    stream = "pcg64"


class TestToyRegisteredStream(StreamContract):
    stream = "toy-sfc64"
