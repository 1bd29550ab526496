"""Nothing lost, nothing refused late (issue 24): --out checked before any work, files with the
user's umask, a run compared with itself refused, XRAND_BACKEND read the same by every command,
a killed sweep leaves no worker behind, a compare killed in a later stage keeps what finished."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from conftest import PYNATIVE, ctrl_c_reaches_it, make_tiny_model, run_python, xrand_here  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("rel") / "model")


def xrand_cli(*args, cwd=None, env=None, umask=None):
    return subprocess.run([sys.executable, "-m", "xrand", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, **(env or {})), timeout=600,
                          preexec_fn=None if umask is None else (lambda: os.umask(umask)))


def one_line_error(out, message):
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert message in lines[0], lines[0]


# -- --out checked before any model loads ------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["compare", "--steps", "1", "--out", "/proc/x"], "--out '/proc/x' cannot be written"),
    (["compare", "--steps", "1", "--out", "/proc/x/y"], "--out '/proc/x/y' cannot be written"),
    (["sweep", "--seeds", "0-1", "--out", "/proc/x"], "--out '/proc/x' cannot be written"),
    (["run", "--backend", "torch", "--out", "/proc/x/side.safetensors"], "cannot be written"),
    (["run", "--backend", "torch", "--out", "."], "--out '.' is a folder; give a file name"),
])
def test_an_unwritable_or_wrong_out_is_refused_before_any_model_loads(args, message, tmp_path, monkeypatch, capfd):
    """The first case in a new ``python -m xrand``, the others through ``main`` here (conftest.xrand_here)."""
    args = [*args, "--model", "/no/such/model/either"]
    fresh = args[:2] == ["compare", "--steps"] and args[3] == "/proc/x"
    out = xrand_cli(*args, cwd=str(tmp_path)) if fresh else xrand_here(args, tmp_path, monkeypatch, capfd)
    one_line_error(out, message)  # the --out error, not the model's: found first
    assert os.listdir(tmp_path) == []


def test_an_out_that_is_a_file_is_refused_for_compare_and_sweep(tmp_path, monkeypatch, capfd):
    (tmp_path / "f").write_text("")
    one_line_error(xrand_cli("compare", "--steps", "1", "--out", "f", cwd=str(tmp_path)),
                   "--out 'f' exists and is not a folder")
    one_line_error(xrand_here(["sweep", "--seeds", "0", "--out", "f"], tmp_path, monkeypatch, capfd),
                   "--out 'f' exists and is not a folder")
    assert os.listdir(tmp_path) == ["f"]


def test_checking_a_new_out_folder_leaves_nothing_behind(tmp_path):
    from xrand.files import check_out_file, check_out_folder

    assert check_out_folder(str(tmp_path / "a" / "b")) == str(tmp_path / "a" / "b")
    check_out_file(str(tmp_path / "c" / "side.safetensors"))
    assert os.listdir(tmp_path) == []


# -- XRAND_BACKEND ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["doctor"], ["compare", "--steps", "1"], ["compare", "a.safetensors", "b.safetensors"],
                                  ["run", "--backend", "torch", "--out", "s.safetensors"],
                                  ["sweep", "--seeds", "0", "--out", "s"]])
def test_an_unknown_xrand_backend_is_the_same_one_line_error_for_every_command(args, tmp_path, monkeypatch, capfd):
    """``compare`` of the digits model in a new ``python -m xrand``, the others through ``main`` here."""
    env = {"XRAND_BACKEND": "jax"}
    out = (xrand_cli(*args, cwd=str(tmp_path), env=env) if args == ["compare", "--steps", "1"]
           else xrand_here(args, tmp_path, monkeypatch, capfd, env=env))
    one_line_error(out, "environment variable XRAND_BACKEND='jax' names no backend; known backends: ")
    assert os.listdir(tmp_path) == []


# -- umask and self-comparison, on torch side files -----------------------------------------------------
@pytest.fixture(scope="module")
def two_torch_runs(tiny_model, tmp_path_factory):
    """Two separate torch runs of the same settings (comparable: other runs, same numbers), written
    with umask 002, through ``main`` in this process (a umask is the process's, as a shell's is the
    command's; reports of a new ``python -m xrand`` under two umasks are the test below's)."""
    from xrand.cli import main

    folder = tmp_path_factory.mktemp("sides")
    umask = os.umask(0o002)
    try:
        for name in ("a", "b"):
            assert main(["run", "--backend", "torch", "--model", tiny_model, "--steps", "2", "--batch-size", "1",
                         "--quiet", "--out", str(folder / f"{name}.safetensors")]) == 0
    finally:
        os.umask(umask)
    return folder


def mode(path):
    return os.stat(path).st_mode & 0o777


def test_side_files_and_reports_get_the_users_umask(two_torch_runs, tmp_path):
    assert mode(two_torch_runs / "a.safetensors") == 0o664
    for umask, want in ((0o002, 0o664), (0o077, 0o600)):
        out_dir = tmp_path / f"o{umask:o}"
        out = xrand_cli("compare", str(two_torch_runs / "a.safetensors"), str(two_torch_runs / "b.safetensors"),
                        "--out", str(out_dir), umask=umask)
        assert out.returncode == 0, out.stderr
        files = sorted(os.listdir(out_dir))
        assert files == ["comparison.png", "divergence.png", "report.html", "report.json"]
        assert {name: mode(out_dir / name) for name in files} == {name: want for name in files}


def test_a_run_compared_with_itself_is_refused(two_torch_runs, tmp_path, monkeypatch, capfd):
    """The file with itself in a new ``python -m xrand``, with its copy through ``main`` here."""
    a = str(two_torch_runs / "a.safetensors")
    shutil.copy(a, tmp_path / "copy.safetensors")
    one_line_error(xrand_cli("compare", a, a, "--out", str(tmp_path / "o")), "both sides are the same torch run")
    one_line_error(xrand_here(["compare", a, str(tmp_path / "copy.safetensors"), "--out", str(tmp_path / "o")],
                              tmp_path, monkeypatch, capfd), "both sides are the same torch run")
    assert sorted(os.listdir(tmp_path)) == ["copy.safetensors"]


# -- a killed sweep leaves no worker ----------------------------------------------------------------------
def children_of(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descendants_of(pid):
    found, todo = [], [pid]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += children
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")
    except OSError:
        return ""


def test_a_ray_sweep_killed_by_sigkill_leaves_no_ray_worker(mindone, tmp_path):
    """The sweep starts its own local Ray: its worker actors go with it. Ray's dashboard and
    runtime-env agents are Ray's own, idle, and end 61 s later (README): not waited for here. Ten
    short cells keep the sweep running after its first (the first came after 14.5 s with two cells of
    100 steps at batch 4, most of it Ray's start and the workers' imports; 10.0 s like this)."""
    pytest.importorskip("ray")
    out = str(tmp_path / "sweep")
    sweep = subprocess.Popen([sys.executable, "-m", "xrand", "sweep", "--steps", "10", "--batch-size", "1",
                              "--seeds", "0-9", *PYNATIVE, "--engine", "ray", "--out", out, "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        results = os.path.join(out, "results.jsonl")
        while sweep.poll() is None and not (os.path.exists(results) and os.path.getsize(results) > 0):
            time.sleep(0.05)
        everything = descendants_of(sweep.pid)
        ray_processes = [pid for pid in everything if "_RayWorker" in cmdline(pid)
                         or "default_worker" in cmdline(pid) or "raylet" in cmdline(pid)]
        assert sweep.poll() is None and ray_processes, sweep.stderr.read()
        sweep.kill()
        sweep.wait()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in ray_processes) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in ray_processes if alive(pid)]
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        for pid in locals().get("everything", []):  # Ray's agents, left by Ray itself
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_sweep_killed_by_sigkill_leaves_no_worker_and_the_next_run_resumes(mindone, tmp_path, monkeypatch, capfd):
    out = str(tmp_path / "sweep")
    # cells of many seconds: the worker is inside the second cell when the sweep is killed, where
    # it would not see its pipe close until the cell ends
    command = ["sweep", "--steps", "100", "--batch-size", "4", "--seeds", "0-1", "--out", out, "--quiet"]
    sweep = subprocess.Popen([sys.executable, "-m", "xrand", *command], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0o002))
    try:
        results = os.path.join(out, "results.jsonl")
        while sweep.poll() is None and not (os.path.exists(results) and os.path.getsize(results) > 0):
            time.sleep(0.05)
        workers = children_of(sweep.pid)
        assert sweep.poll() is None and workers, sweep.stderr.read()
        sweep.kill()  # SIGKILL: the sweep cannot close its workers
        sweep.wait()
        deadline = time.monotonic() + 4
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if alive(pid)]
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    with open(results) as f:
        kept = sum(1 for line in f if line.strip())
    assert kept == 1
    umask = os.umask(0o002)  # the rerun through main here (its cell runs in a worker process either way)
    try:
        again = xrand_here(command, tmp_path, monkeypatch, capfd)
    finally:
        os.umask(umask)
    assert again.returncode == 0, again.stderr
    line = json.loads(again.stdout)
    assert (line["finished"], line["ran"]) == (2, 1)
    assert mode(os.path.join(out, "summary.md")) == mode(os.path.join(out, "sweep.png")) == 0o664


# -- a compare in stages: nothing finished is lost --------------------------------------------------------
def test_a_compare_killed_during_the_floor_keeps_both_sides_and_the_rerun_runs_only_the_floor(
        tiny_model, mindone, tmp_path, monkeypatch):
    import xrand.compare.stages as stages
    from xrand.cli import main

    out = str(tmp_path / "o")
    command = ["compare", "--model", tiny_model, "--steps", "2", "--batch-size", "1", *PYNATIVE, "--quiet",
               "--out", out]

    def killed(*args, **kwargs):
        raise MemoryError("killed during the floor")

    monkeypatch.setattr(stages, "pipeline_floor", killed)
    with pytest.raises(MemoryError):
        main(command)
    assert not os.path.exists(os.path.join(out, "report.json"))  # the floor runs before MindSpore's side
    assert {"torch.safetensors", "manifest.json"} <= set(os.listdir(out))

    monkeypatch.undo()
    calls = []
    for name in ("load", "run", "pipeline_floor"):
        real = getattr(stages, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls.append((_name, args[1] if _name == "load" else args[0].framework))
            return _real(*args, **kwargs)

        monkeypatch.setattr(stages, name, counted)
    assert main(command) == 0
    # torch's side not again: the floor on torch, then MindSpore's side
    assert calls == [("load", "torch"), ("pipeline_floor", "torch"), ("load", "mindspore"), ("run", "mindspore")]
    report = json.load(open(os.path.join(out, "report.json")))
    assert report["stages"]["done"] == ["torch weights", "torch", "floor", "mindspore weights", "mindspore"] and report["stages"]["missing"] == []
    assert report["noise_floor"]["rel_l2"] > 0

    # killed in MindSpore's side: the report of what exists says what is missing; the rerun runs only it
    out = str(tmp_path / "p")
    command[-1] = out
    monkeypatch.undo()
    real_run = stages.run

    def dies_on_mindspore(loaded, plan, **kwargs):
        if loaded.framework == "mindspore":
            raise MemoryError("killed during MindSpore's side")
        return real_run(loaded, plan, **kwargs)

    monkeypatch.setattr(stages, "run", dies_on_mindspore)
    with pytest.raises(MemoryError):
        main([*command, "--no-noise-floor"])
    monkeypatch.undo()
    first = json.load(open(os.path.join(out, "manifest.json")))["stages"]
    assert list(first) == ["torch weights", "torch", "mindspore weights"]
    assert main([*command, "--no-noise-floor"]) == 0
    again = json.load(open(os.path.join(out, "manifest.json")))["stages"]
    assert again["torch"] == first["torch"] and list(again) == ["torch weights", "torch", "mindspore weights",
                                                               "mindspore"]


def test_a_large_models_mindspore_stages_run_in_one_process_of_their_own_with_the_same_result(
        tiny_model, mindone, tmp_path, monkeypatch):
    """Above OWN_PROCESS_BYTES of weights (here: any) MindSpore's stages run in one new process,
    which loads its pipeline once for all of them and gives its memory back when it ends; its
    outputs and the report are what an in-process run gives, and an error there comes back as the
    same one-line usage error."""
    import xrand.compare.stages as staged
    from xrand import UsageError
    from xrand.cli import main

    command = ["compare", "--model", tiny_model, "--steps", "2", "--batch-size", "1", "--quiet", "--lockstep"]
    assert main([*command, "--out", str(tmp_path / "here")]) == 0
    monkeypatch.setattr(staged, "OWN_PROCESS_BYTES", 0)
    monkeypatch.setattr(staged, "_starts_ahead", lambda store, groups: True)  # here with lockstep too
    children = []
    real = staged.stages_in_own_process
    monkeypatch.setattr(staged, "stages_in_own_process", lambda store, names, quiet=True, started=None:
                        children.append((names, started is not None)) or real(store, names, quiet, started))
    assert main([*command, "--out", str(tmp_path / "child")]) == 0
    assert children == [(["mindspore weights", "mindspore", "lockstep"], True)]  # started ahead of them
    here, child = (json.load(open(tmp_path / name / "report.json")) for name in ("here", "child"))
    assert child["final"] == here["final"] and child["noise_floor"] == here["noise_floor"]
    assert [{**w, "seconds": None} for w in (child["weights"], here["weights"])] == [{**here["weights"], "seconds": None}] * 2
    assert child["stages"]["done"] == ["torch weights", "torch", "floor", "mindspore weights", "mindspore",
                                       "lockstep"] and not child["stages"]["missing"]
    assert [s["local"] for s in child["steps"]] == [s["local"] for s in here["steps"]]

    # the weights gone after planning: the load fails in the child, and its usage error comes back
    from xrand.compare import make_plan
    from xrand.compare.stages import Asks, Store
    from xrand.pipelines.settings import Settings

    model = shutil.copytree(tiny_model, tmp_path / "gone")
    plan = make_plan(Settings(model=str(model), steps=1, batch_size=1))
    store = Store(plan, Asks(weights=False), str(tmp_path / "gone-out"))
    store.start(["mindspore"])
    shutil.rmtree(model / "unet")
    with pytest.raises(UsageError, match="mindone.diffusers could not load the model .*gone"):
        staged.stages_in_own_process(store, ["mindspore"])
    assert not store.done("mindspore")


def test_the_process_that_waits_for_mindspores_own_process_never_imports_mindspore(tmp_path):
    """Where MindSpore's stages run in a process of their own (here: any folder, and any folder large
    enough for PyNative), the command's process asks a new process for MindSpore's device (the
    large-model mode and its reason come from it) and imports neither MindSpore nor mindone, whose
    0.3 GiB would sit beside MindSpore's process for nothing. In a new process: this one has both."""
    pytest.importorskip("mindone.diffusers")
    out = str(tmp_path / "o")
    code = ("import json, sys\n"
            "import xrand.compare.plan as plan, xrand.compare.stages as stages\n"
            "plan.OWN_PROCESS_BYTES = stages.OWN_PROCESS_BYTES = plan.PYNATIVE_ABOVE_BYTES = 0\n"
            "from xrand.cli import main\n"
            f"code = main(['compare', '--steps', '1', '--batch-size', '1', '--no-noise-floor', '--quiet', '--out', {out!r}])\n"
            "print(json.dumps([code, [name for name in ('mindspore', 'mindone') if name in sys.modules]]))\n")
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, []]
    mindspore = json.load(open(os.path.join(out, "report.json")))["environment"]["b"]
    assert (mindspore["mindspore_mode"], mindspore["mindspore_device_target"]) == ("pynative", "CPU")
    assert mindspore["mindspore_mode_reason"].startswith("the model's weights are")


