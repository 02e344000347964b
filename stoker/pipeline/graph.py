"""A built graph: the reachable operators in order, split into stages, instantiated."""

from __future__ import annotations

from stoker.errors import PipelineBuildError
from stoker.pipeline.data_node import DataNode, OpNode
from stoker.random_state import mix_seed

_DEVICE_COPIES = ("_to_gpu", "_to_cpu")  # what .gpu() and .cpu() insert


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
        # Copies between devices take no place in that order: moving a pipeline's operators to
        # the GPU with .gpu() keeps every random operator's stream (and so its results).
        creation = sorted(order, key=lambda n: n.id)
        self.instances = {}
        k = 0
        for node in creation:
            op_seed = node.args.get("seed")
            op_seed = mix_seed(seed, k) if op_seed is None or op_seed < 0 else mix_seed(op_seed, 0x0505)
            k += node.op_name not in _DEVICE_COPIES
            cls = node.op_class
            self.instances[node.id] = cls(node.args, node.device, op_seed=op_seed, origin=node.origin,
                                          name=node.args.get("name") or node.op_name)
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
