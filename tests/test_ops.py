"""``xrand compare --ops MODULE``: the operators inside one module call on both sides, matched in
order, each MindSpore operator fed torch's inputs; the first over its limit named. On a fault
injected into one MindSpore operator (across two machines), on mindone 0.5.0's unscaled Wan VAE
attention, on Flux's float32 attention that mindone runs in float16, and on bad input."""
import json
import os

import pytest

pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from conftest import unipc_flow_timesteps_agree  # noqa: E402

from xrand.cli import main  # noqa: E402
from xrand.compare.ops import align, op_key  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU", reason="runs mindone on the CPU")


def report_of(out):
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f)


def first_over(ops):
    assert ops["first_over"] is not None, ops
    return ops["rows"][ops["first_over"]]


def test_a_fault_in_one_mindspore_operator_is_named_first_over_its_limit_across_two_machines(
        tmp_path, monkeypatch, capsys):
    """``ops.group_norm`` (what mint.nn.GroupNorm runs) given an offset of 1e-3 on MindSpore's side
    only: torch's stages write the operators of down_blocks.1.attentions.0 into the folder,
    MindSpore's stages read them, and the group norm is the first operator over its limit, its
    error measured on torch's inputs; the operators before it agree, and every wrapped function
    is back afterwards."""
    out = str(tmp_path / "o")
    args = ["compare", "--steps", "1", "--no-noise-floor", "--no-weights-check", "--out", out,
            "--ops", "down_blocks.1.attentions.0"]
    assert main([*args, "--only", "torch"]) in (0, 1)
    assert os.path.isfile(os.path.join(out, "records", "ops.json"))  # what travels to the other machine
    original = ms.ops.group_norm

    def group_norm(*given, **named):
        return original(*given, **named) + 1e-3

    monkeypatch.setattr(ms.ops, "group_norm", group_norm)
    permute, add, softmax = ms.Tensor.permute, ms.Tensor.__add__, ms.mint.softmax
    main([*args, "--only", "mindspore", "--mindspore-mode", "pynative"])  # a graph would compile the hook
    assert ms.Tensor.permute is permute and ms.Tensor.__add__ is add and ms.mint.softmax is softmax
    assert ms.ops.group_norm is group_norm
    ops = report_of(out)["ops"]
    row = first_over(ops)
    assert row["torch"]["name"] == "F.group_norm" and row["mindspore"]["name"] == "mint.nn.GroupNorm"
    assert row["how"] == "fed" and 1e-4 < row["rel_l2"] and row["limit"] < 1e-4
    before = ops["rows"][:ops["first_over"]]
    assert before and all(r["rel_l2"] is None or r["rel_l2"] <= r["limit"] for r in before)
    console = capsys.readouterr().out
    assert "the first over its limit: row 4, torch F.group_norm against MindSpore mint.nn.GroupNorm" in console
    html = open(os.path.join(out, "report.html")).read()
    assert 'id="ops-table"' in html and "first over" in html


def test_the_unscaled_wan_vae_attention_is_the_first_operator_over_its_limit_in_the_layers_culprit(
        tiny_folder, tmp_path, capsys):
    """``--layers --ops`` on the VAE decode: --layers' culprit is the decoder's attention block,
    and inside it mindone 0.5.0's FlashAttentionScore, made with its default scale_value 1.0 and
    given float16 query, key and value, is the first operator over its limit against torch's
    scaled_dot_product_attention (1/sqrt(channels)); every operator before it agrees."""
    out = str(tmp_path / "wan")
    scheduler = [] if unipc_flow_timesteps_agree() else ["--scheduler", "FlowMatchEulerDiscreteScheduler"]
    code = main(["compare", "--model", tiny_folder("wan"), "--prompt", "a red circle", "--height", "32", "--width",
                 "32", "--frames", "5", "--call-option", "max_sequence_length=32", "--steps", "1",
                 "--no-noise-floor", "--no-weights-check", "--out", out, "--layers", "--layers-component", "vae",
                 "--ops", *scheduler])
    assert code == 1
    report = report_of(out)
    ops = report["ops"]
    assert ops["module"] == report["layers"]["culprit"] == "vae.decoder.mid_block.attentions.0"
    assert ops["component"] == "vae" and ops["step"] is None
    row = first_over(ops)
    assert row["torch"]["name"] == "F.scaled_dot_product_attention"
    assert row["mindspore"]["name"] == "nn_ops.FlashAttentionScore"
    assert row["mindspore"]["params"]["scale_value"] == 1.0 and row["mindspore"]["in"] == ["float16"] * 3
    assert row["torch"]["in"] == ["float32"] * 3 and row["how"] == "fed" and row["rel_l2"] > row["limit"]
    assert all(r["rel_l2"] < 1e-6 for r in ops["rows"][:ops["first_over"]] if r["paired"])
    console = capsys.readouterr().out
    assert ("against MindSpore nn_ops.FlashAttentionScore(head_num=1, keep_prob=1.0, scale_value=1.0" in console)
    assert "--layers --layers-step 0 --layers-component vae --ops --no-noise-floor" in report["reproduce"]
    page_shows_the_table(os.path.join(out, "report.html"), "nn_ops.FlashAttentionScore")


