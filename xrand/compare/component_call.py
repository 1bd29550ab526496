"""The one call of another pipeline component that ``--layers-component`` looks at: the VAE's
decode, a text encoder's call on the prompt, or a ControlNet's call at the ``--layers-step``.

On torch's run, :func:`recorded` keeps that component's call (the first; a ControlNet's, the one of
the step: it is called once per denoising step, before the denoiser) (its inputs by parameter name)
in the run's :class:`.boundary.Recording`, beside the denoiser calls, so that it travels in the
comparison folder; :func:`entry` wraps the component in a module whose own call is that call, so
``--layers`` hooks, matches, floors and judges it as it does the denoiser (module names gain the
component's name: ``vae.decoder.mid_block.attentions.0``).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Iterator, Optional

from .boundary import Recording, call_signature, intercepted, named_inputs
from .trees import Capture

DENOISER = "denoiser"
#: component -> the method whose call is looked at (None: the component's own call)
METHODS = {"vae": "decode", "text_encoder": None, "text_encoder_2": None, "text_encoder_3": None, "controlnet": None}
CALLS = {"vae": "the VAE decode"}  # how a verdict names the call; else "NAME's call"
#: components called once per denoising step (the ControlNet pipelines'): the call looked at is the step's
PER_STEP = ("controlnet",)


def call_name(component: str) -> str:
    return CALLS.get(component, f"{component}'s call")


def where(component: str, step: Optional[int], timestep: Optional[float]) -> str:
    """Which call ``--layers`` looked into, as its lines and pages say it: "at step 1 (timestep
    999)", "in the VAE decode", "in controlnet's call at step 0 (timestep 999)"."""
    at = f"at step {step} (timestep {timestep:g})" if step is not None else "in one call"
    if component == DENOISER:
        return at
    return f"in {call_name(component)}" + (f" {at}" if step is not None else "")


def root_label(component: str) -> str:
    """How the looked-at call itself (the module named "") is named in tables and pictures."""
    return "(denoiser)" if component == DENOISER else f"({component})"


@contextlib.contextmanager
def recorded(fw: Any, pipe: Any, component: Optional[str], recording: Optional[Recording], step: int = 0
             ) -> Iterator[None]:
    """Inside the block, the first call of ``pipe``'s ``component`` (the VAE: its ``decode``), or
    call number ``step`` of a :data:`PER_STEP` component, is kept in ``recording.component``;
    nothing is done for the denoiser or without a recording."""
    if component in (None, DENOISER) or recording is None:
        yield
        return
    module, method = getattr(pipe, component), METHODS[component]
    capture = Capture(fw)
    wanted, calls = (step if component in PER_STEP else 0), [0]

    def keep(signature: inspect.Signature, args: tuple, kwargs: dict) -> None:
        index, calls[0] = calls[0], calls[0] + 1
        if index == wanted and recording.component is None:
            recording.component = recording.writer.encode(capture(named_inputs(signature, args, kwargs)))

    if method is None:
        signature = call_signature(fw, module)

        def around(call, args, kwargs):
            keep(signature, args, kwargs)
            return call(*args, **kwargs)

        with intercepted(module, around):
            yield
        return
    original = getattr(module, method)
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        keep(signature, args, kwargs)
        return original(*args, **kwargs)

    object.__setattr__(module, method, wrapper)
    try:
        yield
    finally:
        object.__delattr__(module, method)  # the instance's wrapper gone, back to the class method


_ENTRIES = {}  # (framework, component) -> its wrapper class, made once


def entry(fw: Any, pipe: Any, component: str) -> Any:
    """A module (torch) or cell (MindSpore) holding ``pipe``'s component under its own name, whose
    call is the component's looked-at call."""
    key = (fw.name, component)
    if key not in _ENTRIES:
        method = METHODS[component]
        base = fw.module_class()

        def __init__(self, module):
            base.__init__(self)
            setattr(self, component, module)

        def call(self, *args, **kwargs):
            module = getattr(self, component)
            return (module if method is None else getattr(module, method))(*args, **kwargs)

        _ENTRIES[key] = type(f"{component}.{method or 'call'}", (base,), {"__init__": __init__, fw.forward: call})
    return _ENTRIES[key](getattr(pipe, component))


__all__ = ["CALLS", "DENOISER", "METHODS", "PER_STEP", "call_name", "entry", "recorded"]
