"""The traced graph: ``OpNode`` (one operator instance) and ``DataNode`` (one of its outputs).

Calling ``fn.resize(images, ...)`` inside a pipeline definition does no work:
it checks the arguments against the operator's schema and records an
``OpNode``. Its outputs are ``DataNode`` objects that support Python
arithmetic, comparisons, indexing and ``.gpu()``, each of which records more
nodes.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from stoker import types
from stoker.errors import ArgumentError, PipelineBuildError, arg_error
from stoker.operators.schema import get_operator

_node_ids = itertools.count()
_STOKER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def new_node_id() -> int:
    """A fresh operator node id: ids grow in creation order (the order seeds are given in)."""
    return next(_node_ids)


def user_origin() -> str:
    """file:line of the first stack frame outside stoker (where the user created the operator)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_STOKER_DIR + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return ""


@dataclass(eq=False)
class OpNode:
    """One operator instance in a traced graph."""

    op_name: str
    device: str
    args: dict
    inputs: list[DataNode]
    arg_inputs: dict[str, DataNode]
    origin: str
    instance_name: str | None = None
    id: int = field(default_factory=new_node_id)
    outputs: list[DataNode] = field(default_factory=list)
    scope: object = None  # the conditional branch it runs in (stoker.pipeline.conditionals.Scope)
    control_inputs: list[DataNode] = field(default_factory=list)  # run after these, take no data

    @property
    def op_class(self):
        return get_operator(self.op_name)

    def describe(self) -> str:
        given = self.args.get("name")
        label = f"{self.op_name}" + (f" '{given}'" if given else "")
        return f"{label} (device='{self.device}', created at {self.origin})"


