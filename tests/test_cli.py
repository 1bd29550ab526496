"""The command line: exit codes, one-line errors without tracebacks, outputs, no partial files.

What runs the torch side alone runs without MindSpore; tests taking the ``mindone`` fixture skip there."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from xrand.cli import main

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from conftest import PYNATIVE, make_tiny_model, xrand_each, xrand_here  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("cli") / "model")


def xrand_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "xrand", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_compare_writes_report_and_pictures_quietly(tiny_model, mindone, tmp_path):
    out = xrand_cli("compare", "--model", tiny_model, "--steps", "2", "--batch-size", "1", "--quiet",
                    "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"verdict": "pass", "out": str(tmp_path / "o")}
    assert out.stderr == ""  # no framework chatter, no progress bars
    assert sorted(os.listdir(tmp_path / "o")) == ["comparison.png", "divergence.png", "manifest.json",
                                                  "mindspore.safetensors", "report.html", "report.json",
                                                  "torch.safetensors"]


def test_run_then_compare_two_files(tiny_model, mindone, tmp_path, monkeypatch, capfd):
    """Through ``main`` here (conftest.xrand_here): a fresh process adds nothing these checks see."""
    for backend in ("torch", "mindspore"):
        out = xrand_here(["run", "--backend", backend, "--model", tiny_model, "--steps", "2", "--batch-size", "1",
                          "--eta", "1", "--mindspore-mode", "graph", "--quiet",
                          "--out", str(tmp_path / f"{backend}.safetensors")], tmp_path, monkeypatch, capfd)
        assert out.returncode == 0, (backend, out.stderr)
    out = xrand_here(["compare", str(tmp_path / "torch.safetensors"), str(tmp_path / "mindspore.safetensors"),
                      "--out", str(tmp_path / "o")], tmp_path, monkeypatch, capfd)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("PASS: torch vs mindspore after 2 steps")


def test_failing_tolerance_exits_1(mindone, tmp_path):
    # The embedded digits model: after one step the frameworks differ by a few float32 ulps, so a
    # tolerance of 0 must fail (the tiny test model can come out bit-identical after one step).
    code = main(["compare", "--steps", "1", "--batch-size", "1", "--tolerance", "0", *PYNATIVE,
                 "--quiet", "--out", str(tmp_path / "o")])
    report = json.load(open(tmp_path / "o" / "report.json"))
    assert report["final"]["rel_l2"] > 0
    assert code == 1
    assert report["verdict"] == "fail"


#: one error of each kind through a fresh interpreter: argparse's, a setting's, one found while building
#: the pipeline
FRESH_PROCESS = {"compare --steps ten", "compare --steps 0", "compare --scheduler flowmatcheulerdiscrete"}


@pytest.mark.parametrize("args, message", [
    (["compare", "--model", "/no/such/model"], "model '/no/such/model' is not a folder"),
    (["compare", "--steps", "0"], "steps must be a positive integer, got 0"),
    (["compare", "--eta", "3"], r"eta must be a number in [0, 1], got 3.0"),
    (["compare", "--stream", "mt"], "unknown stream 'mt'"),
    (["compare", "--seed", "-1"], "seed must be an integer in [0, 2**64), got -1"),
    (["compare", "--tolerance", "-1"], "tolerance must be a finite number >= 0, got -1.0"),
    (["compare", "--device", "jax=tpu"], "--device 'jax=tpu': expected FRAMEWORK=DEVICE"),
    (["compare", "only_one.safetensors"], "compare takes two side files"),
    (["compare", "a.safetensors", "b.safetensors"], "side file 'a.safetensors' does not exist"),
    (["run", "--backend", "jax", "--out", "x.safetensors"], "--backend 'jax': accepted: torch, mindspore"),
    pytest.param(["compare", "--device", "mindspore=tpu"], "unknown MindSpore device 'tpu'",
                 marks=pytest.mark.skipif(importlib.util.find_spec("mindone") is None, reason="MindSpore's check")),
    (["compare", "--only", "torch", "--device", "mindspore=tpu"], "--device mindspore=tpu: mindspore's stages do "
     "not run here (--only torch)"),
    (["compare", "--mindspore-mode", "jit"], "argument --mindspore-mode: invalid choice: 'jit'"),
    (["compare", "--dtype", "float64"], "unknown dtype 'float64' for the pipelines; accepted: float32, float16, "
                                        "bfloat16"),
    (["compare", "--noise", "torch"], "unknown noise 'torch'; accepted: shared, native"),
    (["compare", "--component-dtype", "vae"], "--component-dtype 'vae': expected NAME=DTYPE, e.g. vae=float32"),
    (["compare", "--component-dtype", "unet=float16"], "unet=float16: the denoiser runs in --dtype (float32); "
                                                       "accepted: none"),
    (["compare", "--steps", "ten"], "argument --steps: invalid int value: 'ten'"),
    (["run", "--out", "x.safetensors"], "the following arguments are required: --backend"),
    (["compare", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["compare", "--scheduler", "warp"], "unknown scheduler 'warp'; accepted: DDIMScheduler, DDIMParallelScheduler"),
    (["compare", "--pipeline", "KandinskyPipeline"], "unknown pipeline 'KandinskyPipeline'; accepted: DDIMPipeline, "
                                                     "DDPMPipeline, StableDiffusionPipeline"),
    (["compare", "--scheduler", "flowmatcheulerdiscrete"], "FlowMatchEulerDiscreteScheduler cannot drive DDIMPipeline"),
    (["compare", "--scheduler-option", "karras"], "scheduler option 'karras': expected KEY=VALUE"),
    (["compare", "--scheduler-option", "eta=0", "--scheduler-option", "eta=1"], "--scheduler-option eta is given "
                                                                                 "twice (0 and 1); give it once"),
    (["compare", "--pipeline", "StableDiffusionPipeline"], "declares no vae in model_index.json; "
                                                           "StableDiffusionPipeline needs unet, vae, text_encoder"),
    (["compare", "--prompt", "a cat"], "DDIMPipeline takes no prompt (--prompt 'a cat'); its inputs: none"),
    (["compare", "--scheduler", "all", "--scheduler-option", "eta=1"], "--scheduler-option cannot be combined with "
                                                                       "--scheduler all"),
    (["run", "--backend", "torch", "--scheduler", "all", "--out", "x.safetensors"], "--scheduler all needs both "
                                                                                    "frameworks"),
    (["run", "--backend", "torch", "--scheduler", "euler", "--scheduler-option", "karras=1", "--steps", "1", "--out",
      "x.safetensors"], "EulerDiscreteScheduler has no option 'karras'; accepted: config keys num_train_timesteps"),
])
def test_user_errors_are_one_line_without_traceback(args, message, tmp_path, monkeypatch, capfd):
    """The errors of FRESH_PROCESS in a new ``python -m xrand`` (what a user's shell sees, framework
    imports included); the others through ``main`` in this process, stderr read at the descriptor."""
    fresh = " ".join(args) in FRESH_PROCESS
    out = xrand_cli(*args, cwd=str(tmp_path)) if fresh else xrand_here(args, tmp_path, monkeypatch, capfd)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert message in lines[0]
    assert os.listdir(tmp_path) == []  # nothing written


def test_an_option_the_scheduler_lacks_is_one_line_when_compare_builds_both_sides(mindone, tmp_path, monkeypatch,
                                                                                  capfd):
    out = xrand_here(["compare", "--scheduler", "euler", "--scheduler-option", "karras=1", "--steps", "1"], tmp_path,
                     monkeypatch, capfd)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "EulerDiscreteScheduler has no option 'karras'; accepted: config keys num_train_timesteps" in lines[0]
    assert os.listdir(tmp_path) == []


def test_bad_file_content_is_one_line(tmp_path):
    (tmp_path / "a.safetensors").write_bytes(b"not a safetensors file")
    (tmp_path / "b.safetensors").write_bytes(b"")
    out = xrand_cli("compare", "a.safetensors", "b.safetensors", cwd=str(tmp_path))
    assert out.returncode == 2 and "not a readable xrand side file" in out.stderr
    assert "Traceback" not in out.stderr


def test_corrupt_model_weights_is_a_clean_error(tiny_model, tmp_path, monkeypatch, capfd):
    """Through main in this process (conftest.xrand_here): a traceback would fail the test itself."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    weights = broken / "unet" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    out = xrand_here(["run", "--backend", "torch", "--model", str(broken), "--steps", "1", "--out",
                      str(tmp_path / "side.safetensors")], tmp_path, monkeypatch, capfd)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "side.safetensors").exists()


