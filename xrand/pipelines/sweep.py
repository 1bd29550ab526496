"""Parity over many seeds and schedulers: ``xrand sweep``, on local processes or a Ray cluster.

A cell is (seed, scheduler): one free-running torch-vs-MindSpore comparison. Each worker loads
both pipelines once (:class:`CellRunner`, the only code here that touches the pipeline API) and
runs cells until none are left. Every cell derives everything from its own seed, and a worker's
thread count is fixed (``threads_per_worker``), so a cell's numbers do not depend on how many
workers there are or where they run. Finished cells go to ``results.jsonl`` one line at a time;
running the same sweep again on the same folder runs only the cells that are missing.
"""
from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from ..checks import UsageError, UsageTypeError, check_choice, check_seed
from .files import atomic_path, json_safe, pyplot, write_json, write_text
from .frameworks import DEFAULT_MINDSPORE_MODE

SWEEP_VERSION = 1
ENGINES = ("local", "ray")
MAX_CELLS = 1_000_000
RESULTS, MANIFEST = "results.jsonl", "sweep.json"
SUMMARY_JSON, SUMMARY_MD, PLOT = "summary.json", "summary.md", "sweep.png"
#: Seconds to wait for a TCP answer at --ray-address before giving up (ray.init itself retries for minutes).
RAY_CONNECT_TIMEOUT = 10.0
#: Test hook: "SEED:TIMES[,SEED:TIMES]" kills the worker process running that seed's cells, TIMES times
#: in all (counted by marker files in XRAND_SWEEP_TEST_KILL_DIR), as an out-of-memory kill would;
#: "SEED@SCHEDULER:TIMES" only that seed's cell of one scheduler (its label).
KILL_HOOK, KILL_DIR = "XRAND_SWEEP_TEST_KILL", "XRAND_SWEEP_TEST_KILL_DIR"

Cell = Tuple[int, str]  # (seed, scheduler label: the class name, then its options as JSON if any)


# ----------------------------------------------------------------------------- input

def parse_seeds(text: Any) -> List[int]:
    """``"0-99"`` (inclusive), ``"1,5,9"`` or both (``"0-3,10"``); order kept, repeats dropped."""
    if not isinstance(text, str):
        raise UsageTypeError(f"--seeds must be a string such as '0-99' or '1,5,9', got {text!r}")
    seeds: Dict[int, None] = {}
    if not text.strip():
        raise UsageError(f"--seeds {text!r} is empty; expected A-B (inclusive) or a comma list, e.g. 0-99 or 1,5,9")
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = check_seed(int(first), "seed")
            high = check_seed(int(last), "seed") if dash else low
        except (ValueError, TypeError):
            raise UsageError(f"--seeds {text!r}: {part.strip()!r} is not a seed or a range A-B of seeds "
                             "(integers in [0, 2**64)); expected e.g. 0-99 or 1,5,9") from None
        if high < low:
            raise UsageError(f"--seeds {text!r}: the range {part.strip()!r} ends before it starts; "
                             f"expected A-B with A <= B, e.g. {high}-{low}")
        if len(seeds) + high - low + 1 > MAX_CELLS:
            raise UsageError(f"--seeds {text!r} names more than {MAX_CELLS:,} seeds")
        seeds.update(dict.fromkeys(range(low, high + 1)))
    return list(seeds)


def scheduler_label(name: str, options: Optional[Dict[str, Any]] = None) -> str:
    """A sweep's name for one scheduler entry: the class name, then its options as sorted JSON
    (``'DDIMScheduler {"eta": 1.0}'``); the class name alone when it has none."""
    return f"{name} {json.dumps(options, sort_keys=True)}" if options else name


def split_label(label: str) -> Tuple[str, Dict[str, Any]]:
    """:func:`scheduler_label`'s inverse: (class name, options)."""
    name, _, options = label.partition(" ")
    return name, (json.loads(options) if options else {})


def row_label(row: Dict[str, Any]) -> str:
    """The scheduler label of a results.jsonl row (its ``scheduler`` and ``options``)."""
    return scheduler_label(str(row["scheduler"]), row.get("options") or None)


