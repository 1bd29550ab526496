"""MindSpore's graph mode with xrand's keyed compile cache: the same numbers as PyNative, from a
fresh process too, whatever the weights; a key that follows what changes a graph; graph-mode calls
that compute Linear layers as PyNative does and set the sub-cells' compile phase directly
(xrand.frameworks.mindspore_graph)."""
import contextlib
import ctypes
import gc
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from conftest import make_tiny_model  # noqa: E402
from xrand import mindspore_cpu  # noqa: E402
from xrand.compare import make_plan  # noqa: E402
from xrand.frameworks import mindspore as graph_cache  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402


def key(model, **settings):
    """The cache key of a MindSpore run of these settings (the plan's identity and this process)."""
    plan = make_plan(Settings(**dict(dict(model=model, steps=2, batch_size=1), **settings)), frameworks=["mindspore"])
    return graph_cache.cache_key(plan.graph_identity())

# One MindSpore side of `model` in `mode`, then (optionally) PyNative sides of other models;
# prints {"status": ..., "mode": ...} and saves the images as NumPy files.
SIDES = r"""
import json, sys
import numpy as np
from xrand.compare import make_plan
from xrand.compare.sides import load, run
from xrand.pipelines.settings import Settings
out = {}
for i, (model, mode, path) in enumerate(json.loads(sys.argv[1])):
    plan = make_plan(Settings(model=model, steps=2, batch_size=1, seed=5), frameworks=["mindspore"],
                     mindspore_mode=mode)
    side = run(load(plan, "mindspore"), plan)
    np.save(path, side.images)
    out[path] = side.environment
print(json.dumps(out))
"""