def test_a_folder_of_another_comparison_is_refused_before_any_model_loads(tiny_model, mindone, tmp_path, monkeypatch,
                                                                          capfd):
    """Both commands through ``main`` here (conftest.xrand_here)."""
    out = str(tmp_path / "o")
    first = xrand_here(["compare", "--model", tiny_model, "--steps", "1", "--batch-size", "1", "--no-noise-floor",
                        *PYNATIVE, "--quiet", "--out", out], tmp_path, monkeypatch, capfd)
    assert first.returncode == 0, first.stderr
    again = xrand_here(["compare", "--model", tiny_model, "--steps", "2", "--batch-size", "1", *PYNATIVE, "--quiet",
                        "--out", out], tmp_path, monkeypatch, capfd)
    one_line_error(again, f"--out {out!r} holds a comparison of other settings (differing: settings.steps 1 vs 2)")


# -- Ctrl-C at every stage of a compare -------------------------------------------------------------------
def compare_interrupted(command, line_start):
    """Run ``command``; at the first stdout line that starts with ``line_start`` (None: none),
    send it SIGINT, as Ctrl-C would. (exit status, stdout lines, stderr)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line_start is not None and line.startswith(line_start):
                proc.send_signal(signal.SIGINT)
                break
        rest, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, lines + rest.splitlines(), stderr


def test_ctrl_c_at_every_stage_of_a_compare_keeps_what_finished_and_the_same_command_goes_on(mindone, tmp_path):
    """SIGINT during stages of a digits compare (torch's and MindSpore's), sent when the stage's
    "running" line is printed: each run says what it kept and exits 130; each rerun of the same
    command runs only the stages still missing, and the last one finishes. MindSpore's graph
    runtime turns SIGINT into SIGTERM once it has run (xrand.frameworks.interrupts): before the
    fix a run interrupted after MindSpore's side ended by SIGTERM with nothing printed."""
    out = str(tmp_path / "o")
    command = [sys.executable, "-m", "xrand", "compare", "--steps", "2", "--batch-size", "1", "--lockstep",
               "--layers", "--out", out]
    stages = ["torch weights", "torch", "torch layers", "floor", "mindspore weights", "mindspore", "mindspore layers",
              "lockstep"]
    stopped = ("torch", "floor", "mindspore layers", "lockstep")
    resumes, first = [], {}
    for stage in stopped:
        kept = stages[:stages.index(stage)]
        code, lines, stderr = compare_interrupted(command, f"xrand: running {stage}\n")  # not "torch weights"
        assert (code, (stderr.strip().splitlines() or [""])[-1]) == (
            130, f"xrand compare: interrupted; {', '.join(kept) or 'nothing finished'} kept in {out}/ "
                 "(run the same command to finish)"), (lines, stderr)
        assert "Traceback" not in stderr
        resumes.append([text for text in lines if "holds this comparison" in text])
        for name in ("torch", "mindspore"):
            path = os.path.join(out, f"{name}.safetensors")
            if os.path.exists(path):
                first.setdefault(name, os.stat(path).st_mtime_ns)
    code, lines, stderr = compare_interrupted(command, None)
    assert code == 0, stderr
    resumes.append([text for text in lines if "holds this comparison" in text])
    # each run went on where the one before stopped, said so once, and ran nothing finished again
    assert resumes == [[]] + [
        [f"xrand: {out}/ holds this comparison's {', '.join(stages[:k])}; running {', '.join(stages[k:])}"]
        for k in (stages.index(stage) for stage in stopped)]
    assert first == {name: os.stat(os.path.join(out, f"{name}.safetensors")).st_mtime_ns
                     for name in ("torch", "mindspore")}
    report = json.load(open(os.path.join(out, "report.json")))
    assert report["stages"]["done"] == stages and report["stages"]["missing"] == []


