"""The README's measured numbers are what the code gives today: scripts/readme_numbers.py writes
every ``<!-- numbers: NAME -->`` block from a run; here the cheap ones are made again (one kernel
thread, in a fresh process, as the script runs them) and must equal README's, and every block has
its generator."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import every_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "readme_numbers.py")


@pytest.fixture
def script(monkeypatch):
    """The script as a module; the OMP_NUM_THREADS it sets for its own runs is put back after."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # recorded: teardown restores the caller's
    spec = importlib.util.spec_from_file_location("readme_numbers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_block_has_its_generator_and_every_generator_its_block(script):
    found = script.all_blocks()
    assert set(found) == set(script.GENERATORS), (sorted(set(found) - set(script.GENERATORS)),
                                                  sorted(set(script.GENERATORS) - set(found)))
    assert all(len(files) == 1 for files in found.values()), found  # each block once
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert readme.count("<!-- numbers: ") == readme.count("<!-- /numbers -->")  # no block left open


# Run in a fresh process: MindSpore sets its kernel threads once per process, and the numbers'
# last bits depend on the count.
CHEAP = r"""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, "SCRIPTS")
import readme_numbers as numbers

models = numbers.Models(Path(tempfile.mkdtemp()))
row = numbers.DTYPE_ROWS[0]
print(json.dumps({"default-compare": numbers.GENERATORS["default-compare"](models),
                  "dtype row": "| " + " | ".join(numbers.dtype_row(models, row)) + " |"}))
"""


def test_the_cheap_blocks_are_what_the_code_gives(script, tmp_path):
    """The default compare's sentence (digits, 50 steps, batch 4, the noise floor) and the precision
    table's digits float32 row (10 steps, batch 2), where the libraries are the versions README's
    numbers were measured with and torch's CPU kernels the same width (the last bits move with
    both: CI's newest set skips, and so does a CPU without AVX-512 for README's AVX512 numbers)."""
    pytest.importorskip("torch")
    pytest.importorskip("mindone.diffusers")
    pytest.importorskip("diffusers")
    blocks = dict(script.blocks_in(open(os.path.join(ROOT, "README.md")).read()))
    if blocks["versions"] != script.versions_text(None):
        pytest.skip(f"README's numbers were measured {' '.join(blocks['versions'].split())}; here "
                    f"{' '.join(script.versions_text(None).split())}")
    with every_cpu():  # as README's numbers were measured: MindSpore's last bits move with its CPUs
        done = subprocess.run([sys.executable, "-c", CHEAP.replace("SCRIPTS", os.path.dirname(SCRIPT))],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600,
                              env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(done.stdout.splitlines()[-1])
    assert blocks["default-compare"] == made["default-compare"], \
        "README's default-compare block is stale: python scripts/readme_numbers.py --only default-compare"
    assert made["dtype row"] in blocks["dtype-table"].splitlines(), \
        (made["dtype row"], "README's dtype table is stale: python scripts/readme_numbers.py --only dtype-table")
