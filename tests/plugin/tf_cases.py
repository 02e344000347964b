"""stoker.plugin.tf against the pipelines' own outputs (and DALI's TF plugin where it is importable).

Run by test_tf.py in a pytest process of its own (TensorFlow cannot share a process with the
`tfrecord` package that the TFRecord tests import); run it directly with
``python -m pytest tests/plugin/tf_cases.py``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from oracle import pipeline, submodule  # noqa: E402

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install tensorflow-cpu)")

import stoker.fn as fn  # noqa: E402
import stoker.plugin.tf as dali_tf  # noqa: E402
from stoker import pipeline_def, types  # noqa: E402
from stoker.plugin.tf.experimental import DALIDatasetWithInputs, Input  # noqa: E402

N_FILES = 7
TF_ERRORS = (tf.errors.OpError, ValueError, TypeError)  # what an error inside the generator surfaces as


@pytest.fixture(scope="module")
def seven_files(tmp_path_factory):
    """7 one-byte files in 7 class folders: the label of file k is k, its single byte is k + 1."""
    root = tmp_path_factory.mktemp("seven")
    for k in range(N_FILES):
        d = root / f"class{k}"
        d.mkdir()
        (d / "sample.jpg").write_bytes(bytes([k + 1]))
    return str(root)


def _reader_pipe(root, batch_size=2, seed=3, **kw):
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=seed)
    def pipe():
        data, label = fn.readers.file(file_root=root, name="Reader", **kw)
        return data, label

    return pipe()


def _random_pipe(batch_size=3, seed=11):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=seed)
    def pipe():
        x = fn.random.uniform(range=[-1, 1], shape=[2, 5])
        y = fn.random.uniform(range=[0, 10], dtype=types.INT32)
        return x, y

    return pipe()


def _own_outputs(pipe, steps):
    pipe.build()
    return [tuple(np.stack(o.samples()) if hasattr(o, "samples") else np.asarray(o) for o in pipe.run())
            for _ in range(steps)]


# --- values, element spec, tf.data operations ------------------------------------------------

def test_values_are_the_pipelines_own():
    expected = _own_outputs(_random_pipe(), 4)
    ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32),
                             output_shapes=((3, 2, 5), (3,)), batch_size=3, device_id=0)
    assert isinstance(ds, tf.data.Dataset)
    assert ds.element_spec == (tf.TensorSpec((3, 2, 5), tf.float32), tf.TensorSpec((3,), tf.int32))
    got = [(a.numpy(), b.numpy()) for a, b in ds.take(4)]
    for (ea, eb), (ga, gb) in zip(expected, got):
        np.testing.assert_array_equal(ga, ea)
        np.testing.assert_array_equal(gb, eb.reshape(3))


def test_reader_pipeline_is_infinite_across_epochs(seven_files):
    # as DALI's dataset: readers wrap around, the dataset does not end at an epoch boundary
    ds = dali_tf.DALIDataset(_reader_pipe(seven_files), output_dtypes=(tf.uint8, tf.int32))
    assert ds.cardinality().numpy() == tf.data.INFINITE_CARDINALITY
    labels = [b.numpy().reshape(-1).tolist() for _, b in ds.take(5)]
    data_expected = _own_outputs(_reader_pipe(seven_files), 5)
    assert labels == [e[1].reshape(-1).tolist() for e in data_expected]
    flat = sum(labels, [])
    assert flat[:N_FILES] == list(range(N_FILES)) and len(flat) == 10  # went past the first epoch


def test_single_dtype_gives_single_tensor():
    @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=0)
    def pipe():
        return fn.random.uniform(range=[0, 1], shape=[3])

    ds = dali_tf.DALIDataset(pipe(), output_dtypes=tf.float32, output_shapes=(4, 3))
    assert ds.element_spec == tf.TensorSpec((4, 3), tf.float32)
    (x,) = list(ds.take(1))
    assert x.shape == (4, 3)


def test_take_prefetch_map():
    expected = _own_outputs(_random_pipe(), 3)
    ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32))
    mapped = ds.map(lambda x, y: (x * 2.0, y + 1)).prefetch(2).take(3)
    got = list(mapped.as_numpy_iterator())
    assert len(got) == 3
    for (ex, ey), (gx, gy) in zip(expected, got):
        np.testing.assert_allclose(gx, ex * 2.0)
        np.testing.assert_array_equal(gy.reshape(-1), ey.reshape(-1) + 1)


def test_inside_tf_function():
    expected = _own_outputs(_random_pipe(), 3)
    ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32))

    @tf.function
    def total(dataset):
        s = tf.constant(0.0)
        for x, _ in dataset.take(3):
            s += tf.reduce_sum(x)
        return s

    np.testing.assert_allclose(total(ds).numpy(), sum(e[0].sum() for e in expected), rtol=1e-5)


def test_keras_fit_two_steps():
    @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=2)
    def pipe():
        x = fn.random.uniform(range=[-1, 1], shape=[6])
        y = fn.random.uniform(range=[0, 1], shape=[1])
        return x, y

    ds = dali_tf.DALIDataset(pipe(), output_dtypes=(tf.float32, tf.float32), output_shapes=((4, 6), (4, 1)))
    model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 1 and np.isfinite(history.history["loss"][0])


# --- validation -------------------------------------------------------------------------------

def test_dtype_mismatch_names_the_output():
    ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.float32))
    with pytest.raises(TF_ERRORS, match=r"output 1: output_dtypes\[1\] is tf.float32, but the pipeline gives INT32"):
        next(iter(ds))


def test_shape_mismatch_names_the_output():
    ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32), output_shapes=((3, 5, 2), None))
    with pytest.raises(TF_ERRORS, match=r"output 0: output_shapes\[0\] is \(3, 5, 2\)"):
        next(iter(ds))


def test_size_one_dimensions_are_dropped_to_fit():
    # batch of 1: the batch dimension may be left out; the labels' (1, 1) becomes () or (1,)
    @pipeline_def(batch_size=1, num_threads=1, device_id=None, seed=4)
    def pipe():
        return fn.random.uniform(range=[0, 1], shape=[1, 5]), fn.random.uniform(range=[0, 9], dtype=types.INT32,
                                                                                 shape=[1])

    ds = dali_tf.DALIDataset(pipe(), output_dtypes=(tf.float32, tf.int32), output_shapes=((5,), ()))
    x, y = next(iter(ds))
    assert x.shape == (5,) and y.shape == ()


def test_ambiguous_shape_is_an_error():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=4)
    def pipe():
        return fn.random.uniform(range=[0, 1], shape=[1, 4, 1])

    # (2, 1, 4, 1) as (2, None, None): (2, 1, 4) or (2, 4, 1); DALI refuses to guess, so does stoker
    ds = dali_tf.DALIDataset(pipe(), output_dtypes=tf.float32, output_shapes=(2, None, None))
    with pytest.raises(TF_ERRORS, match="output 0: .* fits it in 2 ways"):
        next(iter(ds))


def test_ragged_output_is_an_error():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=4)
    def pipe():
        return fn.external_source(source=lambda: [np.zeros(2, np.float32), np.zeros(3, np.float32)])

    ds = dali_tf.DALIDataset(pipe(), output_dtypes=tf.float32)
    with pytest.raises(TF_ERRORS, match="output 0: the samples differ in shape"):
        next(iter(ds))


def test_construction_errors():
    with pytest.raises(TypeError, match="output_dtypes` is required"):
        dali_tf.DALIDataset(_random_pipe())
    with pytest.raises(TypeError, match="output_dtypes"):
        dali_tf.DALIDataset(_random_pipe(), output_dtypes=("float32", tf.int32))
    with pytest.raises(ValueError, match="2 outputs but output_dtypes gives 3"):
        dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32, tf.int32))
    with pytest.raises(ValueError, match="output_shapes` has 1 shapes"):
        dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32), output_shapes=((3, 2, 5),))
    with pytest.raises(ValueError, match="batch_size=5, but the pipeline's batch size is 3"):
        dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32), batch_size=5)


def test_stoker_types_and_dtype_tables():
    ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(types.FLOAT, types.INT32))
    assert ds.element_spec[1].dtype == tf.int32
    assert dali_tf.to_tf_dtype(types.UINT8) == tf.uint8 and dali_tf.to_tf_dtype(np.float16) == tf.float16
    assert dali_tf.from_tf_dtype(tf.int64) == types.INT64
    for stoker_type, tf_type in dali_tf.to_tf_type.items():
        assert tf_type.as_numpy_dtype == types.to_numpy_type(stoker_type)


def test_deprecated_names():
    with pytest.warns(DeprecationWarning) as caught:
        ds = dali_tf.DALIDataset(_random_pipe(), dtypes=[tf.float32, tf.int32], shapes=[(3, 2, 5), (3,)])
    assert {str(w.message).split("`")[3] for w in caught} == {"output_dtypes", "output_shapes"}
    assert ds.element_spec[0].shape == (3, 2, 5)


# --- devices ----------------------------------------------------------------------------------

def test_device_mismatch():
    # a CPU pipeline in a dataset placed on the GPU (the placement is read even without a GPU)
    with tf.device("/gpu:0"):
        with pytest.raises(RuntimeError, match="mismatch for output 0: the dataset is placed on GPU, the pipeline's "
                                               "output 0 is on CPU"):
            dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32))
        ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32), fail_on_device_mismatch=False)
    x, _ = next(iter(ds))
    assert x.shape == (3, 2, 5)


def test_gpu_outputs_on_a_cpu_placed_dataset(null_cupy):
    # GPU outputs (a null CUDA device: copies are real, kernels are not; .gpu() is a copy) in a
    # dataset placed on the CPU: refused, or copied to the host with fail_on_device_mismatch=False
    def gpu_pipe():
        @pipeline_def(batch_size=3, num_threads=1, device_id=0, seed=11)
        def pipe():
            x = fn.random.uniform(range=[-1, 1], shape=[2, 5])
            return x.gpu(), fn.random.uniform(range=[0, 10], dtype=types.INT32)

        return pipe()

    expected = _own_outputs(_random_pipe(), 2)
    with pytest.raises(RuntimeError, match="placed on CPU, the pipeline's output 0 is on GPU"):
        dali_tf.DALIDataset(gpu_pipe(), output_dtypes=(tf.float32, tf.int32))
    ds = dali_tf.DALIDataset(gpu_pipe(), output_dtypes=(tf.float32, tf.int32), fail_on_device_mismatch=False)
    for (ex, ey), (x, y) in zip(expected, ds.take(2)):
        assert x.device.endswith("CPU:0")
        np.testing.assert_array_equal(x.numpy(), ex)
        np.testing.assert_array_equal(y.numpy().reshape(-1), ey.reshape(-1))
    # DALIIterator and to_tf: on the host too, as TensorFlow sees no GPU here
    x, _ = dali_tf.DALIIterator()(pipeline=gpu_pipe(), dtypes=[tf.float32, tf.int32])
    np.testing.assert_array_equal(x.numpy(), expected[0][0])
    pipe = gpu_pipe()
    pipe.build()
    np.testing.assert_array_equal(dali_tf.to_tf(pipe.run()[0]).numpy(), expected[0][0])


# --- one live pipeline --------------------------------------------------------------------------

def test_a_new_iterator_continues_and_takes_over():
    expected = _own_outputs(_random_pipe(), 4)
    ds = dali_tf.DALIDataset(_random_pipe(), output_dtypes=(tf.float32, tf.int32))
    first = iter(ds)
    a = next(first)[1].numpy()
    second = iter(ds)
    # the pipeline's queue is ahead of what `first` consumed; the second iterator goes on from the pipeline
    b = next(second)[1].numpy()
    assert a.tolist() == expected[0][1].reshape(-1).tolist()
    assert b.tolist() in [e[1].reshape(-1).tolist() for e in expected[1:]]
    with pytest.raises(TF_ERRORS, match="another iterator"):
        for _ in range(4):  # (tf.data may have fetched one element ahead already)
            next(first)


# --- input datasets -----------------------------------------------------------------------------

def _scale_pipe(batch_size=2, batch=None, layout=None):
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=0)
    def pipe():
        x = fn.external_source(name="x", batch=batch, layout=layout)
        return x * 2, fn.shapes(x)

    return pipe()


def test_input_dataset_per_sample():
    samples = [np.full((3,), k, np.float32) for k in range(7)]
    ds = dali_tf.DALIDataset(_scale_pipe(), output_dtypes=(tf.float32, tf.int64),
                             input_datasets={"x": tf.data.Dataset.from_tensor_slices(np.stack(samples))})
    got = [x.numpy() for x, _ in ds]
    # 7 samples, batches of 2: the 7th cannot fill a batch and is dropped (as DALI); then the dataset ends
    assert len(got) == 3
    np.testing.assert_array_equal(np.concatenate(got), np.stack(samples[:6]) * 2)


def test_input_dataset_batch_mode_and_layout():
    batches = np.arange(4 * 2 * 3, dtype=np.int32).reshape(4, 2, 3)
    pipe = _scale_pipe(layout="W")
    ds = DALIDatasetWithInputs(pipe, output_dtypes=(tf.int32, tf.int64),
                               input_datasets={"x": Input(tf.data.Dataset.from_tensor_slices(batches), batch=True)})
    got = [x.numpy() for x, _ in ds]
    np.testing.assert_array_equal(np.stack(got), batches * 2)
    # the layout comes from the external source; an Input's own must agree
    with pytest.raises(ValueError, match="layout 'HW' differs"):
        dali_tf.DALIDataset(_scale_pipe(layout="W"), output_dtypes=(tf.int32, tf.int64),
                            input_datasets={"x": Input(tf.data.Dataset.from_tensor_slices(batches), layout="HW",
                                                       batch=True)})


def test_input_batch_none_takes_the_external_sources_mode():
    per_sample = np.arange(8, dtype=np.int32).reshape(8, 1)
    ds = dali_tf.DALIDataset(_scale_pipe(batch=False), output_dtypes=(tf.int32, tf.int64),
                             input_datasets={"x": Input(tf.data.Dataset.from_tensor_slices(per_sample), batch=None)})
    assert [x.numpy().reshape(-1).tolist() for x, _ in ds] == [[0, 2], [4, 6], [8, 10], [12, 14]]


def test_input_samples_may_differ_in_shape():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=0)
    def pipe():
        return fn.shapes(fn.external_source(name="x"))

    gen = lambda: (np.ones((k % 3 + 1,), np.float32) * k for k in range(4))  # noqa: E731
    src = tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec((None,), tf.float32))
    ds = dali_tf.DALIDataset(pipe(), output_dtypes=tf.int64, input_datasets={"x": src})
    assert [s.numpy().reshape(-1).tolist() for s in ds] == [[1, 2], [3, 1]]


def test_input_dataset_errors():
    src = tf.data.Dataset.from_tensor_slices(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"external source\(s\) \['x'\] have no data"):
        dali_tf.DALIDataset(_scale_pipe(), output_dtypes=(tf.float32, tf.int64))
    with pytest.raises(ValueError, match="no external source named 'y'"):
        dali_tf.DALIDataset(_scale_pipe(), output_dtypes=(tf.float32, tf.int64), input_datasets={"x": src, "y": src})
    with pytest.raises(TypeError, match="must be a tf.data.Dataset or"):
        dali_tf.DALIDataset(_scale_pipe(), output_dtypes=(tf.float32, tf.int64), input_datasets={"x": [1, 2]})
    with pytest.raises(TypeError, match="each element must be one tensor"):
        pairs = tf.data.Dataset.from_tensor_slices((np.zeros((4, 3), np.float32), np.zeros(4, np.float32)))
        dali_tf.DALIDataset(_scale_pipe(), output_dtypes=(tf.float32, tf.int64), input_datasets={"x": pairs})


def test_external_source_with_source_runs_in_the_pipeline():
    batches = [[np.full((2,), k, np.float32), np.full((2,), -k, np.float32)] for k in range(3)]

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=0)
    def pipe():
        return fn.external_source(source=iter(batches))

    ds = dali_tf.DALIDataset(pipe(), output_dtypes=tf.float32)
    got = [x.numpy() for x in ds]  # the iterable ends: so does the dataset
    np.testing.assert_array_equal(np.stack(got), np.stack([np.stack(b) for b in batches]))


# --- DALIIterator -------------------------------------------------------------------------------

def test_dali_iterator_eager_and_in_tf_function():
    expected = _own_outputs(_random_pipe(), 3)
    daliop = dali_tf.DALIIterator()
    pipe = _random_pipe()
    x, y = daliop(pipeline=pipe, shapes=[(3, 2, 5), (3,)], dtypes=[tf.float32, tf.int32], batch_size=3)
    np.testing.assert_array_equal(x.numpy(), expected[0][0])
    np.testing.assert_array_equal(y.numpy(), expected[0][1].reshape(3))

    @tf.function
    def step():
        a, b = daliop(pipeline=pipe, shapes=[(3, 2, 5), (3,)], dtypes=[tf.float32, tf.int32], batch_size=3)
        return a, b

    for k in (1, 2):  # each run of the function gives the next batch
        a, b = step()
        np.testing.assert_array_equal(a.numpy(), expected[k][0])


def test_dali_iterator_sparse():
    @pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=0)
    def pipe():
        k = fn.external_source(source=lambda: [np.arange(n, dtype=np.int32) + 1 for n in (2, 0, 3)])
        return k

    (sp,) = dali_tf.DALIIterator()(pipeline=pipe(), dtypes=[tf.int32], sparse=[True], batch_size=3)
    assert isinstance(sp, tf.SparseTensor)
    dense = tf.sparse.to_dense(sp).numpy()
    np.testing.assert_array_equal(dense, [[1, 2, 0], [0, 0, 0], [1, 2, 3]])


def test_to_tf_on_the_cpu():
    pipe = _random_pipe()
    pipe.build()
    x, _ = pipe.run()
    t = dali_tf.to_tf(x)
    assert t.device.endswith("CPU:0") and t.shape == (3, 2, 5)
    np.testing.assert_array_equal(t.numpy(), np.stack(x.samples()))


# --- DALI's own TF plugin -----------------------------------------------------------------------

def test_same_batches_as_dalis_tf_plugin(seven_files):
    # DALI's plugin is a compiled op (package nvidia-dali-tf-plugin, built against the installed
    # TensorFlow at install time): skipped where it is not installed.
    pytest.importorskip("nvidia.dali_tf_plugin", reason="DALI's TF plugin (nvidia-dali-tf-plugin) is not installed")
    dtf = submodule("dali", "plugin.tf")
    dali_pipe = pipeline("dali", lambda fn, types: fn.readers.file(file_root=seven_files, name="Reader"), 2,
                         build=False)
    theirs = dtf.DALIDataset(dali_pipe, batch_size=2, device_id=None, output_dtypes=(tf.uint8, tf.int32))
    ours = dali_tf.DALIDataset(_reader_pipe(seven_files), batch_size=2, device_id=None,
                               output_dtypes=(tf.uint8, tf.int32))
    for (td, tl), (od, ol) in zip(theirs.take(5), ours.take(5)):
        np.testing.assert_array_equal(od.numpy(), td.numpy())
        np.testing.assert_array_equal(ol.numpy(), tl.numpy())
