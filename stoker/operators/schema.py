"""Operator schemas: the single description from which argument checking, the
``fn``/``ops`` namespaces, dynamic mode and docs all follow.

An operator is a subclass of :class:`~stoker.operators.base.Operator` with a
``schema`` class attribute and is registered with :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stoker import types
from stoker.errors import ArgumentError, arg_error

REQUIRED = object()


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _seq(v) -> list:
    if isinstance(v, np.ndarray):
        return v.reshape(-1).tolist()
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


def _conv_int(v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            return int(v)
        raise TypeError(f"expected an int, got {type(v).__name__} {v!r}")
    return int(v)


def _conv_float(v):
    if not _is_number(v):
        raise TypeError(f"expected a number, got {type(v).__name__} {v!r}")
    return float(v)


def _conv_bool(v):
    if isinstance(v, (bool, np.bool_)) or v in (0, 1):
        return bool(v)
    raise TypeError(f"expected a bool, got {type(v).__name__} {v!r}")


def _conv_str(v):
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__} {v!r}")
    return v


def _conv_float_list(v):
    return [_conv_float(x) for x in _seq(v)]


def _conv_int_list(v):
    return [_conv_int(x) for x in _seq(v)]


def _conv_str_list(v):
    if isinstance(v, str):
        return [v]
    return [_conv_str(x) for x in _seq(v)]


def _conv_dtype(v):
    try:
        return types.dtype_from_arg(v)
    except (TypeError, ValueError):
        raise TypeError(f"expected a data type such as types.FLOAT, got {v!r}") from None


def _conv_enum(enum_cls):
    def conv(v):
        try:
            if isinstance(v, str):
                return enum_cls[v]
            return enum_cls(int(v))
        except (KeyError, ValueError, TypeError):
            names = ", ".join(f"types.{m.name}" for m in enum_cls)
            raise TypeError(f"expected one of {names}, got {v!r}") from None
    return conv


def _conv_layout(v):
    if v is None:
        return ""
    if not isinstance(v, str):
        raise TypeError(f"expected a layout string such as 'HWC', got {v!r}")
    return v


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int": _conv_int,
    "float": _conv_float,
    "bool": _conv_bool,
    "str": _conv_str,
    "float_list": _conv_float_list,
    "int_list": _conv_int_list,
    "str_list": _conv_str_list,
    "dtype": _conv_dtype,
    "image_type": _conv_enum(types.DALIImageType),
    "interp": _conv_enum(types.DALIInterpType),
    "layout": _conv_layout,
    "any": lambda v: v,
}


@dataclass(frozen=True)
class Arg:
    """One keyword argument of an operator.

    ``kind`` names a converter in :data:`CONVERTERS`; ``tensor`` says whether the
    argument may be a per-sample tensor (a DataNode, an "argument input").
    """

    name: str
    kind: str = "any"
    default: Any = None
    tensor: bool = False
    doc: str = ""

    def convert(self, op_name: str, value):
        if value is None:
            return None
        try:
            return CONVERTERS[self.kind](value)
        except TypeError as e:
            raise arg_error(op_name, self.name, str(e)) from None

    def sample_value(self, value):
        """One sample's value of a per-sample (tensor) argument, checked against ``kind``.

        Scalar kinds take exactly one number (any shape, as DALI: ``()`` or ``(1,)``) and give
        a Python scalar; ``int``/``bool`` refuse fractions. Other kinds give the NumPy array
        (a 0D one as a scalar). Raises ValueError naming the argument; the executor adds the
        operator and the sample's source.
        """
        arr = np.asarray(value)
        if self.kind in _NUMERIC_KINDS and arr.dtype.kind not in "biuf":
            raise ValueError(f"argument '{self.name}' takes numbers per sample, got {arr.dtype} values")
        if self.kind in ("int", "float", "bool"):
            if arr.size != 1:
                raise ValueError(f"argument '{self.name}' takes one value per sample, got {arr.size} "
                                 f"(shape {arr.shape})")
            x = arr.reshape(()).item()
            if self.kind in ("int", "bool") and isinstance(x, float):
                if not x.is_integer():
                    raise ValueError(f"argument '{self.name}' takes whole numbers per sample, got {x}")
                x = int(x)
            if self.kind == "bool" and x not in (0, 1):
                raise ValueError(f"argument '{self.name}' takes 0/1 or booleans per sample, got {x}")
            return x
        if self.kind == "int_list" and arr.dtype.kind == "f" and not np.all(np.mod(arr, 1) == 0):
            raise ValueError(f"argument '{self.name}' takes whole numbers per sample, got {arr.tolist()}")
        return arr.item() if arr.ndim == 0 else arr


_NUMERIC_KINDS = ("int", "float", "bool", "int_list", "float_list")


# Arguments every operator takes (DALI's common ones).
COMMON_ARGS = (
    Arg("device", "str", None, doc="'cpu', 'gpu' or 'mixed'"),
    Arg("name", "str", None, doc="name used to refer to this operator (readers, external sources)"),
    Arg("preserve", "bool", False, doc="keep the operator even if its outputs are unused"),
    Arg("bytes_per_sample_hint", "any", None, doc="accepted for compatibility; stoker sizes buffers itself"),
    Arg("seed", "int", None, doc="seed of this operator's random stream; derived from the pipeline seed if unset"),
    Arg("on_error", "str", None, doc="'raise', 'skip' or 'substitute' for bad samples (default: pipeline's)"),
)


@dataclass
class Schema:
    """What an operator accepts and produces.

    ``name`` is the dotted ``fn`` name ("resize", "readers.file").
    ``inputs`` is (min, max) positional inputs. ``devices`` lists the placements
    implemented. ``num_outputs`` is an int or a function of the static args.
    ``random`` marks operators that draw random values (a ``seed`` matters).
    ``legacy_name`` is the ``ops`` class name ("Resize", "FileReader").
    """

    name: str
    doc: str
    args: Sequence[Arg] = ()
    inputs: tuple[int, int] = (1, 1)
    devices: tuple[str, ...] = ("cpu",)
    num_outputs: int | Callable[[dict], int] = 1
    random: bool = False
    legacy_name: str | None = None
    extra_legacy_names: tuple[str, ...] = ()
    allow_unknown_args: bool = False
    input_count_arg: str | None = None  # static arg set to the number of positional inputs given
    _by_name: dict[str, Arg] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        for a in (*COMMON_ARGS, *self.args):
            self._by_name[a.name] = a

    def arg(self, name: str) -> Arg | None:
        return self._by_name.get(name)

    def all_args(self) -> list[Arg]:
        return list(self._by_name.values())

    def outputs_for(self, args: dict) -> int:
        return self.num_outputs(args) if callable(self.num_outputs) else self.num_outputs

    def bind(self, kwargs: dict, is_tensor) -> tuple[dict, dict]:
        """Check keyword arguments against the schema.

        Returns (static, tensors): static values converted by their kinds with
        every default filled in, and the per-sample tensor arguments (values for
        which ``is_tensor(value)`` is true) as given. A value of None counts as not
        given, so the argument takes its default. Unknown arguments, a tensor
        where a constant is required, bad types and missing required arguments
        raise PipelineBuildError naming the operator and the argument.
        """
        static, tensors = {}, {}
        for key, value in kwargs.items():
            spec = self.arg(key)
            if spec is None and not self.allow_unknown_args:
                known = ", ".join(sorted(a.name for a in self.all_args() if a.name != "device"))
                raise ArgumentError(f"{self.name}: unknown argument '{key}'. Known arguments: {known}")
            if value is None:
                # An explicit None means "not given" (as in DALI, whose ported pipelines write
                # shard_id=None or crop=None): the default below applies, a required one still errors.
                continue
            if isinstance(value, types.ScalarConstant):  # types.Constant(3) as an argument is its value
                value = value.value
            if is_tensor(value):
                if spec is not None and not spec.tensor:
                    raise arg_error(self.name, key, "takes one constant value, not a per-sample tensor")
                tensors[key] = value
            else:
                static[key] = spec.convert(self.name, value) if spec is not None else value
        for a in self.all_args():
            if a.name in static or a.name in tensors or a.name == "device":
                continue
            if a.default is REQUIRED:
                raise arg_error(self.name, a.name, "is required")
            static[a.name] = a.convert(self.name, a.default)
        return static, tensors

    def doc_string(self) -> str:
        lines = [self.doc.strip(), "", f"Devices: {', '.join(self.devices)}.", "", "Arguments:"]
        for a in self.args:
            default = "required" if a.default is REQUIRED else f"default {a.default!r}"
            per_sample = ", per-sample tensor allowed" if a.tensor else ""
            lines.append(f"  {a.name} ({a.kind}, {default}{per_sample}): {a.doc}")
        return "\n".join(lines)


_REGISTRY: dict[str, type] = {}
# Called as listener(name, cls) after each registration and listener(name, None) after a removal:
# namespaces built once (``ops``) and caches keyed by name (eager mode) follow operators that
# are registered late, from a user's package after ``stoker.fn`` was imported (stoker.custom).
_LISTENERS: list[Callable[[str, type | None], None]] = []


def register(cls):
    """Class decorator: add an operator class to the registry under its schema name."""
    name = cls.schema.name
    if name in _REGISTRY:
        raise RuntimeError(f"operator {name!r} registered twice")
    _REGISTRY[name] = cls
    cls._doc_head = cls.__doc__ or ""
    refresh_doc(cls)
    for listener in list(_LISTENERS):
        listener(name, cls)
    return cls


def unregister(name: str) -> type:
    """Remove operator ``name`` from the registry (``stoker.custom.unregister`` checks it is a
    user's operator first); returns its class."""
    cls = _REGISTRY.pop(name)
    for listener in list(_LISTENERS):
        listener(name, None)
    return cls


def on_register(listener: Callable[[str, type | None], None]) -> None:
    """Call ``listener(name, cls)`` after every later registration (``cls`` None on removal)."""
    _LISTENERS.append(listener)


def refresh_doc(cls) -> None:
    """The class docstring (what ``help(fn.NAME)`` shows): its own text and the schema's, made again
    when the schema's devices grow (GPU placements are added once the GPU modules are loaded)."""
    cls.__doc__ = getattr(cls, "_doc_head", cls.__doc__ or "") + "\n\n" + cls.schema.doc_string()


def get_operator(name: str):
    """The operator class registered under ``name`` (loads the operator modules on first use)."""
    from stoker.operators import load_all

    load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AttributeError(f"stoker has no operator {name!r}") from None


def find_operator(name: str) -> type | None:
    """The operator class registered under ``name`` now, or None; unlike :func:`get_operator` it
    loads no operator modules (for code that runs while they load)."""
    return _REGISTRY.get(name)


def registered() -> dict[str, type]:
    from stoker.operators import load_all

    load_all()
    return dict(_REGISTRY)
