"""Choosing the backend: set_backend, use_backend, XRAND_BACKEND, plug-ins, lazy imports."""
import asyncio
import json
import textwrap
import threading

import numpy as np
import pytest

import xrand
from xrand.backends import Backend

from conftest import run_python


def test_import_does_not_import_frameworks():
    out = run_python(
        "import sys, xrand; xrand.available_backends(); xrand.get_backend();"
        "print([m for m in ('torch', 'mindspore', 'mindone', 'diffusers', 'numba') if m in sys.modules])"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_framework_imported_on_first_use():
    pytest.importorskip("torch")
    out = run_python(
        "import sys, xrand; before = 'torch' in sys.modules;"
        "xrand.set_backend('torch'); xrand.randn_tensor((2,), generator=xrand.Generator(0, stream='pcg64'));"
        "print(before, 'torch' in sys.modules)"
    )
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_default_is_torch_when_installed_else_numpy():
    import importlib.util

    expected = "torch" if importlib.util.find_spec("torch") else "numpy"
    assert xrand.get_backend() == expected


def test_environment_variable_sets_default_once(monkeypatch):
    monkeypatch.setenv("XRAND_BACKEND", "numpy")
    assert xrand.get_backend() == "numpy"
    monkeypatch.setenv("XRAND_BACKEND", "mindspore")
    assert xrand.get_backend() == "numpy"  # read at the first need, like OMP_NUM_THREADS


def test_environment_variable_naming_no_backend(monkeypatch):
    monkeypatch.setenv("XRAND_BACKEND", "nope")
    with pytest.raises(ValueError, match="XRAND_BACKEND='nope'"):
        xrand.get_backend()


def test_environment_variable_in_a_fresh_process():
    out = run_python("import xrand; print(xrand.get_backend())", env={"XRAND_BACKEND": "numpy"})
    assert out.stdout.strip() == "numpy", out.stderr


def test_set_backend_and_nested_use_backend():
    xrand.set_backend("numpy")
    assert xrand.get_backend() == "numpy"
    with xrand.use_backend("torch"):
        assert xrand.get_backend() == "torch"
        with xrand.use_backend("mindspore"):
            assert xrand.get_backend() == "mindspore"
        assert xrand.get_backend() == "torch"
    assert xrand.get_backend() == "numpy"


def test_use_backend_restores_after_an_exception():
    xrand.set_backend("numpy")
    with pytest.raises(RuntimeError):
        with xrand.use_backend("torch"):
            raise RuntimeError("boom")
    assert xrand.get_backend() == "numpy"


def test_use_backend_is_local_to_each_thread():
    xrand.set_backend("numpy")
    names = ["torch", "mindspore", "numpy"] * 3
    barrier = threading.Barrier(8)
    seen, errors = {}, []

    def work(i):
        try:
            with xrand.use_backend(names[i]):
                barrier.wait(timeout=30)
                for _ in range(200):
                    assert xrand.get_backend() == names[i]
                seen[i] = xrand.get_backend()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert seen == {i: names[i] for i in range(8)}
    assert xrand.get_backend() == "numpy"


def test_use_backend_is_local_to_each_asyncio_task():
    async def task(name, started, go):
        with xrand.use_backend(name):
            started.set()
            await go.wait()
            return xrand.get_backend()

    async def main():
        go = asyncio.Event()
        events = [asyncio.Event() for _ in range(6)]
        names = ["torch", "numpy", "mindspore", "numpy", "torch", "mindspore"]
        tasks = [asyncio.create_task(task(n, e, go)) for n, e in zip(names, events)]
        for e in events:
            await e.wait()
        go.set()
        return names, await asyncio.gather(*tasks)

    names, got = asyncio.run(main())
    assert got == names


class ListBackend(Backend):
    """A toy plug-in: tensors are nested Python lists."""

    name = "lists"

    def is_tensor(self, obj):
        return isinstance(obj, list)

    def device(self, device):
        return None

    def from_numpy(self, array, dtype, device=None):
        return array.astype(dtype or array.dtype).tolist()

    def to_numpy(self, tensor):
        return np.asarray(tensor)


def test_register_backend_plugs_in_a_framework():
    xrand.register_backend("lists", ListBackend)
    assert "lists" in [b.name for b in xrand.available_backends()]
    with xrand.use_backend("lists"):
        got = xrand.randn_tensor((2, 2), generator=xrand.Generator(1, stream="pcg64"))
    assert got == np.random.Generator(np.random.PCG64(1)).standard_normal((2, 2)).astype(np.float32).tolist()


def test_unavailable_backend_is_listed_with_its_reason():
    class Missing(Backend):
        name, module, extra = "missing", "a_framework_that_is_not_installed", "missing"

    xrand.register_backend("missing", Missing)
    row = [b for b in xrand.available_backends() if b.name == "missing"][0]
    assert not row.available and "a_framework_that_is_not_installed is not installed" in row.reason
    with xrand.use_backend("missing"), pytest.raises(xrand.UsageError, match="cannot be used here"):
        xrand.randn_tensor((2,), generator=xrand.Generator(0, stream="pcg64"))


def test_entry_point_plugin_in_a_fresh_process(tmp_path):
    """A package that declares the xrand.backends entry point is found without registration."""
    (tmp_path / "jaxlike_backend.py").write_text(textwrap.dedent('''
        from xrand.backends import Backend
        class Plugin(Backend):
            name = "plugin"
            def device(self, device): return None
            def from_numpy(self, array, dtype, device=None): return ("plugin-tensor", array.astype(dtype).tolist())
    '''))
    dist = tmp_path / "jaxlike_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jaxlike-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[xrand.backends]\nplugin = jaxlike_backend:Plugin\n")
    code = (
        "import sys, json; sys.path.insert(0, %r); import xrand;"
        "rows = [b.name for b in xrand.available_backends()];"
        "xrand.set_backend('plugin');"
        "print(json.dumps([rows, xrand.randn_tensor((2,), generator=xrand.Generator(1, stream='pcg64'))]))"
    ) % str(tmp_path)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    rows, tensor = json.loads(out.stdout)
    assert "plugin" in rows
    assert tensor[0] == "plugin-tensor" and len(tensor[1]) == 2


@pytest.mark.parametrize("bad", ["tensorflow", "", "Torch"])
def test_unknown_backend_names_the_value_and_the_known_ones(bad):
    with pytest.raises(ValueError, match=f"unknown backend {bad!r}.*known backends: .*numpy"):
        xrand.set_backend(bad)
    with pytest.raises(ValueError, match="unknown backend"):
        with xrand.use_backend(bad):
            pass


def test_backend_name_must_be_a_string():
    with pytest.raises(TypeError, match="backend name must be a string, got 3"):
        xrand.set_backend(3)
