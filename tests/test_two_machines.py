"""A comparison split across two machines: torch's stages where torch is installed, MindSpore's
where only MindSpore is (no torch, no diffusers), the report anywhere; the same numbers as one
process, bit for bit. Each machine is a virtual environment of its own, made from this one's
packages less the other framework's (conftest.venv_without)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("diffusers")

from conftest import PYNATIVE, make_tiny_model, xrand_each, xrand_here  # noqa: E402

import xrand  # noqa: E402
from xrand.cli import main  # noqa: E402
from xrand.models import build_tiny  # noqa: E402

PROMPT = ["--prompt", "a red circle"]
TINY_TEXT = ["--height", "32", "--width", "32", "--call-option", "max_sequence_length=32"]


#: the xrand under test, for the other environments too (their links may name another checkout's)
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(xrand.__file__)))


def cli(python, *args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([python, "-m", "xrand", *args], capture_output=True, text=True, timeout=900, cwd=cwd,
                          env=env)


def cli_each(python, scratch, *commands):
    """What ``cli(python, *args)`` returns for each ``args`` of ``commands``, all run one after
    another in one new interpreter (conftest.xrand_each), from ``scratch``."""
    env = {"PYTHONPATH": os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")])}
    return xrand_each([(scratch, args) for args in commands], scratch, python=python, env=env)


def report(folder):
    with open(os.path.join(folder, "report.json")) as f:
        return json.load(f)


def numbers(r):
    """Everything a report says about the two frameworks' numbers (not timings or machines)."""
    layers = r.get("layers")
    if layers is not None:
        layers = {k: v for k, v in layers.items() if k != "seconds"}
    return {"summary": r["summary"], "final": r["final"], "initial_noise": r["initial_noise"], "steps": r["steps"],
            "noise_floor": r.get("noise_floor"), "layers": layers}


