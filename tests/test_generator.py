"""xrand.Generator: seeding, state, pickling, spawning, threads."""
import json
import pickle
import threading

import numpy as np
import pytest

import xrand

from conftest import run_python


def pcg(seed):
    return np.random.Generator(np.random.PCG64(seed))


def test_pcg64_stream_is_numpy_pcg64_float64_then_cast():
    g = xrand.Generator(2024, stream="pcg64")
    ref = pcg(2024)
    for shape, dtype in [((3, 4), "float32"), ((7,), "float64"), ((2, 2, 2), "float16"), ((5,), "float32")]:
        np.testing.assert_array_equal(g.normal(shape, dtype), ref.standard_normal(shape).astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_pcg64_large_draws_cast_in_pieces_equal_one_draw(dtype):
    from xrand.numeric import cast_float64
    from xrand.streams.pcg64 import CHUNK

    g, ref = xrand.Generator(7, stream="pcg64"), pcg(7)
    for shape in [(3,), (2, CHUNK + 5), (CHUNK,), (3, CHUNK + 1), (4,)]:  # state carries across calls
        got = g.normal(shape, dtype)
        assert got.shape == shape
        assert got.tobytes() == cast_float64(ref.standard_normal(shape), dtype).tobytes(), shape


def test_manual_seed_restarts_the_stream_and_returns_the_generator():
    g = xrand.Generator(1, stream="pcg64")
    first = g.normal((5,))
    g.normal((5,))
    assert g.manual_seed(1) is g
    np.testing.assert_array_equal(g.normal((5,)), first)
    assert g.initial_seed() == 1


def test_seed_none_draws_fresh_entropy():
    a, b = xrand.Generator(stream="pcg64"), xrand.Generator(stream="pcg64")
    assert a.initial_seed() != b.initial_seed()
    assert 0 <= a.initial_seed() < 2**64


@pytest.mark.parametrize("stream", ["pcg64"])
def test_get_state_set_state_continue_exactly(stream):
    g = xrand.Generator(77, stream=stream)
    g.normal((10,))
    state = g.get_state()
    json.dumps(state)  # plain data
    expected = [g.normal((3, 5)), g.normal((17,), "float16")]
    other = xrand.Generator(0, stream=stream).set_state(state)
    np.testing.assert_array_equal(other.normal((3, 5)), expected[0])
    np.testing.assert_array_equal(other.normal((17,), "float16"), expected[1])


def test_pickle_continues_the_stream():
    g = xrand.Generator(5, stream="pcg64")
    g.normal((4,))
    clone = pickle.loads(pickle.dumps(g))
    np.testing.assert_array_equal(clone.normal((9,)), g.normal((9,)))


def test_state_continues_in_another_process(tmp_path):
    g = xrand.Generator(31, stream="pcg64")
    g.normal((100,))
    path = tmp_path / "state.pkl"
    path.write_bytes(pickle.dumps(g))
    out = run_python(
        f"import pickle, numpy as np; g = pickle.load(open({str(path)!r}, 'rb'));"
        "print(g.normal((6,), 'float64').tobytes().hex())"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == g.normal((6,), "float64").tobytes().hex()


def _draws(children):
    return [c.normal((4,), "float64").tolist() for c in children]


@pytest.mark.parametrize("stream", ["pcg64", "torch-cpu"])
def test_spawn_children_are_reproducible_distinct_and_continue_the_count(stream):
    a = _draws(xrand.Generator(8, stream=stream).spawn(3))
    assert a == _draws(xrand.Generator(8, stream=stream).spawn(3))
    assert len({tuple(x) for x in a}) == 3
    parent = xrand.Generator(8, stream=stream)
    first, second = parent.spawn(2), parent.spawn(1)
    assert all(c.stream == stream for c in first + second)
    assert _draws(first + second) == a


def test_pcg64_spawn_is_numpys_spawn():
    """Children and grandchildren equal numpy.random.Generator(PCG64(seed)).spawn(n)'s."""
    ours = xrand.Generator(8, stream="pcg64").spawn(3)
    theirs = np.random.Generator(np.random.PCG64(8)).spawn(3)
    for child, reference in zip(ours, theirs):
        assert np.array_equal(child.normal((5,), "float64"), reference.standard_normal(5))
    grandchild, reference = ours[1].spawn(2)[1], theirs[1].spawn(2)[1]
    assert np.array_equal(grandchild.normal((5,), "float64"), reference.standard_normal(5))


def test_pcg64_child_state_round_trips_with_its_spawn_key():
    child = xrand.Generator(8, stream="pcg64").spawn(2)[1]
    state = json.loads(json.dumps(child.get_state()))
    twin = xrand.Generator(0, stream="pcg64").set_state(state)
    assert np.array_equal(twin.normal((3,), "float64"), child.normal((3,), "float64"))
    assert np.array_equal(_draws(twin.spawn(1)), _draws(child.spawn(1)))


def test_torch_cpu_child_seed_reproduces_it_in_torch():
    torch = pytest.importorskip("torch")
    child = xrand.Generator(8).spawn(1)[0]
    expected = torch.randn(20, generator=torch.Generator().manual_seed(child.initial_seed()))
    assert np.array_equal(child.normal((20,)), expected.numpy())


def test_spawn_is_the_same_in_a_fresh_process():
    draws = [c.normal((2,), "float64").tolist() for c in xrand.Generator(123, stream="pcg64").spawn(4)]
    out = run_python("import xrand; print([c.normal((2,), 'float64').tolist() "
                     "for c in xrand.Generator(123, stream='pcg64').spawn(4)])")
    assert out.stdout.strip() == str(draws), out.stderr


def test_shared_generator_in_threads_gives_whole_draws_from_one_stream():
    g = xrand.Generator(3, stream="pcg64")
    results = []

    def work():
        for _ in range(50):
            results.append(g.normal((64,), "float64"))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Every draw is a contiguous 64-value piece of the single stream: nothing lost or repeated.
    expected = pcg(3).standard_normal(64 * 200).reshape(200, 64)
    got = sorted(map(bytes, (r.tobytes() for r in results)))
    assert got == sorted(map(bytes, (row.tobytes() for row in expected)))


@pytest.mark.parametrize(
    "state, match",
    [
        (None, "malformed generator state"),
        ({}, "malformed generator state"),
        ({"xrand_generator": 1}, "missing keys"),
        ({"xrand_generator": 1, "stream": "pcg64", "options": {}, "seed": -1, "spawned": 0, "stream_state": {}},
         "seed"),
        ({"xrand_generator": 1, "stream": "nope", "options": {}, "seed": 1, "spawned": 0, "stream_state": {}},
         "unknown stream 'nope'"),
        ({"xrand_generator": 1, "stream": "pcg64", "options": {}, "seed": 1, "spawned": 0, "stream_state": {"x": 1}},
         "malformed pcg64 state"),
    ],
)
def test_set_state_refuses_malformed_states(state, match):
    g = xrand.Generator(1, stream="pcg64")
    before = g.get_state()
    with pytest.raises((ValueError, TypeError), match=match):
        g.set_state(state)
    assert g.get_state() == before  # a refused state changes nothing


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), ("7", TypeError),
                                         (True, TypeError)])
