"""torch and diffusers behind :class:`.base.Framework`, and torch in float64 for a block: the
reference a noise floor is measured against.

A float64 run of a loaded torch pipeline (or module) must be float64 throughout, without loading
it again and without a float64 copy of it (twice its weights): :func:`widened` casts each
submodule to float64 only while it runs, and :func:`widened_torch` makes every float32 that
diffusers and transformers pin inside their models float64 too.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, Iterable, Iterator

import numpy as np

from .base import Framework
from .threads import choose as choose_threads


def tf32_settings() -> Dict[str, Any]:
    """Whether torch's float32 convolutions and matrix products on a GPU may run in TF32 (10-bit
    mantissas): cuDNN's convolutions may by default, which makes torch's own float32 floor on an
    H100 about 150x the CPU's (README, two machines). ``NVIDIA_TF32_OVERRIDE=0`` turns it off."""
    import torch

    return {"cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "NVIDIA_TF32_OVERRIDE": os.environ.get("NVIDIA_TF32_OVERRIDE")}


class Torch(Framework):
    name = "torch"
    library = "diffusers"
    extras = "torch,diffusers"
    forward = "forward"
    _dtype_argument = "torch_dtype"

    def check_device(self, device):
        return device or "cpu"

    def device_name(self, device):
        return str(device or "cpu")

    def _placed(self, pipe, device):
        return pipe.to(device or "cpu")

    def randn(self, shape, generator, dtype, device=None):
        from diffusers.utils import torch_utils

        return torch_utils.randn_tensor(shape, generator=generator, device=device, dtype=dtype)

    native_noise = 'torch.Generator("cpu").manual_seed({seed})'

    def native_generator(self, seed):
        import torch

        return torch.Generator("cpu").manual_seed(seed)

    def tensor(self, array, dtype=None, device=None):
        import torch

        out = torch.from_numpy(np.asarray(array, order="C"))  # ascontiguousarray makes a 0-d array 1-d
        return out.to(device=device, dtype=None if dtype is None else getattr(torch, dtype))

    def is_tensor(self, value):
        import torch

        return isinstance(value, torch.Tensor)

    def dtype_of(self, tensor):
        return str(tensor.dtype).replace("torch.", "")

    def module_dtype(self, module):
        first = next(iter(module.parameters()), None)
        return None if first is None else self.dtype_of(first)

    def cast(self, tensor, dtype):
        import torch

        return tensor.to(getattr(torch, dtype))

    def module_class(self):
        import torch

        return torch.nn.Module

    def submodules(self, module):
        return module.named_modules()

    def weights(self, module):
        saved = set(module.state_dict(keep_vars=True))  # persistent buffers (SD3's pos_embed) are saved
        return list(module.named_parameters()) + [(n, b) for n, b in module.named_buffers() if n in saved]

    def module_device(self, module):
        return next(module.parameters()).device

    def _eager(self):
        import torch

        return torch.no_grad()

    def operators_recorded(self, module, on_op):
        return _operators_recorded(on_op)

    def pipeline_device(self, pipe):
        return pipe.device

    @contextlib.contextmanager
    def running(self, device, mode, identity=None):
        import torch

        state = {"torch_tf32": tf32_settings()} if device is not None and str(device).startswith("cuda") else {}
        with torch.no_grad():
            yield state

    def environment(self, mode, state, mode_reason=None):
        return {key: state[key] for key in ("torch_tf32",) if key in state}

    @contextlib.contextmanager
    def threads(self, load):
        import torch

        before = torch.get_num_threads()  # torch's default (the physical cores), or the user's count
        count, why = choose_threads(load, most=before)
        torch.set_num_threads(count)
        try:
            yield {"torch_threads": count, "threads_chosen": why}
        finally:
            torch.set_num_threads(before)

    def unload(self, pipe):
        # the modules to the meta device: their memory goes even while a caller's frame still refers to them
        import torch

        for component in (getattr(pipe, "components", None) or {}).values():
            if isinstance(component, torch.nn.Module):
                component.to("meta")


@contextlib.contextmanager
def widened(modules: Iterable[Any]) -> Iterator[None]:
    """Calls of the torch modules among ``modules`` in float64 inside the block (with
    :func:`widened_torch`), as if each were cast to float64, without a float64 copy of them: each
    submodule's own floating parameters and buffers are float64 only while that submodule runs (a
    float64 copy made by a forward pre-hook, the tensor's own data put back by a forward hook; a
    tensor shared by submodules stays float64 until the last of them ends). Memory: the weights as
    they are, plus the float64 copy of the modules on the call stack. Anything that is not a
    ``torch.nn.Module`` (a scheduler, a tokenizer) is left alone. A parameter read outside its
    module's call is its own float32 tensor there: arithmetic with float64 values promotes it
    exactly (every float32 value is a float64 value) and a layer given it fails loudly (a dtype
    mismatch); a dtype read from it is widened as every dtype asked for is. tests/test_floor.py
    checks every tiny family's floor against its pipeline cast whole to float64."""
    import torch

    held: dict = {}  # id(tensor) -> [tensor, its own data, how many running modules hold it]

    def own(m: Any) -> list:
        return [t for t in list(m._parameters.values()) + list(m._buffers.values())
                if t is not None and t.is_floating_point()]

    def enter(m: Any, args: Any) -> None:
        with torch.no_grad(), torch._C.DisableTorchFunction():  # the cast as asked, not widened
            for t in own(m):
                entry = held.setdefault(id(t), [t, t.data, 0])
                if entry[2] == 0:
                    t.data = t.data.to(torch.float64)
                entry[2] += 1

    def leave(m: Any, args: Any, output: Any) -> None:
        with torch.no_grad(), torch._C.DisableTorchFunction():
            for t in own(m):
                entry = held[id(t)]
                entry[2] -= 1
                if entry[2] == 0:
                    t.data = entry[1]
                    del held[id(t)]

    handles = [h for module in modules if isinstance(module, torch.nn.Module) for m in module.modules()
               for h in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave))]
    try:
        with widened_torch():
            yield
    finally:
        for h in handles:
            h.remove()
        with torch.no_grad(), torch._C.DisableTorchFunction():  # a call that raised: what it held goes back
            for t, data, _ in held.values():
                t.data = data


