"""The DDIM comparison end to end on a tiny model: patching, both pipelines, report, side files.

Tests of the torch side alone run without MindSpore; those that take the ``mindone`` or ``ms``
fixture (conftest.py) skip there."""
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

import xrand

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from conftest import ALL_CPUS, every_cpu, make_tiny_model, on_cpus, run_python  # noqa: E402
from xrand.compare import compare_frameworks, compare_sides, make_plan  # noqa: E402
from xrand.compare.sidefile import load_side, save_side  # noqa: E402
from xrand.compare.sides import run_side  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402
from xrand.report.compare import write_report  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def eta1_comparison(tiny_model, mindone):
    settings = Settings(model=tiny_model, steps=4, seed=3, batch_size=2, eta=1.0)
    with pytest.MonkeyPatch.context() as patch:  # the threads by the rule, whatever the environment fixed
        patch.delenv("OMP_NUM_THREADS", raising=False)
        return compare_frameworks(settings, lockstep=True, mindspore_mode="pynative")  # graph: test_eta0_...


# -- patching ------------------------------------------------------------------------------------------
def test_patch_reaches_every_module_and_unpatch_restores_them():
    import diffusers.pipelines.ddim.pipeline_ddim as pipeline_module
    import diffusers.utils.torch_utils as torch_utils

    original = torch_utils.randn_tensor
    xrand.patch()
    try:
        assert xrand.is_patched()
        assert pipeline_module.randn_tensor is torch_utils.randn_tensor is not original
        sys.modules.pop("diffusers.schedulers.scheduling_euler_ancestral_discrete", None)
        import diffusers.schedulers.scheduling_euler_ancestral_discrete as late  # imported while patched

        assert late.randn_tensor is torch_utils.randn_tensor
    finally:
        xrand.unpatch()
    assert not xrand.is_patched()
    assert pipeline_module.randn_tensor is original and late.randn_tensor is original
    assert torch_utils.randn_tensor is original


def test_patched_context_and_native_generators_unchanged():
    from diffusers.utils import torch_utils

    expected = torch_utils.randn_tensor((2, 3), generator=torch.Generator().manual_seed(4))
    with xrand.patched():
        got = torch_utils.randn_tensor((2, 3), generator=torch.Generator().manual_seed(4))
        from_xrand = torch_utils.randn_tensor((2, 3), generator=xrand.Generator(4))
    assert torch.equal(got, expected) and torch.equal(from_xrand, expected)
    assert not xrand.is_patched()


def test_patched_with_libraries_patches_those_and_puts_back_only_its_own(mindone):
    from diffusers.utils import torch_utils
    from mindone.diffusers.utils import mindspore_utils

    originals = torch_utils.randn_tensor, mindspore_utils.randn_tensor
    with xrand.patched("mindone.diffusers"):
        assert torch_utils.randn_tensor is originals[0] and mindspore_utils.randn_tensor is not originals[1]
        with xrand.patched():  # adds diffusers, leaves mindone's patch to the outer block
            assert torch_utils.randn_tensor is not originals[0]
        assert torch_utils.randn_tensor is originals[0] and mindspore_utils.randn_tensor is not originals[1]
    assert (torch_utils.randn_tensor, mindspore_utils.randn_tensor) == originals and not xrand.is_patched()
    with pytest.raises(xrand.UsageError,
                       match="unknown library to patch 'torch'; accepted: diffusers, mindone.diffusers"):
        xrand.patch(["torch"])


