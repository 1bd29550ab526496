"""Records (xrand.compare.records): what one framework's stages leave for the other's, written to a
comparison folder in safetensors shards and read back exactly, or refused by name."""
import json

import numpy as np
import pytest

from xrand.checks import UsageError
from xrand.compare import records
from xrand.compare.records import RecordReader, RecordWriter
from xrand.compare.trees import Captured


def tree_of(rng):
    sample = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    return {
        "sample": Captured(sample, "float32"),
        "again": Captured(sample, "float32"),  # the same array twice: stored once
        "timestep": Captured(np.array(981, dtype=np.int64), "int64"),  # 0-d stays 0-d
        "scale": np.float64(7.5),
        "half": Captured(rng.standard_normal((3, 5)).astype(np.float16), "float16"),
        "added": ({"text_embeds": Captured(rng.standard_normal((2, 6)).astype(np.float32), "float32")}, 3, None),
        "names": ["a", 1.5, True],
    }


def assert_same(got, want):
    if isinstance(want, Captured):
        assert isinstance(got, Captured) and got.dtype == want.dtype
        assert got.array.shape == want.array.shape and got.array.dtype == want.array.dtype
        assert np.array_equal(got.array, want.array)
    elif isinstance(want, (np.ndarray, np.generic)):
        assert np.asarray(got).shape == np.asarray(want).shape and np.array_equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want


@pytest.mark.parametrize("shard_bytes, shards", [(records.SHARD_BYTES, 1), (100, 2), (1, 5)])
def test_a_record_comes_back_from_its_folder_exactly(tmp_path, monkeypatch, shard_bytes, shards):
    """Shapes (a 0-d timestep included: a 1-d one made MindSpore compile a new graph), dtypes,
    values, tuples and dicts come back as written, from one shard or from many."""
    monkeypatch.setattr(records, "SHARD_BYTES", shard_bytes)
    want = tree_of(np.random.default_rng(0))
    writer = RecordWriter("calls", str(tmp_path))
    files = writer.close(writer.encode(want))
    assert len([name for name in files if name.endswith(".safetensors")]) == shards
    assert all(set(entry) == {"sha256", "bytes"} for entry in files.values())
    got = RecordReader.open(str(tmp_path), "calls", files, made_by="torch")
    assert_same(got.decode(got.tree), want)
    # in memory, the same
    memory = RecordWriter("calls")
    memory.close(memory.encode(want))
    assert memory.close(memory.tree) == {}
    assert_same(RecordReader.of(memory).decode(memory.tree), want)


def test_a_truncated_or_edited_record_is_refused_by_name(tmp_path):
    writer = RecordWriter("calls", str(tmp_path))
    files = writer.close(writer.encode(tree_of(np.random.default_rng(0))))
    shard = next(name for name in files if name.endswith(".safetensors"))
    path = tmp_path / shard
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(UsageError, match=rf"^{path} is not the file the stage 'torch' wrote \({len(data) - 10} "
                                         rf"bytes, {len(data)} written\): truncated or edited"):
        RecordReader.open(str(tmp_path), "calls", files, made_by="torch")
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(UsageError, match="its sha256 differs"):
        RecordReader.open(str(tmp_path), "calls", files, made_by="torch")
    path.unlink()
    with pytest.raises(UsageError, match=rf"^{path} is missing; the stage 'torch' writes it"):
        RecordReader.open(str(tmp_path), "calls", files, made_by="torch")
    tree = json.loads((tmp_path / "records" / "calls.json").read_text())
    assert set(tree) == {"tree", "shards"}
