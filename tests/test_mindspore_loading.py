"""MindSpore's side reads each safetensors file into arrays of its own, not through a memory map
(which held the weights twice while they loaded), and loads the same weights as mindone's reader."""
import contextlib
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from xrand.frameworks import framework  # noqa: E402
from xrand.frameworks import mindspore_loading  # noqa: E402
from xrand.frameworks.mindspore_loading import read_safetensors, weights_read_once  # noqa: E402


def weight_files(folder):
    return sorted(Path(folder).glob("*/*.safetensors"))


def assert_same_arrays(read, loaded):
    assert sorted(read) == sorted(loaded)  # the order differs between safetensors versions; a state dict's does not matter
    for name in loaded:
        assert (read[name].dtype, read[name].shape) == (loaded[name].dtype, loaded[name].shape), name
        assert read[name].tobytes() == loaded[name].tobytes(), name


@pytest.mark.parametrize("variant", ["float32", "float16"])
def test_every_file_reads_as_safetensors_load_file_reads_it(tiny_sd, tiny_sd_fp16, variant):
    files = weight_files(tiny_sd if variant == "float32" else tiny_sd_fp16)
    assert len(files) == 3
    for path in files:
        assert_same_arrays(read_safetensors(path), safetensors_numpy.load_file(path))


def test_a_scalar_an_empty_tensor_and_integers_read_as_load_file_reads_them(tmp_path):
    path = tmp_path / "odd.safetensors"
    safetensors_numpy.save_file({"scalar": np.array(2.5, np.float64), "empty": np.zeros((0, 3), np.float32),
                                 "steps": np.arange(7, dtype=np.int64), "mask": np.array([True, False])},
                                str(path), metadata={"format": "np"})
    assert_same_arrays(read_safetensors(path), safetensors_numpy.load_file(path))


def test_a_dtype_outside_safetensors_numpy_table_is_left_to_load_file(tmp_path):
    """BF16: load_file reads it where MindSpore has given NumPy a bfloat16 dtype (else it raises)."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    path = tmp_path / "bf16.safetensors"
    save_file({"w": torch.arange(3, dtype=torch.bfloat16)}, str(path))
    assert_same_arrays(read_safetensors(path), safetensors_numpy.load_file(path))


def test_a_truncated_file_raises_load_files_error(tiny_sd, tmp_path):
    path = tmp_path / "cut.safetensors"
    path.write_bytes(weight_files(tiny_sd)[0].read_bytes()[:-4])
    with pytest.raises(Exception) as own:
        safetensors_numpy.load_file(path)
    with pytest.raises(type(own.value)):
        read_safetensors(path)


def test_the_reader_is_in_place_only_while_loading_and_after_an_error():
    original = safetensors_numpy.load_file
    with pytest.raises(RuntimeError):
        with weights_read_once():
            assert safetensors_numpy.load_file is read_safetensors
            with weights_read_once():  # nested: the outer one restores
                pass
            assert safetensors_numpy.load_file is read_safetensors
            raise RuntimeError("a load that fails")
    assert safetensors_numpy.load_file is original


def test_every_component_loads_through_the_reader_with_mindones_weights(tiny_sd, monkeypatch):
    """The UNet and VAE (mindone.diffusers) each read their file through it (mindone.transformers'
    CLIP text encoder is read by MindSpore's load_checkpoint); every parameter of every component
    equals what mindone's own reader loads."""
    fw = framework("mindspore")
    read = []

    def counted(path):
        read.append(Path(path).parent.name)
        return read_safetensors(path)

    monkeypatch.setattr(mindspore_loading, "read_safetensors", counted)
    with monkeypatch.context() as own_reader:
        own_reader.setattr(type(fw), "loading", lambda self: contextlib.nullcontext())
        own = fw.load_pipeline("StableDiffusionPipeline", tiny_sd, "float32", None, {})
    assert read == []
    pipe = fw.load_pipeline("StableDiffusionPipeline", tiny_sd, "float32", None, {})
    assert sorted(read) == ["unet", "vae"]
    for name in ("unet", "vae", "text_encoder"):
        theirs = dict(fw.weights(getattr(own, name)))
        ours = dict(fw.weights(getattr(pipe, name)))
        assert list(ours) == list(theirs)
        for key, value in theirs.items():
            assert (ours[key].dtype, ours[key].shape) == (value.dtype, value.shape), key
            assert ours[key].asnumpy().tobytes() == value.asnumpy().tobytes(), f"{name}/{key}"
