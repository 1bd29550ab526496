"""Run mindone's diffusion models on a plain CPU by standing in for mint operators it lacks.

Several ``mindspore.mint`` operators that mindone calls have Ascend kernels only; on a CPU
they fail with "The kernel X unregistered". :func:`install` swaps each of them for the same
math built from MindSpore operators that have CPU kernels, wherever mindone looks it up, so
mindone's own ``DDIMPipeline`` runs unchanged. It does nothing unless MindSpore's device
target is ``"CPU"`` (Ascend and GPU keep their own kernels); :func:`uninstall` puts every
original object back.

    from xrand.pipelines import ddim, mindspore_cpu
    mindspore_cpu.tune_cpu_runtime()                   # once per process
    with mindspore_cpu.cpu_fallbacks(), ddim.mindspore_mode("graph"):
        images = mindone_pipeline(...)

The fallbacks compile in MindSpore's graph mode too (each Cell compiled on its first call).

Speed (DDIM pipeline step, batch 1, 2 shared cores, MindSpore 2.10 vs torch 2.13 at 2 threads;
the machine was shared, so +-30%): google/ddpm-cifar10-32 architecture: torch 0.07-0.12 s;
MindSpore with ops.conv2d fallbacks 9-16 s, with these fallbacks in PyNative after
tune_cpu_runtime() 0.22-0.26 s, in graph mode 0.12-0.16 s. Digits model: torch 0.0045 s,
PyNative 0.035 s, graph mode 0.015 s. Graph mode is the fast path.
"""

from __future__ import annotations

import contextlib
import os
import sys

import mindspore as ms
from mindspore import ops

# (owner, attribute name, original object) for every attribute install() replaced.
_patched: list[tuple[object, str, object]] = []
# The original objects and the fallback that replaces each, keyed by id(original).
_replacements: dict[int, tuple[object, object]] = {}

# Modules scanned for names bound to a replaced operator (``from mindspore.mint import x``
# or ``pad = mint.nn.functional.pad`` at import time, as mindone's layers_compat does).
_SCANNED_PREFIXES = ("mindone.", "mindspore.mint")


# ---------------------------------------------------------------- the fallbacks
# Missing CPU kernels below were found by running mindone 0.5.0's UNet2DModel and
# DDIMScheduler on MindSpore 2.10.0, device_target "CPU". The fallbacks import nothing
# inside their bodies so that they also compile in MindSpore's graph mode (ms.jit).
# Also without CPU kernels, but not on this path (so not replaced): mint.stack (StackExt),
# mint.mm (Mm), mint.full (FillScalar), mint.randn (InplaceNormal), mint.nn.functional.unfold
# (Im2ColExt).


def _arange(start=0, end=None, step=1, *, dtype=None):
    """mint.arange: kernel Arange has no CPU version; ops.arange (Range) has."""
    return ops.arange(start, end, step, dtype=dtype)


def _baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """mint.baddbmm (kernel Baddbmm): beta * input + alpha * (batch1 @ batch2).

    As in torch, beta == 0 ignores ``input`` (NaN or Inf in it do not spread).
    """
    out = ops.bmm(batch1, batch2)
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out
    if beta != 1:
        input = input * beta
    return out + input


def _pad(input, pad, mode="constant", value=None):
    """mint.nn.functional.pad (kernel ConstantPadND): ops.pad (PadV3) has a CPU kernel."""
    if isinstance(pad, tuple) and not pad:
        return input
    return ops.pad(input, tuple(pad), mode=mode, value=value)


def _pair(value):
    if isinstance(value, int):
        return value, value
    return value[0], value[1]


def _conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """mint.nn.functional.conv2d (kernel Conv2DExt) as im2col (ops.unfold) and one batched matmul.

    MindSpore's own CPU Conv2D exists but oneDNN runs it as "jit_uni_ncsp:conv+ref" on the
    plain NCHW layout MindSpore hands it: 0.5-0.7 s for a 128-channel 3x3 conv at 32x32,
    against 8 ms for unfold + matmul (measured, MindSpore 2.10, ONEDNN_VERBOSE=1). That
    Conv2D still serves grouped convs and padding given by name ("same", "valid").
    """
    if groups != 1 or isinstance(padding, str):
        pad_mode, pad = (padding, 0) if isinstance(padding, str) else ("pad", padding)
        return ops.conv2d(input, weight, bias, stride, pad_mode, pad, dilation, groups)
    n, _, h, w = input.shape
    out_channels, _, kh, kw = weight.shape
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if kh == 1 and kw == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0:
        cols = input.reshape(n, -1, h * w)
    else:
        cols = ops.unfold(input, (kh, kw), (dh, dw), (ph, pw), (sh, sw))  # (n, C*kh*kw, oh*ow)
    kernel = weight.reshape(out_channels, -1)
    out = ops.bmm(kernel.broadcast_to((n,) + kernel.shape), cols)
    if bias is not None:
        out = ops.bias_add(out, bias)
    return out.reshape(n, out_channels, oh, ow)


