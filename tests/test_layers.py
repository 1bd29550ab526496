"""compare --layers and the noise floor: the module where torch and MindSpore part, on real models.

Faults are injected into one MindSpore cell only (its output scaled by 1 + 1e-3, through a Cell
forward hook), and the culprit must be exactly that cell. The layer step is the last one
(timestep 0) except where a test says otherwise: at large timesteps MindSpore's own CPU Exp
kernel makes the timestep embedding a genuine culprit (test_large_timestep_...).
"""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from conftest import PYNATIVE, make_tiny_model  # noqa: E402
from xrand.checks import UsageError  # noqa: E402
from xrand.cli import main  # noqa: E402
from xrand.compare import compare_loaded, load_pair, make_plan  # noqa: E402
from xrand.compare.floor import DrawsIn, noise_floor  # noqa: E402
from xrand.compare.layers import (LAYER_FLOOR_MULTIPLE, LayerOptions, check_dump_dir, layer_diff,  # noqa: E402
                                  layers_at_step, module_limit, unet_inputs)
from xrand.pipelines.settings import Settings  # noqa: E402

FAULT = 1 + 1e-3


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("layers") / "model")


@pytest.fixture(scope="module")
def pair(tiny_model, mindone):
    return load_pair(Settings(model=tiny_model, batch_size=1))


@pytest.fixture(scope="module")
def pipes(pair):
    return pair.torch.pipe, pair.mindspore.pipe


@pytest.fixture(scope="module")
def inputs():
    sample = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    return unet_inputs(sample, 0)


def run_with_fault(pipes, inputs, fault=None, **kwargs):
    torch_pipe, ms_pipe = pipes
    handle = None
    if fault is not None:
        cell = dict(ms_pipe.unet.cells_and_names())[fault]
        handle = cell.register_forward_hook(lambda cell, args, output: output * FAULT)
    try:
        return layer_diff(torch_pipe.unet, ms_pipe.unet, *inputs, **kwargs)
    finally:
        if handle is not None:
            handle.remove()


def row(report, label):
    return next(m for m in report.modules if m.label == label)


@pytest.fixture(scope="module")
def clean(pipes, inputs):
    return run_with_fault(pipes, inputs)


# -- the unperturbed run ------------------------------------------------------------------------------------
def test_the_float64_pass_widens_one_module_at_a_time_and_restores_every_dtype():
    """widened gives a float64 model's numbers with each submodule's weights float64 only while
    it runs, and every dtype back afterwards, even after a call that raised."""
    import copy

    import torch

    from xrand.frameworks.torch import widened

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.LayerNorm(8), torch.nn.GELU(),
                                torch.nn.Linear(8, 2))
    x = torch.randn(5, 3)
    expected = copy.deepcopy(model).double()(x.double())
    own = [t.data_ptr() for t in model.parameters()]
    seen = []
    model[0].register_forward_hook(lambda m, a, out: seen.append((m.weight.dtype, model[3].weight.dtype)))
    with widened([model]):
        got = model(x.double())
        with pytest.raises(RuntimeError):
            model(torch.randn(5, 4).double())  # a call that raises inside
    assert got.dtype == torch.float64 and torch.equal(got, expected)
    assert seen[0] == (torch.float64, torch.float32)  # only the running module's own weights widened
    assert {t.dtype for t in list(model.parameters()) + list(model.buffers())} == {torch.float32}
    assert [t.data_ptr() for t in model.parameters()] == own  # their own data back, not copies


def test_unperturbed_run_names_no_culprit(clean):
    assert clean.culprit is None, clean.summary()
    assert all(m.local_rel_l2 <= module_limit(m, clean.threshold, True) for m in clean.modules)
    assert clean.summary().startswith("layers in one call: no culprit")


def test_every_submodule_call_is_matched_by_name_in_execution_order(pipes, clean):
    torch_pipe, ms_pipe = pipes
    labels = [m.label for m in clean.modules]
    assert labels[0] == "" and clean.modules[0].type == "UNet2DModel"
    assert clean.unmatched == {"torch": [], "mindspore": []}
    order = [labels.index(n) for n in ("time_proj", "conv_in", "down_blocks.0.resnets.0.conv1", "mid_block",
                                       "up_blocks.1.resnets.0", "conv_out")]
    assert order == sorted(order)
    # a module called three times (the resnet's shared SiLU) is three rows
    assert {"down_blocks.0.resnets.0.nonlinearity", "down_blocks.0.resnets.0.nonlinearity#1",
            "down_blocks.0.resnets.0.nonlinearity#2"} <= set(labels)
    # every leaf module of the torch UNet that runs has a row (containers such as ModuleList do not run)
    called_types = {type(m).__name__ for _, m in torch_pipe.unet.named_modules()} - {"ModuleList"}
    assert {m.type for m in clean.modules} == called_types