def page_shows_the_table(path, operator):
    """report.html in a headless Chromium (where one is installed): the ops table with the first
    operator over its limit flagged, no console error, no request."""
    from browser import Chromium, find_chromium, open_page

    chromium = find_chromium()
    if chromium is None:
        return
    with Chromium(chromium) as browser:
        page = open_page(browser, path, evaluate={
            "flagged": "document.querySelector('#ops-table tr.culprit td:nth-child(4)').textContent",
            "rows": "document.querySelectorAll('#ops-table tbody tr').length"})
    assert page.console_errors == [] and [u for u in page.requests if u != page.url] == []
    assert "Operator by operator" in page.text and page.values["rows"] > 10
    assert page.values["flagged"].startswith(operator), page.values


def test_mindones_flux_attention_runs_in_float16_under_a_float32_run(tiny_folder, tmp_path):
    """Tiny Flux in float32: torch's scaled_dot_product_attention takes and gives float32; mindone's
    layers_compat.scaled_dot_product_attention casts query, key and value to float16 for
    FlashAttentionScore and its output back, which the dtype columns show (its error, about
    1e-4 fed torch's inputs, is within float16's limit)."""
    out = str(tmp_path / "flux")
    main(["compare", "--model", tiny_folder("flux"), "--prompt", "a red circle", "--height", "32", "--width", "32",
          "--steps", "1", "--no-noise-floor", "--no-weights-check", "--out", out, "--ops", "transformer_blocks.0.attn"])
    rows = report_of(out)["ops"]["rows"]
    attention = [r for r in rows if r["paired"] and r["torch"]["name"] == "F.scaled_dot_product_attention"]
    assert len(attention) == 1
    row = attention[0]
    assert row["mindspore"]["name"] == "nn_ops.FlashAttentionScore"
    assert row["torch"]["in"] == ["float32"] * 3 and row["torch"]["out"] == ["float32"]
    assert row["mindspore"]["in"] == ["float16"] * 3 and row["mindspore"]["out"] == ["float16"]
    assert 1e-6 < row["rel_l2"] < row["limit"]
    casts = [r["mindspore"]["out"] for r in rows if r["mindspore"] and r["mindspore"]["name"] == "Tensor.to"
             and not r["paired"]]
    assert casts.count(["float16"]) == 3 and casts.count(["float32"]) >= 1


@pytest.mark.parametrize("args, said", [
    (["--ops", "down_blocks.1.attention.0"], "--ops 'down_blocks.1.attention.0' is not a module of the "
                                             "UNet2DModel; accepted: a qualified submodule name as --layers prints it"),
    (["--ops"], "--ops without a module name looks into --layers' culprit: add --layers"),
    (["--layers", "--ops", "--only", "torch"], "--layers --ops looks into the culprit MindSpore's layers stage finds"),
])
def test_bad_ops_input_is_one_line_and_exit_2_before_any_model_runs(args, said, tmp_path, capsys):
    code = main(["compare", "--steps", "1", "--no-weights-check", "--out", str(tmp_path / "o"), *args])
    captured = capsys.readouterr()
    # (in-process, diffusers' loading bar reaches capsys; in a subprocess it is silenced: test_cli)
    errors = [line.split("\r")[-1] for line in captured.err.strip().split("\n") if "error" in line]
    assert code == 2 and len(errors) == 1 and errors[0].startswith("xrand compare: error: "), captured.err
    assert said in errors[0] and "Traceback" not in captured.err
    assert "running torch" not in captured.out  # no stage ran


def test_an_unknown_module_name_offers_the_close_ones(tmp_path, capsys):
    assert main(["compare", "--steps", "1", "--out", str(tmp_path / "o"), "--ops", "down_blocks.1.attention.0"]) == 2
    assert "did you mean down_blocks.1.attentions.0" in capsys.readouterr().err


def test_the_two_sequences_are_matched_in_order_by_one_vocabulary():
    assert op_key("nn_ops.FlashAttentionScore") == op_key("F.scaled_dot_product_attention")
    assert op_key("mint.nn.Conv2d") == op_key("torch.conv2d") == "conv2d"
    assert op_key("Tensor.__add__") == op_key("Tensor.add") and op_key("Tensor.swapaxes") == "transpose"
    torch = ["F.group_norm", "F.linear", "F.scaled_dot_product_attention", "Tensor.add"]
    mindspore = ["mint.nn.GroupNorm", "nn.Linear", "Tensor.to", "nn_ops.FlashAttentionScore", "Tensor.to",
                 "Tensor.__add__"]
    assert align(torch, mindspore) == [(0, 0, True), (1, 1, True), (None, 2, False), (2, 3, True), (None, 4, False),
                                       (3, 5, True)]
    assert align(["F.linear"], ["mint.bmm"]) == [(0, 0, False)]  # no pairing: side by side