@contextlib.contextmanager
def cast_whole(modules: Iterable[Any]) -> Iterator[None]:
    """The torch modules among ``modules`` cast to float64 in place (a float64 copy of every
    weight at once) and back afterwards, with :func:`widened_torch`: what :func:`widened` gives
    without that copy (tests/test_floor.py checks it bit for bit; benchmarks/bench_floor.py
    measures the memory each holds)."""
    import torch

    tensors = [t for m in modules if isinstance(m, torch.nn.Module)
               for t in list(m.parameters()) + list(m.buffers()) if t.is_floating_point()]
    dtypes = [t.dtype for t in tensors]
    with torch.no_grad():
        for t in tensors:
            t.data = t.data.to(torch.float64)
    try:
        with widened_torch():
            yield
    finally:
        with torch.no_grad():
            for t, dtype in zip(tensors, dtypes):
                t.data = t.data.to(dtype)


@contextlib.contextmanager
def widened_torch() -> Iterator[None]:
    """Inside the block, torch's default dtype is float64 and a torch function mode turns every
    narrow float dtype requested into float64, and every floating tensor ``torch.tensor`` makes
    from data float64.

    The float64 reference must be float64 throughout: diffusers pins some computations to
    float32 whatever the weights (get_timestep_embedding in models/embeddings.py builds its
    frequencies with ``dtype=torch.float32`` and calls ``.float()``), so a float64 copy of the
    model alone would leave them, and their rounding, out of the floor. The default dtype
    covers tensors made without one (transformers' CLIP builds its causal mask with
    ``torch.full(..., torch.finfo(dtype).min)``, which overflows a float32 default).
    """
    import torch
    from torch.overrides import TorchFunctionMode

    narrow = (torch.float32, torch.float16, torch.bfloat16)
    to_double = {torch.Tensor.float: torch.Tensor.double, torch.Tensor.half: torch.Tensor.double,
                 torch.Tensor.bfloat16: torch.Tensor.double}

    def widen(value):
        if isinstance(value, torch.dtype) and value in narrow:
            return torch.float64
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.dtype) for v in value):
            return type(value)(widen(v) for v in value)
        return value

    class Widened(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            func = to_double.get(func, func)
            args = tuple(widen(a) for a in args)
            kwargs = {k: widen(v) for k, v in (kwargs or {}).items()}
            if func is torch.conv2d:
                out = conv2d_in_row_blocks(*args, **kwargs)
                if out is not None:
                    return out
            out = func(*args, **kwargs)
            if func is torch.tensor and kwargs.get("dtype") is None and out.is_floating_point():
                # torch.tensor(data) keeps the dtype of tensors in data: a list of float32 scheduler
                # values stays float32 (scheduling_unipc_multistep.py: b = torch.tensor(b), then
                # torch.linalg.solve(R, b) with R float64)
                out = out.double()
            return out

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with Widened():
            yield
    finally:
        torch.set_default_dtype(previous)


#: The most a float64 convolution unfolds at once (:func:`conv2d_in_row_blocks`).
IM2COL_BYTES = 1 << 28


def conv2d_in_row_blocks(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.conv2d`` of a float64 batch in blocks of output rows, where it would unfold more
    than :data:`IM2COL_BYTES` at once; None where it would not (or for padding given by name).

    torch's CPU convolution has no oneDNN kernel for float64: it unfolds its input whole (im2col,
    in-channels x kernel x output positions: 1.2 GB for an SD-1.5-sized VAE decoder's last
    convolutions at 256 px), the floor stage's peak (benchmarks/RESULTS.md figure 15). Each block
    is the same convolution of the rows it reads (the input zero-padded once, as torch pads);
    the sums run in another order, so its values may differ from the whole convolution's in the
    last bits (about 1e-13 relative), far below the float32 differences the floor measures."""
    import torch

    if input.dtype != torch.float64 or input.dim() != 4 or isinstance(padding, str):
        return None
    (sh, sw), (ph, pw), (dh, dw) = (_pair(v) for v in (stride, padding, dilation))
    kh, kw = weight.shape[-2:]
    height, width = input.shape[2] + 2 * ph, input.shape[3] + 2 * pw
    rows, columns = (height - dh * (kh - 1) - 1) // sh + 1, (width - dw * (kw - 1) - 1) // sw + 1
    per_row = input.shape[1] * kh * kw * columns * 8
    if rows <= 1 or per_row * rows <= IM2COL_BYTES:
        return None
    padded = torch.nn.functional.pad(input, (pw, pw, ph, ph))
    block = max(1, IM2COL_BYTES // per_row)
    parts = [torch.conv2d(padded[:, :, r * sh:(min(rows, r + block) - 1) * sh + dh * (kh - 1) + 1], weight, bias,
                          (sh, sw), 0, (dh, dw), groups) for r in range(0, rows, block)]
    return torch.cat(parts, dim=2)


def _pair(value: Any) -> tuple:
    return tuple(value) * (2 // len(value)) if isinstance(value, (tuple, list)) else (value, value)


#: where torch's functions live -> how ``--ops`` names them
_NAMESPACES = {"torch": "torch.", "torch.nn.functional": "F.", "torch._C._nn": "F.", "torch._C._fft": "fft.",
               "torch._C._linalg": "linalg."}


def operator_name(func: Any) -> str:
    """A torch function as users write it: ``F.linear``, ``torch.cat``, ``Tensor.permute``."""
    name = getattr(func, "__name__", type(func).__name__)
    qualified = getattr(func, "__qualname__", "") or ""
    if qualified.startswith(("TensorBase.", "Tensor.")):
        return "Tensor." + name
    return _NAMESPACES.get(getattr(func, "__module__", None) or "", "") + name


@contextlib.contextmanager
def _operators_recorded(on_op: Any) -> Iterator[None]:
    """:meth:`.base.Framework.operators_recorded` by a torch function mode: it sees each call of a
    torch function or Tensor method; calls made inside one (``F.group_norm`` calling
    ``torch.group_norm``) run with the mode off, so only the outer one is recorded. An in-place
    method (``mul_``, ``__iadd__``) is given to ``on_op`` with its tensor as it was before."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Recorded(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = operator_name(func)
            given = args
            if name.startswith("Tensor.") and (name.endswith("_") and not name.endswith("__")
                                               or name.startswith("Tensor.__i")):
                given = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
            out = func(*args, **kwargs)
            on_op(name, func, given, kwargs, out, {})
            return out

    with Recorded():
        yield