def test_threshold_is_a_multiple_of_torchs_measured_floor(clean):
    floor = clean.floor["rel_l2"]
    assert 1e-9 < floor < 1e-5  # float32 against float64 on one UNet call
    assert clean.threshold == pytest.approx(LAYER_FLOOR_MULTIPLE * floor)
    assert clean.modules[0].floor_rel_l2 == floor
    assert "float64" in clean.floor["how"]


# -- injected faults -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", [
    "down_blocks.0.resnets.0.conv1",  # a convolution
    "down_blocks.1.resnets.0",        # a resnet block
    "down_blocks.1.attentions.0",     # an attention block
    "up_blocks.0.attentions.1.to_v",  # a linear layer inside attention, deep in the up path
])
def test_a_fault_in_one_mindspore_module_names_exactly_that_module(pipes, inputs, fault):
    report = run_with_fault(pipes, inputs, fault)
    assert report.culprit == fault, report.summary()
    assert row(report, fault).local_rel_l2 == pytest.approx(1e-3, rel=0.05)
    assert f"at {fault} (" in report.summary()


def test_an_upstream_fault_does_not_make_downstream_modules_the_culprit(pipes, inputs, clean):
    fault = "down_blocks.0.resnets.0.conv1"
    report = run_with_fault(pipes, inputs, fault)
    assert report.culprit == fault
    downstream = [m for m in report.modules[[m.label for m in report.modules].index(fault) + 1:]
                  if m.name.startswith(("down_blocks.1", "mid_block", "up_blocks", "conv_out"))]
    # the fault reaches them (global error far above the threshold) ...
    assert row(report, "conv_out").rel_l2 > 10 * report.threshold
    assert row(report, "mid_block.attentions.0").rel_l2 > 10 * report.threshold
    # ... but fed torch's inputs each of them is as close to torch as without the fault (float32 noise,
    # not the 1e-3 fault: MindSpore's CPU kernels are not bit-stable when other processes share the cores)
    assert len(downstream) > 50
    for m in downstream:
        assert m.local_rel_l2 <= 2 * row(clean, m.label).local_rel_l2 + 1e-7, m.label


def test_a_fault_inside_a_module_is_not_charged_to_the_modules_around_it(pipes, inputs, clean):
    report = run_with_fault(pipes, inputs, "down_blocks.1.attentions.0.to_q")
    assert report.culprit == "down_blocks.1.attentions.0.to_q"
    # the fault reaches the attention's output as run, but its own operations, fed torch's values, are clean
    assert row(report, "down_blocks.1.attentions.0").rel_l2 > 10 * report.threshold
    for parent in ("", "down_blocks.1", "down_blocks.1.attentions.0"):
        assert row(report, parent).local_rel_l2 <= 2 * row(clean, parent).local_rel_l2 + 1e-7, parent


def test_a_fault_in_a_modules_own_operations_between_submodules_names_that_module(pipes, inputs):
    """Scaling to_out.0's input (what the attention's own bmm and softmax hand it) is a fault in
    the attention block itself, not in to_out.0, whose own error stays float32 noise."""
    torch_pipe, ms_pipe = pipes
    to_out = dict(ms_pipe.unet.cells_and_names())["down_blocks.1.attentions.0.to_out.0"]
    handle = to_out.register_forward_pre_hook(lambda cell, args: tuple(a * FAULT for a in args))
    try:
        report = layer_diff(torch_pipe.unet, ms_pipe.unet, *inputs)
    finally:
        handle.remove()
    assert report.culprit == "down_blocks.1.attentions.0", report.summary()
    assert row(report, "down_blocks.1.attentions.0").local_rel_l2 == pytest.approx(1e-3, rel=0.05)


def test_an_explicit_layer_tolerance_replaces_the_floor(pipes, inputs):
    loose = run_with_fault(pipes, inputs, "down_blocks.1.resnets.0", threshold=1e-2)
    assert loose.culprit is None and loose.threshold == 1e-2 and loose.floor is None
    assert loose.rule == "local_rel_l2 > threshold"
    tight = run_with_fault(pipes, inputs, threshold=1e-12)
    assert tight.culprit is not None  # float32 differences exist; a 1e-12 limit must catch one


