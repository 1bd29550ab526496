"""Where a sweep's cells run: :class:`LocalEngine` (worker processes) or :class:`RayEngine` (Ray actors)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..checks import UsageError
from ..frameworks.collector import freeze_imports
from ..frameworks.interrupts import end_process
from .cells import KILL_DIR, KILL_HOOK, CellRunner, _first_line, _load_error, run_cell
from .config import Cell, SweepConfig

#: Seconds to wait for a TCP answer at --ray-address before giving up (ray.init itself retries for minutes).
RAY_CONNECT_TIMEOUT = 10.0


class LocalEngine:
    """Worker processes started with spawn (torch and MindSpore hold threads a fork would break)."""

    depth = 1  # cells in flight per worker: a pipe hands a worker its next cell at once

    def __init__(self, config: SweepConfig, log_path: str) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")
        self._config, self._log = config, log_path
        self._workers: Dict[int, Any] = {}  # id -> (process, connection)
        self._next = 0

    def add_worker(self) -> int:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_local_worker, args=(child, self._config, self._log, os.getpid()),
                                    daemon=True)
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


#: Seconds between a worker's looks at whether its sweep process is still there.
PARENT_POLL_SECONDS = 0.5


def die_with_parent(parent: int, interval: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """A daemon thread that ends this process as soon as its parent ``parent`` is gone (a sweep
    killed by SIGKILL or the out-of-memory killer cannot close its workers; a worker busy in a cell
    would not see its pipe close until the cell ends, and a worker loading never)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    thread = threading.Thread(target=watch, name="xrand-die-with-parent", daemon=True)
    thread.start()
    return thread


def _local_worker(conn, config: SweepConfig, log_path: str, parent: int) -> None:
    """A local worker process: load once, then answer cells until the pipe closes or the sweep
    process ``parent`` is gone."""
    die_with_parent(parent)
    freeze_imports()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    _answer_cells(conn, config)
    end_process(0)  # now, not after the frameworks' teardown, which the sweep's end would wait for


def _answer_cells(conn, config: SweepConfig) -> None:
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

    # cells in flight per actor: an actor runs its calls in order, so the second keeps it busy
    # while the first one's result travels back through Ray and the next is submitted
    depth = 2

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
        freeze_imports()  # the actor's process is its own
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