@pytest.fixture(autouse=True)
def _same_threads_everywhere(monkeypatch):
    """Each process, here and the two "machines", runs the kernel threads of an idle machine
    (a thread count can change a reduction's last bits; else each side picks them by the load)."""
    monkeypatch.setenv("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("two-machines")
    return {"sd": str(build_tiny("sd", root / "sd")), "flux": str(build_tiny("flux", root / "flux"))}


# PyNative (conftest.PYNATIVE): a split in graph mode is
# test_the_input_image_and_a_lora_may_live_at_other_paths_on_mindspores_machine's
CASES = {  # model (None: the embedded digits model), the compare's settings
    "digits": (None, ["--steps", "3", "--lockstep", "--layers", "--layers-step", "1", *PYNATIVE]),
    "sd": ("sd", ["--steps", "2", *PROMPT, "--lockstep", "--layers", *PYNATIVE]),
    "flux": ("flux", ["--steps", "2", *PROMPT, *TINY_TEXT, "--lockstep", "--layers"]),
}


@pytest.fixture(scope="module")
def splits(models, torch_only_python, mindspore_only_python, tmp_path_factory):
    """``splits(case)``: the comparison of CASES[case] made in this process, and split: torch's
    stages in the torch-only environment, the folder copied, MindSpore's stages in the MindSpore-only
    one with the model at another path. Every case at the first call, the torch sides one after
    another in one interpreter and the MindSpore sides in another (cli_each: one import of each
    framework, not one per case). ``(one-process folder, torch's command, MindSpore's command, the
    split folder)``."""
    done = {}

    def split(case):
        if not done:
            root = tmp_path_factory.mktemp("splits")
            ones, torch_commands, model_args = {}, [], {}
            for name, (model, settings) in CASES.items():
                model_args[name] = [] if model is None else ["--model", models[model]]
                ones[name] = str(root / name / "one")
                assert main(["compare", *model_args[name], *settings, "--batch-size", "1", "--quiet",
                             "--out", ones[name]]) == 0
                torch_commands.append(["compare", *model_args[name], *settings, "--batch-size", "1", "--only",
                                       "torch", "--out", str(root / name / "two")])
            torch_sides = dict(zip(CASES, cli_each(torch_only_python, root, *torch_commands)))
            theres, ms_commands = {}, []
            for name, (model, _) in CASES.items():
                assert torch_sides[name].returncode == 0, torch_sides[name].stderr
                two = root / name / "two"
                assert not os.path.exists(two / "report.json")  # no MindSpore side yet
                # the folder travels; MindSpore's machine holds the model elsewhere and takes every setting from it
                theres[name] = str(shutil.copytree(two, root / name / "copied"))
                moved = [] if model is None else ["--model", str(shutil.copytree(models[model],
                                                                                 root / name / "model-there"))]
                ms_commands.append(["compare", "--only", "mindspore", "--out", theres[name], *moved])
            ms_sides = cli_each(mindspore_only_python, root, *ms_commands)
            for name, ms_side in zip(CASES, ms_sides):
                done[name] = ones[name], torch_sides[name], ms_side, theres[name]
        return done[case]

    return split


@pytest.mark.parametrize("case", list(CASES))
def test_a_comparison_split_across_a_torch_and_a_mindspore_machine_gives_the_one_process_report_bit_for_bit(
        case, splits):
    one, torch_side, ms_side, there = splits(case)
    assert "still to run: mindspore" in torch_side.stdout and "--only mindspore --out" in torch_side.stdout
    assert ms_side.returncode == 0, ms_side.stderr
    # the plan's scheduler (--layers counts its calls) ran MindSpore's first operators after its launch was set
    assert "launches asynchronously" not in ms_side.stderr, ms_side.stderr
    assert numbers(report(there)) == numbers(report(one))
    split = report(there)
    assert split["stages"]["missing"] == []
    # each side checked its loaded weights against its copy of the files; the summaries met in the folder
    assert split["weights"]["passed"] and split["weights"]["rows"] == report(one)["weights"]["rows"]
    if "--layers" in CASES[case][1]:
        assert split["layers"]["modules"] and split["stages"]["bytes"]["torch layers"] > 0


def test_the_report_is_written_from_the_folder_on_a_machine_without_torch_or_mindspore(splits, tmp_path):
    _, _, ms_side, split = splits("digits")
    assert ms_side.returncode == 0, ms_side.stderr
    out = str(shutil.copytree(split, tmp_path / "o"))
    first = report(out)
    for name in ("report.json", "report.html", "comparison.png", "layers.png"):
        os.remove(os.path.join(out, name))
    from conftest import MINDSPORE_PACKAGES, TORCH_PACKAGES, venv_without

    python = venv_without(tmp_path / "neither", *TORCH_PACKAGES, *MINDSPORE_PACKAGES)
    again = cli(python, "compare", "--out", out)
    assert again.returncode == 0, again.stderr
    assert numbers(report(out)) == numbers(first)
    assert all(os.path.exists(os.path.join(out, name)) for name in ("report.html", "comparison.png", "layers.png"))


def test_a_finished_folder_is_reported_again_from_the_folder_alone_where_both_frameworks_are(mindone, tmp_path):
    """The same command on a finished comparison, on a machine with both frameworks, writes its report
    from the folder as a machine with neither does: the model it was made with may be gone, and
    neither framework is imported. Before, it loaded diffusers and MindSpore (the digits model's
    --lockstep --layers folder: 6.0 s, now 1.4 s) and asked for --model where the model had moved."""
    model, out = make_tiny_model(tmp_path / "model"), str(tmp_path / "o")
    assert main(["compare", "--model", model, "--steps", "2", "--batch-size", "1", *PYNATIVE, "--quiet",
                 "--out", out]) == 0
    first = report(out)
    shutil.rmtree(model)
    os.remove(os.path.join(out, "report.json"))
    code = ("import sys\n"
            "from xrand.cli import main\n"
            "code = main(sys.argv[1:])\n"
            "print(sorted(name for name in ('torch', 'diffusers', 'mindspore', 'mindone') if name in sys.modules))\n"
            "sys.exit(code)\n")
    again = subprocess.run([sys.executable, "-c", code, "compare", "--out", out], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == "[]"
    assert "running nothing more here" in again.stdout and "PASS" in again.stdout
    assert numbers(report(out)) == numbers(first) and report(out)["reproduce"] == first["reproduce"]


# -- bad input, nothing lost ---------------------------------------------------------------------------
def one_line_error(out, *parts):
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for part in parts:
        assert part in lines[0], lines[0]


@pytest.fixture(scope="module")
def torch_done(tmp_path_factory, torch_only_python):
    """A tiny model and a comparison folder holding torch's stages (lockstep and layers)."""
    root = tmp_path_factory.mktemp("torch-done")
    model = make_tiny_model(root / "model")
    out = str(root / "out")
    done = cli(torch_only_python, "compare", "--model", model, "--steps", "2", "--batch-size", "1", "--lockstep",
               "--layers", "--only", "torch", "--out", out)
    assert done.returncode == 0, done.stderr
    return model, out


def test_the_reproduce_command_names_the_device_torchs_stages_ran_on_the_other_machine(torch_done, mindone, tmp_path,
                                                                                       monkeypatch, capfd):
    """The report written on MindSpore's machine, and again from the finished folder, says where
    torch's stages ran (as manifest.json's runtime says: here a GPU, written into a copy of a CPU
    folder), not the device this machine would give torch. Before, both left --device out."""
    _, done = torch_done
    out = str(shutil.copytree(done, tmp_path / "o"))
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["runtime"]["torch"]["device"] = "cuda:1"
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    ran = xrand_here(["compare", "--only", "mindspore", "--out", out, *PYNATIVE], tmp_path, monkeypatch, capfd)
    assert ran.returncode == 0, ran.stderr
    first = report(out)["reproduce"]
    os.remove(os.path.join(out, "report.json"))
    assert main(["compare", "--out", out, "--quiet"]) == 0
    assert first == report(out)["reproduce"] and first.endswith("--mindspore-mode pynative --device torch=cuda:1")


def test_mindspore_stages_before_torchs_records_name_the_missing_stage_and_its_command(
        mindspore_only_python, tmp_path):
    """The three commands in one interpreter of the MindSpore-only environment (cli_each)."""
    out, other, refused = cli_each(
        mindspore_only_python, tmp_path,
        ["compare", "--steps", "2", "--lockstep", "--only", "mindspore", "--out", str(tmp_path / "o")],
        ["compare", "--steps", "2", "--lockstep", "--no-weights-check", "--only", "mindspore", "--out",
         str(tmp_path / "p")],
        ["compare", "--only", "torch", "--out", str(tmp_path / "q")])
    one_line_error(out, "the stage 'mindspore weights' needs torch's stage 'torch weights'", "xrand compare --only torch")
    one_line_error(other, "the stage 'lockstep' needs torch's stage 'torch'", "xrand compare --only torch")
    one_line_error(refused, "--only torch: torch and diffusers must be installed here")


def test_a_truncated_or_edited_record_is_named(torch_done, mindspore_only_python, tmp_path):
    """Both refusals in one interpreter of the MindSpore-only environment (cli_each)."""
    model, done = torch_done
    records = []
    for edit in ("truncate", "edit"):
        out = shutil.copytree(done, tmp_path / edit)
        record = out / "records" / "torch-run-00000.safetensors"
        data = bytearray(record.read_bytes())
        if edit == "truncate":
            data = data[:-100]
        else:
            data[-5] ^= 0xFF
        record.write_bytes(bytes(data))
        records.append(record)
    refused = cli_each(mindspore_only_python, tmp_path,
                       *(["compare", "--only", "mindspore", "--out", str(r.parents[1])] for r in records))
    for record, out in zip(records, refused):
        one_line_error(out, str(record), "truncated or edited")


def test_a_model_folder_of_other_weights_is_refused_naming_the_component(torch_done, mindspore_only_python,
                                                                         tmp_path):
    from safetensors.numpy import load_file, save_file

    model, done = torch_done
    other = shutil.copytree(model, tmp_path / "other")
    weights = other / "unet" / "diffusion_pytorch_model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + np.float32(1e-3)
    save_file(tensors, str(weights))
    out = shutil.copytree(done, tmp_path / "out")
    refused, gone = cli_each(  # both in one interpreter of the MindSpore-only environment
        mindspore_only_python, tmp_path,
        ["compare", "--only", "mindspore", "--out", str(out), "--model", str(other)],
        ["compare", "--only", "mindspore", "--out", str(out), "--model", str(tmp_path / "nowhere")])
    one_line_error(refused, "the weights of unet in", "are not the ones")
    assert gone.returncode == 2 and "Traceback" not in gone.stderr


def test_layers_scope_records_only_the_modules_under_it_with_the_full_runs_numbers(tmp_path, mindone):
    full, scoped = str(tmp_path / "full"), str(tmp_path / "scoped")
    args = ["compare", "--steps", "2", "--batch-size", "1", "--layers", "--no-noise-floor", *PYNATIVE, "--quiet"]
    assert main([*args, "--out", full]) == 0
    assert main([*args, "--layers-scope", "down_blocks.1", "--out", scoped]) == 0
    a, b = report(full)["layers"], report(scoped)["layers"]
    names = [m["name"] for m in b["modules"]]
    assert names[0] == "" and all(n == "down_blocks.1" or n.startswith("down_blocks.1.") for n in names[1:])
    assert len(names) > 2 and b["scope"] == ["down_blocks.1"]
    by_label = {(m["name"], m.get("call", 0)): m for m in a["modules"]}
    for m in b["modules"][1:]:  # a scoped module's errors are the full run's
        full_m = by_label[(m["name"], m.get("call", 0))]
        assert (m["rel_l2"], m["local_rel_l2"], m["floor_rel_l2"]) == \
            (full_m["rel_l2"], full_m["local_rel_l2"], full_m["floor_rel_l2"])
    sizes = report(full)["stages"]["bytes"]["torch layers"], report(scoped)["stages"]["bytes"]["torch layers"]
    assert sizes[1] < sizes[0] / 2
    assert main([*args, "--layers-scope", "down_blocks.9", "--out", str(tmp_path / "bad")]) == 2
    assert not os.path.exists(tmp_path / "bad" / "torch.safetensors")  # refused before anything ran


def test_the_input_image_and_a_lora_may_live_at_other_paths_on_mindspores_machine(
        models, torch_only_python, mindspore_only_python, tmp_path):
    """Image to image with a LoRA: torch's machine names the files it read; MindSpore's machine holds
    them elsewhere and gives their paths (--image, --lora: by the LoRA's file name); a file not
    there is one line naming its flag; a LoRA of another name is refused."""
    from PIL import Image

    from xrand.models.checkpoints import save_lora

    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    image = here / "image.png"
    Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)).save(image)
    lora = save_lora(models["sd"], here / "style.safetensors")
    out = str(tmp_path / "out")
    torch_side = cli(torch_only_python, "compare", "--model", models["sd"], "--pipeline",
                     "StableDiffusionImg2ImgPipeline", "--image", str(image), "--strength", "0.5", "--steps", "2",
                     "--batch-size", "1", *PROMPT, "--lora", f"{lora}:0.8", "--only", "torch", "--out", out)
    assert torch_side.returncode == 0, torch_side.stderr
    assert f"--only mindspore --out {out} [--model PATH] [--lora FILE[:SCALE]] [--image FILE]" in torch_side.stdout
    shutil.move(str(here), str(there))  # neither file is where the manifest says
    missing, other, done = cli_each(  # the three in one interpreter of the MindSpore-only environment
        mindspore_only_python, tmp_path,
        ["compare", "--only", "mindspore", "--out", out, "--model", models["sd"]],
        ["compare", "--only", "mindspore", "--out", out, "--model", models["sd"], "--lora",
         str(there / "image.png.safetensors")],
        ["compare", "--only", "mindspore", "--out", out, "--model", models["sd"], "--lora",
         str(there / "style.safetensors"), "--image", str(there / "image.png")])
    one_line_error(missing, f"the LoRA '{lora}' that manifest.json names is not on this machine", "--lora")
    one_line_error(other, "this comparison has no LoRA named 'image.png' (style)")
    assert done.returncode == 0, done.stderr
    split = report(out)
    assert split["stages"]["missing"] == [] and split["verdict"] == "pass", split["summary"]
    assert [(os.path.basename(path), scale) for path, scale in split["settings"]["loras"]] == \
        [("style.safetensors", 0.8)]  # the manifest's scale
