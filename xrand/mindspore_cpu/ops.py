"""The stand-ins: the same math as each missing ``mindspore.mint`` kernel, from operators a CPU has.

:func:`targets` lists where each one goes; :mod:`.install` puts them there.
"""


from __future__ import annotations

import mindspore as ms
from mindspore import ops

# Whether _conv2d runs MindSpore's Conv2D (set by runtime.cap_onednn_isa; compiled into graphs
# as a constant).
conv2d_by_onednn = False


# ---------------------------------------------------------------- the fallbacks
# Missing CPU kernels below were found by running mindone 0.5.0's UNet2DModel and
# DDIMScheduler on MindSpore 2.10.0, device_target "CPU". The fallbacks import nothing
# inside their bodies so that they also compile in MindSpore's graph mode (ms.jit).
# The scheduler and Stable Diffusion fallbacks further down were found the same way with the
# schedulers both libraries share and mindone's StableDiffusionPipeline (CLIP text encoder,
# UNet2DConditionModel, AutoencoderKL).
# Also without CPU kernels, but not on these paths (so not replaced): mint.mm (Mm), mint.randn
# (InplaceNormal), mint.nn.functional.unfold (Im2ColExt).


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
    """mint.nn.functional.conv2d (kernel Conv2DExt): MindSpore's CPU Conv2D, or im2col and a matmul.

    MindSpore's CPU Conv2D is oneDNN's. On AVX-512, oneDNN runs it as "jit_uni_ncsp:conv+ref"
    on the plain NCHW layout MindSpore hands it: 21 ms for a 32-channel 3x3 conv at 16x16, batch
    4, against 0.9 ms for ops.unfold and one batched matmul, and 0.2 ms for torch. At AVX2
    (:func:`.runtime.cap_onednn_isa`) oneDNN runs it as a GEMM ("x64:gemm:jit") in 0.55 ms, so Conv2D
    serves every conv then; otherwise only grouped convs and padding given by name ("same",
    "valid"). Measured on MindSpore 2.10, ONEDNN_VERBOSE=1.
    """
    if conv2d_by_onednn or groups != 1 or isinstance(padding, str):
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
    # Broadcast, then reshape: in graph mode the reshape of the broadcast copy is a view, where
    # reshaping the weight first ran a Reshape kernel per conv (35 of the digits UNet's 421 kernels).
    kernel = weight.broadcast_to((n,) + weight.shape).reshape(n, out_channels, -1)
    out = ops.bmm(kernel, cols)
    if bias is not None:
        out = ops.bias_add(out, bias)
    return out.reshape(n, out_channels, oh, ow)