def test_main_lets_a_bug_raise(monkeypatch):
    import xrand.cli

    def broken(args):
        raise RuntimeError("a bug, not a usage error")

    monkeypatch.setattr(xrand.cli, "cmd_doctor", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["doctor"])


def test_defaults_come_from_settings():
    from xrand.cli import build_parser
    from xrand.pipelines.settings import Settings
    from xrand.streams import DEFAULT_STREAM

    args = build_parser().parse_args(["compare"])
    defaults = Settings(model="x")
    assert (args.batch_size, args.steps, args.seed, args.eta, args.dtype, args.guidance_scale) == (
        defaults.batch_size, defaults.steps, defaults.seed, defaults.eta, defaults.dtype, defaults.guidance_scale)
    assert args.batch_size == 4 and args.stream == DEFAULT_STREAM == defaults.stream


def test_every_setting_has_one_flag_and_settings_written_as_flags_parse_back_to_them(tmp_path):
    """xrand.pipelines.flags is the one table of setting -> flag: the parser adds its flags, the
    command line reads them, and the commands of report.json and the pages write them."""
    from dataclasses import asdict, fields

    from xrand.cli import _settings, build_parser
    from xrand.pipelines.flags import FLAGS, settings_args
    from xrand.pipelines.settings import Settings

    assert sorted(f.field for f in FLAGS) == sorted(f.name for f in fields(Settings))
    given = Settings(model=str(tmp_path / "model"), steps=3, seed=7, batch_size=2, eta=0.1 + 0.2, stream="pcg64",
                     dtype="float16", noise="native", component_dtypes={"vae": "float32", "text_encoder": "float32"},
                     pipeline="stablediffusionxlinpaintpipeline", scheduler="euler-a",
                     scheduler_options={"timestep_spacing": "trailing", "s_noise": 1.0},
                     prompt="a 'red' circle; \"quoted\"", negative_prompt="blue", guidance_scale=7.25, height=32,
                     width=48, prompt_2="a cat", negative_prompt_2="a dog", prompt_3="three",
                     negative_prompt_3="not three", image="in put.png", mask="mask.png", strength=0.5, frames=5,
                     call_options={"max_sequence_length": 32, "text": "1", "sizes": [1, 2]})
    args = build_parser().parse_args(["compare", *settings_args(asdict(given))])
    assert _settings(args) == given
    assert settings_args({"model": "m", "seed": None, "call_options": {}}) == ["--model", "m"]  # None: the default


