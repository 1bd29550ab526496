"""xrand sweep: cells over seeds, the same numbers whatever the workers and engine, resume,
faults, Ctrl-C, one-line errors. Real torch and MindSpore pipelines, a real local Ray.
The sweeps themselves need MindSpore (the ``mindone`` fixture, conftest.py): without it they skip
and the checks of input, results and summaries still run."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import PYNATIVE, ctrl_c_reaches_it, every_cpu
from xrand.checks import UsageError
from xrand.cli import default_model, main
from xrand.compare import make_plan
from xrand.pipelines import schedulers
from xrand.pipelines.settings import Settings
from xrand.sweep import ResultsFolder, parse_schedulers, parse_seeds, quantiles, row_label, wilson

pytest.importorskip("torch")
pytest.importorskip("skimage")

SWEEP = ["sweep", "--steps", "2", "--batch-size", "1"]  # the embedded digits model
TWO = ["--scheduler", "ddim,euler-a"]  # a deterministic and an ancestral (noise-drawing) scheduler
DDIM, EULER_A = "DDIMScheduler", "EulerAncestralDiscreteScheduler"
METRICS = ("rel_l2", "max_abs", "psnr_db", "ssim", "passed")


def xrand_cli(*args, env=None, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "xrand", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, **(env or {})), timeout=timeout)


def rows_of(out):
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f]


def by_cell(rows):
    """(seed, scheduler label) -> the cell's numbers, for the rows that are not error rows."""
    return {(r["seed"], row_label(r)): {k: r[k] for k in METRICS} for r in rows if "error" not in r}


def kill_hook(tmp_path, spec):
    """Worker processes SIGKILL themselves on the chosen cells (seed:times), as the OOM killer would."""
    folder = tmp_path / "kills"
    folder.mkdir()
    return {"XRAND_SWEEP_TEST_KILL": spec, "XRAND_SWEEP_TEST_KILL_DIR": str(folder)}


# -- runs shared by the tests below ---------------------------------------------------------------------
# Four sweeps, started side by side: a worker runs one thread, so a 1-worker sweep leaves a core
# to the others, and starting a worker (importing torch, MindSpore and both diffusers) is most of
# each sweep's time. Each worker loads the pipelines once. The 2-worker sweep runs MindSpore in
# its default mode, graph (its two workers compile the same graph at once, its retries load it);
# the others PyNative, the same bits on a CPU (tests/test_families.py), without a compile of 3 to
# 8 s per scheduler and worker for cells of 2 steps.
def start_sweep(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "xrand", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, **(env or {})), preexec_fn=ctrl_c_reaches_it)