def test_a_process_of_mindspores_side_alone_imports_transformers_without_torch(tiny_model, mindone, tmp_path):
    """Where torch is installed too, transformers imports it (2.8 s of mindone's pipeline import);
    MindSpore's stages in their own process, and a command line of MindSpore's side alone, import
    it as a MindSpore-only machine does, with the same numbers. ``main`` called with its arguments
    (a notebook may run torch's side next) imports it as usual. Neither imports diffusers (its
    import took 0.3-0.6 s of a MindSpore side's run)."""
    from xrand.compare.stages import OwnProcess

    # the work is a builtin: a function of this module would import torch with the module
    imported = ("__import__('mindone.diffusers', fromlist=['StableDiffusionPipeline']).StableDiffusionPipeline and "
                "[name in __import__('sys').modules for name in ('transformers', 'torch', 'diffusers')]")
    assert OwnProcess(eval, (imported,), "a test", ["mindone.diffusers"]).run() == [True, False, False]
    args = ["run", "--backend", "mindspore", "--model", tiny_model, "--steps", "1", "--batch-size", "1", "--quiet"]
    # printed by an exit handler: the command line's own process ends with its command
    code = ("import atexit, json, sys; from xrand.cli import main; "
            "atexit.register(lambda: print(json.dumps([name in sys.modules for name in ('transformers', 'torch', "
            "'diffusers')] + [sum(name.startswith('mindone.transformers.models.') for name in sys.modules)]))); "
            "{call}")
    tried = {}
    for name, call in (("command line", "sys.argv = ['xrand', *{args!r}]; main()"), ("main(args)", "main({args!r})")):
        path = str(tmp_path / f"{len(tried)}.safetensors")
        done = run_python(code.format(call=call.format(args=[*args, "--out", path])))
        assert done.returncode == 0, done.stderr[-2000:]
        assert "None of PyTorch" not in done.stderr  # transformers' word that it found no torch, kept quiet
        tried[name] = json.loads(done.stdout.strip().splitlines()[-1]), load_side(path)
    imported = {name: (modules, models) for name, ((*modules, models), _) in tried.items()}
    assert imported["command line"][0] == [True, False, False] and imported["main(args)"][0] == [True, True, False]
    # of the 700 and more modules of mindone.transformers' models, those of the pipeline's CLIP and a few
    assert all(0 < models < 40 for _, models in imported.values()), imported
    (_, one), (_, two) = tried.values()
    assert one.images.tobytes() == two.images.tobytes() and one.states.tobytes() == two.states.tobytes()