# -- dump -----------------------------------------------------------------------------------------------------
def test_dump_writes_the_named_modules_tensors_and_nothing_else(pipes, inputs, tmp_path):
    from safetensors.numpy import load_file

    name = "down_blocks.0.resnets.0.conv1"
    report = run_with_fault(pipes, inputs, dump=[name, "down_blocks.0.resnets.0.nonlinearity"],
                            dump_dir=str(tmp_path / "dump"))
    assert sorted(os.listdir(tmp_path / "dump")) == sorted(
        f"{n}.{side}.safetensors" for n in (name, "down_blocks.0.resnets.0.nonlinearity")
        for side in ("torch", "mindspore"))
    pt = load_file(str(tmp_path / "dump" / f"{name}.torch.safetensors"))
    ms_side = load_file(str(tmp_path / "dump" / f"{name}.mindspore.safetensors"))
    assert sorted(pt) == ["call0.input.0", "call0.output.0"]
    assert sorted(ms_side) == ["call0.input.0", "call0.local_output.0", "call0.output.0"]
    conv = dict(pipes[0].unet.named_modules())[name]
    with torch.no_grad():
        expected = conv(torch.from_numpy(pt["call0.input.0"])).numpy()
    np.testing.assert_array_equal(pt["call0.output.0"], expected)
    local = np.linalg.norm(ms_side["call0.local_output.0"] - expected) / np.linalg.norm(expected)
    assert local == pytest.approx(row(report, name).local_rel_l2, rel=1e-6)
    silu = load_file(str(tmp_path / "dump" / "down_blocks.0.resnets.0.nonlinearity.torch.safetensors"))
    assert {k.split(".")[0] for k in silu} == {"call0", "call1", "call2"}


# -- bad input ------------------------------------------------------------------------------------------------
def test_unknown_module_name_for_dump_is_refused(pipes, inputs, tmp_path):
    with pytest.raises(UsageError, match=r"unknown module 'down_blocks.0.resnet.0.conv1' for --layers-dump; "
                                         r"accepted: .*did you mean down_blocks.0.resnets.0.conv1"):
        run_with_fault(pipes, inputs, dump=["down_blocks.0.resnet.0.conv1"], dump_dir=str(tmp_path))


def test_a_dump_folder_that_cannot_be_written_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UsageError, match=f"--layers-dump folder '{blocker}/d' cannot be written"):
        check_dump_dir(str(blocker / "d"))


@pytest.mark.parametrize("options, match", [
    (LayerOptions(step=4), r"--layers-step 4 is outside the schedule; accepted: 0 to 3 \(the run has 4 steps\)"),
    (LayerOptions(step=-1), "--layers-step -1 is outside the schedule"),
    (LayerOptions(threshold=0.0), "layer tolerance must be a finite number > 0, got 0.0"),
    (LayerOptions(dump_dir="/tmp"), "--layers-dump '/tmp' names no module"),
])
def test_bad_layer_options(options, match):
    with pytest.raises(UsageError, match=match):
        options.check(4)


