"""``DALIDataset``: a stoker pipeline as a ``tf.data.Dataset``, through a Python generator."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from stoker.plugin.tf._convert import check_dtype, dense_batch, fit_shape, normalize_dtypes, normalize_shapes

_log = logging.getLogger("stoker.plugin.tf")
_WHO = "DALIDataset"


class Input:
    """One input of :class:`DALIDataset` (DALI's ``experimental.Input``): a ``tf.data.Dataset``
    feeding the pipeline's ``fn.external_source`` of the same name, with options that override
    the external source's own.

    ``layout``: the layout of the data (None: the external source's; both given must agree).
    ``batch``: False (the default): each element of ``dataset`` is one sample, and the
    pipeline's batch is made of ``batch_size`` consecutive elements; True: each element is a whole
    batch (the outer dimension is the sample); None: the external source's ``batch`` argument
    (True where it has none).
    """

    def __init__(self, dataset, *, layout=None, batch=False):
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"Input: the dataset must be a tf.data.Dataset, got {type(dataset).__name__}")
        self.dataset = dataset
        self.layout = layout
        self.batch = batch

    def __repr__(self) -> str:
        return f"Input({self.dataset!r}, layout={self.layout!r}, batch={self.batch!r})"


class _Feed:
    """One input dataset bound to its external source: next batch, or None at the end."""

    def __init__(self, name: str, dataset, layout: str, batch: bool):
        spec = dataset.element_spec
        if not isinstance(spec, tf.TensorSpec):
            raise TypeError(f"{_WHO}: input_datasets[{name!r}]: each element must be one tensor (DALI feeds one "
                            f"external source per dataset), got elements of {spec}")
        self.name, self.dataset, self.layout, self.batch = name, dataset, layout, batch

    def next_batch(self, it, batch_size: int):
        if self.batch:
            try:
                return np.asarray(next(it))
            except StopIteration:
                return None
        samples = []
        for _ in range(batch_size):  # a sample-mode input that ends mid-batch ends the data (DALI drops the rest)
            try:
                samples.append(np.asarray(next(it)))
            except StopIteration:
                return None
        return samples


def _placement() -> str:
    """The device type TensorFlow places new ops on here (``with tf.device``): "GPU" or "CPU"."""
    try:
        if tf.executing_eagerly():
            from tensorflow.python.eager import context

            name = context.context().device_name
        else:
            top = tf.compat.v1.get_default_graph()._device_function_stack.peek_top_obj()
            name = getattr(top, "display_name", "") or ""
        return (tf.DeviceSpec.from_string(name or "").device_type or "CPU").upper()
    except Exception:  # noqa: BLE001 - a private hook that moved: assume the default, CPU
        return "CPU"


def _external_sources(pipe) -> tuple[dict, dict]:
    """The graph's external sources: (placeholders by name, ones with a ``source`` by name)."""
    placeholders, with_source = {}, {}
    for node in pipe._graph.nodes:
        if node.op_name != "external_source":
            continue
        if node.args.get("source") is not None:
            with_source[node.instance_name] = node
        else:
            placeholders[node.args.get("name") or node.instance_name] = node
    return placeholders, with_source


class _Runner:
    """Drives one pipeline for the generator(s) of a dataset: one iterator at a time owns it."""

    def __init__(self, pipe, out_dtypes, out_shapes, single: bool, feeds: list[_Feed]):
        self.pipe = pipe
        self.dtypes, self.shapes, self.single, self.feeds = out_dtypes, out_shapes, single, feeds
        self.lock = threading.Lock()
        self.owner = 0

    def _convert(self, outs) -> tuple | np.ndarray:
        if len(outs) != len(self.dtypes):
            raise ValueError(f"{_WHO}: the pipeline gave {len(outs)} outputs, output_dtypes names {len(self.dtypes)}")
        result = []
        for k, (out, dtype, shape) in enumerate(zip(outs, self.dtypes, self.shapes)):
            arr = dense_batch(out, k, _WHO)
            check_dtype(arr, dtype, k, _WHO)
            fitted = fit_shape(shape, arr.shape, self.pipe.max_batch_size, k, _WHO)
            result.append(arr.reshape(fitted) if fitted != arr.shape else arr)
        return result[0] if self.single else tuple(result)

    def _take_over(self) -> int:
        with self.lock:
            self.owner += 1
            return self.owner

    def _check_owner(self, me: int) -> None:
        if self.owner != me:
            raise RuntimeError(f"{_WHO}: another iterator over this dataset has taken over its pipeline (a stoker "
                               "DALIDataset runs one live pipeline: iterate it with one iterator at a time)")

    def generate(self):
        me = self._take_over()
        with self.lock:
            self.pipe.reset()  # a new pass after external sources ended the last one (no-op otherwise)
        if self.feeds:
            yield from self._generate_with_inputs(me)
            return
        while True:
            with self.lock:
                self._check_owner(me)
                try:
                    outs = self.pipe.run()
                except StopIteration:  # a finite external_source(source=...) ended the data
                    return
                element = self._convert(outs)
            yield element

    def _generate_with_inputs(self, me: int):
        iterators = [iter(f.dataset) for f in self.feeds]
        batch_size = self.pipe.max_batch_size
        while True:
            batches = []
            for feed, it in zip(self.feeds, iterators):
                b = feed.next_batch(it, batch_size)
                if b is None:  # an input ended: so does the dataset (as DALI's)
                    return
                batches.append(b)
            with self.lock:
                self._check_owner(me)
                for feed, b in zip(self.feeds, batches):
                    self.pipe.feed_input(feed.name, b, layout=feed.layout or None)
                try:
                    outs = self.pipe.run()
                except StopIteration:
                    return
                element = self._convert(outs)
            yield element


class DALIDataset(tf.data.Dataset):
    """A stoker pipeline as a ``tf.data.Dataset`` (DALI's ``nvidia.dali.plugin.tf.DALIDataset``).

    Each element is one batch of the pipeline: a tensor per output, the batch first, in a tuple
    (or a single tensor when ``output_dtypes`` is a single ``tf.DType``). It is a real
    ``tf.data.Dataset``: ``take``, ``map``, ``prefetch``, iteration in eager mode and in
    ``tf.function``, and Keras ``model.fit(dataset, steps_per_epoch=...)`` work.

    How it runs, and what that means: stoker has no compiled TensorFlow op (DALI's plugin is a
    C++ dataset kernel). The dataset is ``tf.data.Dataset.from_generator`` over a Python generator
    that runs the live ``pipeline`` object, so

    * every batch passes through the Python interpreter (the GIL) on its way into TensorFlow;
      the pipeline's own worker threads still do the work, in parallel over samples and ahead by
      its ``prefetch_queue_depth``. Add ``.prefetch(n)`` to overlap the generator with training;
      ``tf.data``'s own parallelism (``num_parallel_calls``, autotuning) does not apply to it,
      and the dataset cannot be serialized, checkpointed or sent to a tf.data service or other
      process;
    * elements are host (CPU) tensors. A GPU pipeline's outputs are copied to host memory once
      (TensorFlow copies them to its GPU where a GPU op consumes them). To keep GPU batches on the
      GPU use :func:`to_tf` or :func:`DALIIterator`, which hand them over by DLPack;
    * one live pipeline serves the dataset: one iterator at a time. A new iterator (each
      ``iter(ds)``, each ``for`` loop, a Keras epoch without ``steps_per_epoch``...) takes the
      pipeline over and continues its stream where the last one stopped (DALI builds a fresh copy
      of the pipeline per iterator, which restarts the data); resuming an older iterator after
      that raises an error.

    Epochs: as DALI's, the dataset does not end at a reader's epoch boundary: readers wrap around
    and the dataset is infinite (its cardinality says so), so give Keras ``steps_per_epoch``, or
    use ``take``. With ``input_datasets``, the dataset ends when one of them ends (in sample mode,
    a batch left incomplete is dropped); a finite ``external_source(source=...)`` ends it too.

    Arguments (DALI's):
      pipeline: a stoker ``Pipeline`` (built here if it is not).
      output_dtypes: one ``tf.DType`` per output (a tuple), or one ``tf.DType`` for a pipeline
        with one output; required. stoker types (``types.FLOAT``) are accepted too. A batch of
        another type raises an error naming the output.
      output_shapes: one shape per output (None or partial shapes allowed), the batch first; a
        batch of 1 may leave it out: as DALI, size-1 dimensions of the pipeline's shape are
        dropped to fit the shape asked for where that is unambiguous. A batch that fits no way
        raises an error naming the output.
      fail_on_device_mismatch: True: the pipeline's outputs must be on the device type the
        dataset is placed on (``with tf.device("/gpu:0")`` at construction: GPU; else CPU), or
        the construction raises (DALI checks when an iterator starts). False: a warning is logged
        and the data moves (GPU outputs are copied to the host, see above).
      input_datasets: ``{name: tf.data.Dataset or Input}``: data for the pipeline's
        ``fn.external_source(name=...)`` nodes without ``source``. A bare dataset is per-sample
        input (``Input(ds, batch=False)``). (DALI accepts this only in
        ``experimental.DALIDatasetWithInputs``; stoker's DALIDataset takes it too.)
        ``external_source(source=...)`` nodes need nothing here: the pipeline runs their source.
      batch_size, num_threads, device_id: the pipeline's own settings are used; a ``batch_size``
        or ``device_id`` that contradicts the pipeline raises an error (a pipeline made without a
        batch size takes ``batch_size``). ``num_threads`` and the queue and executor arguments are
        accepted and ignored (the pipeline's own apply).
      dtypes, shapes: DALI's deprecated names of ``output_dtypes`` and ``output_shapes``.
    """

    def __init__(self, pipeline, output_dtypes=None, output_shapes=None, fail_on_device_mismatch=True, *,
                 input_datasets=None, batch_size=None, num_threads=None, device_id=0, exec_separated=False,
                 exec_dynamic=False, prefetch_queue_depth=2, cpu_prefetch_queue_depth=2, gpu_prefetch_queue_depth=2,
                 dtypes=None, shapes=None):
        output_dtypes = _renamed(output_dtypes, dtypes, "dtypes")
        output_shapes = _renamed(output_shapes, shapes, "shapes")
        out_dtypes, single = normalize_dtypes(output_dtypes, _WHO)
        out_shapes = normalize_shapes(output_shapes, len(out_dtypes), single, _WHO)
        pipe = pipeline
        if not hasattr(pipe, "build") or not hasattr(pipe, "run"):
            raise TypeError(f"{_WHO}: pipeline must be a stoker Pipeline, got {type(pipe).__name__}")
        if batch_size is not None and pipe.max_batch_size in (None, -1) and not pipe._built:
            pipe._batch_size = int(batch_size)  # a pipeline made without batch_size takes the dataset's
        pipe.build()
        if batch_size is not None and batch_size != pipe.max_batch_size:
            raise ValueError(f"{_WHO}: batch_size={batch_size}, but the pipeline's batch size is "
                             f"{pipe.max_batch_size}: stoker runs the pipeline as it was made; pass the same value "
                             "(or leave batch_size out)")
        gpu_pipeline = bool(pipe._graph.gpu_nodes)
        if device_id is not None and pipe.device_id is not None and device_id != pipe.device_id:
            raise ValueError(f"{_WHO}: device_id={device_id}, but the pipeline runs on GPU {pipe.device_id}: "
                             "stoker runs the pipeline as it was made; pass the same device_id")
        if device_id is None and gpu_pipeline:
            raise ValueError(f"{_WHO}: device_id=None (CPU only), but the pipeline has GPU operators")
        n_out = len(pipe._outputs)
        if n_out != len(out_dtypes):
            raise ValueError(f"{_WHO}: the pipeline has {n_out} outputs but output_dtypes gives {len(out_dtypes)} "
                             "types: give one per output, in order")
        placed = _placement()
        for k, node in enumerate(pipe._outputs):
            where = "GPU" if node.device == "gpu" else "CPU"
            if where != placed:
                msg = (f"{_WHO}: TF device and pipeline device mismatch for output {k}: the dataset is placed on "
                       f"{placed}, the pipeline's output {k} is on {where}")
                if fail_on_device_mismatch:
                    raise RuntimeError(msg + " (fail_on_device_mismatch=False lets the data move)")
                _log.warning("%s; the data is copied (fail_on_device_mismatch=False)", msg)
        feeds = _feeds(pipe, input_datasets)
        self._pipeline = pipe
        self._runner = _Runner(pipe, out_dtypes, out_shapes, single, feeds)
        specs = tuple(tf.TensorSpec(s, d) for s, d in zip(out_shapes, out_dtypes))
        signature = specs[0] if single else specs
        with tf.device("/cpu:0"):  # a generator's dataset lives on the host, wherever this one is placed
            inner = tf.data.Dataset.from_generator(self._runner.generate, output_signature=signature)
            # Readers wrap around: infinite, as DALI's dataset says. External sources may end the
            # data, so a pipeline with any keeps TF's "unknown".
            if not feeds and not any(_external_sources(pipe)):
                inner = inner.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
        self._inner = inner
        super().__init__(inner._variant_tensor)

    def _inputs(self):
        return [self._inner]

    @property
    def element_spec(self):
        return self._inner.element_spec

    @property
    def pipeline(self):
        """The stoker pipeline this dataset runs."""
        return self._pipeline


def _renamed(new, old, name: str):
    if old is None:
        return new
    if new is not None:
        raise ValueError(f"{_WHO}: `{name}` is the deprecated name of `output_{name}`; give only `output_{name}`")
    import warnings

    warnings.warn(f"{_WHO}: `{name}` is deprecated, use `output_{name}` (a tuple, or a single value)",
                  DeprecationWarning, stacklevel=3)
    return tuple(old) if isinstance(old, list) else old


def _feeds(pipe, input_datasets) -> list[_Feed]:
    placeholders, with_source = _external_sources(pipe)
    given = {} if input_datasets is None else input_datasets
    if not isinstance(given, Mapping):
        raise TypeError(f"{_WHO}: input_datasets must map external source names to tf.data.Dataset or Input, "
                        f"got {type(given).__name__}")
    feeds = []
    for name, value in given.items():
        if not isinstance(name, str):
            raise TypeError(f"{_WHO}: input_datasets keys are external source names (str), got {name!r}")
        if isinstance(value, tf.data.Dataset):
            value = Input(value, layout=None, batch=False)
        elif not isinstance(value, Input):
            raise TypeError(f"{_WHO}: input_datasets[{name!r}] must be a tf.data.Dataset or "
                            f"stoker.plugin.tf.experimental.Input, got {type(value).__name__}")
        if name in with_source or any(n.args.get("name") == name for n in with_source.values()):
            raise ValueError(f"{_WHO}: input_datasets[{name!r}]: that external source has a `source` already; "
                             "give its data one way only")
        if name not in placeholders:
            raise ValueError(f"{_WHO}: input_datasets[{name!r}]: the pipeline has no external source named {name!r} "
                             f"without a `source` (those it has: {sorted(placeholders)})")
        node = placeholders[name]
        if node.args.get("num_outputs") is not None:
            raise ValueError(f"{_WHO}: input_datasets[{name!r}]: the external source has num_outputs; an input "
                             "dataset feeds a single-output external source")
        own_layout = node.args.get("layout")
        if isinstance(own_layout, (list, tuple)):
            own_layout = own_layout[0] if own_layout else None
        if value.layout is not None and own_layout and value.layout != own_layout:
            raise ValueError(f"{_WHO}: input_datasets[{name!r}]: Input layout {value.layout!r} differs from the "
                             f"external source's layout {own_layout!r}")
        layout = value.layout if value.layout is not None else (own_layout or "")
        batch = value.batch if value.batch is not None else node.args.get("batch")
        feeds.append(_Feed(name, value.dataset, layout, True if batch is None else bool(batch)))
    missing = sorted(set(placeholders) - set(given))
    if missing:
        raise ValueError(f"{_WHO}: the pipeline's external source(s) {missing} have no data: give them in "
                         f"input_datasets (given: {sorted(given)}) or a `source`")
    return feeds


class DALIDatasetWithInputs(DALIDataset):
    """DALI's ``experimental.DALIDatasetWithInputs``: :class:`DALIDataset` with ``input_datasets``
    (which stoker's DALIDataset accepts as well)."""