def test_bad_seeds_are_refused(seed, error):
    with pytest.raises(error, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        xrand.Generator(seed, stream="pcg64")
    with pytest.raises(error):
        xrand.Generator(0, stream="pcg64").manual_seed(seed)
    with pytest.raises(error):
        xrand.manual_seed(seed)


def test_largest_seed_is_accepted():
    xrand.Generator(2**64 - 1, stream="pcg64").normal((2,))


def test_unknown_stream_and_stream_options():
    with pytest.raises(ValueError, match="unknown stream 'mt'.*pcg64"):
        xrand.Generator(0, stream="mt")
    with pytest.raises(TypeError, match="takes no options"):
        xrand.Generator(0, stream="pcg64", engine="fast")


def test_manual_seed_seeds_loaded_frameworks_without_importing_others():
    out = run_python(
        "import sys, numpy as np, xrand; xrand.manual_seed(5); a = np.random.rand();"
        "np.random.seed(5); print(a == np.random.rand(), 'torch' in sys.modules, 'mindspore' in sys.modules)"
    )
    assert out.stdout.split() == ["True", "False", "False"], out.stderr


def test_manual_seed_seeds_torch_when_loaded():
    torch = pytest.importorskip("torch")
    xrand.manual_seed(21)
    a = torch.rand(3)
    torch.manual_seed(21)
    assert torch.equal(a, torch.rand(3))


def test_options_go_to_a_stream_name_not_an_instance():
    from xrand.streams.pcg64 import PCG64Stream

    with pytest.raises(TypeError, match=r"options \['engine'\] go to a stream name, not to a stream instance"):
        xrand.Generator(stream=PCG64Stream(1), engine="numba")
