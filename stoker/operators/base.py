"""The operator contract: what the executor and dynamic mode call.

An operator instance is made once per pipeline (or per eager call) with its
static arguments already checked against its schema. Per iteration the
executor calls ``run_cpu`` (host) or ``run_gpu`` (device, incl. "mixed") with
the batch's inputs and the per-sample argument inputs.

Most CPU operators only implement :meth:`Operator.run_sample`; the default
``run_cpu`` maps it over the pipeline's thread pool. Every heavy call inside
(OpenCV, NumPy) releases the GIL, so threads scale.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stoker.errors import OperatorBugError, OperatorError, SampleError, StokerError, detached
from stoker.random_state import SampleRNG, batch_generator
from stoker.tensors import TensorListCPU

# Exceptions of a sample's computation that mean its data is bad, so that on_error applies:
# errors raised on purpose (Operator.error's SampleError), decode and format errors (ValueError,
# struct.error, zlib.error), I/O errors and truncated files (OSError, EOFError), numbers a
# sample's values break (ArithmeticError: a zero-sized image, an overflowing header field) and
# decompression bombs (MemoryError). Any other exception (TypeError, KeyError, IndexError,
# AttributeError, AssertionError, RuntimeError...) is a bug in the operator, or in the user's
# python_function: it becomes an OperatorBugError naming the operator and the sample, raised
# whatever on_error says, since skipping would report a bug as a bad file.
SAMPLE_ERRORS = (SampleError, ValueError, OSError, EOFError, struct.error, zlib.error, ArithmeticError,
                 MemoryError)


@dataclass
class BatchContext:
    """What an operator knows about the batch it runs on."""

    batch_size: int
    iteration: int = 0
    epoch: int = 0
    pool: ThreadPoolExecutor | None = None
    sources: Sequence[str] = ()
    stream: Any = None  # the pipeline's CUDA stream, on the GPU stage
    device_id: int | None = None
    prepared: Any = None  # what a source operator prepared for this batch in advance()
    # GPU stage: positions of the inputs whose device memory the operator may overwrite (this
    # node is their last reader and no other live batch shares their memory); see
    # Operator.gpu_writes_in_place.
    donated: frozenset = frozenset()
    on_error: str = "raise"  # "raise", or "skip"/"substitute": failed samples go to `failures`
    failures: dict = field(default_factory=dict)  # sample index -> OperatorError
    index_offset: int = 0  # added to sample indices for random streams (refilled samples)
    # In a conditional branch: each sample's index in the whole batch (offset included), so a
    # sample's random stream does not depend on which other samples took the branch.
    sample_ids: Sequence[int] | None = None
    # Set by operator fusion (stoker.pipeline.fusion): the default run_cpu then only records the
    # argument inputs its run_sample would get (after any subclass's batch-level checks) and returns.
    fuse_probe: dict | None = None

    def source(self, i: int) -> str:
        return self.sources[i] if i < len(self.sources) else ""

    def sample_index(self, i: int) -> int:
        """The index that keys sample i's random stream."""
        return self.sample_ids[i] if self.sample_ids is not None else i + self.index_offset

    def sample_indices(self, n: int | None = None) -> np.ndarray:
        """``sample_index(i)`` for the first ``n`` samples (default: the batch) as an int64 array."""
        n = self.batch_size if n is None else n
        if self.sample_ids is not None:
            return np.asarray(self.sample_ids[:n], np.int64)
        return np.arange(n, dtype=np.int64) + self.index_offset


class HostHalf:
    """Base of a GPU-stage operator's host-half result (what its ``prepare`` returns, given to its
    run_gpu as ``BatchContext.prepared``) that holds resources: staging buffers, a device buffer
    permit, queued decode jobs. When the batch is dropped before its GPU stage (a refill after a
    failed sample, or the pipeline closing), the executor calls :meth:`cancel`. Results of any
    other type (a reader's sample references, a Future) are never called off."""

    def cancel(self) -> None:
        """Give back what the batch holds; a second call, or one after run_gpu used the result,
        must do nothing."""


@dataclass
class SampleContext:
    """What an operator knows about one sample: where it came from and its random stream."""

    index: int
    iteration: int
    op_seed: int
    source: str = ""
    _rng: SampleRNG | None = field(default=None, repr=False)

    @property
    def rng(self) -> SampleRNG:
        """This sample's counter-based stream (NumPy Generator-like: random, uniform, integers,
        normal, choice)."""
        if self._rng is None:
            self._rng = SampleRNG(self.op_seed, self.iteration, self.index)
        return self._rng


