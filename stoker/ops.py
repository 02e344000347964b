"""The legacy class API, ``ops.Resize(...)``: thin views over the same operators as ``fn``.

An ``ops`` object holds keyword arguments; calling it inside ``define_graph``
records the operator exactly as the ``fn`` function would::

    self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
    images = self.decode(jpegs)
"""

from __future__ import annotations

import sys
import types as _pytypes

from stoker.operators.schema import on_register, registered
from stoker.pipeline.data_node import invoke


class LegacyOperator:
    """Base of every ``ops`` class; subclasses only set ``_op_name``."""

    _op_name = ""

    def __init__(self, **kwargs):
        self._kwargs = kwargs
        self.device = kwargs.get("device", "cpu")

    def __call__(self, *inputs, **kwargs):
        merged = {**self._kwargs, **kwargs}
        return invoke(self._op_name, list(inputs), merged)

    def __repr__(self):
        return f"ops.{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())})"


# Words DALI's class names spell in capitals (ops.readers.COCO, ops.MFCC, ops.BBoxPaste).
_WORDS = {"coco": "COCO", "mxnet": "MXNet", "tfrecord": "TFRecord", "mfcc": "MFCC", "bbox": "BBox",
          "roi": "ROI", "ssd": "SSD", "dl": "DL"}


def _camel(name: str) -> str:
    return "".join(_WORDS.get(p, p[:1].upper() + p[1:]) for p in name.split("_"))


def _legacy_class(op_name: str, class_name: str) -> type:
    cls = type(class_name, (LegacyOperator,), {"_op_name": op_name})
    cls.__module__ = __name__
    cls.__doc__ = f"Legacy-API view of ``fn.{op_name}``."
    return cls


def _add(op_name: str, op_cls: type) -> None:
    """Make ``ops`` classes for operator ``op_name`` (CamelCase under its namespace, legacy names)."""
    if op_name.startswith("_"):
        return
    module = sys.modules[__name__]
    parts = op_name.split(".")
    target = module
    for sub in parts[:-1]:  # ops.readers.File, ops.decoders.Image, ops.random.Uniform
        child = getattr(target, sub, None)
        if child is None:
            child = _pytypes.ModuleType(f"{target.__name__}.{sub}")
            setattr(target, sub, child)
        target = child
    setattr(target, _camel(parts[-1]), _legacy_class(op_name, _camel(parts[-1])))
    schema = op_cls.schema
    for legacy in filter(None, (schema.legacy_name, *schema.extra_legacy_names)):
        setattr(module, legacy, _legacy_class(op_name, legacy))


def _remove(op_name: str) -> None:
    """Drop the ``ops`` classes that view operator ``op_name`` (it was unregistered)."""
    module = sys.modules[__name__]
    parts = op_name.split(".")
    target = module
    for sub in parts[:-1]:
        target = getattr(target, sub, None)
        if target is None:
            return
    for owner in (target, module):
        for attr, value in list(vars(owner).items()):
            if isinstance(value, type) and issubclass(value, LegacyOperator) and value._op_name == op_name:
                delattr(owner, attr)


def _on_change(op_name: str, op_cls: type | None) -> None:
    if op_cls is None:
        _remove(op_name)
    else:
        _add(op_name, op_cls)


def _populate() -> None:
    for op_name, op_cls in registered().items():
        _add(op_name, op_cls)


_populate()
# Operators registered later (stoker.custom, plugins) get their classes as they arrive.
on_register(_on_change)
