"""MindSpore's CPU runtime as a comparison needs it: synchronous launch, a thread count, and its
own oneDNN capped at AVX2 (where its Conv2D is fast)."""
from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import platform
import time
import warnings
from typing import Iterator

import mindspore as ms

from . import ops
from .install import on_cpu

# The instruction set MindSpore's oneDNN runs, once tune_cpu_runtime() has fixed it.
_onednn_isa: str | None = None
# The kernel threads tune_cpu_runtime() set, and why (None: not set by xrand).
_threads: tuple[int, str] | None = None

# oneDNN's dnnl_cpu_isa_t values (dnnl_types.h, oneDNN 3), named as ONEDNN_MAX_CPU_ISA takes them.
_ISA_NAMES = {0x1: "SSE41", 0x3: "AVX", 0x7: "AVX2", 0xf: "AVX2_VNNI", 0x1f: "AVX2_VNNI_2", 0x27: "AVX512_CORE",
              0x67: "AVX512_CORE_VNNI", 0xe7: "AVX512_CORE_BF16", 0x1ef: "AVX10_1_512"}
_AVX2 = 0x7
_ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def _mindspore_onednn():
    """MindSpore's own copy of oneDNN (torch links its own), or None where there is none to cap."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    paths = sorted(glob.glob(os.path.join(os.path.dirname(ms.__file__), "lib", "libdnnl.so*")))
    return ctypes.CDLL(paths[0]) if paths else None


def cap_onednn_isa() -> str | None:
    """Cap MindSpore's oneDNN at AVX2 (as ONEDNN_MAX_CPU_ISA=AVX2 would, for MindSpore only).

    Returns the instruction set it runs from now on (``"AVX2"``, ``"AVX512_CORE_BF16"``...), or
    None off x86 or without MindSpore's libdnnl. At AVX2 its Conv2D runs as a GEMM, faster than
    xrand's im2col fallback, which it then replaces (:func:`_conv2d`). oneDNN takes a cap only
    before its first kernel: later, or when the user set ONEDNN_MAX_CPU_ISA, what runs stays.
    """
    global _onednn_isa
    library = _mindspore_onednn()
    if library is None:
        return None
    if not any(os.environ.get(name) for name in _ISA_VARIABLES):
        library.dnnl_set_max_cpu_isa(_AVX2)  # refused (status 2) once oneDNN has run
    isa = library.dnnl_get_effective_cpu_isa()
    _onednn_isa = _ISA_NAMES.get(isa, hex(isa))
    ops.conv2d_by_onednn = (isa | _AVX2) == _AVX2  # AVX2 or less: measured fast
    return _onednn_isa


def onednn_isa() -> str | None:
    """The instruction set MindSpore's oneDNN runs, once :func:`cap_onednn_isa` has fixed it (else None)."""
    return _onednn_isa


def tune_cpu_runtime(threads: int | None = None, why: str | None = None) -> bool:
    """Once per process on a CPU target: synchronous op launch and MindSpore's oneDNN capped at
    AVX2 (:func:`launch_synchronously`), and ``threads`` kernel threads.

    Kernel threads default to 25 (mindspore/device_context/cpu/op_tuning.py);
    ``threads=None`` uses the CPUs this process may run on; ``why`` says why, for the report
    (:func:`cpu_threads`). Each can be set only once per process, the launch before MindSpore's
    first operator; returns whether MindSpore launches synchronously and the threads were set now
    (never off the CPU).
    """
    global _threads
    if not on_cpu():
        return False
    synchronous = launch_synchronously()
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        why = why or "the CPUs this process may use"
    try:
        ms.device_context.cpu.op_tuning.threads_num(threads)
    except RuntimeError:  # "... can not be set repeatedly"
        return False
    _threads = (threads, why or "")
    return synchronous


