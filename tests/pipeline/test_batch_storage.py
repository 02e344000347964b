"""How batches hold their samples: a host batch computed as one array makes its per-sample views
only when asked, and argument inputs read it whole (``DenseRows``); a device batch's geometry is
computed once per storage. These keep per-sample Python off the pipeline's hot path."""

import os
import pickle
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import null_device  # noqa: E402

from stoker import types  # noqa: E402
from stoker.tensors import DenseRows, TensorListCPU, batch_of_rows  # noqa: E402


def test_rows_of_a_dense_batch_are_made_only_when_asked():
    values = np.arange(12, dtype=np.float32).reshape(6, 2)
    b = batch_of_rows(values, "X")
    assert b._rows is None
    assert len(b) == 6 and b.shape() == [(2,)] * 6 and b.ndim == 1 and b.is_dense_tensor()
    assert b.dtype == types.FLOAT
    assert b._rows is None, "asking for the length, shapes or type made the per-sample views"
    rows = b.samples()
    assert len(rows) == 6 and all(r.base is values or r.base is values.base for r in rows)
    np.testing.assert_array_equal(np.stack(rows), values)


def test_scalar_rows_are_zero_dimensional_arrays_as_before():
    values = np.array([1.5, 2.5, 3.5], np.float32)
    assert all(isinstance(s, np.ndarray) and s.shape == () for s in batch_of_rows(values).samples())
    args = batch_of_rows(values).arg_samples()
    assert isinstance(args, DenseRows)
    assert isinstance(args[1], np.ndarray) and args[1].shape == () and float(args[1]) == 2.5
    assert float(args[-1]) == 3.5 and [float(v) for v in args] == [1.5, 2.5, 3.5]
    assert [float(v) for v in args[1:]] == [2.5, 3.5]
    with pytest.raises(IndexError):
        args[3]


def test_arg_samples_read_whole_and_round_trip():
    values = np.random.default_rng(0).random((5, 3))
    args = batch_of_rows(values).arg_samples()
    assert np.asarray(args) is values  # (one step, no copy)
    assert np.asarray(args, np.float32).dtype == np.float32
    back = pickle.loads(pickle.dumps(args))
    np.testing.assert_array_equal(np.asarray(back), values)
    listed = TensorListCPU([np.zeros(2), np.ones(3)])
    assert isinstance(listed.arg_samples(), list)  # (ragged: the samples themselves)


def test_replacing_the_samples_drops_the_array():
    b = batch_of_rows(np.zeros((3, 2)))
    b._samples = [np.ones(2)] * 3  # (as per_frame re-tags the rows of a batch)
    assert b._dense is None and isinstance(b.arg_samples(), list)
    np.testing.assert_array_equal(np.asarray(b.arg_samples()), np.ones((3, 2)))
    pickled = pickle.loads(pickle.dumps(b))
    np.testing.assert_array_equal(np.stack(pickled.samples()), np.ones((3, 2)))


def test_a_pickled_dense_batch_stays_dense():
    b = pickle.loads(pickle.dumps(batch_of_rows(np.arange(8).reshape(4, 2), "AB", ["a", "b", "c", "d"])))
    assert b._rows is None and b.layout() == "AB" and b.source_info(2) == "c"
    np.testing.assert_array_equal(np.stack(b.samples()), np.arange(8).reshape(4, 2))


def test_device_geometry_is_computed_once_per_storage():
    with null_device.installed() as cp:
        from stoker.tensors_gpu import TensorListGPU

        x = TensorListGPU.from_flat(cp.zeros(40, cp.uint8), [0, 12, 24], [[2, 2, 3], [2, 2, 3], [4, 1, 3]], "HWC")
        g = x.geometry()
        assert x.geometry() is g
        assert all(not a.flags.writeable for a in g)
        with pytest.raises(ValueError):
            g[2][0, 0] = 7  # (a caller cannot change what the next one reads)
        assert x._flat[2].flags.writeable  # (the batch's own shapes are not frozen)
        np.testing.assert_array_equal(g[2], [[2, 2, 3], [2, 2, 3], [4, 1, 3]])
        d = TensorListGPU(cp.zeros((3, 4, 5, 3), cp.uint8), "HWC")
        gd = d.geometry()
        np.testing.assert_array_equal(gd[2], [[4, 5, 3]] * 3)
        np.testing.assert_array_equal(gd[1], [15] * 3)
        d._samples = list(d._samples)[:2]  # another storage: computed again
        assert d.geometry() is not gd and d.geometry()[2].shape == (2, 3)