def sweep_here(*args):
    """``xrand ARGS`` through ``main`` in this process, as a CompletedProcess (stdout and stderr as
    Python writes them): its cells run in worker processes either way."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(["xrand", *args], code, out.getvalue(), err.getvalue())


def finish(proc):
    stdout, stderr = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory, mindone):
    """one: workers=1, local, two schedulers: interrupted with Ctrl-C after its first cell, a half
    line appended, resumed through main in this process (the longest chain: started first). two: workers=2, local; the worker
    running seed 3 is killed, and so is the one that retries it. ray: workers=2 as Ray actors on one
    real local Ray (started here, reached with --ray-address), two schedulers; the actor running the
    last cell (seed 3, Euler ancestral) is killed once, the other retries it."""
    runs, running, ray = {}, [], None
    try:
        # on every CPU (conftest.every_cpu), as a user runs them, and each run's workers on the same
        # CPUs: four sweeps at once on one pytest-xdist worker's core took 59 s, not 38
        with every_cpu():
            out = str(tmp_path_factory.mktemp("one") / "sweep")
            one = [*SWEEP, *TWO, *PYNATIVE, "--seeds", "0-3", "--out", out]
            first = start_sweep(*one)
            running.append(("one", first))
            tmp = tmp_path_factory.mktemp("two")
            runs["two"] = {"out": str(tmp / "sweep")}
            running.append(("two", start_sweep(*SWEEP, "--seeds", "0-3", "--workers", "2", "--out", runs["two"]["out"],
                                               "--quiet", env=kill_hook(tmp, "3:2"))))
            try:
                import ray
            except ImportError:
                ray = None
            if ray is not None:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
                tmp = tmp_path_factory.mktemp("ray")
                runs["ray"] = {"out": str(tmp / "sweep")}
                address = ray.get_runtime_context().gcs_address
                running.append(("ray", start_sweep(*SWEEP, *TWO, *PYNATIVE, "--seeds", "0-3", "--workers", "2",
                                                   "--engine", "ray", "--ray-address", address, "--out",
                                                   runs["ray"]["out"], "--quiet",
                                                   env=kill_hook(tmp, f"3@{EULER_A}:1"))))
            results = os.path.join(out, "results.jsonl")
            while first.poll() is None and not (os.path.exists(results) and os.path.getsize(results) > 0):
                time.sleep(0.05)
            first.send_signal(signal.SIGINT)
            stdout, stderr = first.communicate(timeout=120)
            kept = rows_of(out)
            with open(results, "a") as f:
                f.write('{"seed": 3, "scheduler": "DDIMSch')  # what a run killed mid-write leaves
            # the resumed run through main here, while the others run
            runs["one"] = {"out": out, "first": (first.returncode, stdout, stderr), "kept": kept,
                           "second": sweep_here(*one, "--quiet")}
            for name, proc in running:
                if name != "one":
                    runs[name]["proc"] = finish(proc)
        yield runs
    finally:
        for _, proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if ray is not None:
            ray.shutdown()


@pytest.fixture(scope="module")
def one_worker(sweeps):
    return sweeps["one"]


@pytest.fixture(scope="module")
def two_workers(sweeps):
    return sweeps["two"]


@pytest.fixture(scope="module")
def on_ray(sweeps):
    if "ray" not in sweeps:
        pytest.skip("Ray is not installed (pip install 'xrand[ray]')")
    return sweeps["ray"]


# -- the sweep ------------------------------------------------------------------------------------------
def test_results_per_seed_do_not_depend_on_the_number_of_workers(one_worker, two_workers):
    one, two = (by_cell(rows_of(run["out"])) for run in (one_worker, two_workers))
    assert sorted(two) == [(seed, DDIM) for seed in range(3)]  # seed 3: an error row (see below)
    assert {cell: one[cell] for cell in two} == two
    assert len({one[(seed, DDIM)]["rel_l2"] for seed in range(4)}) == 4  # four seeds, four different results


def test_two_schedulers_give_the_same_results_per_seed_on_one_local_worker_and_on_ray(one_worker, on_ray):
    one, ray = (by_cell(rows_of(run["out"])) for run in (one_worker, on_ray))
    assert sorted(one) == sorted((seed, name) for seed in range(4) for name in (DDIM, EULER_A))
    assert ray == one
    # the scheduler was swapped in: the same seed ends elsewhere under Euler ancestral than under DDIM
    assert all(one[(seed, DDIM)]["rel_l2"] != one[(seed, EULER_A)]["rel_l2"] for seed in range(4))


def test_ctrl_c_stops_cleanly_and_keeps_finished_cells(one_worker):
    code, stdout, stderr = one_worker["first"]
    assert code == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted" in stderr and "run the same command to finish" in stderr
    assert "cell" in stderr  # the progress bar
    assert 1 <= len(one_worker["kept"]) < 8


def test_resume_runs_only_missing_cells_and_drops_a_half_written_line(one_worker):
    second, kept = one_worker["second"], one_worker["kept"]
    assert second.returncode == 0, second.stderr
    line = json.loads(second.stdout)
    assert line == {"verdict": "pass", "cells": 8, "finished": 8, "passed": 8, "failed": 0, "errors": 0,
                    "ran": 8 - len(kept), "out": one_worker["out"]}
    rows = rows_of(one_worker["out"])  # every line parses: the half line is gone
    assert sorted((r["seed"], r["scheduler"]) for r in rows) == sorted(
        (seed, name) for seed in range(4) for name in (DDIM, EULER_A))
    assert rows[:len(kept)] == kept
    assert {r["worker"] for r in rows[len(kept):]}.isdisjoint({r["worker"] for r in kept})


def test_writes_rows_summary_and_picture(one_worker):
    out = one_worker["out"]
    rows = rows_of(out)
    for row in rows:
        assert set(row) == {"seed", "scheduler", "rel_l2", "max_abs", "psnr_db", "ssim", "passed", "seconds",
                            "worker"}
        assert 0 < row["rel_l2"] < 5e-3 and 0.99 < row["ssim"] <= 1
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["verdict"] == "pass" and list(summary["schedulers"]) == [DDIM, EULER_A]
    markdown = open(os.path.join(out, "summary.md")).read()
    for name in (DDIM, EULER_A):
        mine = [r for r in rows if r["scheduler"] == name]
        per = summary["schedulers"][name]
        assert (per["cells"], per["passed"], per["pass_rate"]) == (4, 4, 1.0)
        assert per["pass_rate_95"] == pytest.approx(wilson(4, 4))
        assert per["rel_l2"]["worst"] == max(r["rel_l2"] for r in mine)
        assert per["ssim"]["worst"] == min(r["ssim"] for r in mine)
        assert f"| {name} | 4 of 4 | 4 | 0 | 0 |" in markdown
    assert open(os.path.join(out, "sweep.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_worker_that_dies_twice_on_a_cell_gives_an_error_row_and_the_sweep_goes_on(two_workers):
    proc = two_workers["proc"]
    assert proc.returncode == 1, proc.stderr  # one cell did not pass
    assert json.loads(proc.stdout)["errors"] == 1
    rows = {r["seed"]: r for r in rows_of(two_workers["out"])}
    assert sorted(rows) == [0, 1, 2, 3]
    assert all(rows[seed]["passed"] for seed in (0, 1, 2))
    assert rows[3]["passed"] is False and rows[3]["rel_l2"] is None
    assert "killed by SIGKILL" in rows[3]["error"] and "twice" in rows[3]["error"]
    summary = json.load(open(os.path.join(two_workers["out"], "summary.json")))
    assert summary["verdict"] == "fail" and summary["schedulers"]["DDIMScheduler"]["errors"] == 1
    assert summary["schedulers"]["DDIMScheduler"]["pass_rate_95"] == pytest.approx(wilson(3, 4))


def test_ray_retries_a_dead_actor_elsewhere(on_ray):
    proc = on_ray["proc"]
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(on_ray["out"])
    assert len(rows) == 8 and all(r["passed"] for r in rows)
    kills = os.path.join(os.path.dirname(on_ray["out"]), "kills")
    assert os.listdir(kills) == ["3-0"]  # it was killed once
    killed = open(os.path.join(kills, "3-0")).read()
    workers = {r["worker"] for r in rows}
    assert killed in workers  # it had finished cells before
    retried = [r for r in rows if (r["seed"], row_label(r)) == (3, EULER_A)]
    assert len(retried) == 1 and retried[0]["worker"] != killed  # and the cell was retried elsewhere
    # A cell the actor had finished may be lost with it when Ray fails its calls in flight: then
    # two cells wait for one live actor and a replacement starts. Never more than one.
    assert len(workers) in (2, 3)


def test_a_folder_of_other_settings_is_refused_naming_the_difference(one_worker, capsys):
    out = one_worker["out"]
    before = {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)}
    code = main([*SWEEP, *PYNATIVE, "--eta", "1", "--seeds", "0-3", "--out", out])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "holds a sweep with other settings (eta: 0.0 in the folder, 1.0 now)" in err[0]
    assert {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)} == before


# -- bad input ------------------------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args, message", [
    (["--seeds", "5-2"], "--seeds '5-2': the range '5-2' ends before it starts"),
    (["--seeds", "a-b"], "--seeds 'a-b': 'a-b' is not a seed or a range A-B of seeds"),
    (["--seeds", ""], "--seeds '' is empty"),
    (["--seeds", "0-3", "--workers", "0"], "--workers must be a positive integer, got 0"),
    (["--seeds", "0-3", "--engine", "spark"], "unknown engine 'spark'; accepted: local, ray"),
    (["--seeds", "0-3", "--scheduler", "ddim,warp"], "unknown scheduler 'warp'; accepted: DDIMScheduler, "),
    (["--seeds", "0-3", "--scheduler", "ddim,,euler"], "--scheduler 'ddim,,euler': an empty name"),
    (["--seeds", "0-3", "--scheduler", "flowmatcheulerdiscrete"],
     "scheduler FlowMatchEulerDiscreteScheduler cannot drive DDIMPipeline"),
    (["--seeds", "0-3", "--scheduler", "all", "--scheduler-option", "eta=1"],
     "--scheduler-option cannot be combined with --scheduler all"),
    (["--seeds", "0-3", "--scheduler-option", "karras"], "scheduler option 'karras': expected KEY=VALUE"),
    (["--seeds", "0-3", "--pipeline", "StableDiffusionPipeline", "--prompt", "x"],
     "declares no vae in model_index.json; StableDiffusionPipeline needs"),
    (["--seeds", "0-3", "--prompt", "x"], "DDIMPipeline takes no prompt"),
    (["--seeds", "0-3", "--seed", "4"], "--seed 4: a sweep takes --seeds"),
    (["--seeds", "0-3", "--ray-address", "127.0.0.1:1"], "needs --engine ray"),
    (["--seeds", "0-3", "--steps", "0"], "steps must be a positive integer, got 0"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, message, tmp_path, capsys):
    code = main(["sweep", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert os.listdir(tmp_path) == []


def test_unreachable_ray_address_fails_fast_in_one_line(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    out = xrand_cli(*SWEEP, "--seeds", "0-3", "--engine", "ray", "--ray-address", address, "--out", "o",
                    cwd=str(tmp_path), timeout=30)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert f"--ray-address '{address}': no Ray cluster answers there" in lines[0]
    assert os.listdir(tmp_path) == []


def test_ray_not_installed_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an interpreter without Ray sees
    code = main([*SWEEP, "--seeds", "0-3", "--engine", "ray", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--engine ray needs Ray, which is not installed: pip install 'xrand[ray]'" in err[0]
    assert os.listdir(tmp_path) == []


# -- pieces ---------------------------------------------------------------------------------------------
def test_seeds_are_inclusive_ranges_and_lists():
    assert parse_seeds("0-99") == list(range(100))
    assert parse_seeds("7") == [7]
    assert parse_seeds("1,5, 9") == [1, 5, 9]
    assert parse_seeds("0-2,10,1-3") == [0, 1, 2, 10, 3]  # order kept, repeats dropped
    assert parse_seeds("18446744073709551615") == [2**64 - 1]
    for bad in ("5-2", "a-b", "", " ", "1,,2", "-1", "2**64", "0-1.5", "18446744073709551616"):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seeds(bad)


def test_schedulers_take_compares_names_aliases_and_all_with_their_options():
    settings = make_plan(Settings(model=default_model(), steps=2, batch_size=1))
    assert parse_schedulers(None, settings) == [DDIM]  # the folder's own
    assert parse_schedulers("ddim, DDIMScheduler,euler-a", settings) == [DDIM, EULER_A]
    assert parse_schedulers("dpm++-2m-karras", settings) == [
        'DPMSolverMultistepScheduler {"algorithm_type": "dpmsolver++", "use_karras_sigmas": true}']
    everything = parse_schedulers("all", settings)  # the matrix's entries, each with its options
    assert len(everything) == len(schedulers.MATRIX)
    assert everything[:2] == [DDIM, 'DDIMScheduler {"eta": 1.0}']
    # --scheduler-option goes into every entry, over an alias's own options
    assert parse_schedulers("ddim,dpm++-2m", settings, {"timestep_spacing": "trailing"}) == [
        'DDIMScheduler {"timestep_spacing": "trailing"}',
        'DPMSolverMultistepScheduler {"algorithm_type": "dpmsolver++", "timestep_spacing": "trailing"}']
    assert parse_schedulers("dpm++-2m", settings, {"algorithm_type": "dpmsolver"}) == [
        'DPMSolverMultistepScheduler {"algorithm_type": "dpmsolver"}']
    with pytest.raises(ValueError, match="unknown scheduler 'warp'"):
        parse_schedulers("ddim,warp", settings)
    with pytest.raises(ValueError, match="cannot drive DDIMPipeline"):
        parse_schedulers("ddim,flowmatcheulerdiscrete", settings)
    with pytest.raises(ValueError, match="PNDMScheduler with Runge-Kutta steps needs at least 4 steps, got 2"):
        parse_schedulers("pndm", settings)


def test_wilson_interval_and_bad_side_quantiles():
    # Wilson (1927) 95% interval: 5 of 10 -> 0.2366 to 0.7634; 0 of 4 -> 0 to 0.4899
    assert wilson(5, 10) == pytest.approx([0.23659, 0.76341], abs=1e-5)
    assert wilson(0, 4) == pytest.approx([0.0, 0.48990], abs=1e-5)
    assert wilson(0, 0) is None
    values = list(np.arange(1.0, 101.0))
    assert quantiles(values, "higher") == {"median": 50.0, "p90": 90.0, "p99": 99.0, "worst": 100.0}
    assert quantiles(values, "lower") == {"median": 50.0, "p90": 10.0, "p99": 1.0, "worst": 1.0}
    assert quantiles([float("inf")] * 3, "lower")["median"] == float("inf")  # identical images: PSNR inf


def test_a_half_written_last_line_is_dropped_and_a_bad_middle_line_refused(tmp_path):
    rows = [{"seed": s, "scheduler": "DDIMScheduler", "passed": True} for s in (0, 1)]
    rows.append({"seed": 0, "scheduler": "DDIMScheduler", "options": {"eta": 1.0}, "passed": True})
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"seed": 2, "sch')
    assert sorted(ResultsFolder(str(tmp_path)).read()) == [(0, "DDIMScheduler"), (0, 'DDIMScheduler {"eta": 1.0}'),
                                                           (1, "DDIMScheduler")]
    assert path.read_text() == "".join(json.dumps(r) + "\n" for r in rows)  # cut, ready to append
    path.write_text("not json\n" + json.dumps(rows[0]) + "\n")
    with pytest.raises(ValueError, match="results.jsonl line 1 is not a result row"):
        ResultsFolder(str(tmp_path)).read()


class _ScriptedPool:
    """A pool whose workers run cells in order, two in flight each, as Ray actors do; worker 0
    dies on its first cell, reported once for each of its cells in flight (as Ray reports)."""

    depth = 2

    def __init__(self):
        self.queues, self.started, self.next = {}, [], 0

    def add_worker(self):
        self.queues[self.next] = []
        self.next += 1
        return self.next - 1

    def submit(self, wid, cell):
        self.queues[wid].append(cell)

    def wait(self):
        events = []
        for wid, queue in list(self.queues.items()):
            if queue and wid == 0:
                events += [(0, "died", "worker 0 died")] * len(queue)
                self.started.append(queue[0])
                del self.queues[0]
            elif queue:
                cell = queue.pop(0)
                self.started.append(cell)
                events.append((wid, "row", {"seed": cell[0]}))
        return events


def test_a_dead_workers_cells_in_flight_are_handed_out_again_and_only_the_running_one_counts_as_tried():
    from xrand.sweep.run import schedule

    pool, rows = _ScriptedPool(), []
    schedule(pool, [(seed, "ddim") for seed in range(6)], 2, rows.append)
    assert sorted(row["seed"] for row in rows) == list(range(6))  # every cell ran once, none an error row
    assert pool.started.count((0, "ddim")) == 2  # worker 0 was running seed 0: retried on worker 1
    assert pool.started.count((1, "ddim")) == 1  # in flight on worker 0 but never started: run once, later


def test_a_sweep_whose_every_cell_failed_to_run_still_writes_its_summary_and_picture(tmp_path):
    from xrand.sweep import SweepConfig
    from xrand.sweep.cells import error_row
    from xrand.sweep.results import SweepResult
    from xrand.sweep.summary import write_summary

    cells = [(0, "DDIMScheduler"), (1, "DDIMScheduler")]
    rows = {cell: error_row(cell, "worker process 7 died (killed by SIGKILL), twice: not retried again")
            for cell in cells}
    summary = write_summary(str(tmp_path), SweepConfig(make_plan(Settings(model=default_model()))),
                            SweepResult(cells=cells, rows=rows, ran=2))
    assert summary["verdict"] == "fail" and summary["schedulers"]["DDIMScheduler"]["errors"] == 2
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dtype_list_is_parsed_in_order_and_a_bad_name_refused():
    from xrand.sweep import parse_dtypes

    assert parse_dtypes("float32, bfloat16,float32") == ["float32", "bfloat16"]
    with pytest.raises(UsageError, match="unknown dtype 'float64'; accepted: float32, float16, bfloat16"):
        parse_dtypes("float32,float64")


def test_a_sweep_over_dtypes_has_a_cell_per_dtype_a_summary_per_scheduler_and_dtype_and_resumes(
        mindone, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", "--dtype", "float32,bfloat16", "--seeds", "0-1", "--steps", "2", "--batch-size", "1", "--quiet",
            "--out", str(out)]
    assert main(args) == 0
    rows = rows_of(str(out))
    assert sorted((r["seed"], r["dtype"]) for r in rows) == [(0, "bfloat16"), (0, "float32"), (1, "bfloat16"),
                                                             (1, "float32")]
    error = {d: max(r["rel_l2"] for r in rows if r["dtype"] == d) for d in ("float32", "bfloat16")}
    assert error["bfloat16"] > 100 * error["float32"]  # each cell ran in its dtype
    summary = json.loads((out / "summary.json").read_text())
    per = summary["schedulers"]
    assert list(per) == [f"{DDIM} @ float32", f"{DDIM} @ bfloat16"]
    assert [(p["scheduler"], p["dtype"], p["passed"]) for p in per.values()] == [(DDIM, "float32", 2),
                                                                                 (DDIM, "bfloat16", 2)]
    assert summary["settings"]["dtype"] == "float32,bfloat16"
    assert summary["settings"]["tolerance"] == {"float32": 5e-3, "bfloat16": 5e-2}
    capsys.readouterr()
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # one cell lost: only it runs again
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["ran"] == 1
    again = rows_of(str(out))
    assert {(r["seed"], r["dtype"]): r["rel_l2"] for r in again} == {(r["seed"], r["dtype"]): r["rel_l2"] for r in rows}


def test_sweep_png_names_the_tolerance_in_its_panel_and_draws_tiny_1_minus_ssim_on_a_band():
    """The tolerance's label sits inside the relative L2 panel, on its line; 1 - SSIM values of
    rounding size (1e-11) go on a band labelled "<= 1e-6", not down an axis to 1e-11."""
    from xrand.files import pyplot
    from xrand.sweep import SweepConfig
    from xrand.sweep.results import SweepResult
    from xrand.sweep.summary import SSIM_FLOOR, sweep_figure

    cells = [(seed, "DDIMScheduler") for seed in range(3)]
    rows = {cell: {"seed": cell[0], "scheduler": cell[1], "rel_l2": 3e-6, "psnr_db": 115.0, "ssim": ssim}
            for cell, ssim in zip(cells, (1 - 1e-11, 1 - 3e-11, 1 - 2e-4))}
    config = SweepConfig(make_plan(Settings(model=default_model())))
    fig = sweep_figure(SweepResult(cells=cells, rows=rows, ran=3), config)
    fig.canvas.draw()
    rel_l2, _, ssim = fig.axes
    [label] = [t for t in rel_l2.texts if t.get_text() == "tolerance 0.005"]
    assert rel_l2.get_window_extent().contains(*label.get_window_extent().get_points().mean(axis=0))
    assert rel_l2.get_legend() is None
    low, high = ssim.get_ylim()
    assert 1e-9 < low < SSIM_FLOOR < 2e-4 < high
    ticks = {t.get_text(): t.get_position()[1] for t in ssim.get_yticklabels()}
    assert ticks["≤ 1e-6"] < SSIM_FLOOR
    points = sorted(y for line in ssim.lines for y in line.get_ydata() if line.get_marker() == "o")
    assert points == [pytest.approx(ticks["≤ 1e-6"])] * 2 + [pytest.approx(2e-4)]
    pyplot().close(fig)