def launch_synchronously() -> bool:
    """On a CPU target: MindSpore's operators launched synchronously, and its oneDNN capped at AVX2
    (:func:`cap_onednn_isa`); returns whether MindSpore launches synchronously from now on.

    MindSpore's asynchronous PyNative launch costs far more per operator than the operators of a
    small model on a CPU (README, "MindSpore without Ascend"). It takes the setting only before
    its first operator in the process: set after a pipeline has loaded, MindSpore accepts it and
    goes on launching asynchronously (MindSpore 2.10: the digits model's 10 PyNative steps 2.5-6.5 s
    either way, 0.28 s with the launch set before loading). Then this warns, once, naming the fix.
    """
    if not on_cpu():
        return False
    if _onednn_isa is None:
        cap_onednn_isa()
    ms.runtime.launch_blocking()
    if launches_asynchronously():
        warnings.warn("MindSpore ran an operator in this process before its launch was set synchronous, so it "
                      "launches asynchronously for good (a small model's PyNative steps about 10x slower); enter "
                      "xrand.patched(), or call xrand.mindspore_cpu.tune_cpu_runtime(), before MindSpore's first "
                      "operator", RuntimeWarning, stacklevel=2)
        return False
    return True


#: the thread of MindSpore's asynchronous PyNative launch: there from its first operator on where
#: the launch was not set synchronous before it (MindSpore 2.10; graph mode's queues are others)
_ASYNC_QUEUE = "frontend_queue"


def launches_asynchronously() -> bool:
    """Whether MindSpore launches its PyNative operators asynchronously in this process, for good:
    its operator queue's thread runs. False before its first operator, and off Linux."""
    return _ASYNC_QUEUE in _threads_named().values()


def _threads_named() -> dict[int, str]:
    """This process's threads: thread id -> name (empty off Linux)."""
    tasks = f"/proc/{os.getpid()}/task"
    names = {}
    for tid in os.listdir(tasks) if os.path.isdir(tasks) else []:
        with contextlib.suppress(OSError):  # a thread that ended
            with open(f"{tasks}/{tid}/comm") as f:
                names[int(tid)] = f.read().strip()
    return names


def threads_to_set() -> bool:
    """Whether MindSpore runs on a CPU and its kernel threads are still to be set in this process."""
    from mindspore._c_expression import RuntimeConf  # what op_tuning.threads_num itself asks (MindSpore 2.10)

    return on_cpu() and not RuntimeConf.get_instance().is_op_threads_num_configured()


@contextlib.contextmanager
def kernel_threads_pinned() -> Iterator[dict[str, int]]:
    """Inside the block: each thread of MindSpore's kernel pool (``ActorThread_*``,
    ``KernelThread_*``) on a CPU of its own, where :func:`tune_cpu_runtime` gave it every CPU this
    process may use (no other process kept one busy, or ``OMP_NUM_THREADS`` says so) and the pool
    is that many; yields ``{thread: cpu}`` (empty where not, or off Linux). After it, they may run
    anywhere again.

    A parallel kernel hands every part to the pool and its caller waits spinning (``sched_yield``,
    mindrt's ``ThreadPool::ParallelLaunch``), so three threads are busy on 2 CPUs. Left to the
    scheduler, the pool's two shared one CPU in 43% of samples during the SD-1.5-sized model's
    denoising, and its 4 steps took 27-31 s; pinned, 21-24 s, the same numbers bit for bit."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pool = _kernel_pool(len(cpus)) if _threads is not None and _threads[0] == len(cpus) else {}
    if len(pool) != len(cpus):
        yield {}
        return
    pinned = {}
    try:
        for (name, tid), cpu in zip(sorted(pool.items()), cpus):
            with contextlib.suppress(OSError):  # a thread that ended
                os.sched_setaffinity(tid, {cpu})
                pinned[name] = cpu
        yield pinned
    finally:
        for name in pinned:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pool[name], cpus)


def _kernel_pool(size: int) -> dict[str, int]:
    """MindSpore's kernel pool: thread name -> thread id (empty off Linux). Waits up to a second
    for ``size`` of them: each names itself once it first runs."""
    if not os.path.isdir(f"/proc/{os.getpid()}/task"):
        return {}
    (ms.Tensor([0.0]) + 1).asnumpy()  # the pool starts with the first kernel
    for _ in range(100):
        pool = {name: tid for tid, name in _threads_named().items()
                if name.startswith(("ActorThread_", "KernelThread_"))}
        if len(pool) >= size:
            break
        time.sleep(0.01)
    return pool


def cpu_threads() -> tuple[int, str] | None:
    """``(threads, why)``: MindSpore's CPU kernel threads as :func:`tune_cpu_runtime` set them
    (None where it did not: another device, or set before xrand)."""
    return _threads