def sides(runs, cache_dir):
    env = dict(os.environ, XRAND_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", SIDES, json.dumps(runs)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Two tiny models of one config, with different weights."""
    root = tmp_path_factory.mktemp("graph-cache")
    a = make_tiny_model(root / "a")
    b = str(root / "b")
    shutil.copytree(a, b)
    from safetensors.numpy import load_file, save_file

    weights = os.path.join(b, "unet", "diffusion_pytorch_model.safetensors")
    save_file({k: v * np.float32(0.9) + np.float32(0.01) for k, v in load_file(weights).items()}, weights)
    return a, b


def test_cached_graphs_give_pynative_numbers_in_a_fresh_process_for_other_weights(two_models, tmp_path):
    a, b = two_models
    cache = tmp_path / "cache"
    files = {name: str(tmp_path / f"{name}.npy") for name in ("a_graph", "a_pynative", "b_pynative", "b_graph")}
    first = sides([(a, "graph", files["a_graph"]), (a, "pynative", files["a_pynative"]),
                   (b, "pynative", files["b_pynative"])], cache)
    env = first[files["a_graph"]]
    assert env["mindspore_mode"] == "graph"
    assert env["mindspore_compile_cache"].startswith("saved " + str(cache))
    assert first[files["a_pynative"]]["mindspore_mode"] == "pynative"
    assert "mindspore_compile_cache" not in first[files["a_pynative"]]
    folder = env["mindspore_compile_cache"].split()[1]
    assert sorted(os.listdir(cache / graph_cache.SUBFOLDER)) == [os.path.basename(folder)]  # no partial left

    second = sides([(b, "graph", files["b_graph"])], cache)  # a fresh process, the same config: the same folder
    assert second[files["b_graph"]]["mindspore_compile_cache"] == f"loaded {folder}"
    images = {name: np.load(path) for name, path in files.items()}
    np.testing.assert_array_equal(images["a_graph"], images["a_pynative"])  # PyNative's bits (graph_calls)
    np.testing.assert_array_equal(images["b_graph"], images["b_pynative"])  # b's weights, not a's from the cache
    assert rel_l2(images["a_pynative"], images["b_pynative"]) > 1e-2


def test_the_key_follows_what_changes_a_graph_and_not_the_seed_or_weights(two_models, tmp_path, monkeypatch):
    a, b = two_models
    same = [key(a), key(a, seed=9), key(b)]
    assert same == [same[0]] * 3
    other = tmp_path / "other-config"
    shutil.copytree(a, other)
    config = other / "unet" / "config.json"
    config.write_text(config.read_text().replace('"norm_eps": 1e-05', '"norm_eps": 1e-06'))
    changed = {"batch": key(a, batch_size=2), "dtype": key(a, dtype="float16"), "steps": key(a, steps=3),
               "scheduler": key(a, scheduler="euler"), "config": key(str(other))}
    monkeypatch.setattr(graph_cache, "source_digest", lambda: "another xrand source")
    changed["xrand source"] = key(a)
    monkeypatch.undo()
    monkeypatch.setattr(ms, "__version__", "0.0.1")
    changed["mindspore"] = key(a)
    monkeypatch.undo()
    monkeypatch.setattr(mindspore_cpu.runtime, "_onednn_isa", "AVX512_CORE")  # another conv fallback in the graph
    changed["oneDNN instruction set"] = key(a)
    assert same[0] not in changed.values() and len(set(changed.values())) == len(changed), changed


def test_a_cache_folder_that_cannot_be_written_compiles_without_it(two_models, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XRAND_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("MS_COMPILER_CACHE_ENABLE", raising=False)
    monkeypatch.setattr(graph_cache, "_taken", None)
    identity = make_plan(Settings(model=two_models[0])).graph_identity()
    with graph_cache.compile_cache(identity) as state:
        assert os.environ.get("MS_COMPILER_CACHE_ENABLE") != "1"
    assert state["status"].startswith(f"off: cannot write {blocker / 'cache'}")
    assert graph_cache._taken is None  # a later run may still use a writable folder


def test_one_folder_per_process_and_the_variables_put_back(two_models, tmp_path, monkeypatch):
    monkeypatch.setenv("XRAND_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MS_COMPILER_CACHE_ENABLE", raising=False)  # put back after the test
    monkeypatch.setattr(graph_cache, "_taken", None)
    before = {name: os.environ.get(name) for name in ("MS_COMPILER_CACHE_PATH", "MS_DEV_FORCE_USE_COMPILE_CACHE")}
    with graph_cache.compile_cache(make_plan(Settings(model=two_models[0])).graph_identity()) as state:
        assert os.environ["MS_COMPILER_CACHE_ENABLE"] == "1"
    assert state["status"] == "off: nothing compiled (the graphs were already in memory)"
    assert os.environ["MS_COMPILER_CACHE_ENABLE"] == "0"
    assert {name: os.environ.get(name) for name in before} == before
    with graph_cache.compile_cache(make_plan(Settings(model=two_models[0], steps=3)).graph_identity()) as state:
        pass
    assert state["status"] == graph_cache.OFF_TAKEN
    assert os.listdir(tmp_path / graph_cache.SUBFOLDER) == []


def test_the_cache_folder_follows_xrand_cache_dir_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XRAND_CACHE_DIR", str(tmp_path / "x"))
    assert graph_cache.cache_root() == str(tmp_path / "x" / graph_cache.SUBFOLDER)
    monkeypatch.delenv("XRAND_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert graph_cache.cache_root() == str(tmp_path / "xdg" / "xrand" / graph_cache.SUBFOLDER)


def test_graph_calls_set_every_sub_cells_phase_as_mindspores_setter_does():
    from mindspore import nn

    from xrand.frameworks import mindspore_mode
    from xrand.frameworks.mindspore_graph import direct_phase_setter

    def phases(net):
        return {name: cell._compile_phase for name, cell in net.cells_and_names()}

    net = nn.SequentialCell([nn.Dense(3, 2), nn.SequentialCell([nn.ReLU(), nn.Dense(2, 2)])])
    original = nn.Cell.__dict__["compile_phase"]
    net.compile_phase = "by mindspore"
    assert set(phases(net).values()) == {"by mindspore"} and len(phases(net)) == 5
    with direct_phase_setter():
        assert nn.Cell.__dict__["compile_phase"] is not original
        net.compile_phase = "direct"
        assert set(phases(net).values()) == {"direct"}
        with pytest.raises(TypeError, match="must be string type"):
            net.compile_phase = 3
    assert nn.Cell.__dict__["compile_phase"] is original

    x = ms.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    pynative = net(x).asnumpy()
    with mindspore_mode("graph"):
        assert nn.Cell.__dict__["compile_phase"] is not original
        graph = [net(x).asnumpy() for _ in range(2)]  # compiled, then called again
        assert len(set(phases(net).values())) == 1 and phases(net)[""] == net.phase_cache[net.phase]
    assert nn.Cell.__dict__["compile_phase"] is original
    np.testing.assert_allclose(graph[1], pynative, rtol=1e-6)
    np.testing.assert_array_equal(graph[0], graph[1])


@pytest.mark.parametrize("shape,bias,dtype", [
    ((4, 512), True, np.float32), ((1, 128), True, np.float32), ((4, 512), False, np.float32),
    ((2, 2, 512), True, np.float32), ((2, 5, 512), True, np.float32), ((2, 2, 2, 512), False, np.float32),
    ((2, 128, 256), True, np.float32), ((2, 3, 16, 32), True, np.float32), ((32,), True, np.float32),
    ((4, 512), True, np.float64), ((2, 128, 256), True, np.float64),  # the bias by BiasAdd, as float32's
    ((4, 512), True, np.float16), ((2, 128, 256), True, np.float16)])  # by Add: BiasAdd rounds otherwise
def test_graph_mode_linear_layers_give_pynatives_bits(shape, bias, dtype):
    from mindspore import mint

    from xrand.frameworks import mindspore_mode

    rng = np.random.default_rng(len(shape))
    net = mint.nn.Linear(shape[-1], 512, bias=bias, dtype=ms.tensor(np.zeros(1, dtype)).dtype)
    x = ms.tensor(rng.standard_normal(shape).astype(dtype))
    pynative = net(x).asnumpy()
    with mindspore_mode("graph"):
        graph = net(x).asnumpy()
    np.testing.assert_array_equal(graph, pynative)


def _resident_gib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 2**20


class _Shared(ms.nn.Cell):
    """Linear layers, one whose weight an Embedding also holds, two whose weights share a buffer."""

    def __init__(self):
        from mindspore import mint

        super().__init__()
        self.first = mint.nn.Linear(512, 256)
        self.layers = ms.nn.CellList([mint.nn.Linear(256, 256, bias=b) for b in (True, False)])
        self.embedding = ms.nn.Embedding(256, 256)
        self.tied = mint.nn.Linear(256, 256)
        self.tied.weight = self.embedding.embedding_table
        shared = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
        self.twins = ms.nn.CellList([mint.nn.Linear(256, 256) for _ in range(2)])
        for twin in self.twins:  # two parameters, one buffer
            twin.weight = ms.Parameter(ms.Tensor.from_numpy(shared))

    def construct(self, x, ids):
        x = self.first(x)
        for layer in self.layers:
            x = layer(x)
        x = self.tied(x)
        return self.twins[0](x) + self.twins[1](x) + self.embedding(ids).sum()


@pytest.mark.parametrize("rows", [(1,), (4,), (2, 77), (2, 3, 16)])
def test_linear_weights_transposed_give_pynatives_bits_and_are_put_back(rows):
    from xrand.frameworks import mindspore_mode
    from xrand.frameworks.mindspore_graph import linear_weights_transposed

    rng = np.random.default_rng(len(rows))
    net = _Shared()
    x = ms.tensor(rng.standard_normal(rows + (512,)).astype(np.float32))
    ids = ms.tensor(np.arange(3, dtype=np.int32))
    before = {name: (p, p.asnumpy().copy()) for name, p in net.parameters_and_names()}
    pynative = net(x, ids).asnumpy()
    twins = [twin.weight for twin in net.twins]
    assert twins[0] is not twins[1] and np.shares_memory(twins[0].asnumpy(), twins[1].asnumpy())
    with mindspore_mode("graph"), linear_weights_transposed([net, None, "not a cell"]):
        assert net.first.weight.shape == (512, 256) and net.first.weight_transposed
        assert not net.tied.weight_transposed  # the Embedding holds it
        assert not any(twin.weight_transposed for twin in net.twins)
        graph = net(x, ids).asnumpy()
    np.testing.assert_array_equal(graph, pynative)
    for name, (parameter, values) in before.items():
        found = dict(net.parameters_and_names())[name]
        assert found is parameter
        np.testing.assert_array_equal(found.asnumpy(), values, err_msg=name)
    assert not any(cell.weight_transposed for _, cell in net.cells_and_names() if isinstance(cell, ms.nn.Linear))


def test_a_graph_holds_nothing_per_linear_layer_with_its_weight_transposed():
    """What linear_weights_transposed is for: a graph computing weight.T holds 2x to 3x each weight
    (MindSpore 2.10, CPU); with the weight stored transposed, nothing more."""
    from mindspore import mint

    from xrand.frameworks import mindspore_mode
    from xrand.frameworks.mindspore_graph import linear_weights_transposed

    weight_gib = 4096 * 16384 * 4 / 2**30  # 0.25
    x = ms.tensor(np.ones((2, 4096), np.float32))
    grown = {}
    for transposed in (True, False):
        net = mint.nn.Linear(4096, 16384)
        with mindspore_mode("graph"), (linear_weights_transposed([net]) if transposed else
                                       contextlib.nullcontext()):
            start = _resident_gib()
            net(x).asnumpy()
            grown[transposed] = _resident_gib() - start
        del net
        gc.collect()
    assert grown[True] < 0.4 * weight_gib < weight_gib < grown[False], grown


class _RowAdded(ms.nn.Cell):
    """A row added to each row of a matrix with ``+``: MindSpore's Add, broadcasting."""

    def __init__(self, row):
        super().__init__()
        self.row = row

    def construct(self, x):
        return x + self.row


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mapped_gib():
    """What glibc's malloc holds in blocks mapped each on its own (mallinfo2's hblkhd): every block of
    32 MiB or more, whatever the process's resident memory does meanwhile."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _Mallinfo2
    return mallinfo2().hblkhd / 2**30


def test_a_graph_holds_nothing_per_linear_layers_bias():
    """What the bias by BiasAdd is for (xrand.frameworks.mindspore_graph): MindSpore's Add of a row
    of biases to a matrix keeps two tables of one 8-byte index per output value for as long as its
    graph lives, four times a float32 output (MindSpore 2.10, CPU); the Linear layer keeps nothing."""
    from mindspore import mint

    from xrand.frameworks import mindspore_mode
    from xrand.frameworks.mindspore_graph import linear_weights_transposed

    tables_gib = 4096 * 4096 * 16 / 2**30  # 0.25: 4096 rows of 4096 outputs, two tables of 128 MiB
    linear = mint.nn.Linear(256, 4096)
    inputs = {"add": ms.tensor(np.ones((4096, 4096), np.float32)),
              "linear": ms.tensor(np.ones((4096, 256), np.float32))}
    grown = {}
    with mindspore_mode("graph"), linear_weights_transposed([linear]):  # as a pipeline's run
        for name, net in (("add", _RowAdded(linear.bias)), ("linear", linear)):  # the memory pool grows in the first
            net.compile(inputs[name])  # where MindSpore frees the graphs of cells gone before
            start = _mapped_gib()
            net(inputs[name]).asnumpy()
            grown[name] = _mapped_gib() - start
    assert grown["linear"] < 0.1 * tables_gib < tables_gib <= grown["add"], grown


class _Divisions(ms.nn.Cell):
    """A chain of ``count`` divisions by a number and ``count`` by a tensor of the same shape, then one by a row."""

    def __init__(self, count):
        super().__init__()
        self.count = count

    def construct(self, x, y, row):
        for _ in range(self.count):
            x = x / 0.18215 + 1.0
            x = x / (x * 0.5 + y)
        return x / row


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_division_in_graph_mode_gives_pynatives_bits_and_the_next_graph_divides_as_before(dtype):
    from mindspore.ops.composite.multitype_ops import div_impl

    from xrand.frameworks import mindspore_mode

    rng = np.random.default_rng(7)
    x = ms.tensor(rng.standard_normal((64, 256)).astype(dtype))
    y, row = (ms.tensor(rng.uniform(2, 3, shape).astype(dtype)) for shape in ((64, 256), (1, 256)))
    pynative = _Divisions(2)(x, y, row).asnumpy()
    entries = list(div_impl.div.entries)
    integers = ms.tensor(np.arange(1, 9, dtype=np.int32)), ms.tensor(np.full(8, 2, np.int32)), \
        ms.tensor(np.full(8, 4, np.int32))
    with mindspore_mode("graph"):
        graph = _Divisions(2)(x, y, row).asnumpy()
        whole = _Divisions(1)(*integers).asnumpy()  # integers: MindSpore's Div, as before
    np.testing.assert_array_equal(graph, pynative)
    np.testing.assert_array_equal(whole, _Divisions(1)(*integers).asnumpy())
    assert div_impl.div.entries == entries and not div_impl.div.xrand_real_div


class _Swaps(ms.nn.Cell):
    """A chain of ``count`` pairs of swaps of two axes (negative and positive), each pair followed by a product."""

    def __init__(self, count):
        super().__init__()
        self.count = count

    def construct(self, x):
        for _ in range(self.count):
            x = x.swapaxes(0, -1).swapaxes(1, 2) * 2.0
        return x


def test_swapaxes_in_graph_mode_gives_pynatives_values_and_the_next_graph_swaps_as_before():
    from mindspore.ops import functional

    from xrand.frameworks import mindspore_mode

    x = ms.tensor(np.random.default_rng(8).standard_normal((2, 3, 5)).astype(np.float32))
    original = functional.swapaxes
    pynative = _Swaps(3)(x).asnumpy()
    with mindspore_mode("graph"):
        graph = _Swaps(3)(x).asnumpy()
    np.testing.assert_array_equal(graph, pynative)
    assert functional.swapaxes is original


# A chain of divisions in a graph, in a fresh process (what a process holds after a first graph
# says little of a second): inside division_as_real_div, outside it, or outside it with freed large
# blocks unmapped ("unmapped", as a comparison's own processes run); prints how much the process grew, in GiB.
DIVISIONS = r"""
import contextlib, sys
import numpy as np
import mindspore as ms
from xrand.mindspore_cpu import install, tune_cpu_runtime
from xrand.frameworks.mindspore_graph import division_as_real_div
sys.path.insert(0, sys.argv[1])
from test_graph_cache import _Divisions, _resident_gib
tune_cpu_runtime(1)
install()
rng = np.random.default_rng(3)  # what the kernels hold depends on the values: constant arrays show little
x = ms.tensor(rng.standard_normal((2048, 1024)).astype(np.float32))
y, row = (ms.tensor(rng.uniform(5, 6, shape).astype(np.float32)) for shape in ((2048, 1024), (1, 1024)))
ms.set_context(mode=ms.GRAPH_MODE)
if sys.argv[2] == "unmapped":
    from xrand.compare.stages import large_blocks_unmapped_when_freed
    large_blocks_unmapped_when_freed()
with division_as_real_div() if sys.argv[2] == "inside" else contextlib.nullcontext():
    start = _resident_gib()
    _Divisions(6)(x, y, row).asnumpy()
print(_resident_gib() - start)
"""


def test_a_graph_holds_nothing_per_division():
    """What division_as_real_div is for: after a graph's Div and Divs kernels the process holds up
    to four times their output more each, memory they freed that glibc's malloc keeps (MindSpore
    2.10, CPU; xrand.frameworks.mindspore_graph); as RealDiv, nothing past the memory pool's reuse;
    as Div in a process whose freed large blocks are unmapped (a comparison's own processes), nothing either."""
    output_gib = 2048 * 1024 * 4 / 2**30  # 8 MiB; 13 divisions
    grown = {}
    for where in ("inside", "outside", "unmapped"):
        done = subprocess.run([sys.executable, "-c", DIVISIONS, os.path.dirname(__file__), where],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        grown[where] = float(done.stdout.split()[-1])
    assert max(grown["inside"], grown["unmapped"]) < 12 * output_gib < 24 * output_gib < grown["outside"], grown


def test_without_graph_calls_a_2d_linear_layer_rounds_differently_in_graph_mode():
    """What linear_as_in_pynative is for: MindSpore's own graph-mode Linear (MindSpore 2.10, CPU)."""
    from mindspore import mint

    net = mint.nn.Linear(128, 512)  # one row: different at AVX2 and at AVX-512 (cap_onednn_isa)
    x = ms.tensor(np.random.default_rng(0).standard_normal((1, 128)).astype(np.float32))
    pynative = net(x).asnumpy()
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        graph = net(x).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert 1e-8 < rel_l2(graph, pynative) < 1e-6