class Operator:
    """Base of all operators. Subclasses set ``schema`` and implement the compute methods."""

    schema: Any = None  # a stoker.operators.schema.Schema

    def __init__(self, args: dict, device: str, *, op_seed: int = 0, origin: str = "", name: str = ""):
        self.args = args
        self.device = device
        self.op_seed = op_seed
        self.origin = origin
        self.instance_name = name or self.schema.name
        self.setup()

    # --- to override ------------------------------------------------------
    def setup(self) -> None:
        """Check and precompute from static arguments (raise PipelineBuildError on bad ones)."""

    def output_layouts(self, input_layouts: list[str]) -> list[str]:
        """Layout of each output given the inputs' layouts (default: the first input's)."""
        first = input_layouts[0] if input_layouts else ""
        return [first] * self.num_outputs

    def run_sample(self, inputs: tuple, args: dict, ctx: SampleContext):
        """Compute one sample on the CPU: return an array or a tuple of arrays."""
        raise NotImplementedError(f"{self.schema.name} has no CPU implementation")

    def run_batch(self, batch: BatchContext, inputs: list[TensorListCPU], arg_inputs: dict[str, list]):
        """Optional: the outputs of :meth:`run_cpu` for the whole batch in a few NumPy steps (where
        run_sample costs a Python call or more per sample), the same values sample for sample; or
        None where only the per-sample path applies. Anything it raises sends the batch to the
        per-sample path too, which raises naming the sample (and applies on_error). An operator
        that has one is not fused into per-sample chains (``pipeline.fusion``)."""
        return None

    def run_cpu(self, batch: BatchContext, inputs: list[TensorListCPU], arg_inputs: dict[str, list]) -> list:
        """Compute a batch on the CPU: :meth:`run_batch` where it applies, else run_sample over
        the thread pool."""
        if batch.fuse_probe is not None:
            batch.fuse_probe["arg_inputs"] = arg_inputs
            return []
        if type(self).run_batch is not Operator.run_batch and (not inputs or len(inputs[0])):
            try:
                out = self.run_batch(batch, inputs, arg_inputs)
            except Exception:  # noqa: BLE001 - the per-sample path below raises it, naming the sample
                out = None
            if out is not None:
                return out
        n = len(inputs[0]) if inputs else batch.batch_size
        sample_inputs = [tuple(t.samples()[i] for t in inputs) for i in range(n)]

        def one(i):
            args = self.sample_args(arg_inputs, i)
            ctx = SampleContext(batch.sample_index(i), batch.iteration, self.op_seed, batch.source(i))
            out = self.run_sample(sample_inputs[i], args, ctx)
            return out if isinstance(out, tuple) else (out,)

        results = self.map_samples(batch, n, one)
        kept = [i for i in range(n) if results[i] is not None]
        sources = [batch.source(i) for i in kept] if batch.sources else None
        layouts = self.output_layouts([t.layout() for t in inputs])
        return [TensorListCPU([results[i][k] for i in kept], layouts[k], sources) for k in range(self.num_outputs)]

    def map_samples(self, batch: BatchContext, n: int, compute) -> list:
        """Run ``compute(i)`` for every sample on the pool, applying the batch's error policy.

        With ``on_error="raise"`` the first failure raises an OperatorError naming
        the operator, its origin and the sample's source. Otherwise failed samples
        give None and are recorded in ``batch.failures`` for the executor.
        """
        policy = self.args.get("on_error") or batch.on_error

        def guarded(i):
            try:
                return compute(i)
            except OperatorBugError as e:
                if e.operator:  # named already (a nested operator's)
                    raise
                raise self.sample_failure(e, batch, i) from e.__cause__
            except OperatorError as e:
                err = e
            except SAMPLE_ERRORS as e:
                err = self.sample_failure(e, batch, i)
                err.__cause__ = e
            except Exception as e:  # noqa: BLE001 - a bug: raised below whatever the policy
                raise self.sample_failure(e, batch, i) from e
            if policy == "raise":
                raise err
            batch.failures[i] = detached(err)
            return None

        if batch.pool is None or n < 2 or not self.parallel_samples:
            return [guarded(i) for i in range(n)]
        # A few contiguous chunks per thread: one pool task per sample costs more in
        # futures and locks (~15 us) than a small sample's work, and holds the GIL doing it.
        chunks = _chunks(n, batch.pool._max_workers * 4)
        results: list = [None] * n

        def run_chunk(bounds):
            for i in range(*bounds):
                results[i] = guarded(i)

        for f in [batch.pool.submit(run_chunk, c) for c in chunks]:
            f.result()
        return results

    def run_gpu(self, batch: BatchContext, inputs: list, arg_inputs: dict[str, list]) -> list:
        """Compute a batch on the GPU (inputs are TensorListGPU, or TensorListCPU for "mixed").

        Default: the function registered in ``stoker.operators.gpu_registry``.
        """
        from stoker.operators import gpu_registry

        return gpu_registry.run_gpu(self, batch, inputs, arg_inputs)

    # --- helpers ------------------------------------------------------------
    parallel_samples = True  # False for operators whose samples must run in order
    # True where the GPU implementation can write its output into a donated input's memory
    # (BatchContext.donated): the executor then works out which inputs it may donate.
    gpu_writes_in_place = False
    # True where run_cpu computes the batch in NumPy steps with no pool and no state between
    # batches, and the instance pickles: it may then run in a helper process, off the pipeline's
    # GIL (stoker.pipeline.batch_offload).
    offload_cpu = False
    # True where run_sample is many NumPy calls on mid-sized arrays (a spectrogram's chunks, a
    # mel bank's blocks): each takes the GIL on its way in and out, so threads running such a
    # fused chain wait for each other. Such a chain then runs in worker processes from 2 threads
    # on (stoker.pipeline.stage_setup.chain_process_count), not only from 8.
    prefers_worker_processes = False
    # True on a class whose own run_cpu only checks batch-level arguments or adds argument inputs
    # and then calls the inherited run_cpu, returning its result unchanged: the samples are still
    # computed by run_sample alone, so pipeline fusion may call run_sample directly. Read from the
    # class that defines run_cpu (its own __dict__), so a subclass that overrides run_cpu again
    # must set it again (stoker.pipeline.fusion.per_sample).
    run_cpu_wraps_samples = False

    @property
    def num_outputs(self) -> int:
        return self.schema.outputs_for(self.args)

    def sample_args(self, arg_inputs: dict[str, list], i: int) -> dict:
        """Static args overlaid with sample i's per-sample argument values (as NumPy/Python values)."""
        if not arg_inputs:
            return self.args
        merged = dict(self.args)
        for k, v in arg_inputs.items():
            spec = self.schema.arg(k) if self.schema is not None else None
            merged[k] = spec.sample_value(v[i]) if spec is not None else _scalarize(v[i])
        return merged

    def batch_rng(self, batch: BatchContext) -> np.random.Generator:
        return batch_generator(self.op_seed, batch.iteration)

    def sample_failure(self, exc: BaseException, batch: BatchContext, i: int) -> OperatorError:
        """The error that reports ``exc``, raised while computing sample ``i``: an OperatorError
        naming the operator and the sample, or an OperatorBugError where ``exc`` is not one of
        :data:`SAMPLE_ERRORS` (the operator's code failed, not the sample's data)."""
        if isinstance(exc, SAMPLE_ERRORS):
            return OperatorError(str(exc) or type(exc).__name__, operator=self.instance_name, origin=self.origin,
                                 source=batch.source(i), sample_index=i)
        reason = str(exc) if isinstance(exc, StokerError) else f"{type(exc).__name__}: {exc}"
        return OperatorBugError(f"{reason} (an error in code, not in the sample's data: on_error does not skip it)",
                                operator=self.instance_name, origin=self.origin, source=batch.source(i),
                                sample_index=i)

    def error(self, message: str) -> SampleError:
        """A per-sample error raised from run_sample (the executor adds operator and source)."""
        return SampleError(message)


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """Split range(n) into at most ``parts`` contiguous (start, stop) pieces of near-equal size."""
    parts = max(1, min(parts, n))
    step, extra = divmod(n, parts)
    bounds, start = [], 0
    for k in range(parts):
        stop = start + step + (1 if k < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _scalarize(v):
    arr = np.asarray(v)
    if arr.ndim == 0:
        return arr.item()
    return arr


def arg_key(v):
    """A hashable stand-in for an argument value (a scalar, a list, a small per-sample array), for
    operators that cache what they compute from their arguments: equal numbers give equal keys."""
    if v is None or isinstance(v, (int, float, str)):
        return v
    try:
        return tuple(float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError):
        return repr(v)


class Reader(Operator):
    """A source operator that walks a data set in epochs, with shuffling and sharding.

    The executor calls :meth:`next_refs` in iteration order on one thread (cheap
    bookkeeping) and :meth:`load` for each reference on the pool (the I/O).
    """

    parallel_samples = True

    def prepare(self) -> None:
        """List the data set (called at build)."""

    def epoch_size(self, padded: bool = False) -> int:
        raise NotImplementedError

    def next_refs(self, n: int) -> list:
        raise NotImplementedError

    def advance(self, batch: BatchContext):
        """Called by the executor in iteration order: the references of the next batch."""
        return self.next_refs(batch.batch_size)

    def load(self, ref) -> tuple:
        raise NotImplementedError

    def source_of(self, ref) -> str:
        return str(ref)

    def meta(self) -> dict:
        return {}

    def state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass

    def run_cpu(self, batch: BatchContext, inputs, arg_inputs):
        refs = batch.prepared  # from advance(), called by the executor in iteration order
        sources = [self.source_of(r) for r in refs]
        batch.sources = sources
        results = self.map_samples(batch, len(refs), lambda i: self.load(refs[i]))
        kept = [i for i in range(len(refs)) if results[i] is not None]
        layouts = self.output_layouts([])
        return [TensorListCPU([results[i][k] for i in kept], layouts[k], [sources[i] for i in kept])
                for k in range(self.num_outputs)]