def test_a_package_imports_a_models_module_when_a_name_from_it_is_first_used(tmp_path, monkeypatch):
    """import_models_when_used on a package shaped as mindone.transformers and its models package:
    their ``__init__`` runs but for the relative imports, each name of which gives what the import
    would on first use; an ``if`` picks as it would; a failed ``__init__`` leaves no module behind."""
    from xrand.frameworks.mindspore import import_models_when_used

    package = tmp_path / "eager"
    (package / "models" / "clip").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import json\nVERSION = 2\nfrom .models.clip import CLIPTextModel, CLIPTextModel as Alias\n"
        "from .utils import helper\nif VERSION >= 2:\n    from .models.clip import NEW\nelse:\n"
        "    from .models.clip import OLD\n")
    (package / "utils.py").write_text("def helper():\n    return 'helped'\n")
    (package / "models" / "__init__.py").write_text("from . import clip, t5\n")
    (package / "models" / "clip" / "__init__.py").write_text("class CLIPTextModel:\n    pass\nNEW = 'new'\n")
    (package / "models" / "t5.py").write_text("raise RuntimeError('t5 is imported')\n")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "__init__.py").write_text("import a_module_that_is_not_there\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("eager", "eager.models", "eager.models.clip", "eager.utils", "broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    import_models_when_used(("eager", "eager.models"))
    import eager

    assert eager.VERSION == 2 and "json" in dir(eager)  # the rest of its __init__ ran
    assert {"eager.models.clip", "eager.utils"}.isdisjoint(sys.modules) and "t5" in dir(eager.models)
    from eager import CLIPTextModel, helper

    assert CLIPTextModel is eager.Alias is sys.modules["eager.models.clip"].CLIPTextModel is eager.models.clip.CLIPTextModel
    assert helper() == "helped" and eager.NEW == "new" and not hasattr(eager, "OLD") and "OLD" not in dir(eager)
    with pytest.raises(AttributeError, match="module 'eager' has no attribute 'nothing'"):
        eager.nothing
    with pytest.raises(RuntimeError, match="t5 is imported"):
        eager.models.t5
    with pytest.raises(ModuleNotFoundError, match="a_module_that_is_not_there"):
        import_models_when_used(("broken",))
    assert "broken" not in sys.modules


def test_mindone_native_numpy_generator_unchanged_when_patched(ms):
    from mindone.diffusers.utils import mindspore_utils

    expected = mindspore_utils.randn_tensor((2, 3), generator=np.random.default_rng(1), dtype=ms.float32)
    with xrand.patched():
        got = mindspore_utils.randn_tensor((2, 3), generator=np.random.default_rng(1), dtype=ms.float32)
        from_xrand = mindspore_utils.randn_tensor((2, 3), generator=xrand.Generator(1, stream="pcg64"),
                                                  dtype=ms.float32)
    np.testing.assert_array_equal(got.asnumpy(), expected.asnumpy())
    np.testing.assert_array_equal(from_xrand.asnumpy(), expected.asnumpy())


def test_torch_pipeline_with_xrand_generator_equals_torch_generator(tiny_model):
    from diffusers import DDIMPipeline

    pipe = DDIMPipeline.from_pretrained(tiny_model)
    pipe.set_progress_bar_config(disable=True)
    for eta in (0.0, 1.0):
        native = pipe(batch_size=2, generator=torch.Generator().manual_seed(9), num_inference_steps=3, eta=eta,
                      output_type="np").images
        with xrand.patched():
            ours = pipe(batch_size=2, generator=xrand.Generator(9), num_inference_steps=3, eta=eta,
                        output_type="np").images
        np.testing.assert_array_equal(ours, native)


# -- the comparison -------------------------------------------------------------------------------------
def test_both_frameworks_get_bit_identical_initial_noise(eta1_comparison):
    assert eta1_comparison.initial_noise == {"max_abs": 0.0, "mean_abs": 0.0, "rel_l2": 0.0}


def test_eta1_within_tolerance_with_lockstep(eta1_comparison):
    c = eta1_comparison
    assert c.passed, c.verdict()
    assert c.final["rel_l2"] < 1e-4 and c.final["psnr_db"] > 60
    assert len(c.global_steps) == len(c.local_steps) == 4
    assert all(row["sample"]["rel_l2"] < 1e-4 for row in c.local_steps)
    assert c.timesteps == [750, 500, 250, 0]


def test_the_largest_local_error_of_lockstep_in_words(eta1_comparison):
    from xrand.compare.boundary import largest_local_error, local_error_text

    local = eta1_comparison.local_steps
    worst = max(range(4), key=lambda i: local[i]["sample"]["rel_l2"])
    largest = largest_local_error(local)
    assert largest["sample"] == {"rel_l2": local[worst]["sample"]["rel_l2"], "step": worst,
                                 "timestep": [750, 500, 250, 0][worst]}
    assert local_error_text(local).startswith(
        f"lockstep's largest local error {local[worst]['sample']['rel_l2']:.3g} (step {worst}, timestep ")
    assert largest_local_error(None) is None and local_error_text(None) == ""


def test_eta0_within_tolerance(tiny_model, mindone):
    c = compare_frameworks(Settings(model=tiny_model, steps=3, seed=0, batch_size=1, eta=0.0))
    assert c.passed, c.verdict()
    assert c.initial_noise["max_abs"] == 0.0
    assert c.local_steps is None
    assert c.environments["b"]["mindspore_mode"] == "graph"  # the default
    assert "mindspore_compile_cache" in c.environments["b"]


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_each_mindspore_mode_agrees_and_restores_the_mode(tiny_model, mode, ms):
    settings = Settings(model=tiny_model, steps=3, seed=1, batch_size=1, eta=1.0)
    before = ms.get_context("mode")
    c = compare_frameworks(settings, lockstep=True, mindspore_mode=mode)
    assert ms.get_context("mode") == before
    assert c.initial_noise["max_abs"] == 0.0
    assert c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    assert all(row["sample"]["rel_l2"] < 1e-4 for row in c.local_steps)
    assert c.environments["b"]["mindspore_mode"] == mode
    assert ("mindspore_compile_cache" in c.environments["b"]) == (mode == "graph")


def test_unknown_mindspore_mode_is_refused(tiny_model):
    with pytest.raises(ValueError, match="unknown MindSpore mode 'jit'; accepted: pynative, graph"):
        compare_frameworks(Settings(model=tiny_model, steps=1), mindspore_mode="jit")


def test_tolerance_decides_the_verdict(eta1_comparison):
    strict = compare_sides_from(eta1_comparison, tolerance=0.0)
    assert not strict.passed and strict.verdict().startswith("FAIL")


def compare_sides_from(c, tolerance):
    from dataclasses import replace

    return replace(c, tolerance=tolerance)


def test_report_and_pictures_are_written_and_valid(eta1_comparison, ms, tmp_path):
    paths = write_report(eta1_comparison, str(tmp_path / "out"))
    report = json.loads(open(paths["report.json"]).read())
    assert report["verdict"] == "pass"
    assert report["settings"]["eta"] == 1.0 and report["settings"]["stream"] == "torch-cpu"
    assert len(report["steps"]) == 4 and "local" in report["steps"][0] and "global" in report["steps"][0]
    assert report["environment"]["a"]["torch"] == torch.__version__
    assert report["environment"]["b"]["mindspore"] == ms.__version__
    a, b = report["environment"]["a"], report["environment"]["b"]  # each side's threads and load as it started
    assert isinstance(a["torch_threads"], int) and isinstance(b["mindspore_threads"], int)
    assert "usable core" in a["threads_chosen"] and "once per process" in b["threads_chosen"]
    for e in (a, b):  # the others' load, watched where the process may use more than one CPU
        busy = e["other_processes_busy_cores"]
        assert len(e["load_average"]) == 3 and (busy is None if e["usable_cpus"] == 1 else busy >= 0)
    assert a["usable_cpus"] == b["usable_cpus"] == len(os.sched_getaffinity(0))  # MindSpore's last bits move with them
    import matplotlib.image

    for name in ("comparison.png", "divergence.png"):
        with open(paths[name], "rb") as f:
            assert f.read(8) == PNG_SIGNATURE
        image = matplotlib.image.imread(paths[name])
        assert image.shape[0] > 100 and image.shape[1] > 100
    assert sorted(os.listdir(tmp_path / "out")) == ["comparison.png", "divergence.png", "report.html", "report.json"]


# -- threads ---------------------------------------------------------------------------------------------
def test_the_thread_rule_leaves_the_cores_other_processes_keep_busy():
    from xrand.frameworks.threads import rule

    assert [rule(2, busy) for busy in (0.0, 0.4, 0.6, 1.0, 2.0, 7.5)] == [2, 2, 1, 1, 1, 1]
    assert (rule(16, 3.2), rule(16, 0.0, most=8), rule(4, None)) == (13, 8, 4)


@pytest.fixture
def waits(monkeypatch):
    """The seconds each load measurement waits, from a fresh start (no measurement before)."""
    from xrand.frameworks import threads

    waited = []
    monkeypatch.setattr(threads, "time", SimpleNamespace(monotonic=time.monotonic,
                                                         sleep=lambda s: (waited.append(s), time.sleep(s))))
    monkeypatch.setattr(threads, "_last", None)
    return waited


def test_a_measurement_soon_after_another_watches_the_time_between_and_waits_for_nothing(waits):
    from xrand.frameworks import threads

    with every_cpu():  # more than one: on one CPU it watches nothing (below)
        threads.measure()
        time.sleep(threads.SAMPLE_SECONDS)
        second = threads.measure()  # the busy time since the first
        time.sleep(threads.RECENT_SECONDS + 0.1)
        third = threads.measure()  # too long since: watches anew
    assert waits == [threads.SAMPLE_SECONDS, threads.SAMPLE_SECONDS]
    assert second.others is not None and third.others is not None


@pytest.mark.skipif(not ALL_CPUS, reason="no thread affinity here")
def test_on_one_cpu_a_side_runs_one_thread_and_waits_for_no_measurement(waits, monkeypatch):
    from xrand.frameworks import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with on_cpus(ALL_CPUS[:1]):
        load = threads.measure()
    assert waits == [] and (load.cores, load.others) == (1, None)
    assert threads.choose(load) == (1, "1 usable core (one thread whatever the load)")


@pytest.fixture
def busy_process():
    """Another process that keeps one core busy, as a user's other jobs do, for longer than a
    side's measurement may look back (threads.RECENT_SECONDS)."""
    from xrand.frameworks.threads import RECENT_SECONDS

    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(RECENT_SECONDS + 0.2)
    yield
    process.kill()
    process.wait()


def test_beside_a_busy_process_torch_runs_a_thread_fewer_and_the_side_says_why(tiny_model, busy_process, monkeypatch):
    from xrand.frameworks.threads import rule, usable_cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    default = torch.get_num_threads()
    with every_cpu():  # more than one, one of them busy
        env = side(tiny_model, "torch").environment
        busy, cores = env["other_processes_busy_cores"], usable_cores()
    assert busy >= 0.5 and len(env["load_average"]) == 3
    assert env["torch_threads"] == rule(cores, busy, most=default) <= max(1, cores - 1)
    assert env["threads_chosen"].startswith(f"{cores} usable cores, other processes kept ")
    assert torch.get_num_threads() == default  # put back after the side


def test_a_helpers_cpu_time_is_the_commands_own_not_another_processs_load():
    """MindSpore's own process, started while torch's side runs (xrand.compare.stages.OwnProcess),
    keeps a core busy importing its libraries: the command's own work, which must not take a thread
    from torch's side. Its CPU seconds count as this process's while it is a helper, and as a child
    that ended once waited for. Measured in CPU time, which other processes' load does not change."""
    from xrand.frameworks import threads

    process = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
                                "while time.process_time() < end: pass\ninput()"],
                               stdin=subprocess.PIPE, text=True)
    before = threads._own_seconds()
    with threads.helper(process.pid):
        while threads._own_seconds() - before < 0.5:
            assert process.poll() is None
            time.sleep(0.05)
        assert threads._own_seconds() - before < 1.0
    assert threads._own_seconds() - before < 0.4  # a child that runs, not a helper: another's load
    process.communicate("\n", timeout=60)
    assert threads._own_seconds() - before >= 0.5  # waited for: its time is in os.times()'s children


