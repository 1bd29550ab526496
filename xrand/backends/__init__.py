"""Backends: one module per framework, each a :class:`Backend` subclass.

To add a framework, subclass :class:`Backend` in a module of its own (see ``numpy.py``, the
smallest) and register it with ``xrand.register_backend`` or the ``xrand.backends`` entry point.
"""
from .base import Backend, global_numpy_generator, numpy_generators_draw, seed_global_numpy_generator

__all__ = ["Backend", "global_numpy_generator", "numpy_generators_draw", "seed_global_numpy_generator"]
