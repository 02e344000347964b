"""Operators as functions, DALI's ``fn`` API: ``fn.resize(images, size=224)``.

Call them inside a ``@pipeline_def`` function (or ``with pipe:``); each call
records an operator and returns its output DataNode(s). For eager use on real
data, see :mod:`stoker.dynamic`.
"""

from stoker.fn import decoders, random, readers  # noqa: F401
from stoker.fn._factory import make_fn, namespace_dir, namespace_getattr

_external_source = make_fn("external_source")


def external_source(source=None, num_outputs=None, **kwargs):
    """Data from Python; ``source`` and ``num_outputs`` may be positional, as in DALI."""
    if source is not None:
        kwargs["source"] = source
    if num_outputs is not None:
        kwargs["num_outputs"] = num_outputs
    return _external_source(**kwargs)


external_source.__doc__ = (external_source.__doc__ or "") + "\n\n" + (_external_source.__doc__ or "")
resize = make_fn("resize")
random_resized_crop = make_fn("random_resized_crop")
crop = make_fn("crop")
crop_mirror_normalize = make_fn("crop_mirror_normalize")
flip = make_fn("flip")
rotate = make_fn("rotate")
cast = make_fn("cast")
shapes = make_fn("shapes")
peek_image_shape = make_fn("peek_image_shape")
constant = make_fn("constant")
copy = make_fn("copy")
reshape = make_fn("reshape")
transpose = make_fn("transpose")

__getattr__ = namespace_getattr("")
__dir__ = namespace_dir("", globals())
