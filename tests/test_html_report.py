"""report.html beside every result, layers.csv in msprobe's columns, the pictures' shared axes, and
the pages in a real browser (headless Chromium): no console error, no request, not blank, the
verdict and the final relative L2 on screen.

The pages come from real runs of the xrand command line (``xrand.cli.main`` in the test's process;
a sweep's workers are processes of their own) on the embedded digits model (the scheduler matrix:
on a tiny model, conftest's); every expected number is read from the JSON those runs wrote.
"""
import csv
import io
import json
import math
import os
import re
import sys

import numpy as np
import pytest

from xrand.compare.metrics import module_metrics
from xrand.report.csv import COLUMNS, METRIC_KEYS, MSPROBE_COLUMNS, layers_csv

sys.path.insert(0, os.path.dirname(__file__))
from browser import Chromium, find_chromium, open_page  # noqa: E402
from conftest import PYNATIVE  # noqa: E402


def xrand_here(*args):
    """``xrand ARGS --quiet`` through ``main`` here, sparing a new interpreter and its imports (a
    sweep's cells run in worker processes either way); the command line's own process is
    test_cli's."""
    pytest.importorskip("torch")
    pytest.importorskip("mindone.diffusers")
    from xrand.cli import main

    assert main([*args, "--quiet"]) == 0, args


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "compare"
    xrand_here("compare", "--steps", "4", "--batch-size", "2", "--lockstep", "--layers", *PYNATIVE, "--out", str(out))
    return out


@pytest.fixture(scope="module")
def matrix_dir(scheduler_matrix):
    return scheduler_matrix[1]  # conftest: the command line's matrix on a tiny model


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "sweep"
    xrand_here("sweep", "--seeds", "0-3", "--steps", "4", "--batch-size", "1", *PYNATIVE, "--out", str(out))
    return out


def load(folder, name):
    with open(folder / name) as f:
        return json.load(f)


def assert_self_contained(html: str, pictures: int) -> None:
    """Nothing the page would fetch: every src a data URI, no stylesheet or script file, no url()."""
    sources = re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', html)
    assert all(s.startswith("data:image/png;base64,") for s in sources), sources
    assert len(sources) == pictures
    assert "<link" not in html and "url(" not in html and "@import" not in html
    assert not re.search(r"<script[^>]*\bsrc", html)
    assert "http://" not in html and "https://" not in html


# ----------------------------------------------------------------------------- the pages' content

def test_compare_page_has_verdict_pictures_layers_and_command(compare_dir):
    report = load(compare_dir, "report.json")
    html = (compare_dir / "report.html").read_text()
    assert_self_contained(html, pictures=3)
    assert f'<span class="word">{report["verdict"].upper()}</span>' in html
    assert f'<b id="final-rel-l2">{report["final"]["rel_l2"]:.3g}</b>' in html
    # the environment of each side, and the command that makes the report again
    for side in ("a", "b"):
        for key in ("python", "platform"):
            assert str(report["environment"][side][key]) in html
    assert "xrand compare --steps 4 --seed 0 --batch-size 2" in html and "--lockstep --layers" in html
    # lockstep's largest local error in the verdict box and the console's line, as the steps' table has it
    largest = max(report["steps"], key=lambda s: s["local"]["sample"]["rel_l2"])
    assert report["lockstep"]["sample"] == {"rel_l2": largest["local"]["sample"]["rel_l2"],
                                            "step": largest["step"], "timestep": largest["timestep"]}
    box = html[html.index('<li id="lockstep-largest">'):]
    assert box[:box.index("</li>")].count(f"{largest['local']['sample']['rel_l2']:.3g}") == 1
    assert f"lockstep's largest local error {largest['local']['sample']['rel_l2']:.3g} (step {largest['step']}" \
        in report["summary"]
    # every module call in the table, each with the JSON's full number to sort by
    layers = report["layers"]
    for m in layers["modules"]:
        assert f'data-sort="{m["local_rel_l2"]!r}"' in html
    assert html.count('<tr class="') >= len(layers["modules"])


def test_under_a_pass_the_page_calls_the_culprit_the_start_of_a_within_tolerance_difference(compare_dir):
    """digits at step 0: MindSpore's CPU timestep embedding (time_proj) is the culprit of a PASS."""
    report = load(compare_dir, "report.json")
    assert report["verdict"] == "pass" and report["layers"]["culprit"], report["summary"]
    html = (compare_dir / "report.html").read_text()
    summary = html[html.index('<p id="layers-summary">'):]
    summary = summary[:summary.index("</p>")]
    assert (f"the run passes: its difference from torch, within tolerance, starts at "
            f"<b>{report['layers']['culprit']}</b>") in summary and "parts from" not in summary