def test_ctrl_c_while_mindspores_own_process_waits_or_runs_ends_it_and_says_what_was_kept(mindone, tmp_path):
    """Where MindSpore's stages run in a process of their own (here: any folder) and the floor is not
    asked (or kept), that process starts with torch's stages, importing its libraries meanwhile.
    Ctrl-C (SIGINT to the terminal's whole process group) while it waits, then while it runs its
    stages: the command says what it kept and exits 130, and the process is gone. Before, that
    process took the Ctrl-C too: a traceback, a "Fatal Python error" of an import cut short, and
    multiprocessing's warning of a semaphore it left behind."""
    out = str(tmp_path / "o")
    code = ("import sys\n"
            "import xrand.compare.plan as plan, xrand.compare.stages as stages\n"
            "plan.OWN_PROCESS_BYTES = stages.OWN_PROCESS_BYTES = 0\n"
            "from xrand.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    command = [sys.executable, "-c", code, "compare", "--steps", "20", "--batch-size", "1", "--no-noise-floor",
               "--out", out]
    for stream, text, kept in (("stdout", "xrand: running torch\n", "torch weights"),  # it waits
                               ("stderr", "mindspore:", "torch weights, torch, mindspore weights")):  # it runs
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=ctrl_c_reaches_it, start_new_session=True)
        try:
            read = ""
            while not read.endswith(text):  # up to that text: the line of the stage, MindSpore's progress bar
                read += getattr(proc, stream).read(1)
                assert proc.poll() is None, read
            own = [pid for pid in descendants_of(proc.pid) if "spawn_main" in cmdline(pid)]
            assert len(own) == 1  # started ahead: there while torch's stages run
            os.killpg(proc.pid, signal.SIGINT)
            _, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        last = stderr.strip().splitlines()[-1]
        assert proc.returncode == 130 and last.endswith(
            f"xrand compare: interrupted; {kept} kept in {out}/ (run the same command to finish)"), stderr
        assert not any(word in stderr for word in ("Traceback", "Fatal", "leaked")), stderr
        assert not alive(own[0])