def parse_schedulers(text: Optional[str], settings: Any) -> List[str]:
    """``--scheduler`` of a sweep -> scheduler labels, with ``settings.scheduler_options`` in each.

    ``None``: the model folder's own scheduler. ``"all"``: every entry of
    :data:`.schedulers.MATRIX` with its options (as ``xrand compare --scheduler all``). Otherwise
    a comma list of the names and aliases ``xrand compare --scheduler`` takes; an alias's options
    come first, ``--scheduler-option`` values over them. Every entry is checked as compare checks
    it (:class:`.settings.Settings`), before any framework is imported.
    """
    from . import schedulers
    from .sides import folder_scheduler, is_local

    user = dict(settings.scheduler_options)
    if text is not None and not isinstance(text, str):
        raise UsageTypeError(f"--scheduler must be a string such as 'ddim,euler-a' or 'all', got {text!r}")
    if text is not None and text.strip().lower() == "all":
        if user:
            raise UsageError("--scheduler-option cannot be combined with --scheduler all (each entry has its own "
                             "options)")
        entries = [(name, dict(options)) for name, options in schedulers.MATRIX]
    elif text is None:
        base = folder_scheduler(settings.model) if is_local(settings.model) else None
        if not base or not base.get("_class_name"):
            raise UsageError(f"model {settings.model!r}: its scheduler is not known before loading; name one with "
                             f"--scheduler (accepted: {', '.join(schedulers.IMAGE_SCHEDULERS)}, an alias, or all)")
        entries = [(base["_class_name"], {})]
    else:
        names = [name.strip() for name in text.split(",")]
        if not all(names):
            raise UsageError(f"--scheduler {text!r}: an empty name; expected NAME[,NAME...] or all, "
                             "e.g. ddim,euler-a")
        entries = [schedulers.resolve(name) for name in names]
    labels: Dict[str, None] = {}
    for name, options in entries:
        options = {**options, **user}
        # Settings refuses unknown or unfit schedulers and options that are not JSON values
        replace(settings, scheduler=name, scheduler_options=options)
        labels[scheduler_label(name, options)] = None
    return list(labels)


def check_workers(workers: Any) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise UsageTypeError(f"--workers must be a positive integer, got {workers!r}")
    if workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers}")
    return workers


def check_engine(engine: Any) -> str:
    return check_choice(engine, ENGINES, "engine")


@dataclass
class SweepConfig:
    """What every cell of one sweep shares; two sweeps with different configs never mix.

    ``settings``: every compare setting (:class:`.settings.Settings`); its seed and scheduler are
    the cell's, its ``scheduler_options`` (``--scheduler-option``) go into every entry.
    ``load_scheduler``: the scheduler label both sides are loaded with (the sweep's first entry,
    as :func:`.matrix.run_matrix` loads with its first row); any cell swaps in its own.
    """

    settings: Any  # Settings
    tolerance: Optional[float] = None
    mindspore_mode: str = DEFAULT_MINDSPORE_MODE
    torch_device: str = "cpu"
    mindspore_device: Optional[str] = None
    threads_per_worker: int = 1
    load_scheduler: Optional[str] = None

    def cell_settings(self, seed: int, scheduler: Optional[str]) -> Any:
        """The Settings of one cell: the sweep's, with the cell's seed and scheduler label."""
        if scheduler is None:
            return replace(self.settings, seed=seed)
        name, options = split_label(scheduler)
        return replace(self.settings, seed=seed, scheduler=name, scheduler_options=options)

    def describe(self) -> Dict[str, Any]:
        """The settings as plain values, flat: the compare settings (less the cell's seed and
        scheduler; ``scheduler_options`` are the ones given to every entry) and the sweep's own."""
        from .sides import pipeline_class

        out = {k: v for k, v in asdict(self.settings).items() if k not in ("seed", "scheduler")}
        out["pipeline"] = pipeline_class(self.settings)
        out.update(tolerance=self.tolerance, mindspore_mode=self.mindspore_mode, torch_device=self.torch_device,
                   mindspore_device=self.mindspore_device, threads_per_worker=self.threads_per_worker)
        return out

    def identity(self) -> Dict[str, Any]:
        """The settings that decide a cell's numbers, as written to sweep.json."""
        from .compare import DEFAULT_TOLERANCE
        from .sides import model_fingerprint

        out = self.describe()
        out["model"] = model_fingerprint(self.settings.model)
        out["tolerance"] = DEFAULT_TOLERANCE[self.settings.dtype] if self.tolerance is None else self.tolerance
        out["versions"] = _versions()
        return out


