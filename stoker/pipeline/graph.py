"""A built graph: the reachable operators in order, split into stages, instantiated."""

from __future__ import annotations

from stoker.errors import PipelineBuildError
from stoker.pipeline.data_node import DataNode, OpNode
from stoker.random_state import mix_seed

_DEVICE_COPIES = ("_to_gpu", "_to_cpu")  # what .gpu() and .cpu() insert


def operator_seed(pipeline_seed: int, args: dict, k: int) -> int:
    """The seed of the ``k``-th operator a definition created (device copies not counted), or
    the one its own ``seed`` argument gives."""
    own = args.get("seed")
    return mix_seed(pipeline_seed, k) if own is None or own < 0 else mix_seed(own, 0x0505)


def counts_in_seed_order(node: OpNode) -> bool:
    """Whether ``node`` takes a place in the creation order of seeds: copies between devices do
    not, so moving operators to the GPU with .gpu() keeps every random operator's stream."""
    return node.op_name not in _DEVICE_COPIES


def make_instance(node: OpNode, op_seed: int):
    """The operator object that runs ``node``."""
    return node.op_class(node.args, node.device, op_seed=op_seed, origin=node.origin,
                         name=node.args.get("name") or node.op_name)


class Graph:
    """Operators reachable from ``outputs`` (plus ``preserve=True`` ones), topologically ordered.

    ``cpu_nodes`` run in the CPU stage; ``gpu_nodes`` ("mixed", "gpu", and CPU
    operators that consume GPU results) run in the GPU stage.
    """

    def __init__(self, outputs: list[DataNode], recorded: list[OpNode], seed: int):
        self.outputs = outputs
        order: list[OpNode] = []
        seen: set[int] = set()

        def visit(node: OpNode, stack: tuple = ()):
            if node.id in seen:
                return
            for x in [*node.inputs, *node.arg_inputs.values(), *node.control_inputs]:
                visit(x.source, stack + (node.id,))
            seen.add(node.id)
            order.append(node)

        for out in outputs:
            if not isinstance(out, DataNode):
                raise PipelineBuildError(
                    f"pipeline outputs must be DataNodes returned by operators, got {type(out).__name__}")
            if out.source.scope is not None:
                raise PipelineBuildError(
                    f"output {out!r} was produced inside a branch of {out.source.scope.what} and not merged: "
                    "assign it to a variable in both branches (or before the if)")
            visit(out.source)
        for node in recorded:
            if node.args.get("preserve") and node.id not in seen:
                visit(node)
        self.nodes = order
        names = [n.args["name"] for n in order if n.args.get("name")]
        dup = {x for x in names if names.count(x) > 1}
        if dup:
            raise PipelineBuildError(f"operator names must be unique in a pipeline; repeated: {sorted(dup)}")

        on_gpu_stage: set[int] = set()
        for node in order:
            upstream_gpu = any(x.source.id in on_gpu_stage for x in node.inputs)
            if node.device in ("gpu", "mixed") or upstream_gpu:
                on_gpu_stage.add(node.id)
        self.cpu_nodes = [n for n in order if n.id not in on_gpu_stage]
        self.gpu_nodes = [n for n in order if n.id in on_gpu_stage]
        for n in self.gpu_nodes:
            for k, x in n.arg_inputs.items():
                if x.source.id in on_gpu_stage:
                    raise PipelineBuildError(f"{n.describe()}: argument '{k}' depends on GPU results; "
                                             "argument inputs must come from CPU operators")

        # Operator seeds follow creation order, so the same definition gives the same streams.
        # Every operator the definition created counts, used or not: debug mode runs them all
        # as they are called, before it can know which ones the outputs need, and must give
        # each the seed it has here (stoker.pipeline.debug).
        creation = sorted(order, key=lambda n: n.id)
        counted = sorted({n.id: n for n in [*order, *recorded]}.values(), key=lambda n: n.id)
        self.instances = {}
        k = 0
        for node in counted:
            if node.id in seen:
                self.instances[node.id] = make_instance(node, operator_seed(seed, node.args, k))
            k += counts_in_seed_order(node)
        self.source_nodes = [n for n in creation if hasattr(self.instances[n.id], "advance")]

    # --- lookups --------------------------------------------------------
    def find(self, name: str) -> OpNode:
        for n in self.nodes:
            if n.instance_name == name:
                return n
        known = [n.args["name"] for n in self.nodes if n.args.get("name")]
        raise KeyError(f"no operator named {name!r} in the pipeline (named operators: {known})")

    def instance(self, name: str):
        return self.instances[self.find(name).id]

    def readers(self):
        from stoker.operators.base import Reader

        return [(n, self.instances[n.id]) for n in self.nodes if isinstance(self.instances[n.id], Reader)]

    # --- checkpoint state ------------------------------------------------
    def source_state(self, iteration: int) -> dict:
        from stoker.pipeline.checkpoint import source_key

        states = {}
        for k, node in enumerate(self.source_nodes):
            st = self.instances[node.id].state()
            if st:
                states[source_key(k, node)] = st
        return {"iteration": iteration, "sources": states}

    def set_source_state(self, state: dict) -> None:
        """Move the sources to a checkpoint's positions (parsed by ``checkpoint.parse``); raises
        CheckpointError where they do not fit this graph's sources."""
        from stoker.pipeline.checkpoint import restore_sources

        restore_sources(self, state)
