import contextlib
import importlib.util
import os
import signal
import subprocess
import sys

import pytest

import xrand.registry


def pytest_sessionstart(session):
    """MindSpore's CPU runtime set up as xrand's MindSpore side sets it up in a new process, before
    any test runs a kernel (synchronous launch, oneDNN at AVX2: the conv fallback users get), so
    no test depends on which test ran first. Under pytest-xdist each worker runs on its share of the
    cores (:func:`own_cores`) and as many kernel threads, torch's and MindSpore's (one each on 2
    cores, as a sweep worker runs): more threads than free cores wait on each other
    (xrand/frameworks/threads.py); the suite took 610 s where both workers ran two each 672 s (1.8
    of 4.6 minutes of system time saved)."""
    from xrand.frameworks.threads import usable_cores

    cores, workers = usable_cores(), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = max(1, cores // workers)
    own_cores(workers)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(threads)
    if importlib.util.find_spec("mindspore") is not None:
        from xrand.mindspore_cpu import tune_cpu_runtime

        tune_cpu_runtime(threads, f"{cores} usable cores shared by {workers} pytest-xdist workers")


#: The CPUs the run started with, before :func:`own_cores` gave this worker its share.
ALL_CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []


def own_cores(workers):
    """Under pytest-xdist, this worker (its threads, and the processes its tests start) on CPUs of
    its own: its share of :data:`ALL_CPUS`, the last worker taking any left over. MindSpore's CPU
    pool has two threads at least, one spinning (``sched_yield``) while the other works, so a
    worker's MindSpore steps took the other worker's core: 50 PyNative steps of the digits model at
    one kernel thread took 5.5 s and 8.1 CPU seconds on 2 CPUs, 5.2 s and 5.1 on one. The suite took
    420 s (136 s of system time), each worker on its own core 382 s (63 s)."""
    index = os.environ.get("PYTEST_XDIST_WORKER", "gw")[2:]
    share = len(ALL_CPUS) // workers
    if not index.isdigit() or share < 1 or workers < 2:
        return
    first = int(index) * share
    mine = set(ALL_CPUS[first:first + share] if int(index) < workers - 1 else ALL_CPUS[first:])
    for tid in os.listdir("/proc/self/task"):  # threads started already (a library's pool) too
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), mine)


@contextlib.contextmanager
def on_cpus(cpus):
    """Inside the block, this thread and the processes it starts (they inherit its CPUs) on
    ``cpus`` (as they were where there is no thread affinity)."""
    own = os.sched_getaffinity(0) if ALL_CPUS else None
    if own is not None:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        if own is not None:
            os.sched_setaffinity(0, own)


def every_cpu():
    """:func:`on_cpus` every CPU of the run, where a test needs them all: MindSpore's last bits move
    with the CPUs it may use, even at one kernel thread (2 steps of the digits model at batch 1:
    images up to 7.5e-7 apart)."""
    return on_cpus(ALL_CPUS)


@pytest.fixture(autouse=True, scope="module")
def _earlier_objects_frozen():
    """What is alive as a test file starts, after a collection (the libraries' modules above all,
    over a million objects once torch, MindSpore and both diffusers are in), frozen out of the
    collector's later walks: each pipeline a comparison drops is followed by ``gc.collect()``, which
    walked them all again (xrand.frameworks.collector; xrand's own processes freeze their imports)."""
    import gc

    gc.collect()
    gc.freeze()