def _versions() -> Dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    from .._version import __version__

    out = {"xrand": __version__}
    for dist in ("torch", "diffusers", "mindspore", "mindone"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


# ----------------------------------------------------------------------------- one cell

class CellRunner:
    """The one place a sweep calls the pipeline API: load both sides once, then run cells.

    Both pipelines are loaded once (:func:`.compare.load_pair`, with the config's
    ``load_scheduler``); each cell swaps its scheduler in on both sides and compares them
    (:func:`.compare.compare_loaded`), as ``xrand compare --scheduler all`` does per row.
    ``run(seed, scheduler)`` takes a scheduler label (:func:`scheduler_label`) and returns a row of
    results.jsonl (without ``seconds`` and ``worker``, which the caller adds).
    """

    def __init__(self, config: SweepConfig) -> None:
        from .compare import load_pair
        from .mindspore_cpu import tune_cpu_runtime
        from .quiet import silenced

        with silenced():
            import mindspore  # noqa: F401
            import torch

        # A fixed thread count per worker: reductions may split differently with more threads,
        # and a cell's numbers must not depend on the layout of the sweep.
        torch.set_num_threads(config.threads_per_worker)
        tune_cpu_runtime(config.threads_per_worker)  # before loading: it can be set once per process
        self.config = config
        self.pair = load_pair(config.cell_settings(0, config.load_scheduler), config.torch_device,
                              config.mindspore_device, quiet=True)

    def run(self, seed: int, scheduler: str) -> Dict[str, Any]:
        from .compare import compare_loaded

        c = self.config
        comparison = compare_loaded(self.pair, c.cell_settings(seed, scheduler), c.tolerance,
                                    mindspore_mode=c.mindspore_mode)
        name, options = split_label(scheduler)
        row = {"seed": seed, "scheduler": name}
        if options:
            row["options"] = options
        row.update(rel_l2=comparison.final["rel_l2"], max_abs=comparison.final["max_abs"],
                   psnr_db=comparison.final["psnr_db"], ssim=ssim(comparison.images["a"], comparison.images["b"]),
                   passed=comparison.passed)
        return row


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM (scikit-image) over the batch of NHWC images in [0, 1]."""
    from skimage.metrics import structural_similarity

    side = min(a.shape[1], a.shape[2])
    win = min(7, side if side % 2 else side - 1)  # scikit-image's default window, shrunk for tiny images
    return float(np.mean([structural_similarity(x, y, data_range=1.0, channel_axis=-1, win_size=win)
                          for x, y in zip(a.astype(np.float64), b.astype(np.float64))]))


def _load_error(exc: Exception) -> Dict[str, Any]:
    """Why a worker could not load, for the parent: a UsageError stays one (one line, exit 2)."""
    usage = isinstance(exc, UsageError)
    return {"usage": usage, "error": _first_line(exc) if usage else f"{type(exc).__name__}: {_first_line(exc)}"}


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _maybe_die(seed: int, scheduler: str) -> None:
    """The fault-injection test hook (see KILL_HOOK): SIGKILL this process on a chosen cell."""
    spec = os.environ.get(KILL_HOOK)
    if not spec:
        return
    times = dict((key, int(n)) for key, _, n in (item.rpartition(":") for item in spec.split(",")))
    key = next((k for k in (f"{seed}@{scheduler}", str(seed)) if k in times), None)
    if key is None:
        return
    folder = os.environ[KILL_DIR]
    done = [name for name in os.listdir(folder) if name.startswith(f"{seed}-")]
    if len(done) < times[key]:
        open(os.path.join(folder, f"{seed}-{len(done)}"), "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


def run_cell(runner: CellRunner, seed: int, scheduler: str) -> Dict[str, Any]:
    """One cell as a row; a Python error in the cell becomes an error row."""
    _maybe_die(seed, scheduler)
    start = time.perf_counter()
    try:
        row = runner.run(seed, scheduler)
    except Exception as exc:  # recorded, and the sweep goes on
        row = error_row((seed, scheduler), f"{type(exc).__name__}: {_first_line(exc)}")
    row["seconds"] = time.perf_counter() - start
    row["worker"] = _worker_name()
    return row


def error_row(cell: Cell, reason: str, worker: str = "", seconds: float = 0.0) -> Dict[str, Any]:
    seed, label = cell
    name, options = split_label(label)
    row: Dict[str, Any] = {"seed": seed, "scheduler": name}
    if options:
        row["options"] = options
    row.update(rel_l2=None, max_abs=None, psnr_db=None, ssim=None, passed=False, seconds=seconds, worker=worker,
               error=reason)
    return row


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


# ----------------------------------------------------------------------------- engines

class LocalEngine:
    """Worker processes started with spawn (torch and MindSpore hold threads a fork would break)."""

    def __init__(self, config: SweepConfig, log_path: str) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")
        self._config, self._log = config, log_path
        self._workers: Dict[int, Any] = {}  # id -> (process, connection)
        self._next = 0

    def add_worker(self) -> int:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_local_worker, args=(child, self._config, self._log), daemon=True)
        with _thread_env(self._config.threads_per_worker):
            process.start()
        child.close()
        wid, self._next = self._next, self._next + 1
        self._workers[wid] = (process, parent)
        return wid

    def submit(self, wid: int, cell: Cell) -> None:
        try:
            self._workers[wid][1].send(cell)
        except (BrokenPipeError, OSError):
            pass  # the worker is dead; wait() reports it

    def wait(self) -> List[Tuple[int, str, Any]]:
        from multiprocessing.connection import wait

        by_handle = {}
        for wid, (process, conn) in self._workers.items():
            by_handle[conn] = wid
            by_handle[process.sentinel] = wid
        events, seen = [], set()
        for handle in wait(list(by_handle), timeout=1.0):
            wid = by_handle[handle]
            if wid in seen:
                continue
            seen.add(wid)
            process, conn = self._workers[wid]
            try:
                if conn.poll():
                    events.append((wid, *conn.recv()))
                    continue
            except (EOFError, OSError):
                pass
            if process.is_alive():
                continue
            process.join()
            events.append((wid, "died", f"worker process {process.pid} died ({_exit_reason(process.exitcode)})"))
            conn.close()
            del self._workers[wid]
        return events

    def close(self) -> None:
        """Idle workers exit when their pipe closes; one still in a cell is terminated."""
        for process, conn in self._workers.values():
            conn.close()
        deadline = time.monotonic() + 5
        for process, conn in self._workers.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
        self._workers.clear()


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@contextlib.contextmanager
def _thread_env(threads: int) -> Iterator[None]:
    """The environment a worker starts with: OpenMP and BLAS pools of ``threads`` threads, as
    Ray gives its workers (OMP_NUM_THREADS = num_cpus), so workers do not oversubscribe the cores."""
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _exit_reason(code: Optional[int]) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = ", as the out-of-memory killer does" if name == "SIGKILL" else ""
        return f"killed by {name}{why}"
    return f"exit code {code}"


def _local_worker(conn, config: SweepConfig, log_path: str) -> None:
    """A local worker process: load once, then answer cells until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        runner = CellRunner(config)
    except Exception as exc:
        conn.send(("fatal", _load_error(exc)))
        return
    while True:
        try:
            seed, scheduler = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("row", run_cell(runner, seed, scheduler)))
        except (BrokenPipeError, OSError):  # the sweep stopped meanwhile
            return