def test_a_known_cause_is_on_the_page_under_the_verdict(compare_dir):
    from xrand.report.html import render_compare

    report = load(compare_dir, "report.json")
    assert report["known_causes"] == []  # none measured for the digits model
    assert "Known cause" not in (compare_dir / "report.html").read_text()
    html = render_compare(dict(report, known_causes=["mindone's attention in float16"]), {})
    verdict = html[html.index('id="verdict"'):html.index('<h2 id="images">')]
    assert '<p class="known-cause">Known cause: mindone&#39;s attention in float16</p>' in verdict


def test_compare_page_names_the_first_and_worst_call_over_its_limit(compare_dir):
    from xrand.compare.layers import ModuleDiff, module_limit

    report = load(compare_dir, "report.json")
    layers = report["layers"]
    use_floors = layers["floor"] is not None
    over = []
    for m in layers["modules"]:
        limit = module_limit(ModuleDiff(m["name"], m["type"], m.get("call", 0), None, None, None,
                                        floor_rel_l2=m.get("floor_rel_l2")), layers["threshold"], use_floors)
        if m["local_rel_l2"] is not None and m["local_rel_l2"] > limit:
            label = (m["name"] or "(denoiser)") + (f"#{m['call']}" if m.get("call") else "")
            over.append((m["local_rel_l2"] / limit, label))
    html = (compare_dir / "report.html").read_text()
    assert f"{len(over)} of {len(layers['modules'])} module calls over their limit" in html
    if over:
        assert f"First over its limit: <b>{over[0][1]}</b>" in html
        assert f"Worst over its limit: <b>{max(over)[1]}</b>" in html
    else:
        assert "No module call is over its limit." in html