def _conv2d_construct(self, input):
    """mint.nn.Conv2d.construct, calling the CPU conv2d instead of conv2d_ext_op."""
    if self.padding_mode != "zeros":
        input = _pad(input, self._reversed_padding, mode=self.padding_mode)
        return _conv2d(input, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
    return _conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


def _targets() -> list[tuple[object, str, object]]:
    """(owner, attribute, fallback) for each operator replaced on a CPU."""
    import mindspore.mint as mint
    import mindspore.mint.nn.functional as F
    from mindspore.mint.nn import Conv2d

    return [
        (mint, "arange", _arange),
        (mint, "baddbmm", _baddbmm),
        (F, "pad", _pad),
        (F, "conv2d", _conv2d),
        (Conv2d, "construct", _conv2d_construct),
    ]


# ---------------------------------------------------------------- install / uninstall


def _on_cpu() -> bool:
    return ms.get_context("device_target") == "CPU"


def installed() -> bool:
    """Whether the CPU fallbacks are in place."""
    return bool(_patched)


def _set(owner, name, value, original) -> None:
    _patched.append((owner, name, original))
    setattr(owner, name, value)


def install() -> bool:
    """Put the CPU fallbacks in place if MindSpore's device target is CPU; returns whether they are.

    Idempotent. Call it before or after importing mindone: names that mindone modules
    already bound to an original operator are replaced too.
    """
    if _patched:
        return True
    if not _on_cpu():
        return False
    for owner, name, fallback in _targets():
        original = vars(owner)[name]
        _replacements[id(original)] = (original, fallback)
        _set(owner, name, fallback, original)
    for module in _scanned_modules():
        for name, value in list(vars(module).items()):
            entry = _replacements.get(id(value))
            if entry is not None and value is entry[0]:
                _set(module, name, entry[1], value)
    return True


def uninstall() -> None:
    """Restore every original operator (idempotent).

    Names bound to a fallback by modules imported while it was installed are restored too.
    """
    if not _patched:
        return
    for owner, name, original in reversed(_patched):
        setattr(owner, name, original)
    by_fallback = {id(fb): orig for orig, fb in _replacements.values()}
    for module in _scanned_modules():
        for name, value in list(vars(module).items()):
            if id(value) in by_fallback:
                setattr(module, name, by_fallback[id(value)])
    _patched.clear()
    _replacements.clear()


@contextlib.contextmanager
def cpu_fallbacks():
    """Context manager: the CPU fallbacks inside the block (if the target is CPU), not after.

    Leaves them in place when they were already installed on entry.
    """
    already = installed()
    install()
    try:
        yield
    finally:
        if not already:
            uninstall()


def tune_cpu_runtime(threads: int | None = None) -> bool:
    """Once per process on a CPU target: synchronous op launch and ``threads`` kernel threads.

    MindSpore's asynchronous PyNative launch cost about 1 ms an operator on 2 cores: the
    digits UNet took 0.48 s/step async and 0.034 s/step with ms.runtime.launch_blocking()
    (measured). Kernel threads default to 25 (mindspore/device_context/cpu/op_tuning.py);
    ``threads=None`` uses the CPUs this process may run on. Both settings can be made only
    once per process; returns whether either was made now (never off the CPU).
    """
    if not _on_cpu():
        return False
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    changed = False
    for setting in (lambda: ms.device_context.cpu.op_tuning.threads_num(threads), ms.runtime.launch_blocking):
        try:
            setting()
            changed = True
        except RuntimeError:  # "... can not be set repeatedly"
            pass
    return changed


def _scanned_modules():
    return [m for n, m in list(sys.modules.items())
            if m is not None and n.startswith(_SCANNED_PREFIXES)]