def _conv2d_construct(self, input):
    """mint.nn.Conv2d.construct, calling the CPU conv2d instead of conv2d_ext_op."""
    if self.padding_mode != "zeros":
        input = _pad(input, self._reversed_padding, mode=self.padding_mode)
        return _conv2d(input, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
    return _conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


# ------------------------------------------------ schedulers and Stable Diffusion
_INTEGER_DTYPES = (ms.bool_, ms.int8, ms.int16, ms.int32, ms.int64, ms.uint8, ms.uint16, ms.uint32, ms.uint64)


def _to_float(x):
    """Integer and bool tensors as float32, as torch promotes them for float-valued math."""
    return x.astype(ms.float32) if x.dtype in _INTEGER_DTYPES else x


def _atan2(input, other):
    """mint.atan2 (kernel Atan2Ext): ops.atan2 (Atan2) after torch's integer-to-float promotion."""
    input, other = _to_float(input), _to_float(other)
    if input.dtype != other.dtype:  # e.g. float16 with float32: the wider one, as torch does
        input, other = input.astype(ms.float32), other.astype(ms.float32)
    return ops.atan2(input, other)


def _stack(tensors, dim=0):
    """mint.stack (kernel StackExt): ops.stack (Stack) has a CPU kernel."""
    return ops.stack(tuple(tensors), dim)


def _zeros_like(input, *, dtype=None):
    """mint.zeros_like (kernel ZerosLikeExt): ops.zeros (Zeros) of the input's shape and dtype."""
    return ops.zeros(input.shape, input.dtype if dtype is None else dtype)


def _fill_dtype(fill_value, dtype):
    if dtype is not None:
        return dtype
    if isinstance(fill_value, ms.Tensor):
        return fill_value.dtype
    if isinstance(fill_value, bool):
        return ms.bool_
    return ms.int64 if isinstance(fill_value, int) else ms.float32


def _full(size, fill_value, *, dtype=None):
    """mint.full (kernel FillScalar): ops.fill (Fill); dtype inferred from the value as torch does.

    (ops.full makes ``full((2,), 3.0)`` an int64 tensor, measured on MindSpore 2.10.)
    """
    dtype = _fill_dtype(fill_value, dtype)
    if isinstance(fill_value, ms.Tensor):
        return fill_value.astype(dtype).reshape(()).broadcast_to(tuple(size)).copy()
    return ops.fill(dtype, tuple(size), fill_value)


def _linspace(start, end, steps, *, dtype=None):
    """mint.linspace (kernel LinSpaceExt) with torch's CPU formula, so the values match torch bit for bit.

    torch (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp): step = (end - start) / (steps - 1)
    in the output precision (double for integer outputs); the first half counts up from start,
    the second half down from end.
    """
    dtype = ms.float32 if dtype is None else dtype
    if isinstance(start, ms.Tensor):
        start = start.item()
    if isinstance(end, ms.Tensor):
        end = end.item()
    if steps == 0:
        return ops.zeros((0,), dtype)
    if steps == 1:
        return ops.fill(dtype, (1,), start)
    compute = ms.float64 if dtype in _INTEGER_DTYPES or dtype == ms.float64 else ms.float32
    first, last = ms.tensor(start, compute), ms.tensor(end, compute)
    step = (last - first) / ms.tensor(steps - 1, compute)
    index = ops.arange(0, steps, 1, dtype=compute)
    up = first + step * index
    down = last - step * (ms.tensor(steps - 1, compute) - index)
    return ops.where(index < steps // 2, up, down).astype(dtype)


def _log(input):
    """mint.log: the CPU Log kernel has no integer types; torch returns float32 for them."""
    return ops.log(_to_float(input))


def _lerp(input, end, weight):
    """Tensor.lerp / mint.lerp with torch's formula: MindSpore's Lerp turns a -inf start into NaN.

    torch (aten/src/ATen/native/Lerp.h): start + w * (end - start) for |w| < 0.5, else
    end - (end - start) * (1 - w); with start = -inf that gives -inf, which KDPM2's
    log-sigma interpolation needs (its last sigma is 0).
    """
    diff = end - input
    if isinstance(weight, ms.Tensor):
        return ops.where(ops.abs(weight) < 0.5, input + weight * diff, end - diff * (1 - weight))
    if abs(weight) < 0.5:
        return input + weight * diff
    return end - diff * (1 - weight)


def _nonzero(input, *, as_tuple=False):
    """Tensor.nonzero: as_tuple=True has only an Ascend kernel (NonZeroExt); the CPU's NonZero
    gives the (n, ndim) index matrix, whose columns are the tuple. A 0-d tensor counts as 1-d,
    as in torch."""
    if input.ndim == 0:
        input = input.reshape((1,))
        if not as_tuple:  # torch: shape (n, 0) for a 0-d input
            return ops.nonzero(input)[:, :0]
    indices = ops.nonzero(input)
    if not as_tuple:
        return indices
    return tuple(indices[:, i] for i in range(input.ndim))


def _gelu(input, approximate="none"):
    """mint.nn.functional.gelu (kernel GeluExt): ops.gelu (GeLU / FastGeLU tanh form)."""
    return ops.gelu(input, approximate=approximate)


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """mint.nn.functional.layer_norm (kernel LayerNormExt): the LayerNorm primitive, which has a CPU
    kernel, over the last ``len(normalized_shape)`` axes."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    axis = input.ndim - len(normalized_shape)
    if 0 in input.shape:  # the CPU LayerNorm kernel rejects empty input; torch returns it empty
        return ops.zeros(input.shape, input.dtype)
    if weight is None:
        weight = ops.ones(normalized_shape, input.dtype)
    if bias is None:
        bias = ops.zeros(normalized_shape, input.dtype)
    return ops.LayerNorm(axis, axis, eps)(input, weight, bias)[0]


def _layer_norm_construct(self, input):
    """mint.nn.LayerNorm.construct (LayerNormExt), calling the CPU layer norm."""
    return _layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


def _geglu_construct(self, hidden_states):
    """mindone's GEGLU.construct without Tensor.chunk: in graph mode chunk compiles to the Chunk
    kernel, which the CPU lacks (PyNative splits in Python); ops.split makes the same two halves."""
    hidden_states = self.proj(hidden_states)
    hidden_states, gate = ops.split(hidden_states, hidden_states.shape[-1] // 2, -1)
    return hidden_states * self.gelu(gate)


def targets() -> list[tuple[object, str, object]]:
    """(owner, attribute, fallback) for each operator replaced on a CPU."""
    import mindspore.mint as mint
    import mindspore.mint.nn.functional as F
    from mindspore.mint.nn import Conv2d, LayerNorm
    from mindone.diffusers.models.activations import GEGLU

    return [
        (mint, "arange", _arange),
        (mint, "baddbmm", _baddbmm),
        (F, "pad", _pad),
        (F, "conv2d", _conv2d),
        (Conv2d, "construct", _conv2d_construct),
        # schedulers (DDPM, IPNDM, KDPM2, UniPC, SASolver, EDMEuler, DPMSolverSDE, Cosine...)
        (ms.Tensor, "nonzero", _nonzero),
        (ms.Tensor, "lerp", _lerp),
        (mint, "lerp", _lerp),
        (mint, "atan2", _atan2),
        (mint, "stack", _stack),
        (mint, "linspace", _linspace),
        (mint, "zeros_like", _zeros_like),
        (mint, "full", _full),
        (mint, "log", _log),
        # Stable Diffusion (CLIP text encoder, transformer blocks)
        (F, "layer_norm", _layer_norm),
        (LayerNorm, "construct", _layer_norm_construct),
        (F, "gelu", _gelu),
        (GEGLU, "construct", _geglu_construct),  # graph mode: Stable Diffusion's feed-forward
    ]
