"""--noise native: each side draws its noise the way its library does by itself from the seed
(diffusers: torch.Generator("cpu").manual_seed(s); mindone: np.random.Generator(np.random.PCG64(s))),
checked against the libraries' own draws; the two sides then part, where xrand's shared noise passes."""
import json
from dataclasses import replace

import numpy as np
import pytest

from conftest import PYNATIVE
from xrand.checks import UsageError
from xrand.cli import default_model, main
from xrand.compare.plan import make_plan
from xrand.pipelines.settings import Settings

SEED = 7


def test_native_noise_is_a_setting_checked_once_and_refuses_the_noise_floor():
    with pytest.raises(UsageError, match="unknown noise 'torch'; accepted: shared, native"):
        Settings(model="x", noise="torch")
    with pytest.raises(UsageError, match="with --noise native give --no-noise-floor"):
        make_plan(Settings(model=default_model(), steps=2, noise="native"), frameworks=("torch",), noise_floor=True)
    assert "noise" in Settings.COMPARED  # a native side never compares with a shared one


@pytest.fixture(scope="module")
def digits_pair(mindone):
    from xrand.compare import load_pair

    settings = Settings(model=default_model(), steps=2, batch_size=1, seed=SEED)
    return settings, load_pair(make_plan(settings))


def test_each_side_draws_its_librarys_own_noise_from_the_seed(digits_pair):
    import mindspore as ms
    import torch
    from mindone.diffusers.utils.mindspore_utils import randn_tensor as mindone_randn_tensor

    from xrand.compare.result import compare_sides
    from xrand.compare.sides import run

    settings, pair = digits_pair
    plan = make_plan(replace(settings, noise="native"))
    a, b = run(pair.torch, plan), run(pair.mindspore, plan)
    shape = a.initial_noise.shape  # DDIM's init_noise_sigma is 1: the first sample is the draw itself
    assert shape[0] == 1 and shape == b.initial_noise.shape
    torch_own = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(SEED)).numpy()
    mindone_own = mindone_randn_tensor(shape, generator=np.random.Generator(np.random.PCG64(SEED)),
                                       dtype=ms.float32).asnumpy()
    np.testing.assert_array_equal(a.initial_noise, torch_own)
    np.testing.assert_array_equal(b.initial_noise, mindone_own)
    np.testing.assert_array_equal(mindone_own, np.random.Generator(np.random.PCG64(SEED)).standard_normal(shape)
                                  .astype(np.float32))
    assert a.ran["noise"] == f'torch.Generator("cpu").manual_seed({SEED})'
    assert b.ran["noise"] == f"np.random.Generator(np.random.PCG64({SEED}))"
    assert a.ran["noise_draws"] is None

    native = compare_sides(a, b)
    assert not native.passed and native.final["rel_l2"] > 0.1 and native.initial_noise["rel_l2"] > 1
    assert "(native noise: each library's own generator)" in native.verdict()

    from xrand.compare import compare_loaded

    shared = compare_loaded(pair, make_plan(settings))
    assert shared.passed and shared.ran["a"]["noise"].startswith("shared") and "native" not in shared.verdict()
    assert shared.final["rel_l2"] < native.final["rel_l2"] / 100


def test_compare_and_sweep_take_noise_native(mindone, tmp_path, capsys):
    out = tmp_path / "compare"
    assert main(["compare", "--noise", "native", "--steps", "2", "--batch-size", "1", "--seed", str(SEED), *PYNATIVE,
                 "--out", str(out)]) == 1  # the libraries' own noises differ: FAIL, no floor
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["noise"] == "native"
    assert report["settings"]["ran"]["b"]["noise"] == f"np.random.Generator(np.random.PCG64({SEED}))"
    assert "native noise" in capsys.readouterr().out

    sweep = tmp_path / "sweep"
    assert main(["sweep", "--noise", "native", "--seeds", "0-1", "--steps", "2", "--batch-size", "1", "--quiet",
                 "--out", str(sweep)]) == 1
    rows = [json.loads(line) for line in (sweep / "results.jsonl").read_text().splitlines()]
    assert sorted(r["seed"] for r in rows) == [0, 1] and all(r["rel_l2"] > 0.1 and not r["passed"] for r in rows)
    assert json.loads((sweep / "sweep.json").read_text())["settings"]["noise"] == "native"