def test_scheduler_all_writes_the_matrix(scheduler_matrix):
    """Every shared image scheduler on both frameworks, few steps: all pass (5e-3, fp32). Here beside
    the matrix's page, so that the one matrix run (conftest) serves both in one process."""
    from xrand.pipelines.schedulers import MATRIX

    code, out = scheduler_matrix
    matrix = json.load(open(out / "matrix.json"))
    failed = [(r["label"], r["rel_l2"], r["error"]) for r in matrix["rows"] if r["verdict"] != "pass"]
    assert code == 0 and matrix["verdict"] == "pass" and not failed, failed
    assert [(r["scheduler"], r["options"]) for r in matrix["rows"]] == [(n, o) for n, o in MATRIX]
    draws = {r["label"]: r["noise_draws"] for r in matrix["rows"]}
    assert draws["DDIM"] == 0 and draws["EulerAncestralDiscrete"] == 4 * 64 and draws["DPMSolverSDE"] > 0
    table = (out / "matrix.md").read_text()
    assert "| scheduler | options | noise draws during steps | final rel L2 | max \\|diff\\| | verdict |" in table
    assert table.count("| PASS |") == len(MATRIX)
    with open(out / "matrix.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_matrix_page(matrix_dir):
    matrix = load(matrix_dir, "matrix.json")
    html = (matrix_dir / "report.html").read_text()
    assert_self_contained(html, pictures=1)
    worst = max((r for r in matrix["rows"] if r["rel_l2"] is not None), key=lambda r: r["rel_l2"])
    assert f'<b id="final-rel-l2">{worst["rel_l2"]:.3g}</b>' in html
    assert html.count("<tr class=") == len(matrix["rows"])
    assert "xrand compare --scheduler all --model " in html and " --steps 4 --seed 0 --batch-size 1 " in html


def test_sweep_page(sweep_dir):
    summary = load(sweep_dir, "summary.json")
    rows = [json.loads(line) for line in (sweep_dir / "results.jsonl").read_text().splitlines() if line]
    html = (sweep_dir / "report.html").read_text()
    assert_self_contained(html, pictures=1)
    assert f'<span class="word">{summary["verdict"].upper()}</span>' in html
    assert f'<b id="final-rel-l2">{max(r["rel_l2"] for r in rows):.3g}</b>' in html
    for row in rows:
        assert f'data-sort="{row["rel_l2"]!r}"' in html
    assert "<pre>xrand sweep --seeds 0-3 " in html and " --steps 4 --batch-size 1 " in html


def test_the_sweep_page_command_reproduces_the_sweep(sweep_dir, tmp_path):
    """The command on the page, run as it reads (its --out DIR a new folder), gives the same cells."""
    import html as html_module
    import shlex

    page = (sweep_dir / "report.html").read_text()
    command = shlex.split(html_module.unescape(re.search(r'<h2 id="command">Reproduce</h2>\s*<pre>(.*?)</pre>',
                                                         page).group(1)))
    assert command[:2] == ["xrand", "sweep"] and command[-2:] == ["--out", "DIR"]
    xrand_here("sweep", *command[2:-1], str(tmp_path / "again"))
    rows = [json.loads(line) for line in (sweep_dir / "results.jsonl").read_text().splitlines() if line]
    again = [json.loads(line) for line in (tmp_path / "again" / "results.jsonl").read_text().splitlines() if line]
    key = lambda r: (r["seed"], r["scheduler"])  # noqa: E731
    assert [(key(r), r["rel_l2"], r["max_abs"]) for r in sorted(again, key=key)] == \
        [(key(r), r["rel_l2"], r["max_abs"]) for r in sorted(rows, key=key)]


# ----------------------------------------------------------------------------- layers.csv

def test_layers_csv_has_msprobe_columns_and_the_json_numbers(compare_dir):
    report = load(compare_dir, "report.json")
    layers = report["layers"]
    text = (compare_dir / "layers.csv").read_text()
    assert text == layers_csv(layers)
    table = list(csv.DictReader(io.StringIO(text)))
    assert list(table[0].keys()) == COLUMNS
    # Ascend msprobe's compare column names (CompareConst in msprobe/core/common/const.py)
    assert MSPROBE_COLUMNS == ["NPU Name", "Bench Name", "Cosine", "MaxAbsErr", "MaxRelativeErr",
                               "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "Err_message"]
    assert len(table) == len(layers["modules"])
    for row, m in zip(table, layers["modules"]):
        assert float(row["xrand local_rel_l2"]) == m["local_rel_l2"]
        assert float(row["xrand rel_l2"]) == m["rel_l2"]
        assert float(row["MaxAbsErr"]) == m["max_abs"]
        assert row["xrand over limit"] == ("yes" if m["local_rel_l2"] > float(row["xrand limit"]) else "no")
        for column, key in METRIC_KEYS.items():
            if key in m:
                assert float(row[column]) == m[key]
            else:  # not written by layers.py yet: msprobe's N/A, and the message names the key
                assert row[column] == "N/A" and key in row["Err_message"]
    if layers["culprit"]:
        assert next(row for row in table if row["NPU Name"] == layers["culprit"])["xrand over limit"] == "yes"


def test_module_metrics_as_msprobe_defines_them():
    rng = np.random.default_rng(0)
    reference = rng.standard_normal(1000) + 3.0  # no zeros
    identical = module_metrics(reference, reference.copy())
    assert identical == {"cosine": pytest.approx(1.0), "max_abs": 0.0, "max_rel_err": 0.0, "err_ratio_1e-3": 1.0,
                         "err_ratio_5e-3": 1.0}
    # half the elements off by a relative 2e-3, half by 1e-4: within 5e-3 all, within 1e-3 half
    rel = np.where(np.arange(1000) % 2 == 0, 2e-3, 1e-4)
    other = reference * (1 + rel)
    got = module_metrics(reference, other)
    assert got["err_ratio_1e-3"] == 0.5 and got["err_ratio_5e-3"] == 1.0
    assert got["max_rel_err"] == pytest.approx(2e-3, rel=1e-9)
    assert got["max_abs"] == pytest.approx(np.max(np.abs(other - reference)))
    assert got["cosine"] == pytest.approx(np.dot(reference, other) / np.linalg.norm(reference) / np.linalg.norm(other))
    assert module_metrics(reference, -reference)["cosine"] == pytest.approx(-1.0)
    # a module's several outputs count as one, in order
    assert module_metrics([reference[:300], reference[300:]], [other[:300], other[300:]]) == got


def test_module_metrics_at_zeros_and_non_finite_values():
    zeros = np.zeros(4)
    assert module_metrics(zeros, zeros)["cosine"] == 1.0  # both all zero: msprobe's 1.0
    assert module_metrics(zeros, zeros)["err_ratio_1e-3"] == 1.0  # 0 against 0 agrees exactly
    one_sided = module_metrics(zeros, np.array([0.0, 0.0, 0.0, 1e-3]))
    assert math.isnan(one_sided["cosine"])
    assert one_sided["err_ratio_1e-3"] == 0.75  # eps added to both: 1e-3 against 0 is far off
    assert all(math.isnan(v) for v in module_metrics(np.array([1.0, np.inf]), np.array([1.0, 2.0])).values())
    with pytest.raises(ValueError):
        module_metrics(np.ones(3), np.ones(4))


# ----------------------------------------------------------------------------- the pictures' axes

def test_exact_zeros_get_a_labelled_band_below_the_data():
    from xrand.files import pyplot
    from xrand.report.plots import ExactBand, spaced_ticks

    plt = pyplot()
    values = [0.0, 3e-7, 2e-5, 0.0]
    band = ExactBand(values)
    fig, ax = plt.subplots()
    band.start(ax)
    ax.plot(range(4), band(values), "o")
    band.finish(ax)
    fig.canvas.draw()
    labels = {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()}
    assert labels["exact (0)"] == band.at < 3e-7
    assert ax.get_ylim()[0] < band.at
    plt.close(fig)
    assert not ExactBand([1e-6, 2e-6]).present
    assert spaced_ticks([0, 1, 2, 5, 6, 30, 31], 3) == [0, 5, 31]


# ----------------------------------------------------------------------------- in a real browser

@pytest.fixture(scope="module")
def chromium():
    path = find_chromium()
    if path is None:
        if os.environ.get("XRAND_REQUIRE_BROWSER") == "1":
            pytest.fail("XRAND_REQUIRE_BROWSER=1 but no Chromium found (Debian: apt-get install chromium)")
        pytest.skip("no Chromium here (Debian: apt-get install chromium); the page tests need a real browser")
    with Chromium(path) as browser:
        yield browser


def assert_page_shows(page, verdict: str, rel_l2: float) -> None:
    from PIL import Image

    assert page.console_errors == []
    assert [u for u in page.requests if u != page.url] == []
    pixels = np.asarray(Image.open(io.BytesIO(page.screenshot)).convert("L"), dtype=np.float64)
    assert pixels.std() > 20, "the screenshot is (nearly) blank"
    assert verdict.upper() in page.text
    assert format(rel_l2, ".3g") in page.text


def test_compare_page_in_chromium(chromium, compare_dir):
    report = load(compare_dir, "report.json")
    local = [m["local_rel_l2"] for m in report["layers"]["modules"]]
    click = "document.querySelector('#layers-table th:nth-child(5)').click()"
    first = "document.querySelector('#layers-table tbody tr td:nth-child(5)').getAttribute('data-sort')"
    page = open_page(chromium, compare_dir / "report.html", evaluate={
        "ascending": f"{click}; {first}", "descending": f"{click}; {first}"})
    assert_page_shows(page, report["verdict"], report["final"]["rel_l2"])
    assert "the run passes: its difference from torch, within tolerance, starts at" in page.text
    assert float(page.values["ascending"]) == min(local)
    assert float(page.values["descending"]) == max(local)


def test_the_layers_table_fits_a_1200_pixel_window(chromium, compare_dir):
    """Every column of the module table is on screen in a 1200 px wide window: no scrolling sideways
    to see whether a module is over its limit."""
    box = "document.querySelector('#layers-table').parentElement"
    page = open_page(chromium, compare_dir / "report.html", width=1200, evaluate={
        "overflow": f"{box}.scrollWidth - {box}.clientWidth",
        "right": "document.querySelector('#layers-table th:last-child').getBoundingClientRect().right"})
    assert page.values["overflow"] <= 0 and page.values["right"] <= 1200


def test_matrix_page_in_chromium(chromium, matrix_dir):
    matrix = load(matrix_dir, "matrix.json")
    page = open_page(chromium, matrix_dir / "report.html")
    assert_page_shows(page, matrix["verdict"], max(r["rel_l2"] for r in matrix["rows"] if r["rel_l2"] is not None))


def test_sweep_page_in_chromium(chromium, sweep_dir):
    summary = load(sweep_dir, "summary.json")
    rows = [json.loads(line) for line in (sweep_dir / "results.jsonl").read_text().splitlines() if line]
    page = open_page(chromium, sweep_dir / "report.html")
    assert_page_shows(page, summary["verdict"], max(r["rel_l2"] for r in rows))


def test_the_browser_check_can_fail(chromium, tmp_path):
    """A page that fetches something and logs an error is caught (the harness is no rubber stamp)."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="http://127.0.0.1:9/x.png"><script>console.error("boom")</script>'
                   "</body></html>")
    page = open_page(chromium, bad)
    assert any("boom" in e for e in page.console_errors)
    assert any(u.startswith("http://127.0.0.1:9/") for u in page.requests)


def test_per_frame_errors_are_drawn_when_the_json_has_them(compare_dir):
    """A video report's ``final.per_frame`` (one metrics dict per frame) gets a chart with the
    tolerance and the floor, and a table; here the frames are the run's own per-step values."""
    from xrand.report.html import render_compare

    report = load(compare_dir, "report.json")
    assert "<svg" not in (compare_dir / "report.html").read_text()  # images, no frames: no chart
    frames = [s["global"] for s in report["steps"]]
    html = render_compare(dict(report, final=dict(report["final"], per_frame=frames)), {})
    chart = html[html.index('<h2 id="frames">'):html.index('id="frames-table"')]
    assert chart.count("<circle") == len(frames) and 'stroke="#d93025"' in chart  # points and the tolerance
    assert ('stroke="#57606a" stroke-dasharray' in chart) == ("noise_floor" in report)
    for f in frames:
        assert f'data-sort="{f["rel_l2"]!r}"' in html