def test_a_kernel_is_looked_up_once():
    with null_device.installed() as cp:
        from stoker.backend import cuda

        made = []
        real = cp.RawModule

        def counting(**kw):
            made.append(kw)
            return real(**kw)

        cp.RawModule = counting
        f1 = cuda.load_kernel("warp_affine", "warp_u8")
        f2 = cuda.load_kernel("warp_affine", "warp_u8")
        f3 = cuda.load_kernel("warp_affine", "warp_f32")
        assert f1 is f2 and f3 is not f1 and len(made) == 1


def _operator(name, **kwargs):
    from stoker.operators.schema import get_operator

    cls = get_operator(name)
    args = {a.name: a.convert(cls.schema.name, a.default) for a in cls.schema.all_args()}
    args.update({k: cls.schema.arg(k).convert(cls.schema.name, v) for k, v in kwargs.items()})
    return cls(args, "cpu")


def test_a_constant_table_indexed_per_sample_makes_no_per_sample_views():
    """auto_aug's magnitude tables: fn.constant indexed by a random bin, per sample."""
    from stoker.operators.base import BatchContext

    batch = BatchContext(64)
    (table,) = _operator("constant", fdata=[0.0, 0.5, 1.0, 1.5]).run_cpu(batch, [], {})
    assert table._rows is None and table._dense.strides[0] == 0 and len(table) == 64
    bins = batch_of_rows(np.arange(64, dtype=np.int32) % 4)
    (picked,) = _operator("_subscript", spec=(("index", "i0"),)).run_batch(batch, [table], {"i0": bins.arg_samples()})
    assert table._rows is None and bins._rows is None
    np.testing.assert_array_equal(np.stack(picked.samples()), (np.arange(64) % 4) * 0.5)


def test_segments_round_trip_and_stay_one_buffer():
    from stoker.tensors import batch_of_segments, segments_of

    counts = [2, 0, 3, 1]
    values = np.arange(24, dtype=np.float32).reshape(6, 4)
    b = batch_of_segments(values, counts, "", list("abcd"))
    assert len(b) == 4 and b.shape() == [(2, 4), (0, 4), (3, 4), (1, 4)] and b.ndim == 2 and not b.is_dense_tensor()
    got, got_counts = segments_of(b, (4,))
    assert got_counts.tolist() == counts and np.shares_memory(got, values)
    assert segments_of(b, (6,)) is None
    assert b._rows is None  # (read without per-sample views)
    back = pickle.loads(pickle.dumps(b))
    assert back.flat_parts() is not None and back.source_info(2) == "c"
    for s, want in zip(back.samples(), np.split(values, np.cumsum(counts)[:-1])):
        np.testing.assert_array_equal(s, want)
    listed = TensorListCPU([values[:2], values[2:5]])  # from samples: the same answer
    v, c = segments_of(listed)
    np.testing.assert_array_equal(v, values[:5])
    assert c.tolist() == [2, 3]
    assert segments_of(TensorListCPU([np.zeros(3), np.zeros((1, 2))[0]])) is not None  # (k,) samples
    assert segments_of(TensorListCPU([np.zeros((2, 4)), np.zeros((2, 6))])) is None


def test_detection_operators_hand_boxes_on_as_one_buffer():
    from stoker.operators.base import BatchContext

    rng = np.random.default_rng(3)
    boxes = []
    for k in rng.integers(1, 6, 32):
        lo = rng.uniform(0, 0.6, (k, 2))
        boxes.append(np.concatenate([lo, lo + rng.uniform(0.05, 0.4, (k, 2))], 1).astype(np.float32))
    labels = [np.arange(len(b), dtype=np.int32)[:, None] for b in boxes]
    batch = BatchContext(32, 1)
    crop = _operator("random_bbox_crop", thresholds=[0.0, 0.3], scaling=[0.3, 1.0], bbox_layout="xyXY",
                     _num_inputs=2)
    crop.op_seed = 5
    _, _, out_boxes, out_labels = crop.run_cpu(batch, [TensorListCPU(boxes), TensorListCPU(labels)], {})
    assert out_boxes.flat_parts() is not None and out_labels.flat_parts() is not None
    flipped = _operator("bb_flip", ltrb=True).run_cpu(batch, [out_boxes], {"horizontal": np.ones(32)})[0]
    assert out_boxes._rows is None and flipped.flat_parts() is not None
    for a, b in zip(flipped.samples(), out_boxes.samples()):
        np.testing.assert_allclose(a[:, [0, 2]], 1 - b[:, [2, 0]], atol=1e-6)
