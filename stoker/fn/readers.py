"""Readers: ``fn.readers.file`` and more."""

from stoker.fn._factory import make_fn, namespace_dir, namespace_getattr

file = make_fn("readers.file")

__getattr__ = namespace_getattr("readers.")
__dir__ = namespace_dir("readers.", globals())