#: Each test file's seconds in one run of the suite (benchmarks/RESULTS.md figure 17, 2026-11-29),
#: for the files over 15 s: pytest-xdist hands out the files with the most tests first, which left
#: these (few tests, long ones) to the end of the run, where one process ran them while the other
#: had nothing left.
FILE_SECONDS = {
    "test_reliability.py": 138, "test_two_machines.py": 124, "test_families.py": 101, "test_sweep.py": 87,
    "test_precision.py": 68, "test_graph_cache.py": 59, "test_html_report.py": 58, "test_reproducibility.py": 51,
    "test_next_families.py": 46, "test_controlnet.py": 43, "test_readme.py": 40, "test_cli.py": 37,
    "test_pipelines.py": 34, "test_weights.py": 28, "test_recipes.py": 25, "test_mindspore_cpu.py": 24,
    "test_ops.py": 23, "test_readme_numbers.py": 20, "test_floor.py": 17, "test_tiny_families.py": 15,
    "test_native_noise.py": 15,
}


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` handing out the longest files first (FILE_SECONDS; the others after them,
    in pytest-xdist's own order)."""
    from collections import OrderedDict

    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            order = sorted(self.workqueue, key=lambda scope: -FILE_SECONDS.get(os.path.basename(scope), 0))
            self.workqueue = OrderedDict((scope, self.workqueue[scope]) for scope in order)
            super()._assign_work_unit(node)

    return LongestFirst(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.fixture(scope="session")
def mindone():
    """mindone.diffusers on MindSpore, for a test or fixture that runs MindSpore's side. Where
    MindSpore or mindone is not installed (``xrand[torch,diffusers,compare]`` alone) it skips
    just that test; the rest of its module, the torch side, still runs."""
    pytest.importorskip("mindspore")
    return pytest.importorskip("mindone.diffusers")


@pytest.fixture(scope="session")
def ms(mindone):
    """MindSpore, with mindone.diffusers installed beside it (else the test skips)."""
    import mindspore

    return mindspore


def unipc_flow_timesteps_agree(steps=3):
    """Whether diffusers' and mindone's UniPCMultistepScheduler give the same timesteps with flow
    sigmas (Wan's scheduler config). diffusers 0.35.2 and mindone 0.5.0 do; diffusers 0.39.0 takes
    the flow sigmas (before the shift) from 1 (less 1e-6) down where they take them from 1 - 1/1000
    (timesteps 999, 750 against 999, 749 for 2 steps), so the libraries part there before any model runs."""
    import diffusers
    import mindone.diffusers
    import numpy as np

    from xrand.compare.result import same_timesteps

    config = dict(use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=3.0)
    a, b = diffusers.UniPCMultistepScheduler(**config), mindone.diffusers.UniPCMultistepScheduler(**config)
    a.set_timesteps(steps)
    b.set_timesteps(steps)
    return same_timesteps(np.asarray(a.timesteps, float), b.timesteps.asnumpy().astype(float))


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """``tiny_folder(name)``: the tiny folder ``name`` (xrand.models.TINY_MODELS), built once per
    session and shared by every test file that asks for it."""
    from xrand.models import build_tiny

    built = {}
    root = tmp_path_factory.mktemp("tiny-folders")

    def folder(name):
        if name not in built:
            built[name] = str(build_tiny(name, root / name))
        return built[name]

    return folder


def make_tiny_model(path):
    """A random 1-channel UNet2DModel with an attention block, saved as a DDIMPipeline folder
    (needs torch and diffusers only; mindone reads the same folder)."""
    import torch
    from diffusers import DDIMPipeline, DDIMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(16, 32),
                       layers_per_block=1, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8)
    DDIMPipeline(unet=unet, scheduler=DDIMScheduler(num_train_timesteps=1000)).save_pretrained(
        str(path), safe_serialization=True)
    return str(path)


@pytest.fixture(scope="session")
def tiny_sd(tmp_path_factory):
    """The tiny Stable Diffusion folder (xrand.models.tiny_sd), float32 safetensors."""
    pytest.importorskip("diffusers")
    pytest.importorskip("transformers")
    from xrand.models.tiny_sd import build_tiny_sd

    return str(build_tiny_sd(tmp_path_factory.mktemp("tiny-sd") / "model"))


@pytest.fixture(scope="session")
def tiny_sd_fp16(tiny_sd, tmp_path_factory):
    """The tiny SD folder as most hub repositories ship one: saved with variant="fp16", float16
    weights in */*.fp16.safetensors and no plain weight files."""
    from xrand.models.checkpoints import save_variant

    return str(save_variant(tiny_sd, tmp_path_factory.mktemp("tiny-sd-fp16") / "model", "fp16"))


@pytest.fixture(scope="session")
def tiny_sd_file(tiny_sd, tmp_path_factory):
    """``(single file, config folder)``: the tiny SD folder's float32 weights as one safetensors
    file in the original layout, and a copy of the folder without its weights (the configs alone)."""
    import shutil

    from xrand.models.checkpoints import save_single_file
    from xrand.pipelines.folder import WEIGHT_SUFFIXES

    root = tmp_path_factory.mktemp("tiny-sd-file")
    config = root / "config"
    shutil.copytree(tiny_sd, config, ignore=lambda _, names: [n for n in names if n.endswith(WEIGHT_SUFFIXES)])
    return str(save_single_file(tiny_sd, root / "tiny-sd.safetensors")), str(config)


@pytest.fixture(scope="session")
def scheduler_matrix(tmp_path_factory, mindone):
    """``xrand compare --scheduler all`` on a tiny model, 4 steps, run once for the tests that read
    it: ``(exit status, output folder)``."""
    from xrand.cli import main

    root = tmp_path_factory.mktemp("matrix")
    model = make_tiny_model(root / "model")
    out = root / "out"
    code = main(["compare", "--model", model, "--scheduler", "all", "--steps", "4", "--batch-size", "1", "--quiet",
                 "--out", str(out)])
    return code, out


@pytest.fixture(autouse=True)
def _clean_backend_choice(monkeypatch):
    """Every test starts with no process-wide backend choice and no XRAND_BACKEND."""
    monkeypatch.delenv("XRAND_BACKEND", raising=False)
    monkeypatch.setattr(xrand.registry, "_process_default", None)
    monkeypatch.setattr(xrand.registry, "_default", None)
    factories, instances = dict(xrand.registry._factories), dict(xrand.registry._instances)
    yield
    xrand.registry._factories.clear()
    xrand.registry._factories.update(factories)
    xrand.registry._instances.clear()
    xrand.registry._instances.update(instances)


#: For a compare in the test's own process that is not about graph mode: MindSpore PyNative, which gives
#: graph mode's bits on a CPU (test_sdxl_in_graph_mode_gives_pynatives_bits). A pytest worker's graph-mode
#: runs after its first compile anew and keep nothing (MindSpore reads one compile-cache folder per
#: process: xrand.frameworks.mindspore.compile_cache), 10 to 35 s each on 2 cores.
PYNATIVE = ["--mindspore-mode", "pynative"]


def ctrl_c_reaches_it():
    """For Popen's preexec_fn, in a child that a test sends SIGINT: SIGINT's default action, as in
    a terminal's foreground (a job started in the background of a shell, as a CI runner may start
    the suite, has SIGINT ignored, and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_python(code: str, env=None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (what a new process sees), returning its output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300)


def xrand_here(args, cwd, monkeypatch, capfd, env=None) -> subprocess.CompletedProcess:
    """``xrand ARGS`` through ``xrand.cli.main`` in this process, from ``cwd`` with ``env`` added:
    what ``subprocess.run([python, "-m", "xrand", ...])`` returns (stdout and stderr read at the file
    descriptors), without a new interpreter's imports. For the command line's checks that do not need
    a fresh process; each such behaviour keeps a test of its own in one."""
    from xrand.cli import main

    monkeypatch.chdir(cwd)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    capfd.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own errors leave parse_args this way, as from the shell
        code = exc.code
    out = capfd.readouterr()
    return subprocess.CompletedProcess(["xrand", *args], code, out.out, out.err)


# Each command through xrand.cli.main, from its folder, one after another in one interpreter; each
# command's stdout and stderr read at the file descriptors into files of their own.
_EACH = r"""
import json, os, sys
exec(sys.argv[2])
from xrand.cli import main
from xrand.frameworks.collector import freeze_imports
freeze_imports()  # as main does in a process of its own
codes = []
for cwd, args, out, err in json.loads(sys.argv[1]):
    os.chdir(cwd)
    saved = os.dup(1), os.dup(2)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, kept in zip((1, 2), saved):
        os.dup2(kept, fd)
        os.close(kept)
    codes.append(code)
print(json.dumps(codes))
"""


def xrand_each(commands, scratch, python=sys.executable, env=None, setup=""):
    """``xrand ARGS`` for each ``(cwd, ARGS)`` of ``commands``, one after another in ONE new
    interpreter ``python`` (``env`` added, ``setup`` run first): a list of what
    ``subprocess.run([python, "-m", "xrand", *ARGS], cwd=cwd)`` returns for each, for commands
    that each need a fresh environment but not a process of their own (one-line errors): one
    interpreter's imports, not one per command. Its output files go to the folder ``scratch``."""
    import json
    import tempfile

    runs = []
    folder = tempfile.mkdtemp(dir=scratch)
    for i, (cwd, args) in enumerate(commands):
        runs.append([str(cwd), [str(a) for a in args], os.path.join(folder, f"{i}.out"),
                     os.path.join(folder, f"{i}.err")])
    done = subprocess.run([python, "-c", _EACH, json.dumps(runs), setup], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=900)
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(codes) == len(runs)
    results = []
    for (_, args, out, err), code in zip(runs, codes):
        with open(out) as o, open(err) as e:
            results.append(subprocess.CompletedProcess(["xrand", *args], code, o.read(), e.read()))
    return results


def assert_forked_child_continues(setup: str, numel: int) -> None:
    """In a fresh interpreter, ``setup`` makes a stream ``s`` and a function ``reference(state)``
    (another engine in that state); ``s`` draws ``numel`` float32 values, then a forked child
    draws the next ``numel`` and must get what ``reference`` draws. The child has none of its
    parent's pool threads, so the engine must make its own."""
    code = (f"import os, hashlib\n{setup}\n"
            f"s.normal(({numel},), 'float32')\n"
            f"want = hashlib.sha1(reference(s.get_state()).normal(({numel},), 'float32').tobytes()).hexdigest()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            f"    got = hashlib.sha1(s.normal(({numel},), 'float32').tobytes()).hexdigest()\n"
            "    print(got == want, flush=True)\n"
            "    os._exit(0)\n"
            "print(os.waitpid(pid, 0)[1])")
    result = run_python(code)
    assert result.stdout.split() == ["True", "0"], result.stderr


@pytest.fixture(autouse=True, scope="session")
def _private_graph_cache(tmp_path_factory):
    """MindSpore's compiled graphs (xrand.frameworks.mindspore.compile_cache) and torch's kept floors
    go to a temporary folder, not the user's cache, for this process and the xrand processes tests
    start. Under pytest-xdist the run's workers share one (in the run's temporary folder, above each
    worker's own), so a graph or floor one worker made is loaded by the other: both caches write a
    temporary name and rename it, safe for processes writing the same key at once."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-xdist's workers each have a folder in the run's own
    folder = base / "xrand-cache"
    folder.mkdir(exist_ok=True)
    saved = os.environ.get("XRAND_CACHE_DIR")
    os.environ["XRAND_CACHE_DIR"] = str(folder)
    yield
    if saved is None:
        os.environ.pop("XRAND_CACHE_DIR", None)
    else:
        os.environ["XRAND_CACHE_DIR"] = saved


def venv_without(folder, *excluded):
    """A virtual environment at ``folder`` that has every package of this one but those whose
    names start with one of ``excluded`` (their .dist-info too, so that find_spec and
    importlib.metadata agree they are absent): what a machine with only one framework has,
    made in a second from links, nothing downloaded. Returns its python."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    here = sysconfig.get_paths()["purelib"]
    there = subprocess.run([os.path.join(folder, "bin", "python"), "-c",
                            "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    for name in os.listdir(here):
        if not name.lower().startswith(tuple(x.lower() for x in excluded)):
            os.symlink(os.path.join(here, name), os.path.join(there, name))
    return os.path.join(folder, "bin", "python")


#: what a MindSpore machine lacks, and what a torch machine lacks
TORCH_PACKAGES = ("torch", "diffusers", "functorch", "torchgen", "triton", "nvidia")
MINDSPORE_PACKAGES = ("mindspore", "mindone")


@pytest.fixture(scope="session")
def mindspore_only_python(tmp_path_factory, mindone):
    python = venv_without(tmp_path_factory.mktemp("venv") / "mindspore-only", *TORCH_PACKAGES)
    check = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    assert check.returncode != 0 and "No module named 'torch'" in check.stderr
    return python


@pytest.fixture(scope="session")
def torch_only_python(tmp_path_factory):
    python = venv_without(tmp_path_factory.mktemp("venv") / "torch-only", *MINDSPORE_PACKAGES)
    check = subprocess.run([python, "-c", "import mindspore"], capture_output=True, text=True)
    assert check.returncode != 0 and "No module named 'mindspore'" in check.stderr
    return python


@pytest.fixture(scope="session")
def tiny_sdxl_file(tiny_folder, tmp_path_factory):
    """``(single file, config folder, folder)``: the tiny ``sdxl-wide`` folder (text_encoder_2 wider
    than text_encoder, as SDXL's layout needs) as one safetensors file in the original SDXL layout,
    a copy of the folder without its weights, and the folder."""
    import shutil

    from xrand.models.checkpoints import save_single_file
    from xrand.pipelines.folder import WEIGHT_SUFFIXES

    folder = tiny_folder("sdxl-wide")
    root = tmp_path_factory.mktemp("tiny-sdxl-file")
    config = root / "config"
    shutil.copytree(folder, config, ignore=lambda _, names: [n for n in names if n.endswith(WEIGHT_SUFFIXES)])
    return str(save_single_file(folder, root / "tiny-sdxl.safetensors")), str(config), folder