def test_report_json_keeps_the_command_that_reproduces_it_from_any_folder(tiny_model, mindone, tmp_path, monkeypatch,
                                                                          capfd):
    """report.json's ``reproduce`` (and the page's Reproduce line) names the model folder by its
    absolute path: run from another folder, it gives the same settings and the same comparison.
    Both runs through ``main`` here, each from its folder (conftest.xrand_here)."""
    import html
    import shlex
    import shutil

    first, other = tmp_path / "first", tmp_path / "other"
    first.mkdir()
    other.mkdir()
    shutil.copytree(tiny_model, first / "model")
    done = xrand_here(["compare", "--model", "model", "--steps", "1", "--batch-size", "1", "--seed", "3", "--eta",
                       "0.5", "--no-noise-floor", *PYNATIVE, "--quiet", "--out", "o"], first, monkeypatch, capfd)
    assert done.returncode == 0, done.stderr
    report = json.load(open(first / "o" / "report.json"))
    command = shlex.split(report["reproduce"])
    assert command[:2] == ["xrand", "compare"] and command[command.index("--model") + 1] == str(first / "model")
    assert html.escape(report["reproduce"], quote=False) in (first / "o" / "report.html").read_text()
    again = xrand_here([*command[1:], "--quiet", "--out", "o"], other, monkeypatch, capfd)
    assert again.returncode == 0, again.stderr
    second = json.load(open(other / "o" / "report.json"))
    assert dict(second["settings"], model="model") == report["settings"]
    assert second["reproduce"] == report["reproduce"] and second["final"] == report["final"]
    identity = [json.load(open(folder / "o" / "manifest.json"))["identity"] for folder in (first, other)]
    assert identity[0] == identity[1]  # the same weights, plan and options


