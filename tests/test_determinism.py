"""enable_full_determinism / disable_full_determinism restore exactly what they found."""
import os

import pytest

import xrand


def torch_settings():
    import torch

    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cuda.matmul.allow_tf32,
        os.environ.get("CUDA_LAUNCH_BLOCKING"),
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )


def test_torch_settings_on_and_restored(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        before = torch_settings()
        xrand.enable_full_determinism(["torch"])
        assert xrand.full_determinism_enabled()
        assert torch_settings() == (True, False, True, False, False, "1", ":16:8")
        xrand.disable_full_determinism()
        assert torch_settings() == before
        assert not xrand.full_determinism_enabled()
    finally:
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        xrand.disable_full_determinism()


def test_enabling_twice_keeps_the_first_saved_state():
    torch = pytest.importorskip("torch")
    before = torch_settings()
    xrand.enable_full_determinism(["torch"])
    xrand.enable_full_determinism(["torch"])
    xrand.disable_full_determinism()
    assert torch_settings() == before
    assert not torch.are_deterministic_algorithms_enabled()


def test_mindspore_deterministic_mode_on_and_restored():
    ms = pytest.importorskip("mindspore")
    before = (ms.get_context("deterministic"), ms.get_context("pynative_synchronize"))
    xrand.enable_full_determinism(["mindspore"])
    assert (ms.get_context("deterministic"), ms.get_context("pynative_synchronize")) == ("ON", True)
    xrand.disable_full_determinism()
    assert (ms.get_context("deterministic"), ms.get_context("pynative_synchronize")) == before


def test_default_applies_to_every_installed_framework():
    xrand.enable_full_determinism()
    try:
        import importlib.util

        if importlib.util.find_spec("torch"):
            import torch

            assert torch.are_deterministic_algorithms_enabled()
    finally:
        xrand.disable_full_determinism()


def test_unknown_framework_is_refused():
    with pytest.raises(ValueError, match="unknown backend 'jax'"):
        xrand.enable_full_determinism(["jax"])


def test_a_framework_that_is_not_installed_is_a_usage_error():
    class Missing(xrand.backends.Backend):
        name, module = "missing", "a_framework_that_is_not_installed"

    xrand.register_backend("missing", Missing)
    with pytest.raises(xrand.UsageError, match="cannot make 'missing' deterministic: .*is not installed"):
        xrand.enable_full_determinism(["missing"])
    assert not xrand.full_determinism_enabled()
