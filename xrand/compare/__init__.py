"""torch against MindSpore: plan a comparison once, run both sides, and measure how far apart they end.

Modules, each importing only those above it in this list: :mod:`.trees` (nested inputs and
outputs), :mod:`.metrics`, :mod:`.records` (tensors kept by key, in memory or in files),
:mod:`.plan` (settings resolved once), :mod:`.components` (which component parts them: prompt
embeddings, latents, decode), :mod:`.nonfinite` (the first NaN or Inf), :mod:`.boundary` (the
denoiser and scheduler calls: recorded, fed), :mod:`.component_call` (the VAE's or a text
encoder's call, for ``--layers-component``), :mod:`.sides` (one framework's run), :mod:`.weights`
(the loaded weights against the files), :mod:`.known` (measured causes a verdict names),
:mod:`.result` (two sides compared), :mod:`.floor` (torch's own noise floor), :mod:`.layers`
(which module parts them), :mod:`.sidefile` (a side in a file), :mod:`.stages` (the stages of
every comparison and their one runner, in memory or in a comparison folder that two machines
share), :mod:`.run` (both sides in one process), :mod:`.matrix` (every scheduler).
"""
from .layers import LayerOptions
from .plan import DEFAULT_TOLERANCE, Plan, make_plan
from .result import Comparison, compare_sides
from .run import Pair, compare_frameworks, compare_loaded, load_pair

__all__ = ["DEFAULT_TOLERANCE", "Comparison", "LayerOptions", "Pair", "Plan", "compare_frameworks", "compare_loaded",
           "compare_sides", "load_pair", "make_plan"]
