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


def python_blocks():
    readme = open(os.path.join(ROOT, "README.md")).read()
    return [block.split("```", 1)[0] for block in readme.split("```python\n")[1:]]


@pytest.mark.parametrize("marker", ["DDIMPipeline.from_pretrained", "make_plan("])
def test_the_python_examples_of_comparing_run_as_written(marker, tmp_path):
    """Both libraries' DDIMPipeline under xrand.patched() (on a CPU: the MindSpore stand-ins come
    with it), and the plan-then-compare example; in fresh processes, in a scratch folder."""
    pytest.importorskip("mindone.diffusers")
    pytest.importorskip("diffusers")
    import subprocess
    import sys

    [code] = [block for block in python_blocks() if marker in block]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    if marker.startswith("DDIM"):
        assert 0 < float(done.stdout.strip().splitlines()[-1]) < 1e-4
    else:
        assert done.stdout.count("PASS: torch vs mindspore") == 4 and (tmp_path / "out" / "report.html").exists()


def test_three_line_example_is_torch_on_mindspore():
    torch = pytest.importorskip("torch")
    pytest.importorskip("mindspore")
    import xrand

    xrand.set_backend("mindspore")
    noise = xrand.randn_tensor((1, 4, 64, 64), generator=xrand.Generator(1234))
    expected = torch.randn((1, 4, 64, 64), generator=torch.Generator("cpu").manual_seed(1234))
    np.testing.assert_array_equal(noise.asnumpy(), expected.numpy())
