"""Eager decoders: ``ndd.decoders.image(encoded, device="cpu")`` and the rest of ``fn.decoders``."""

from stoker.dynamic._namespace import module_getattr

__getattr__ = module_getattr("decoders.")
