"""``Pipeline.serialize()`` / ``Pipeline.deserialize()``: a pipeline's graph as one file.

The format is stoker's own (not DALI's protobuf): a header line, then a pickle of
the pipeline's settings and its traced graph (the ``OpNode``/``DataNode`` objects
with their static arguments). Loading it in another process rebuilds the same
graph, and since operator seeds are a function of the pipeline seed and the
operators' creation order (kept: node ids are renumbered in their old order),
the same random streams.

Python callables among the arguments (``external_source`` sources,
``python_function`` functions) travel by pickle, so they must be importable by
name in the loading process: module-level functions and classes, not lambdas,
closures or generators. A callable that does not pickle fails ``serialize()``
with an error naming the operator and the argument.

Operators the outputs do not need are kept only as placeholders (their name and
place in the creation order, for the seeds), so their arguments need not pickle.
Custom operators (``stoker.custom``) must be registered in the loading process
before ``deserialize()``.
"""

from __future__ import annotations

import io
import pickle

from stoker.errors import StokerError
from stoker.pipeline.conditionals import Scope
from stoker.pipeline.data_node import DataNode, OpNode, new_node_id

MAGIC = b"stoker-pipeline 1\n"

# The Pipeline settings a serialized pipeline carries (deserialize's keyword arguments override them).
SETTINGS = ("batch_size", "num_threads", "device_id", "seed", "exec_pipelined", "exec_async",
            "prefetch_queue_depth", "py_num_workers", "py_start_method", "on_error", "max_pixels")


class _Pickler(pickle.Pickler):
    """Pickles the graph of ``used`` nodes; other nodes become placeholders without arguments,
    and conditional scopes drop their cache of split nodes (rebuilt by nobody: only tracing uses it)."""

    def __init__(self, file, used: set[int]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.used = used

    def reducer_override(self, obj):
        if type(obj) is OpNode and obj.id not in self.used:
            return _stub_node, (obj.op_name, obj.device, obj.instance_name, obj.id)
        if type(obj) is Scope and obj.splits:
            return _scope, (obj.parent, obj.predicate, obj.branch, obj.what, obj.cases, obj.id)
        return NotImplemented


def _stub_node(op_name: str, device: str, instance_name: str, node_id: int) -> OpNode:
    return OpNode(op_name, device, {}, [], {}, "", instance_name, node_id)


def _scope(parent, predicate, branch, what, cases, scope_id) -> Scope:
    return Scope(parent, predicate, branch, what, cases, scope_id)


def _reachable(outputs: list[DataNode], recorded: list[OpNode]) -> list[OpNode]:
    seen: dict[int, OpNode] = {}
    stack = [o.source for o in outputs] + [n for n in recorded if n.args.get("preserve")]
    while stack:
        node = stack.pop()
        if node.id in seen:
            continue
        seen[node.id] = node
        stack.extend(x.source for x in [*node.inputs, *node.arg_inputs.values(), *node.control_inputs])
    return list(seen.values())


def _check_args(node: OpNode) -> None:
    """Raise a StokerError naming ``node`` and the argument that does not pickle."""
    for key, value in node.args.items():
        try:
            pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - pickle raises many types
            what = getattr(value, "__qualname__", type(value).__name__)
            raise StokerError(
                f"serialize(): {node.describe()}: argument '{key}' ({what}) cannot be pickled "
                f"({type(e).__name__}: {e}). A serialized pipeline carries Python callables by name: use a "
                "function or class defined at module level (not a lambda, a closure, a generator object or an "
                "open file), or a list of arrays") from None


def dumps(pipe) -> bytes:
    """The bytes of pipeline ``pipe`` (traced if it was not yet)."""
    outputs, recorded = pipe._outputs, pipe._recorded
    used = _reachable(outputs, recorded)
    for node in sorted(used, key=lambda n: n.id):
        _check_args(node)
    settings = {k: getattr(pipe, k) for k in SETTINGS}
    settings.update(dict.fromkeys(pipe._auto, "auto"))  # (tuned again where it is loaded)
    settings["enable_checkpointing"] = pipe._enable_checkpointing
    from stoker import __version__

    payload = {"stoker": __version__, "settings": settings, "outputs": outputs, "recorded": recorded}
    buf = io.BytesIO()
    buf.write(MAGIC)
    try:
        _Pickler(buf, {n.id for n in used}).dump(payload)
    except Exception as e:  # noqa: BLE001 - something other than an argument (a layout object ...)
        raise StokerError(f"serialize(): the pipeline's graph cannot be pickled: {type(e).__name__}: {e}") from None
    return buf.getvalue()


def loads(data: bytes) -> tuple[dict, list[DataNode], list[OpNode]]:
    """(settings, outputs, recorded nodes) of serialized bytes; node ids renumbered for this process."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StokerError(f"deserialize(): expected the bytes of Pipeline.serialize(), got {type(data).__name__}")
    data = bytes(data)
    if not data.startswith(MAGIC):
        raise StokerError("deserialize(): not a stoker pipeline (a DALI protobuf pipeline cannot be loaded; "
                          "serialize the pipeline with stoker)")
    try:
        payload = pickle.loads(data[len(MAGIC):])
    except (AttributeError, ModuleNotFoundError, ImportError) as e:
        raise StokerError(f"deserialize(): a Python object of the pipeline cannot be found in this process ({e}); "
                          "import the module that defines it (or run from the directory it lives in)") from None
    outputs, recorded = payload["outputs"], payload["recorded"]
    nodes = {n.id: n for n in [*recorded, *_reachable(outputs, recorded)]}
    from stoker.operators.schema import get_operator

    for old_id in sorted(nodes):  # new ids in the old order: the creation order (and seeds) stay
        node = nodes[old_id]
        node.id = new_node_id()
        try:
            get_operator(node.op_name)
        except AttributeError:
            raise StokerError(f"deserialize(): operator {node.op_name!r} is not registered in this process; "
                              "import the module that registers it (stoker.custom) first") from None
    return payload["settings"], outputs, recorded