def test_omp_num_threads_fixes_the_thread_count(tiny_model, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    env = side(tiny_model, "torch").environment
    assert (env["torch_threads"], env["threads_chosen"]) == (1, "OMP_NUM_THREADS=1")


def test_a_process_started_after_importing_mindspore_gets_the_users_omp_num_threads_not_mindspores(ms):
    """Importing MindSpore sets OMP_NUM_THREADS=1 for every process started after (the stages of
    ``compare --only mindspore`` in their own process ran 1 thread on 2 cores); while xrand starts
    one, it is the user's again (here: unset)."""
    code = ("import subprocess, sys, mindspore\n"
            "from xrand.frameworks.threads import users_thread_count_inherited\n"
            "ask = [sys.executable, '-c', 'import os; print(os.environ.get(\"OMP_NUM_THREADS\"))']\n"
            "seen = lambda: subprocess.run(ask, capture_output=True, text=True).stdout.strip()\n"
            "before = seen()\n"
            "with users_thread_count_inherited():\n"
            "    during = seen()\n"
            "print(before, during, seen())\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "None", "1"]


# -- side files ------------------------------------------------------------------------------------------
SIDE = dict(steps=2, seed=5, batch_size=1, eta=0.0)


def side(model, framework, **changes):
    plan = make_plan(Settings(model=model, **dict(SIDE, **changes)), frameworks=(framework,), mindspore_mode="pynative")
    return run_side(plan, framework, quiet=True)


@pytest.fixture(scope="module")
def side_files(tiny_model, tmp_path_factory):
    """Torch sides: the settings of SIDE, and seed 6."""
    folder = tmp_path_factory.mktemp("sides")
    a = save_side(side(tiny_model, "torch"), str(folder / "torch.safetensors"))
    c = save_side(side(tiny_model, "torch", seed=6), str(folder / "seed6.safetensors"))
    return a, c


def test_side_files_compare_like_in_process(side_files, tiny_model, mindone, tmp_path):
    a, _ = side_files
    b = save_side(side(tiny_model, "mindspore"), str(tmp_path / "ms.safetensors"))
    c = compare_sides(load_side(a), load_side(b))
    assert c.passed and c.initial_noise["max_abs"] == 0.0
    assert c.frameworks == ["torch", "mindspore"]


def test_side_files_with_other_settings_are_refused(side_files):
    a, other = side_files
    with pytest.raises(xrand.UsageError, match="not comparable: seed: 5 vs 6"):
        compare_sides(load_side(a), load_side(other))


def test_truncated_side_file_is_refused(side_files, tmp_path):
    data = open(side_files[0], "rb").read()
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a readable xrand side file"):
        load_side(str(broken))


def test_plain_safetensors_is_not_a_side_file(tmp_path):
    from safetensors.numpy import save_file

    path = str(tmp_path / "plain.safetensors")
    save_file({"x": np.zeros(3, np.float32)}, path)
    with pytest.raises(ValueError, match="not an xrand side file"):
        load_side(path)


# -- bad models and settings -------------------------------------------------------------------------------
def test_missing_and_incomplete_model_folders(tmp_path):
    def plan(folder):
        return make_plan(Settings(model=str(folder)))

    with pytest.raises(xrand.UsageError, match="is not a folder"):
        plan(tmp_path / "nope")
    (tmp_path / "m" / "unet").mkdir(parents=True)
    with pytest.raises(xrand.UsageError, match="has no readable model_index.json with a _class_name"):
        plan(tmp_path / "m")
    index = {"_class_name": "DDIMPipeline", "unet": ["diffusers", "UNet2DModel"]}
    (tmp_path / "m" / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(xrand.UsageError, match="declares no scheduler in model_index.json; DDIMPipeline needs unet, "
                                               "scheduler"):
        plan(tmp_path / "m")
    index["scheduler"] = ["diffusers", "DDIMScheduler"]
    (tmp_path / "m" / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(xrand.UsageError, match="has no scheduler/; DDIMPipeline needs unet, scheduler"):
        plan(tmp_path / "m")
    (tmp_path / "m" / "scheduler").mkdir()
    (tmp_path / "m" / "scheduler" / "scheduler_config.json").write_text('{"_class_name": "DDIMScheduler"}')
    (tmp_path / "m" / "unet" / "config.json").write_text("{}")
    with pytest.raises(xrand.UsageError, match=r"has no unet/\*.safetensors weights"):
        plan(tmp_path / "m")
    (tmp_path / "m" / "unet" / "config.json").write_text("{not json")
    with pytest.raises(xrand.UsageError, match=r"unet/config.json' is not valid JSON"):
        plan(tmp_path / "m")


@pytest.mark.parametrize("field, value, match", [
    ("steps", 0, "steps must be a positive integer"),
    ("steps", 5000, "at most 1000"),
    ("batch_size", -1, "batch_size must be a positive integer"),
    ("eta", 2.0, r"eta must be a number in \[0, 1\]"),
    ("stream", "mt", "unknown stream 'mt'"),
    ("dtype", "float64", "unknown dtype 'float64' for the pipelines; accepted: float32, float16, bfloat16"),
    ("seed", -5, "seed must be an integer"),
    ("pipeline", "StableCascadePipeline", "unknown pipeline 'StableCascadePipeline'; accepted: DDIMPipeline, "
                                          "DDPMPipeline, StableDiffusionPipeline"),
    ("scheduler", "warp", "unknown scheduler 'warp'; accepted: DDIMScheduler, "),
    ("scheduler_options", {"x": object()}, "scheduler_options must hold JSON values"),
    ("guidance_scale", -1, "guidance_scale must be a finite number >= 0"),
    ("height", 0, "height must be a positive integer, got 0"),
    ("prompt", 3, "prompt must be a string"),
])
def test_bad_settings(field, value, match):
    with pytest.raises(xrand.UsageError, match=match):
        Settings(**{"model": "x", field: value})


def test_settings_are_checked_once_and_frozen():
    import dataclasses

    s = Settings(model="x", seed=np.uint32(5), eta=1, scheduler="Euler-A", scheduler_options={"s_noise": 1.0})
    assert (s.seed, type(s.seed), s.eta, type(s.eta)) == (5, int, 1.0, float)
    assert s.scheduler == "EulerAncestralDiscreteScheduler" and s.batch_size == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.steps = 0
    alias = Settings(model="x", scheduler="dpm++-2m-sde", scheduler_options={"use_karras_sigmas": True})
    assert alias.scheduler == "DPMSolverMultistepScheduler"
    assert alias.scheduler_options == {"algorithm_type": "sde-dpmsolver++", "use_karras_sigmas": True}


def test_a_torch_side_on_a_gpu_reports_whether_its_float32_may_run_in_tf32(monkeypatch):
    """On an H100 cuDNN's float32 convolutions run in TF32 unless told not to: torch's own float32
    floor there is 1.4e-4 against 9.3e-7 with NVIDIA_TF32_OVERRIDE=0 (README, two machines), so a
    GPU side's environment says which ran. A CPU side says nothing of it."""
    from xrand.frameworks.torch import Torch

    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    fw = Torch()
    with fw.running("cuda", "pynative") as state:
        env = fw.environment("pynative", state)
    assert env == {"torch_tf32": {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                                  "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                                  "NVIDIA_TF32_OVERRIDE": "0"}}
    with fw.running(None, "pynative") as state:
        assert fw.environment("pynative", state) == {}