class DataNode:
    """A symbolic batch produced by an operator in a pipeline definition."""

    __array_priority__ = 1000  # make NumPy defer to our operators (np.float32(2) * node)

    def __init__(self, op: OpNode, index: int, device: str):
        self.source = op
        self.index = index
        self.device = device

    @property
    def name(self) -> str:
        base = self.source.instance_name
        return base if self.index == 0 else f"{base}[{self.index}]"

    def __repr__(self) -> str:
        return f"DataNode(name={self.name!r}, device={self.device!r})"

    # --- placement ------------------------------------------------------
    def gpu(self) -> DataNode:
        """This batch copied to the GPU (DALI's ``.gpu()``)."""
        if self.device == "gpu":
            return self
        return invoke("_to_gpu", [self], {}, device="mixed")

    def cpu(self) -> DataNode:
        """This batch copied back to the host."""
        if self.device == "cpu":
            return self
        return invoke("_to_cpu", [self], {}, device="cpu_from_gpu")

    def shape(self, dtype=None, device="cpu") -> DataNode:
        """The samples' shapes, on ``device`` (the host by default, also for GPU data, as DALI)."""
        kwargs = {} if dtype is None else {"dtype": dtype}
        return invoke("shapes", [self], kwargs, device=device)

    def property(self, key: str, device="cpu") -> DataNode:
        """A property of each sample (``"layout"``, ``"source_info"``), on ``device``."""
        return invoke("get_property", [self], {"key": key}, device=device)

    def source_info(self) -> DataNode:
        return self.property("source_info")

    def __bool__(self):
        raise TypeError(
            f"{self!r} is a symbolic batch: its value is known only when the pipeline runs, so it cannot "
            "be used in a Python 'if', 'and', 'or' or 'not' while the pipeline is defined. Use "
            "@pipeline_def(enable_conditionals=True) (per-sample if/elif/else, and/or/not), or arithmetic "
            "masks."
        )

    def __iter__(self):
        raise TypeError(f"{self!r} is a symbolic batch and cannot be iterated while defining a pipeline")

    __hash__ = object.__hash__

    # --- arithmetic -----------------------------------------------------
    def _bin(self, op, other, reverse=False):
        a, b = (other, self) if reverse else (self, other)
        return arithmetic(op, a, b)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("fdiv", o)
    def __rtruediv__(self, o): return self._bin("fdiv", o, True)
    def __floordiv__(self, o): return self._bin("div", o)
    def __rfloordiv__(self, o): return self._bin("div", o, True)
    def __mod__(self, o): return self._bin("mod", o)
    def __rmod__(self, o): return self._bin("mod", o, True)
    def __pow__(self, o): return self._bin("pow", o)
    def __rpow__(self, o): return self._bin("pow", o, True)
    def __and__(self, o): return self._bin("bitand", o)
    def __rand__(self, o): return self._bin("bitand", o, True)
    def __or__(self, o): return self._bin("bitor", o)
    def __ror__(self, o): return self._bin("bitor", o, True)
    def __xor__(self, o): return self._bin("bitxor", o)
    def __rxor__(self, o): return self._bin("bitxor", o, True)
    def __eq__(self, o): return self._bin("eq", o)  # noqa: D105 - symbolic comparison, as DALI
    def __ne__(self, o): return self._bin("neq", o)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("leq", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("geq", o)

    def __neg__(self):
        return invoke("_arithmetic", [self], {"expr": "neg"}, device=self.device)

    def __pos__(self):
        return self

    def __invert__(self):
        return invoke("_arithmetic", [self], {"expr": "bitnot"}, device=self.device)

    def __getitem__(self, key):
        return subscript(self, key)


def _as_input(x, device_hint: str):
    if isinstance(x, DataNode):
        return x
    return constant_node(x, device=None)


def arithmetic(op: str, a, b) -> DataNode:
    """A binary arithmetic node; Python scalars become constants folded into the operator."""
    nodes = [x for x in (a, b) if isinstance(x, DataNode)]
    device = "gpu" if any(n.device == "gpu" for n in nodes) else "cpu"
    args = {"expr": op}
    inputs = []
    for slot, x in (("lhs", a), ("rhs", b)):
        if isinstance(x, DataNode):
            inputs.append(x)
            args[slot] = None
        elif isinstance(x, (int, float, bool, np.integer, np.floating, np.bool_)):
            args[slot] = x
        elif isinstance(x, types.ScalarConstant):  # folded as a NumPy scalar, whose dtype sets promotion
            args[slot] = x.numpy_value()
        else:
            inputs.append(constant_node(x))
            args[slot] = None
    if device == "gpu":
        inputs = [i.gpu() for i in inputs]
    return invoke("_arithmetic", inputs, args, device=device)


def subscript(node: DataNode, key) -> DataNode:
    """``node[...]``: per-sample indexing and slicing (DALI's tensor subscript)."""
    if not isinstance(key, tuple):
        key = (key,)
    spec = []
    arg_inputs = {}
    for i, k in enumerate(key):
        if k is Ellipsis:
            spec.append(("ellipsis",))
        elif k is None:
            spec.append(("newaxis",))
        elif isinstance(k, slice):
            parts = []
            for j, v in enumerate((k.start, k.stop, k.step)):
                if isinstance(v, DataNode):
                    arg_inputs[f"s{i}_{j}"] = v
                    parts.append(f"s{i}_{j}")
                else:
                    parts.append(v)
            spec.append(("slice", *parts))
        elif isinstance(k, DataNode):
            arg_inputs[f"i{i}"] = k
            spec.append(("index", f"i{i}"))
        else:
            spec.append(("index", int(k)))
    return invoke("_subscript", [node], {"spec": spec, **arg_inputs}, device=node.device)


def constant_node(value, dtype=None, shape=None, layout=None, device=None, **kwargs) -> DataNode:
    """A node that produces the same value for every sample (a ScalarConstant keeps its type)."""
    if isinstance(value, types.ScalarConstant):
        value, dtype = value.value, value.dtype if dtype is None else dtype
    args = {"fdata": None, "idata": None, "value": np.asarray(value), "dtype": dtype, "shape": shape,
            "layout": layout, **kwargs}
    return invoke("constant", [], args, device=device or "cpu")


# --- tracing -----------------------------------------------------------------

_tls = threading.local()


def _current_graph_recorder():
    return getattr(_tls, "recorder", None)


class GraphRecorder:
    """Collects OpNodes created while a pipeline's graph is being defined."""

    def __init__(self):
        self.nodes: list[OpNode] = []

    def __enter__(self):
        self._prev = getattr(_tls, "recorder", None)
        _tls.recorder = self
        return self

    def __exit__(self, *exc):
        _tls.recorder = self._prev

    def add(self, node: OpNode) -> None:
        """Record ``node`` (debug mode's recorder also runs it here and swaps its outputs)."""
        self.nodes.append(node)


_INTERNAL_DEVICES = {"cpu_from_gpu": "cpu"}
# Operators that read only their input's shapes and properties: as DALI's CPU forms, they take GPU
# batches too, and give host data.
_METADATA_OPS = ("shapes", "get_property")


# Operators whose last input (a per-sample if's predicate) stays a CPU batch on the GPU.
_HOST_PREDICATE_OPS = ("_conditional.split", "_conditional.merge", "_conditional.merge_cases")


def invoke(op_name: str, inputs: list, kwargs: dict, device: str | None = None) -> DataNode | tuple:
    """Record one operator call. Returns one DataNode or a tuple of them."""
    cls = get_operator(op_name)
    schema = cls.schema
    kwargs = dict(kwargs)
    requested = kwargs.pop("device", None) or device
    lo, hi = schema.inputs
    if not lo <= len(inputs) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise ArgumentError(f"{op_name}: expected {want} positional inputs, got {len(inputs)}")
    inputs = [_as_input(x, "cpu") for x in inputs]
    in_dev = {x.device for x in inputs}
    if requested is None:
        requested = "gpu" if "gpu" in in_dev else "cpu"
    placement = _INTERNAL_DEVICES.get(requested, requested)
    if requested not in ("cpu", "gpu", "mixed", "cpu_from_gpu"):
        raise arg_error(op_name, "device", f"must be 'cpu', 'gpu' or 'mixed', got {requested!r}")
    if placement not in schema.devices and requested not in schema.devices:
        raise arg_error(op_name, "device",
                        f"'{requested}' is not available; this operator runs on {', '.join(schema.devices)}")
    if placement == "cpu" and requested == "cpu" and "gpu" in in_dev and op_name in _METADATA_OPS:
        requested = "cpu_from_gpu"  # (runs after its input in the GPU stage; its output is host data)
    if placement == "cpu" and requested == "cpu" and "gpu" in in_dev:
        raise PipelineBuildError(
            f"{op_name}: a CPU operator cannot take a GPU input ({[x.name for x in inputs if x.device == 'gpu']}); "
            "move the operator to the GPU with device='gpu' or keep the data on the CPU")
    if placement == "gpu" and op_name not in ("_to_gpu",):
        # (a per-sample if's predicate stays on the host: the GPU stage reads it to split/merge)
        keep = len(inputs) - 1 if op_name in _HOST_PREDICATE_OPS else len(inputs)
        inputs = [x if x.device == "gpu" or i >= keep else x.gpu() for i, x in enumerate(inputs)]
    static, arg_nodes = schema.bind(kwargs, lambda v: isinstance(v, DataNode))
    if schema.input_count_arg:  # e.g. random_bbox_crop: a labels input adds an output
        static[schema.input_count_arg] = len(inputs)
    for key, value in arg_nodes.items():
        if value.device != "cpu":
            raise arg_error(op_name, key, "per-sample argument inputs must be CPU batches")
    from stoker.pipeline import conditionals  # imports this module

    inputs, arg_nodes, scope, control = conditionals.scoped_inputs(op_name, inputs, arg_nodes)
    name = static.get("name")
    node = OpNode(op_name, requested if requested == "mixed" else placement, static, inputs, arg_nodes,
                  user_origin(), name, scope=scope, control_inputs=control)
    if not node.instance_name:
        node.instance_name = f"__{op_name.replace('.', '_')}_{node.id}"
    out_device = "gpu" if requested in ("gpu", "mixed") else "cpu"
    n_out = schema.outputs_for(static)
    node.outputs = [DataNode(node, i, out_device) for i in range(n_out)]
    rec = _current_graph_recorder()
    if rec is not None:
        rec.add(node)
    names = getattr(schema, "output_names", None)  # readers.tfrecord: a dict keyed by feature name
    if names is not None and names(static) is not None:
        return dict(zip(names(static), node.outputs))
    as_list = getattr(schema, "outputs_as_list", None)  # e.g. external_source with num_outputs given
    if as_list is not None and as_list(static):
        return list(node.outputs)
    return node.outputs[0] if n_out == 1 else tuple(node.outputs)
