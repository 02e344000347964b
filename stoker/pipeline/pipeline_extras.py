"""Pipeline methods that save, load, prepare and describe a pipeline: ``serialize``,
``deserialize``, ``start_py_workers``, ``reader_meta``, ``epoch_size`` and ``tuning`` (a base class
of :class:`stoker.pipeline.pipeline.Pipeline`, kept apart so that each file stays small)."""

from __future__ import annotations

import copy
import inspect

from stoker.errors import StokerError


class PipelineExtras:
    """Saving and loading a pipeline's graph, starting its Python workers early, and what it reads
    and was tuned to."""

    def _trace(self) -> None:
        """Trace ``define_graph`` (the legacy way of defining a pipeline) if no outputs are set yet."""
        if self._outputs is None:
            with self:
                outs = self.define_graph()
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            self.set_outputs(*outs)

    def serialize(self, define_graph=None, filename: str | None = None) -> bytes:
        """The pipeline's graph and settings as bytes (stoker's format: :mod:`stoker.pipeline.serialize`);
        also written to ``filename`` when given. :meth:`deserialize` rebuilds it, in any process, with
        the same random streams. Python callables among the arguments must pickle."""
        from stoker.pipeline import serialize

        if define_graph is not None:
            raise StokerError("serialize(define_graph=...) is not supported; set the outputs before serializing")
        self._trace()
        data = serialize.dumps(self)
        if filename is not None:
            with open(filename, "wb") as f:
                f.write(data)
        return data

    @classmethod
    def deserialize(cls, serialized_pipeline: bytes | None = None, filename: str | None = None, **kwargs):
        """A new pipeline from :meth:`serialize`'s bytes or file; keyword arguments override its
        settings (``batch_size``, ``num_threads``, ``device_id``, ``seed``, ...). Not built yet."""
        from stoker.pipeline import serialize
        from stoker.pipeline.pipeline import Pipeline

        if (serialized_pipeline is None) == (filename is None):
            raise StokerError("deserialize(): give exactly one of serialized_pipeline= and filename=")
        if filename is not None:
            with open(filename, "rb") as f:
                serialized_pipeline = f.read()
        settings, outputs, recorded = serialize.loads(serialized_pipeline)
        allowed = set(inspect.signature(Pipeline.__init__).parameters) - {"self", "checkpoint"}
        unknown = set(kwargs) - allowed
        if unknown:
            raise StokerError(f"deserialize(): unknown Pipeline arguments {sorted(unknown)}")
        pipe = Pipeline(**{**settings, **kwargs})
        pipe._recorded = list(recorded)
        pipe._outputs = list(outputs)
        return pipe

    def start_py_workers(self) -> None:
        """Start the worker processes of ``external_source(parallel=True)`` now.

        With ``py_start_method="fork"`` the workers are copies of this process: call this before
        anything that must not be forked (CUDA, threads of a framework) starts. ``build()`` starts
        them anyway when this was not called; nothing happens for a pipeline without parallel
        sources, or one already built."""
        if self._built or getattr(self, "_early_graph", None) is not None:
            return
        self._trace()
        if not any(n.op_name == "external_source" and n.args.get("parallel") for n in self._recorded):
            return
        from stoker.pipeline.graph import Graph

        graph = Graph(self._outputs, self._recorded, self._seed)
        for inst in graph.instances.values():
            if hasattr(inst, "start_workers"):
                inst.start_workers(self)
        self._early_graph = graph  # build() uses it, so the started workers are the ones that run

    def reader_meta(self, name: str | None = None) -> dict:
        """Epoch size, padding and sharding of the reader ``name`` (or all readers, by name)."""
        self.build()
        if name is None:
            return {n.args.get("name") or n.instance_name: r.meta() for n, r in self._graph.readers()}
        inst = self._graph.instance(name)
        if not hasattr(inst, "meta"):
            raise StokerError(f"reader_meta: operator {name!r} is not a reader")
        return inst.meta()

    def epoch_size(self, name: str | None = None):
        """Samples per epoch of the reader ``name`` (or a dict for all readers)."""
        if name is not None:
            return self.reader_meta(name)["epoch_size"]
        return {k: v["epoch_size"] for k, v in self.reader_meta().items()}

    def tuning(self) -> dict:
        """The ``num_threads`` and ``prefetch_queue_depth`` in use (builds the pipeline): with "auto",
        how they were chosen. Keys: ``num_threads``, ``prefetch_queue_depth``, ``auto`` (the
        settings that were "auto"), ``candidates`` (each tried: ``num_threads``,
        ``prefetch_queue_depth``, ``batches_per_s``, ``batches`` timed), ``seconds`` (the tuning's
        time), ``why`` ("measured", "fixed: given by the caller", or "heuristic: " and the reason
        no trials ran) and ``hw_decoder_load`` (not tuned, and why): see :mod:`stoker.pipeline.tuning`."""
        self.build()
        if self._tuning is None:  # (debug mode with fixed settings)
            from stoker.pipeline.tuning import HW_DECODER_LOAD

            return {"num_threads": self._num_threads, "prefetch_queue_depth": self._prefetch_queue_depth,
                    "auto": [], "candidates": [], "seconds": 0.0, "why": "fixed: given by the caller",
                    "hw_decoder_load": HW_DECODER_LOAD}
        return copy.deepcopy(self._tuning)