def test_a_sigterm_from_outside_still_ends_the_command_by_sigterm(tmp_path):
    """keyboard_interrupts takes only MindSpore's SIGTERM (sent while SIGINT is MindSpore's) for a
    Ctrl-C; a SIGTERM from outside ends the process as it did before (exit status 143 in a shell)."""
    code = ("import os, signal, time\n"
            "from xrand.frameworks.interrupts import keyboard_interrupts\n"
            "with keyboard_interrupts():\n"
            "    print('ready', flush=True)\n"
            "    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM and stderr == ""


def test_a_process_ended_by_end_process_has_its_status_its_exit_handlers_and_its_whole_output():
    """What the command line, MindSpore's own process and a sweep's workers end with: the interpreter's
    teardown left out, nothing else (the exit handlers run, buffered output written)."""
    code = ("import atexit, sys\n"
            "from xrand.frameworks.interrupts import end_process\n"
            "atexit.register(lambda: print(' and the exit handler ran'))\n"
            "sys.stdout.write('buffered output')\n"
            "sys.stderr.write('an error line')\n"
            "end_process(3)\n"
            "print('not reached')\n")
    done = run_python(code)
    assert (done.returncode, done.stdout, done.stderr) == (3, "buffered output and the exit handler ran\n",
                                                            "an error line")


class _InterruptedAt:
    """Stands in for ``os`` (and wraps the standard streams' ``flush``) in xrand.frameworks.quiet:
    once :attr:`armed`, the ``at``-th call of flush or dup2 does its work, then raises
    KeyboardInterrupt, as a Ctrl-C that arrived during it does in Python."""

    def __init__(self, at):
        self.at, self.calls, self.armed, self.raised = at, 0, False, False

    def __getattr__(self, name):
        return getattr(os, name)

    def call(self, function, *args):
        done = function(*args)
        if self.armed:
            self.calls += 1
            if self.calls == self.at:
                self.raised = True
                raise KeyboardInterrupt
        return done

    def dup2(self, fd, fd2):
        return self.call(os.dup2, fd, fd2)


@pytest.mark.parametrize("at", [1, 2, 3, 4])  # stdout's flush, stderr's, then the two dup2
def test_a_ctrl_c_as_silenced_ends_still_gives_stdout_and_stderr_back(at, monkeypatch):
    """A Ctrl-C that raises KeyboardInterrupt at any call of silenced()'s end leaves file
    descriptors 1 and 2 where they were. Before, a Ctrl-C at the flush left both on /dev/null: an
    ``xrand compare`` interrupted at the start of torch's stage (inside import_library's block)
    printed what it kept nowhere (3 runs in 48 of the test of every stage above)."""
    from xrand.frameworks import quiet

    stand_in = _InterruptedAt(at)
    monkeypatch.setattr(quiet, "os", stand_in)
    for stream in ("stdout", "stderr"):
        real = getattr(sys, stream)
        wrapped = type("Stream", (), {"flush": lambda self, real=real: stand_in.call(real.flush),
                                      "__getattr__": lambda self, name, real=real: getattr(real, name)})()
        monkeypatch.setattr(sys, stream, wrapped)
    before = [os.fstat(fd) for fd in (1, 2)]
    with pytest.raises(KeyboardInterrupt):
        with quiet.silenced():
            stand_in.armed = True
    assert stand_in.raised
    assert [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)] == \
        [(s.st_dev, s.st_ino) for s in before]
