"""The README's set-up commands are exactly what CI runs, and its three-line example is true."""
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ci_runs_the_readme_install_and_test_commands():
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    install, test = block[0], block[1]
    ci = open(os.path.join(ROOT, ".ci", "run")).read().splitlines()
    assert install in ci and test in ci


def test_three_line_example_is_torch_on_mindspore():
    torch = pytest.importorskip("torch")
    pytest.importorskip("mindspore")
    import xrand

    xrand.set_backend("mindspore")
    noise = xrand.randn_tensor((1, 4, 64, 64), generator=xrand.Generator(1234))
    expected = torch.randn((1, 4, 64, 64), generator=torch.Generator("cpu").manual_seed(1234))
    np.testing.assert_array_equal(noise.asnumpy(), expected.numpy())
