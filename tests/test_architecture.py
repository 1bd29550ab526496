"""The package's layers point down, and the extension points work as documented."""
import ast
import pathlib
import shutil

import numpy as np
import pytest

import xrand
from conftest import run_python

PACKAGE = pathlib.Path(xrand.__file__).parent

# Lowest first; a module may import only from its own layer or below. The package's own
# __init__ is the public facade over everything, so it sits on top.
LAYERS = {
    "xrand._version": 0, "xrand.checks": 0, "xrand.numeric": 0, "xrand.files": 0, "xrand.cache": 0,
    "xrand.streams": 1,
    "xrand.backends": 2, "xrand.registry": 2,
    "xrand.generator": 3, "xrand.noise": 3, "xrand.determinism": 3, "xrand.brownian": 3,
    "xrand.mindspore_cpu": 3,
    "xrand.patch": 4, "xrand.frameworks": 4,
    "xrand.pipelines": 5, "xrand.models": 5,
    "xrand.compare": 6,
    "xrand.report": 7,
    "xrand.sweep": 8,
    "xrand.cli": 9, "xrand.__main__": 9,
    "xrand": 10,
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: pathlib.Path, top_level_only: bool = False):
    """The xrand modules that ``name`` imports (anywhere in the file, or at its top level)."""
    modules = _modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "xrand")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "xrand":
                continue
            for alias in node.names:  # `from . import numpy` names a module, `from .x import f` a function
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def test_every_import_points_down():
    upward = []
    for name, path in _modules().items():
        for target in _imports(name, path):
            if _layer(target) > _layer(name):
                upward.append(f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_cycles():
    graph = {name: {t for t in _imports(name, path) if t != name} for name, path in _modules().items()}
    # a package's __init__ re-exporting its own modules is not a cycle through them
    graph = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}
    state, cycles = {}, []

    def visit(node, trail):
        state[node] = "open"
        for nxt in graph.get(node, ()):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_a_plain_copy_of_the_package_imports(tmp_path):
    """No install-time mapping: the source tree is the package."""
    shutil.copytree(PACKAGE, tmp_path / "xrand", ignore=shutil.ignore_patterns("models"))
    out = run_python(
        "import sys; sys.path.insert(0, %r); import xrand, xrand.backends.numpy;"
        "assert xrand.__file__.startswith(%r), xrand.__file__;"
        "print(xrand.randn_tensor((2,), generator=xrand.Generator(1, stream='pcg64'), dtype='float64').tolist())"
        % (str(tmp_path), str(tmp_path)),
        env={"XRAND_BACKEND": "numpy"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(np.random.default_rng(1).standard_normal(2).tolist())


def test_a_plugin_backend_with_the_base_class_signature_draws_global_noise():
    class ThirdParty(xrand.backends.Backend):
        name = "thirdparty"

        def from_numpy(self, array, dtype, device=None):
            return ("tensor", array.astype(dtype or array.dtype))

        def randn(self, shape, dtype, device=None):  # as the base class declares it
            return self.from_numpy(np.zeros(shape), dtype, device)

    xrand.register_backend("thirdparty", ThirdParty)
    with xrand.use_backend("thirdparty"):
        tag, values = xrand.randn_tensor((2, 3), dtype="float32")
        assert tag == "tensor" and values.shape == (2, 3) and values.dtype == np.float32
        with pytest.raises(xrand.UsageError, match="layout='strided' is only accepted by the torch backend"):
            xrand.randn_tensor((2, 3), layout="strided")


def test_generator_works_with_torch_hidden(monkeypatch):
    """A hidden module (``sys.modules[name] = None``, as tests hide one) counts as absent."""
    import sys

    expected = xrand.Generator(3, engine="numpy").normal((40,))
    monkeypatch.setitem(sys.modules, "torch", None)
    g = xrand.Generator(3)
    assert g._stream.engine != "torch"
    np.testing.assert_array_equal(g.normal((40,)), expected)
    out = run_python("import sys; sys.modules['torch'] = None; import xrand;"
                     "print(xrand.Generator(3).normal((4,)).tolist(), xrand.get_backend())")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("]")[1].strip() == "numpy"


def test_manual_seed_does_not_create_plugin_backends():
    created = []

    class Heavy(xrand.backends.Backend):
        name, module = "heavy", "a_framework_that_is_not_installed"

        def __init__(self):
            created.append(self)

    xrand.register_backend("heavy", Heavy)
    xrand.manual_seed(1)
    assert created == []


def test_manual_seed_seeds_a_plugin_whose_framework_is_loaded():
    seeds = []

    class Seeded(xrand.backends.Backend):
        name, module = "seeded", "json"  # a module that is imported

        def manual_seed(self, seed):
            seeds.append(seed)

    xrand.register_backend("seeded", Seeded, module="json")
    xrand.manual_seed(5)
    assert seeds == [5]


def test_the_default_backend_is_decided_once():
    """find_spec (about 30 us) is asked once, not on every randn_tensor call."""
    out = run_python(
        "import importlib.util as u; calls = []; real = u.find_spec;"
        "u.find_spec = lambda name, *a: calls.append(name) or real(name, *a);"
        "import xrand; [xrand.get_backend() for _ in range(5)]; print(calls.count('torch'))"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_patch_maps_each_libraries_own_signature():
    """mindone's randn_tensor(shape, generator, dtype) and diffusers' (shape, generator, device, dtype)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("mindone")
    from xrand.frameworks.quiet import silenced

    with silenced():
        import mindspore as ms
        from diffusers.utils import torch_utils
        from mindone.diffusers.utils import mindspore_utils

    def gen():
        return xrand.Generator(1, stream="pcg64")

    expected = gen().normal((2, 3), "float16")
    with xrand.patched():
        for fn in (mindspore_utils.randn_tensor, mindspore_utils.randn):
            positional = fn((2, 3), gen(), ms.float16)
            keyword = fn((2, 3), generator=gen(), dtype=ms.float16)
            for out in (positional, keyword):
                assert out.dtype == ms.float16
                np.testing.assert_array_equal(out.asnumpy(), expected)
        out = torch_utils.randn_tensor((2, 3), gen(), torch.device("cpu"), torch.float16)
        assert out.dtype == torch.float16
        np.testing.assert_array_equal(out.numpy(), expected)