class RayEngine:
    """Ray actors, each declaring ``threads_per_worker`` CPUs and holding one CellRunner."""

    def __init__(self, config: SweepConfig, address: Optional[str], workers: int) -> None:
        import ray

        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            kwargs = dict(log_to_driver=False, logging_level="ERROR")
            try:
                if address:
                    ray.init(address=address, **kwargs)
                else:
                    ray.init(num_cpus=workers * config.threads_per_worker, include_dashboard=False, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"at --ray-address {address!r}" if address else "locally"
                raise UsageError(f"Ray could not start or connect {where}: {_first_line(exc)}") from None
            self._started = True
        env = {k: v for k, v in os.environ.items() if k in (KILL_HOOK, KILL_DIR)}
        options = dict(num_cpus=config.threads_per_worker, max_restarts=0, max_task_retries=0)
        if env:
            options["runtime_env"] = {"env_vars": env}
        self._actor_class = ray.remote(_RayWorker).options(**options)
        self._config = config
        self._actors: Dict[int, Any] = {}
        self._pending: Dict[Any, int] = {}  # object ref -> worker id
        self._next = 0

    def add_worker(self) -> int:
        wid, self._next = self._next, self._next + 1
        self._actors[wid] = self._actor_class.remote(self._config)
        return wid

    def submit(self, wid: int, cell: Cell) -> None:
        self._pending[self._actors[wid].run.remote(*cell)] = wid

    def wait(self) -> List[Tuple[int, str, Any]]:
        if not self._pending:
            time.sleep(0.1)
            return []
        ready, _ = self._ray.wait(list(self._pending), num_returns=1, timeout=1.0)
        events = []
        for ref in ready:
            wid = self._pending.pop(ref)
            try:
                events.append((wid, *self._ray.get(ref)))
            except self._ray.exceptions.RayActorError as exc:
                events.append((wid, "died", "Ray worker died (" + _ray_reason(exc) + ")"))
                self._actors.pop(wid, None)
        return events

    def close(self) -> None:
        for actor in self._actors.values():
            self._ray.kill(actor)
        self._actors.clear()
        if self._started:
            self._ray.shutdown()


class _RayWorker:
    """The Ray actor: one CellRunner per actor process."""

    def __init__(self, config: SweepConfig) -> None:
        self.error = None
        try:
            self.runner = CellRunner(config)
        except Exception as exc:
            self.error = _load_error(exc)

    def run(self, seed: int, scheduler: str):
        if self.error:
            return ("fatal", self.error)
        return ("row", run_cell(self.runner, seed, scheduler))


def _ray_reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Worker exit detail: ", "Worker exit type: "):
        if marker in text:
            return text.split(marker, 1)[1].split(". ")[0].strip()[:200]
    return _first_line(exc)


def connect_check(address: str) -> None:
    """Fail within seconds when nothing answers at ``address`` (ray.init retries for minutes)."""
    target = address.split("://", 1)[-1]
    if address == "auto":
        return
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--ray-address {address!r}: expected HOST:PORT (or ray://HOST:PORT, or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise UsageError(f"--ray-address {address!r}: no Ray cluster answers there ({exc.strerror or exc}); "
                         "start one with 'ray start --head' or leave out --ray-address for a local Ray") from None


def check_ray() -> None:
    from ..checks import module_installed

    if not module_installed("ray"):
        raise UsageError("--engine ray needs Ray, which is not installed: pip install 'xrand[ray]'")


# ----------------------------------------------------------------------------- results folder

class ResultsFolder:
    """``DIR/sweep.json`` (the config), ``DIR/results.jsonl`` (a row per finished cell)."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.results = os.path.join(out, RESULTS)
        self.manifest = os.path.join(out, MANIFEST)

    def check(self, identity: Dict[str, Any]) -> None:
        """Refuse a folder that is not a folder, or that holds a sweep of other settings."""
        if os.path.exists(self.out) and not os.path.isdir(self.out):
            raise UsageError(f"--out {self.out!r} exists and is not a folder")
        if os.path.isfile(self.manifest):
            try:
                with open(self.manifest) as f:
                    written = json.load(f)["settings"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise UsageError(f"--out {self.out!r}: {MANIFEST} is unreadable ({exc}); use another folder") from None
            diffs = _differences(written, identity)
            if diffs:
                raise UsageError(f"--out {self.out!r} holds a sweep with other settings ({'; '.join(diffs)}); "
                                 "use another folder or the same settings")
        elif os.path.isfile(self.results):
            raise UsageError(f"--out {self.out!r} has {RESULTS} but no {MANIFEST}; use another folder")

    def read(self) -> Dict[Cell, Dict[str, Any]]:
        """Rows by cell; a half-written last line (a killed run) is cut off the file."""
        rows: Dict[Cell, Dict[str, Any]] = {}
        if not os.path.isfile(self.results):
            return rows
        with open(self.results, "rb") as f:
            data = f.read()
        good_end = 0
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            last = number == len(lines)
            if not line.strip():
                good_end += len(line) + (0 if last else 1)
                continue
            try:
                row = json.loads(line)
                cell = (int(row["seed"]), row_label(row))
            except (ValueError, KeyError, TypeError):
                if last or all(not rest.strip() for rest in lines[number:]):
                    break  # the half-written tail of an interrupted run
                raise UsageError(f"--out {self.out!r}: {RESULTS} line {number} is not a result row; "
                                 "use another folder") from None
            if last:  # a complete row but no newline: keep it, end the line
                rows[cell] = row
                good_end += len(line)
                with open(self.results, "ab") as f:
                    f.write(b"\n")
                good_end += 1
                break
            rows[cell] = row
            good_end += len(line) + 1
        if good_end < len(data):
            with open(self.results, "r+b") as f:
                f.truncate(good_end)
        return rows

    def start(self, identity: Dict[str, Any]) -> None:
        os.makedirs(self.out, exist_ok=True)
        if not os.path.isfile(self.manifest):
            write_json(self.manifest, {"xrand_sweep": SWEEP_VERSION, "settings": identity})

    def append(self, row: Dict[str, Any]) -> None:
        """One whole line in one write, flushed to the OS at once."""

        line = (json.dumps(json_safe(row)) + "\n").encode()
        fd = os.open(self.results, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _differences(written: Dict[str, Any], now: Dict[str, Any], prefix: str = "") -> List[str]:
    diffs = []
    for key in sorted(set(written) | set(now)):
        a, b = written.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _differences(a, b, prefix + key + ".")
        elif a != b:
            diffs.append(f"{prefix}{key}: {a!r} in the folder, {b!r} now")
    return diffs


# ----------------------------------------------------------------------------- the sweep

@dataclass
class SweepResult:
    cells: List[Cell]
    rows: Dict[Cell, Dict[str, Any]]
    ran: int
    interrupted: bool = False
    summary: Dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.interrupted and all(self.rows.get(c, {}).get("passed") for c in self.cells)


def run_sweep(config: SweepConfig, seeds: Iterable[int], schedulers: Iterable[str], out: str, workers: int = 1,
              engine: str = "local", ray_address: Optional[str] = None,
              progress: bool = False) -> SweepResult:
    """Run every missing cell of seeds x schedulers into ``out``; write the summary and plot.

    Usage errors are raised before anything is written. Ctrl-C stops the workers, keeps every
    finished cell and writes the summary of those (``SweepResult.interrupted``).
    """
    check_workers(workers)
    check_engine(engine)
    cells = [(seed, name) for name in schedulers for seed in seeds]
    if not cells:
        raise UsageError("a sweep needs at least one seed and one scheduler")
    if engine == "ray":
        check_ray()
        if ray_address:
            connect_check(ray_address)
    folder = ResultsFolder(out)
    identity = config.identity()
    folder.check(identity)
    rows = folder.read()
    todo = [cell for cell in cells if cell not in rows]
    if todo and config.load_scheduler is None:  # workers load with the first scheduler they will run
        config = replace(config, load_scheduler=todo[0][1])
    result = SweepResult(cells=cells, rows=rows, ran=0)
    # Ray connects before the folder is made: a cluster that cannot be reached leaves nothing behind.
    pool = RayEngine(config, ray_address, min(workers, len(todo))) if todo and engine == "ray" else None
    folder.start(identity)
    if todo:
        bar = _progress_bar(len(cells), len(cells) - len(todo), progress)
        try:
            pool = pool or LocalEngine(config, os.path.join(out, "workers.log"))
            try:
                def finished(row: Dict[str, Any]) -> None:
                    folder.append(row)
                    rows[(row["seed"], row_label(row))] = row
                    result.ran += 1
                    bar.update(1)
                    bar.set_postfix(failed=sum(1 for r in rows.values() if not r.get("passed")), refresh=False)

                schedule(pool, todo, min(workers, len(todo)), finished)
            finally:
                pool.close()
        except KeyboardInterrupt:
            result.interrupted = True
        finally:
            bar.close()
    result.summary = write_summary(out, config, result)
    return result


def schedule(pool: Any, cells: List[Cell], workers: int, finished: Callable[[Dict[str, Any]], None]) -> None:
    """Hand cells to idle workers; a cell whose worker died is retried once on another worker,
    then recorded as an error row."""
    pending: Deque[Cell] = collections.deque(cells)
    attempts: Dict[Cell, int] = collections.Counter()
    busy: Dict[int, Cell] = {}
    idle: List[int] = [pool.add_worker() for _ in range(workers)]
    replacements = 0
    while pending or busy:
        while idle and pending:
            wid = idle.pop()
            busy[wid] = pending.popleft()
            pool.submit(wid, busy[wid])
        for wid, kind, payload in pool.wait():
            if kind == "row":
                busy.pop(wid, None)
                idle.append(wid)
                finished(payload)
            elif kind == "fatal":
                if payload["usage"]:  # the model or a setting, refused while loading: the user's to fix
                    raise UsageError(payload["error"])
                raise RuntimeError(f"a sweep worker could not load the pipelines: {payload['error']}")
            elif kind == "died":
                cell = busy.pop(wid, None)
                if wid in idle:
                    idle.remove(wid)
                if cell is not None:
                    attempts[cell] += 1
                    if attempts[cell] < 2:
                        pending.appendleft(cell)
                    else:
                        finished(error_row(cell, f"{payload}, twice: not retried again"))
                # A new worker loads for a while: start one only when the live ones cannot take
                # the waiting cells at once (always when none is left).
                alive = len(busy) + len(idle)
                if pending and alive < workers and (alive == 0 or len(pending) > alive):
                    replacements += 1
                    if replacements > 2 * len(cells) + workers:
                        raise RuntimeError(f"sweep workers keep dying ({payload})")
                    idle.append(pool.add_worker())


def _progress_bar(total: int, done: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="cell", desc="xrand sweep", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True)


# ----------------------------------------------------------------------------- summary

#: For rel L2 larger is worse; for PSNR and SSIM smaller is. "p90" is the value 90% of cells do better than.
METRICS = {"rel_l2": "higher", "psnr_db": "lower", "ssim": "lower"}
Z95 = 1.959963984540054


def wilson(passed: int, n: int, z: float = Z95) -> Optional[List[float]]:
    """95% Wilson score interval of a pass rate (Wilson 1927); None without cells."""
    if n == 0:
        return None
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def quantiles(values: List[float], worse: str) -> Optional[Dict[str, float]]:
    """median, p90, p99 and worst, read on the bad side (an empirical quantile: inf stays inf)."""
    if not values:
        return None
    v = np.asarray(values, dtype=np.float64)
    q = (lambda p: float(np.quantile(v, p, method="inverted_cdf"))) if worse == "higher" else \
        (lambda p: float(np.quantile(v, round(1 - p, 12), method="inverted_cdf")))
    return {"median": q(0.5), "p90": q(0.9), "p99": q(0.99), "worst": float(v.max() if worse == "higher" else v.min())}


def summarize(cells: List[Cell], rows: Dict[Cell, Dict[str, Any]]) -> Dict[str, Any]:
    per: Dict[str, Dict[str, Any]] = {}
    for name in dict.fromkeys(s for _, s in cells):
        mine = [rows[c] for c in cells if c[1] == name and c in rows]
        ok = [r for r in mine if "error" not in r]
        passed = sum(1 for r in mine if r.get("passed"))
        per[name] = {
            "cells": sum(1 for c in cells if c[1] == name),
            "finished": len(mine),
            "passed": passed,
            "failed": len(ok) - passed,
            "errors": len(mine) - len(ok),
            "pass_rate": passed / len(mine) if mine else None,
            "pass_rate_95": wilson(passed, len(mine)),
            **{key: quantiles([float(r[key]) for r in ok], worse) for key, worse in METRICS.items()},
        }
    return per


def write_summary(out: str, config: SweepConfig, result: SweepResult) -> Dict[str, Any]:
    per = summarize(result.cells, result.rows)
    summary = json_safe({
        "xrand_sweep_summary": SWEEP_VERSION,
        "verdict": "pass" if result.passed else ("interrupted" if result.interrupted else "fail"),
        "cells": len(result.cells),
        "finished": sum(1 for c in result.cells if c in result.rows),
        "ran_now": result.ran,
        "settings": config.describe(),
        "quantiles": "median, p90, p99, worst: for rel_l2 90% of cells are at or below p90; "
                     "for psnr_db and ssim 90% are at or above it",
        "schedulers": per,
    })
    write_json(os.path.join(out, SUMMARY_JSON), summary)
    write_text(os.path.join(out, SUMMARY_MD), summary_markdown(summary))
    with atomic_path(os.path.join(out, PLOT)) as tmp:
        plot_sweep(result, config, tmp)
    return summary


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if kind == "ssim":
        return f"1 - {1 - value:.2g}" if 0.999 < value < 1 else f"{value:.4f}"
    return f"{value:.3g}" if kind == "rel_l2" else f"{value:.1f}"


def summary_markdown(summary: Dict[str, Any]) -> str:
    s = summary["settings"]
    lines = [f"# xrand sweep: {summary['verdict']}", "",
             f"{summary['finished']} of {summary['cells']} cells finished ({summary['ran_now']} in the last run). "
             f"Model {s['model']} ({s['pipeline']}), {s['steps']} steps, batch {s['batch_size']}, eta {s['eta']}, "
             f"stream {s['stream']}, {s['dtype']}, MindSpore {s['mindspore_mode']}"
             + (f", prompt {s['prompt']!r}" if s.get("prompt") else "") + ".", "",
             "| scheduler | cells | passed | failed | errors | pass rate (95% Wilson) |", "| --- | --- | --- | --- | --- | --- |"]
    for name, p in summary["schedulers"].items():
        rate = "-" if p["pass_rate"] is None else \
            f"{p['pass_rate']:.1%} ({p['pass_rate_95'][0]:.1%} to {p['pass_rate_95'][1]:.1%})"
        lines.append(f"| {name} | {p['finished']} of {p['cells']} | {p['passed']} | {p['failed']} | {p['errors']} "
                     f"| {rate} |")
    lines += ["", "Quantiles on the bad side: for rel L2 the median, 90% and 99% quantiles and the max; for PSNR "
              "(dB) and SSIM the median, 10% and 1% quantiles and the min.", "",
              "| scheduler | metric | median | p90 | p99 | worst |", "| --- | --- | --- | --- | --- | --- |"]
    for name, p in summary["schedulers"].items():
        for key in METRICS:
            q = p[key] or {}
            lines.append(f"| {name} | {key} | " + " | ".join(_fmt(q.get(k), key) for k in
                                                               ("median", "p90", "p99", "worst")) + " |")
    return "\n".join(lines) + "\n"


def plot_sweep(result: SweepResult, config: SweepConfig, path: str) -> None:
    """One panel per metric: each scheduler's cells as points over a box plot."""
    from .compare import DEFAULT_TOLERANCE
    from .schedulers import describe

    plt = pyplot()
    names = list(dict.fromkeys(s for _, s in result.cells))
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    rng = np.random.default_rng(0)  # jitter only
    for ax, (key, label) in zip(axes, (("rel_l2", "relative L2"), ("psnr_db", "PSNR (dB)"), ("ssim", "1 - SSIM"))):
        data = []
        for name in names:
            values = [float(r[key]) for c, r in result.rows.items() if c[1] == name and "error" not in r]
            values = [1 - v for v in values] if key == "ssim" else values  # SSIM sits within 1e-6 of 1
            data.append([v for v in values if math.isfinite(v)] or [np.nan])
        ax.boxplot(data, showfliers=False)
        for i, values in enumerate(data, 1):
            ax.plot(i + rng.uniform(-0.15, 0.15, len(values)), values, "o", ms=3, alpha=0.6)
        ax.set_xticks(range(1, len(names) + 1))
        ax.set_xticklabels([describe(*split_label(name)) for name in names], rotation=20, fontsize=8)
        ax.set_title(label)
        if key in ("rel_l2", "ssim") and all(v > 0 for d in data for v in d if math.isfinite(v)):
            ax.set_yscale("log")
        if key == "rel_l2":
            tol = DEFAULT_TOLERANCE[config.settings.dtype] if config.tolerance is None else config.tolerance
            ax.axhline(tol, color="gray", lw=0.8, ls=":", label=f"tolerance {tol:g}")
            ax.legend(fontsize=8)
    fig.suptitle(f"xrand sweep: {sum(1 for c in result.cells if c in result.rows)} cells, "
                 f"{config.settings.steps} steps", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