def test_cli_bad_layers_input_is_one_line_and_exit_2(tiny_model, mindone, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cases = [
        (["--layers", "--layers-step", "9"], "--layers-step 9 is outside the schedule; accepted: 0 to 1"),
        (["--layers", "--layers-dump", str(tmp_path / "d"), "--layers-module", "conv_inn"],
         "unknown module 'conv_inn' for --layers-dump"),
        (["--layers", "--layers-dump", str(blocker / "d"), "--layers-module", "conv_in"],
         f"--layers-dump folder '{blocker}/d' cannot be written"),
        (["--layers-step", "1"], "--layers-step needs --layers"),
        (["--layers", "--scheduler", "all"], "--layers cannot be combined with --scheduler all"),
    ]
    for extra, message in cases:
        code = main(["compare", "--model", tiny_model, "--steps", "2", "--batch-size", "1", "--quiet",
                     "--out", str(tmp_path / "o"), *extra])
        # (in-process, diffusers' loading bar reaches capsys; in a subprocess it is silenced: test_cli)
        last = capsys.readouterr().err.strip().split("\n")[-1].split("\r")[-1]
        assert code == 2 and last.startswith("xrand compare: error: ") and message in last, last


# -- the noise floor ------------------------------------------------------------------------------------------
def test_noise_floor_compares_a_run_against_its_float64_run():
    reference = np.linspace(1, 2, 10)
    runs = {"float32": reference.astype(np.float32), "float64": reference}
    floor = noise_floor(lambda dtype: runs[dtype], "float32")
    expected = np.linalg.norm(reference.astype(np.float32) - reference) / np.linalg.norm(reference)
    assert floor["rel_l2"] == pytest.approx(expected) and floor["rel_l2"] > 0
    assert floor["how"].startswith("torch float32 vs torch float64")
    with pytest.raises(UsageError, match="noise floor needs two different dtypes, got 'float64' twice"):
        noise_floor(lambda dtype: reference, "float64")


def test_the_float64_run_sees_the_float32_runs_noise():
    wide = DrawsIn(7, "torch-cpu", "float32").normal((2, 3, 4), "float64")
    assert wide.dtype == np.float64
    expected = torch.randn((2, 3, 4), generator=torch.Generator().manual_seed(7)).double().numpy()
    np.testing.assert_array_equal(wide, expected)


# -- compare end to end ------------------------------------------------------------------------------------------
def test_compare_with_layers_and_noise_floor_writes_report_and_picture(pair, tiny_model, tmp_path):
    from xrand.report.compare import write_report

    settings = Settings(model=tiny_model, steps=2, seed=1, batch_size=1)
    c = compare_loaded(pair, settings, layers=LayerOptions(step=1), noise_floor=True, mindspore_mode="pynative")
    paths = write_report(c, str(tmp_path / "out"))
    report = json.load(open(paths["report.json"]))
    layers = report["layers"]
    assert layers["step"] == 1 and layers["timestep"] == 0 and layers["culprit"] is None
    assert layers["threshold"] > 0 and layers["modules"][0]["name"] == ""
    assert set(layers["modules"][1]) >= {"name", "type", "rel_l2", "local_rel_l2", "max_abs"}
    assert set(report["noise_floor"]) >= {"rel_l2", "how"} and 0 < report["noise_floor"]["rel_l2"] < 1e-4
    ratio = c.final["rel_l2"] / report["noise_floor"]["rel_l2"]
    assert f"MindSpore differs from torch by {ratio:.3g}x torch's own float32 floor" in report["summary"]
    with open(paths["layers.png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_large_timestep_names_mindspores_timestep_embedding(mindone, tmp_path, capsys):
    """A real finding, on the embedded digits model at timestep 500: MindSpore's CPU Exp kernel
    (mint.exp, float32) is off by up to 4e-6 relative where torch's is 3e-7, so mindone's
    sinusoidal embedding differs from torch's by 7.7e-5, about 25x torch's own float32 error
    there (measured against float64). xrand names it."""
    code = main(["compare", "--steps", "2", "--batch-size", "1", "--layers", "--no-noise-floor", *PYNATIVE,
                 "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 0
    report = json.load(open(tmp_path / "o" / "report.json"))
    assert report["layers"]["culprit"] == "time_proj" and report["layers"]["timestep"] == 500
    assert "PASS: " in out and ("layers at step 0 (timestep 500): the run passes: its difference from torch, within "
                                "tolerance, starts at time_proj (Timesteps)") in out  # not a failure
    assert "noise_floor" not in report and "floor" not in report["summary"]
    time_proj = report["layers"]["modules"][1]
    assert time_proj["name"] == "time_proj"
    assert time_proj["local_rel_l2"] > LAYER_FLOOR_MULTIPLE * time_proj["floor_rel_l2"] > 0


def test_layers_step_counts_the_schedulers_steps(pair, tiny_model):
    """Heun calls the denoiser twice per step but the last: 2 steps are 3 scheduler steps, and step 2
    is the third call, fed torch's sample there."""
    settings = Settings(model=tiny_model, steps=2, seed=1, batch_size=1, scheduler="heun")
    c = compare_loaded(pair, settings, layers=LayerOptions(step=2, threshold=1e-4), mindspore_mode="pynative")
    assert len(c.timesteps) == 3 and c.layers.step == 2
    assert c.layers.timestep == pytest.approx(c.timesteps[2])
    assert c.layers.culprit is None, c.layers.summary()
    with pytest.raises(UsageError, match=r"--layers-step 3 is outside the schedule; accepted: 0 to 2"):
        compare_loaded(pair, settings, layers=LayerOptions(step=3))


# -- any pipeline and scheduler: the tiny Stable Diffusion, with guidance and an ancestral sampler ----------------
SD_PROMPT = dict(prompt="a red circle", negative_prompt="blue")


@pytest.fixture(scope="module")
def sd_pair(tmp_path_factory, mindone):
    from xrand.models.tiny_sd import build_tiny_sd

    model = str(build_tiny_sd(tmp_path_factory.mktemp("sd") / "model", seed=0))
    return load_pair(Settings(model=model, steps=2, batch_size=1, **SD_PROMPT))


@pytest.fixture(scope="module")
def sd_settings(sd_pair):
    return Settings(model=sd_pair.torch.model, steps=2, seed=1, batch_size=1, scheduler="euler-a",
                    guidance_scale=7.5, **SD_PROMPT)


@pytest.fixture(scope="module")
def sd_torch_side(sd_pair, sd_settings):
    from xrand.compare.sides import run

    return run(sd_pair.torch, make_plan(sd_settings), record_calls={1})


@pytest.fixture(scope="module")
def sd_clean(sd_pair, sd_settings, tmp_path_factory):
    dump = str(tmp_path_factory.mktemp("sd-dump"))
    return compare_loaded(sd_pair, sd_settings, noise_floor=True, mindspore_mode="pynative",
                          layers=LayerOptions(step=1, dump=["conv_in"], dump_dir=dump)), dump


def test_stable_diffusion_with_euler_ancestral_compares_the_guided_unet_call(sd_clean, sd_settings):
    from safetensors.numpy import load_file

    c, dump = sd_clean
    layers = c.layers
    assert c.ran["a"]["scheduler"] == "EulerAncestralDiscreteScheduler" and c.passed
    assert layers.culprit is None, layers.summary()
    assert layers.modules[0].type == "UNet2DConditionModel" and layers.unmatched == {"torch": [], "mindspore": []}
    assert layers.step == 1 and layers.timestep == pytest.approx(c.timesteps[1])
    labels = {m.label for m in layers.modules}
    assert "down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k" in labels  # cross-attention ran
    # the call the pipeline made: the latents through scale_model_input, doubled for guidance
    conv_in = load_file(f"{dump}/conv_in.torch.safetensors")["call0.input.0"]
    assert conv_in.shape == (2, 4, 16, 16)
    np.testing.assert_array_equal(conv_in[0], conv_in[1])
    # the noise floor ran the same pipeline and scheduler in float64
    assert 0 < c.noise_floor["rel_l2"] < 1e-4
    assert "StableDiffusionPipeline with EulerAncestralDiscreteScheduler" in c.noise_floor["how"]


def test_a_fault_in_one_stable_diffusion_unet_module_names_exactly_that_module(sd_pair, sd_settings, sd_torch_side):
    fault = "down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k"  # cross-attention on the prompt embeddings
    cell = dict(sd_pair.mindspore.pipe.unet.cells_and_names())[fault]
    handle = cell.register_forward_hook(lambda cell, args, output: output * FAULT)
    try:
        report = layers_at_step(sd_pair.torch, sd_pair.mindspore, make_plan(sd_settings, layers=LayerOptions(step=1)),
                                sd_torch_side.recording, sd_torch_side.timesteps)
    finally:
        handle.remove()
    assert report.culprit == fault, report.summary()
    assert row(report, fault).local_rel_l2 == pytest.approx(1e-3, rel=0.05)


def test_every_call_over_its_limit_is_reported_with_the_first_and_the_worst(mindone, tmp_path):
    """The digits model at timestep 500: time_proj is over its limit by itself (MindSpore's CPU
    Exp, test above); a 1e-3 fault injected at time_embedding is the worst by far, and both are
    named, in the console's lines, the JSON and layers.csv."""
    from xrand.cli import default_model
    from xrand.report.csv import layers_csv

    digits = load_pair(Settings(model=default_model(), batch_size=1))
    sample = np.random.default_rng(0).standard_normal((1, 1, 16, 16)).astype(np.float32)
    cell = dict(digits.mindspore.pipe.unet.cells_and_names())["time_embedding"]
    handle = cell.register_forward_hook(lambda cell, args, output: output * FAULT)
    try:
        report = layer_diff(digits.torch.pipe.unet, digits.mindspore.pipe.unet, *unet_inputs(sample, 500))
    finally:
        handle.remove()
    over = [m.label for m in report.over]
    assert report.culprit == "time_proj" and over[:2] == ["time_proj", "time_embedding"]
    assert report.worst.label == "time_embedding" and report.worst.local_rel_l2 > 100 * report.worst.limit
    first, second = report.summary().splitlines()
    assert "parts from torch at time_proj" in first
    assert f"{len(over)} module calls over their limits; the worst time_embedding (TimestepEmbedding)" in second
    data = report.to_dict()
    assert data["over"] == over and data["worst"] == "time_embedding"
    rows = {row["name"]: row for row in data["modules"]}
    assert rows["time_embedding"]["over"] and rows["time_embedding"]["limit"] == report.worst.limit
    assert 0 < rows["time_embedding"]["cosine"] <= 1 and rows["conv_in"]["err_ratio_1e-3"] > 0.99
    table = layers_csv(data)
    assert "time_embedding" in table and table.splitlines()[0].startswith("NPU Name,Bench Name,Cosine")