def test_doctor_lists_backends():
    out = xrand_cli("doctor", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    names = {b["name"]: b["available"] for b in info["backends"]}
    assert names["numpy"] is True and names["torch"] is True
    assert info["environment"]["numpy"]
    env = info["environment"]
    if names.get("mindspore") and env.get("machine") == "x86_64" and env.get("mindspore_device_target") == "CPU":
        assert info["mindspore_onednn_isa"] == "AVX2"  # as a MindSpore side runs (mindspore_cpu.cap_onednn_isa)
    from importlib.metadata import version

    assert info["optional"] == {"numba": version("numba"), "ray": version("ray")}
    assert info["graph_cache"]["folder"].endswith("mindspore-graphs") and info["graph_cache"]["graphs"] >= 0


def test_no_command_prints_help():
    out = xrand_cli()
    assert out.returncode == 2 and "compare" in out.stdout


IMPORT_ERROR = ("mindone.diffusers cannot be imported here", "pip install 'xrand[mindspore,diffusers]'")
WITHOUT_MINDONE = {  # case -> the command, run where mindone cannot be imported
    "only mindspore": ["compare", "--steps", "1", "--only", "mindspore"],
    "run mindspore": ["run", "--backend", "mindspore", "--out", "m.safetensors"],
    "sweep": ["sweep", "--seeds", "0-1", "--out", "sweep"],
    "compare": ["compare", "--steps", "1", "--batch-size", "1", "--quiet", "--out", "o"],
}


@pytest.fixture(scope="module")
def without_mindone(tmp_path_factory):
    """As on an install without MindSpore (xrand[torch,diffusers,compare]): mindone hidden. Every
    WITHOUT_MINDONE command in one new interpreter (conftest.xrand_each; not one each, each
    importing torch again). case -> (the command's folder, its CompletedProcess)."""
    root = tmp_path_factory.mktemp("without-mindone")
    folders = {case: root / f"cwd{i}" for i, case in enumerate(WITHOUT_MINDONE)}
    for folder in folders.values():
        folder.mkdir()
    done = xrand_each([(folders[case], args) for case, args in WITHOUT_MINDONE.items()], root,
                      setup="sys.modules['mindone'] = None")
    return {case: (folders[case], out) for case, out in zip(WITHOUT_MINDONE, done)}


@pytest.mark.parametrize("case, message", [
    ("only mindspore", ("--only mindspore: mindspore and mindone must be installed",)),
    ("run mindspore", IMPORT_ERROR),
    ("sweep", IMPORT_ERROR)])
def test_a_library_that_cannot_be_imported_is_one_line_and_writes_nothing(without_mindone, case, message):
    folder, out = without_mindone[case]
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert all(part in lines[0] for part in message), lines[0]
    assert os.listdir(folder) == []


def test_compare_without_mindspore_runs_torchs_stages_and_says_what_is_left(without_mindone):
    _, out = without_mindone["compare"]
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout)
    assert line["verdict"] == "incomplete" and line["done"] == ["torch weights", "torch", "floor"] and \
        line["missing"] == ["mindspore weights", "mindspore"]
    assert line["next"] == ["xrand compare --only mindspore --out o"]
