"""Eager decoders: ``ndd.decoders.image(encoded, device="cpu")`` and the rest of ``fn.decoders``."""

from stoker.dynamic._namespace import module_dir, module_getattr

__getattr__ = module_getattr("decoders.")
__dir__ = module_dir("decoders.", globals())
