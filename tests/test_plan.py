"""A comparison is planned once: the folder read once, each scheduler built once per run, every
refusal before any model loads."""
import builtins
import json
import os
import sys

import pytest

import xrand
from xrand.compare import make_plan
from xrand.pipelines.settings import Settings

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from conftest import PYNATIVE, make_tiny_model  # noqa: E402

XRAND = os.path.dirname(os.path.abspath(xrand.__file__))


def _from_xrand(frame) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(XRAND + os.sep)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("plan") / "model")


def test_one_compare_reads_model_index_once_and_builds_a_scheduler_per_run(tiny_model, mindone, tmp_path,
                                                                            monkeypatch):
    """xrand's own reads and constructions (the libraries' from_pretrained reads and builds for itself)."""
    from diffusers.configuration_utils import ConfigMixin as TorchConfigMixin
    from diffusers.schedulers.scheduling_utils import SchedulerMixin as TorchSchedulerMixin
    from mindone.diffusers.configuration_utils import ConfigMixin as MsConfigMixin
    from mindone.diffusers.schedulers.scheduling_utils import SchedulerMixin as MsSchedulerMixin

    from xrand.cli import main

    reads, built = [], []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if str(file).endswith("model_index.json") and _from_xrand(sys._getframe(1)):
            reads.append(str(file))
        return real_open(file, *args, **kwargs)

    def counting(config_mixin, scheduler_mixin, framework):
        original = config_mixin.__dict__["from_config"].__func__

        def from_config(cls, *args, **kwargs):
            if issubclass(cls, scheduler_mixin) and _from_xrand(sys._getframe(1)):
                built.append((framework, cls.__name__))
            return original(cls, *args, **kwargs)

        monkeypatch.setattr(config_mixin, "from_config", classmethod(from_config))

    monkeypatch.setattr(builtins, "open", counting_open)
    counting(TorchConfigMixin, TorchSchedulerMixin, "torch")
    counting(MsConfigMixin, MsSchedulerMixin, "mindspore")
    code = main(["compare", "--model", tiny_model, "--steps", "2", "--batch-size", "1", "--scheduler", "euler-a",
                 *PYNATIVE, "--quiet", "--out", str(tmp_path / "o")])
    assert code == 0
    assert reads == [os.path.join(tiny_model, "model_index.json")]
    assert sorted(built) == [("mindspore", "EulerAncestralDiscreteScheduler"),  # its side
                             ("torch", "EulerAncestralDiscreteScheduler"),  # its side
                             ("torch", "EulerAncestralDiscreteScheduler")]  # the float64 floor run
    report = json.load(open(tmp_path / "o" / "report.json"))
    assert "noise_floor" in report and report["settings"]["ran"]["a"]["scheduler"] == "EulerAncestralDiscreteScheduler"


def test_a_plan_is_immutable_and_a_cell_reuses_its_folder(tiny_model, monkeypatch):
    import dataclasses

    from xrand.compare import plan as plan_module

    plan = make_plan(Settings(model=tiny_model, steps=3, scheduler="heun"), tolerance=1e-3, lockstep=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.tolerance = 1.0
    assert plan.scheduler.cls == "HeunDiscreteScheduler" and plan.scheduler.config["_class_name"] == "DDIMScheduler"
    monkeypatch.setattr(plan_module, "read_folder", lambda *a: pytest.fail("the folder was read again"))
    cell = plan.cell(seed=7, scheduler="DPMSolverMultistepScheduler", scheduler_options={"use_karras_sigmas": True})
    assert cell.folder is plan.folder and cell.settings.seed == 7 and cell.tolerance == 1e-3 and cell.lockstep
    assert cell.scheduler.config["use_karras_sigmas"] is True and cell.scheduler.step_options == {}
    with pytest.raises(xrand.UsageError, match="DPMSolverMultistepScheduler has no option 's_noise'"):
        plan.cell(scheduler="DPMSolverMultistepScheduler", scheduler_options={"s_noise": 1.0})


def test_a_large_model_runs_mindspore_pynative_on_a_cpu_unless_graph_mode_is_asked(tiny_model, mindone, monkeypatch):
    from xrand.compare import plan as plan_module

    settings = Settings(model=tiny_model, steps=3)
    assert make_plan(settings).mindspore_mode == "graph"  # the tiny model is far below the line
    monkeypatch.setattr(plan_module, "PYNATIVE_ABOVE_BYTES", 1000)  # the tiny model's weights are more
    plan = make_plan(settings)
    size = plan.folder.weights_bytes
    assert size > 1000 and size == sum(os.path.getsize(p) for p in plan.folder.weights)
    assert plan.mindspore_mode == "pynative" and plan.mindspore_mode_reason.startswith(
        f"the model's weights are {size / 1e9:.1f} GB: on a CPU graph mode would hold about 1.6x")
    assert plan.cell(seed=1).mindspore_mode == "pynative"
    asked = make_plan(settings, mindspore_mode="graph")
    assert (asked.mindspore_mode, asked.mindspore_mode_reason) == ("graph", None)
    assert asked.cell(seed=1).mindspore_mode == "graph"


@pytest.mark.parametrize("options, message", [
    (dict(tolerance=-1), "tolerance must be a finite number >= 0, got -1"),
    (dict(mindspore_mode="jit"), "unknown MindSpore mode 'jit'; accepted: pynative, graph"),
    (dict(frameworks=["jax"]), "unknown framework 'jax'; accepted: torch, mindspore"),
    (dict(devices={"mindspore": "tpu"}), "unknown MindSpore device 'tpu'"),
    (dict(frameworks=["mindspore"], noise_floor=True), "the noise floor is torch's own: it needs the torch side"),
])
def test_bad_plan_options_are_refused_naming_the_value(tiny_model, options, message):
    with pytest.raises(xrand.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_plan(Settings(model=tiny_model), **options)


def test_a_weight_files_sha256_is_kept_and_a_rewritten_file_is_hashed_again(tmp_path, monkeypatch):
    """A weight file's digest is hashed once and kept in the cache: a later process reads it back
    (here: what the cache holds is what is returned); the same file rewritten, same size and
    modification time put back, is hashed again (its change time moved)."""
    import hashlib

    from xrand.pipelines import folder as folders

    monkeypatch.setenv("XRAND_CACHE_DIR", str(tmp_path / "cache"))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 1000)

    def digest():
        folders._sha256.cache_clear()  # as a new process: nothing in memory
        return folders.file_sha256(str(weights))

    assert digest() == hashlib.sha256(b"a" * 1000).hexdigest()
    kept = list((tmp_path / "cache" / folders.DIGESTS).iterdir())
    assert len(kept) == 1 and kept[0].read_text() == hashlib.sha256(b"a" * 1000).hexdigest()
    kept[0].write_text("0" * 64)
    assert digest() == "0" * 64  # read back, not hashed

    before = os.stat(weights)
    weights.write_bytes(b"b" * 1000)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert digest() == hashlib.sha256(b"b" * 1000).hexdigest()

    monkeypatch.setenv("XRAND_CACHE_DIR", str(weights))  # a file: the cache cannot be written
    assert digest() == hashlib.sha256(b"b" * 1000).hexdigest()
