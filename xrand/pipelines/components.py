"""Mixed precision: components of a pipeline loaded in a dtype of their own (``--component-dtype``).

The pipeline is loaded in the run's dtype; each named component is loaded again from its
subfolder in its own dtype (from the file's weights, never rounded through the run's dtype) and
put in its place. Library pipelines hand a component what the previous one made (SD's
``vae.decode`` gets the denoiser's bfloat16 latents; its latents take the text encoder's dtype),
so in a mixed run every component with weights casts its floating-point inputs to its own dtype, the same on both sides (in Python: MindSpore runs PyNative, COMPONENT_DTYPES_PYNATIVE).
"""
from __future__ import annotations

import functools
from typing import Any, Dict, Mapping, Optional

#: The methods of a component that take the previous component's tensors.
CAST_METHODS = ("encode", "decode")


def model_components(folder: Any) -> Dict[str, str]:
    """The folder's components that hold weights (a config.json), name -> class name."""
    return {name: cls for name, cls in folder.components().items() if name in folder.configs and name != "scheduler"}


#: Why a mixed run of MindSpore runs PyNative (the casts wrap the Cells' construct in Python).
COMPONENT_DTYPES_PYNATIVE = ("--component-dtype casts every component's inputs in Python around its construct, "
                             "which graph mode would not run")


def use_component_dtypes(fw: Any, pipe: Any, folder: Any, dtypes: Mapping[str, str], device: Optional[str]) -> None:
    """Load each component of ``dtypes`` (name -> dtype) from the folder in its dtype, in place of
    the pipeline's; every component with weights then casts its inputs to its own dtype."""
    for name, dtype in dtypes.items():
        component = fw.load_component(type(getattr(pipe, name)), folder.path, name, dtype, device, folder.variant)
        setattr(pipe, name, component)  # both libraries' pipelines register it under that name
    for name in model_components(folder):
        if getattr(pipe, name, None) is not None:
            _cast_inputs(fw, getattr(pipe, name))


def _cast_inputs(fw: Any, module: Any) -> None:
    for method in (fw.forward,) + CAST_METHODS:
        if callable(getattr(module, method, None)):
            setattr(module, method, _casting(fw, module, getattr(module, method)))


def _casting(fw: Any, module: Any, method: Any) -> Any:
    @functools.wraps(method)
    def cast(*args, **kwargs):
        dtype = fw.module_dtype(module)  # at call time: the float64 floor run widens the module
        args = tuple(_cast(fw, a, dtype) for a in args)
        kwargs = {k: _cast(fw, v, dtype) for k, v in kwargs.items()}
        return method(*args, **kwargs)

    return cast


def _cast(fw: Any, value: Any, dtype: str) -> Any:
    if fw.is_tensor(value) and fw.dtype_of(value) in ("float32", "float16", "bfloat16", "float64") \
            and fw.dtype_of(value) != dtype:
        return fw.cast(value, dtype)
    return value


def component_dtypes(fw: Any, pipe: Any, names: Any) -> Dict[str, str]:
    """What dtype each named component of a loaded pipeline holds its weights in (the report's
    ``ran.component_dtypes``)."""
    out = {}
    for name in names:
        component = getattr(pipe, name, None)
        dtype = None if component is None else fw.module_dtype(component)
        if dtype is not None:
            out[name] = dtype
    return out
