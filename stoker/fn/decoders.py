"""Decoders: ``fn.decoders.image`` (device "cpu" or "mixed") and region-of-interest variants."""

from stoker.fn._factory import make_fn, namespace_dir, namespace_getattr

image = make_fn("decoders.image")
image_random_crop = make_fn("decoders.image_random_crop")
image_crop = make_fn("decoders.image_crop")
image_slice = make_fn("decoders.image_slice")

__getattr__ = namespace_getattr("decoders.")
__dir__ = namespace_dir("decoders.", globals())
