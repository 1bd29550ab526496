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
    """Both libraries' DDIMPipeline under xrand.patched() (on a CPU: the MindSpore stand-ins and
    its synchronous launch come with it), and the plan-then-compare example; in fresh processes,
    in a scratch folder."""
    pytest.importorskip("mindone.diffusers")
    pytest.importorskip("diffusers")
    import subprocess
    import sys

    [code] = [block for block in python_blocks() if marker in block]
    if marker.startswith("DDIM"):  # and how MindSpore launched its operators (synchronously: 10x faster steps here)
        code += "from mindspore._c_expression import RuntimeConf\nprint(RuntimeConf.get_instance().is_launch_blocking())\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    if marker.startswith("DDIM"):
        assert len(lines) == 2 and 0 < float(lines[0]) < 1e-4, done.stdout  # nothing printed but the answer
        assert lines[1] == "True"
    else:
        assert lines == [line for line in lines if line.startswith("PASS: torch vs mindspore")] and len(lines) == 4
        assert (tmp_path / "out" / "report.html").exists()
    # the libraries' warnings stay out, as the xrand command keeps them out (progress bars stay)
    assert not any(word in done.stderr for word in ("WARNING", "Warning", "deprecated", "Config not found")), \
        done.stderr[-3000:]


def test_every_tiny_folder_the_readme_uses_is_made_by_a_command_it_shows():
    import re

    from xrand.models import TINY_MODELS

    readme = open(os.path.join(ROOT, "README.md")).read()
    made = dict((folder, name) for name, folder in re.findall(r"^python -m xrand\.models (\S+) (\S+)(?: .*)?$", readme, re.M))
    assert set(made.values()) == set(TINY_MODELS)  # every family, each by its own name
    used = set(re.findall(r"--model (tiny-[\w-]+)", readme))
    assert used and used <= set(made), sorted(used - set(made))


def test_three_line_example_is_torch_on_mindspore():
    torch = pytest.importorskip("torch")
    pytest.importorskip("mindspore")
    import xrand

    xrand.set_backend("mindspore")
    noise = xrand.randn_tensor((1, 4, 64, 64), generator=xrand.Generator(1234))
    expected = torch.randn((1, 4, 64, 64), generator=torch.Generator("cpu").manual_seed(1234))
    np.testing.assert_array_equal(noise.asnumpy(), expected.numpy())
