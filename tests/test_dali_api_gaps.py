"""DALI API pieces that ported documentation examples use (issue 19): typed scalar constants,
``stoker.backend``'s tensor type names, ``experimental`` aliases, ``None`` as "not given" for
operator arguments, and the built-in exception types that ported ``except`` blocks catch.
DALI's CPU operators are the oracle where they run."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from oracle import check, libs, pipeline, run_graph, submodule

import stoker
from stoker import fn, pipeline_def, types
from stoker.errors import ArgumentError, OperatorError, PipelineBuildError, StokerError

IMAGES = [np.full((2, 3), 7, np.uint8), np.arange(12, dtype=np.uint8).reshape(4, 3)]


# --- 1. typed constants ---------------------------------------------------------------------

CONSTANT_GRAPHS = {
    "uint8": lambda fn, types, x: x * types.Constant(2).uint8(),
    "plain_int_is_int32": lambda fn, types, x: x * types.Constant(2),
    "float32": lambda fn, types, x: x * types.Constant(2).float32(),
    "float64": lambda fn, types, x: x * types.Constant(2).float64(),
    "dtype_arg": lambda fn, types, x: x + types.Constant(3, dtype=types.INT16),
    "numpy_scalar_keeps_type": lambda fn, types, x: x + types.Constant(np.float64(1.5)),
    "constant_on_the_left": lambda fn, types, x: types.Constant(3).uint16() * x,
    "bool": lambda fn, types, x: x * types.Constant(1).bool(),
    "uint64": lambda fn, types, x: x - types.Constant(1).uint64(),
    "int8": lambda fn, types, x: x + types.Constant(-1).int8(),
    "int64": lambda fn, types, x: x + types.Constant(1).int64(),
    "uint32": lambda fn, types, x: x + types.Constant(1).uint32(),
    "compare": lambda fn, types, x: x == types.Constant(7).uint8(),
    "shaped_node": lambda fn, types, x: (x, types.Constant(5, shape=(2, 2), layout="HW")),
    "shaped_dtype_node": lambda fn, types, x: (x, types.Constant(5, shape=(3,), dtype=types.UINT8)),
    "array_node": lambda fn, types, x: (x, types.Constant(np.arange(6, dtype=np.int16).reshape(2, 3))),
    "scalar_as_output": lambda fn, types, x: (x, types.Constant(4).int8()),
    "scalar_as_input": lambda fn, types, x: fn.cast(types.Constant(4).int8(), dtype=types.FLOAT),
    "scalar_as_argument": lambda fn, types, x: fn.pad(x, fill_value=types.Constant(9)),
}


@pytest.mark.parametrize("case", sorted(CONSTANT_GRAPHS))
def test_typed_constants_match_dali(case):
    check(CONSTANT_GRAPHS[case], IMAGES, layouts=["HW"], what=case)


def test_typed_constant_keeps_uint8_where_plain_int_promotes():
    (u8,), (i32,) = (run_graph("stoker", CONSTANT_GRAPHS[c], IMAGES, layouts=["HW"])
                     for c in ("uint8", "plain_int_is_int32"))
    assert u8[0][1].dtype == np.uint8 and i32[0][1].dtype == np.int32
    np.testing.assert_array_equal(u8[0][1], IMAGES[1] * 2)


def test_float16_constant_computes_in_float16():
    # (DALI's CPU arithmetic refuses float16; stoker computes it)
    (out,) = run_graph("stoker", lambda fn, types, x: x * types.Constant(1.5).float16(), IMAGES)
    assert out[0][0].dtype == np.float16
    np.testing.assert_array_equal(out[0][0], np.full((2, 3), 10.5, np.float16))


def test_scalar_constant_object_matches_dali():
    _, _, dali_types = libs("dali")
    for make in (lambda t: t.Constant(2), lambda t: t.Constant(2.5), lambda t: t.Constant(True),
                 lambda t: t.Constant(2.7).uint8(), lambda t: t.Constant(3, dtype=t.FLOAT64),
                 lambda t: t.Constant(np.int16(4)), lambda t: t.Constant(1).float16()):
        ours, theirs = make(types), make(dali_types)
        assert type(ours).__name__ == type(theirs).__name__ == "ScalarConstant"
        assert (ours.value, int(ours.dtype), ours.shape) == (theirs.value, int(theirs.dtype), theirs.shape)
        assert type(ours.value) is type(theirs.value)
        assert str(ours) == str(theirs)


def test_scalar_constant_conversions_and_equality():
    c = types.Constant(2.5)
    assert float(c) == 2.5 and c == types.Constant(2.5) and c != types.Constant(2.5).float64()
    assert int(types.Constant(3)) == 3 and not bool(types.Constant(0))
    with pytest.raises(TypeError):
        int(c)
    with pytest.raises(TypeError):
        types.ScalarConstant("a")
    assert types.ScalarConstant is type(types.Constant(1))


def test_non_scalar_constants_are_nodes():
    from stoker.pipeline.data_node import DataNode

    with stoker.Pipeline(batch_size=1, num_threads=1, device_id=None):
        assert isinstance(types.Constant([1, 2, 3]), DataNode)
        assert isinstance(types.Constant(1, device="cpu"), DataNode)
        assert isinstance(types.Constant(types.FLOAT), DataNode)  # an enum is no arithmetic value
        assert isinstance(types.Constant(1, layout="A"), DataNode)


# --- 2. stoker.backend's tensor names -----------------------------------------------------------


def test_backend_tensor_names_are_stokers_classes():
    import stoker.backend as backend
    from stoker.tensors import TensorCPU, TensorListCPU
    from stoker.tensors_gpu import TensorGPU, TensorListGPU

    assert backend.TensorListCPU is TensorListCPU and backend.TensorCPU is TensorCPU
    assert backend.TensorListGPU is TensorListGPU and backend.TensorGPU is TensorGPU
    with pytest.raises(AttributeError):
        backend.NoSuchThing  # noqa: B018


def test_pipeline_outputs_are_backend_tensor_lists():
    from stoker.backend import TensorCPU, TensorListCPU

    (out,) = stoker.pipeline_def(lambda: types.Constant([1, 2]), batch_size=2, num_threads=1, device_id=None)().run()
    assert isinstance(out, TensorListCPU) and isinstance(out[0], TensorCPU)


def test_importing_backend_loads_neither_cupy_nor_the_gpu_module():
    code = ("import sys, stoker.backend as b; from stoker.backend import TensorListCPU; "
            "assert 'cupy' not in sys.modules and 'stoker.tensors_gpu' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- 3. experimental aliases -----------------------------------------------------------------------


def test_experimental_dynamic_is_stoker_dynamic():
    import stoker.dynamic
    import stoker.experimental.dynamic as ndd
    from stoker.experimental import dynamic

    assert ndd is stoker.dynamic and dynamic is stoker.dynamic
    out = ndd.flip(ndd.as_tensor(np.arange(6, dtype=np.uint8).reshape(2, 3, 1), layout="HWC"), horizontal=1)
    np.testing.assert_array_equal(np.asarray(out)[..., 0], [[2, 1, 0], [5, 4, 3]])


def test_experimental_pipeline_def_without_debug_is_pipeline_def():
    from stoker.pipeline.experimental import pipeline_def as exp_def

    @exp_def(batch_size=2, num_threads=1, device_id=None, debug=False)
    def p(k):
        return types.Constant([k, k])

    (out,) = p(3).run()
    np.testing.assert_array_equal(np.asarray(out[1]), [3, 3])
    (out,) = p(4, debug=False).run()
    np.testing.assert_array_equal(np.asarray(out[0]), [4, 4])


def test_experimental_pipeline_def_runs_debug_mode():
    from stoker.pipeline.experimental import pipeline_def as exp_def

    p = exp_def(lambda: types.Constant([1, 2]), batch_size=1, num_threads=1, device_id=None)
    (out,) = p(debug=True).run()
    np.testing.assert_array_equal(np.asarray(out[0]), [1, 2])


def test_dali_has_the_experimental_names_we_mirror():
    submodule("dali", "experimental.dynamic")
    assert callable(submodule("dali", "pipeline.experimental").pipeline_def)


# --- 4. None means "not given" ----------------------------------------------------------------------


def test_reader_takes_none_for_sharding(sample_jpeg_dir):
    def build(**kw):
        @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=1)
        def p():
            return fn.readers.file(file_root=sample_jpeg_dir, name="R", **kw)[1]
        pipe = p()
        pipe.build()
        return pipe

    ours = build(shard_id=None, num_shards=None, random_shuffle=None)
    plain = build()
    assert ours.epoch_size("R") == plain.epoch_size("R") == 24
    np.testing.assert_array_equal(np.asarray(ours.run()[0].as_array()), np.asarray(plain.run()[0].as_array()))


NONE_GRAPHS = {
    "resize": lambda fn, types, x: fn.resize(x, resize_x=None, resize_y=None, size=(4, 6)),
    "resize_one_side": lambda fn, types, x: fn.resize(x, resize_x=None, resize_y=8, interp_type=None),
    "crop": lambda fn, types, x: fn.crop(x, crop=None, crop_w=2, crop_h=3, crop_pos_x=None),
    "cmn": lambda fn, types, x: fn.crop_mirror_normalize(x, crop=None, mean=None, std=None, output_layout=None),
    "cast_layout": lambda fn, types, x: fn.flip(x, horizontal=1, vertical=None),
}


@pytest.mark.parametrize("case", sorted(NONE_GRAPHS))
def test_none_arguments_match_dali(case):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (6, 8, 3), dtype=np.uint8), rng.integers(0, 255, (5, 7, 3), dtype=np.uint8)]
    check(NONE_GRAPHS[case], images, layouts=["HWC"], tol=1, what=case)


def test_none_for_a_required_argument_is_still_missing():
    with pytest.raises(ArgumentError, match="dtype.*required"):
        run_graph("stoker", lambda fn, types, x: fn.cast(x, dtype=None), IMAGES)


def test_none_for_an_unknown_argument_is_still_unknown():
    with pytest.raises(ArgumentError, match="unknown argument 'no_such'"):
        run_graph("stoker", lambda fn, types, x: fn.flip(x, no_such=None), IMAGES)


# --- 5. built-in exception types ---------------------------------------------------------------------


def test_corrupt_file_under_raise_is_a_runtime_error(tmp_path):
    from PIL import Image

    cls = tmp_path / "c"
    cls.mkdir()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(cls / "a.jpg")
    (cls / "b.jpg").write_bytes(b"\xff\xd8 this is not a jpeg")

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, on_error="raise")
    def p():
        jpegs, _ = fn.readers.file(file_root=str(tmp_path))
        return fn.decoders.image(jpegs)

    pipe = p()
    pipe.build()
    try:
        with pytest.raises(RuntimeError) as info:
            pipe.run()
        assert isinstance(info.value, OperatorError) and isinstance(info.value, StokerError)
        assert "b.jpg" in str(info.value)
    finally:
        pipe.close()


BAD_ARGUMENTS = {
    "wrong_type": lambda fn, types, x: fn.resize(x, resize_x="a"),
    "wrong_list": lambda fn, types, x: fn.resize(x, resize_x=[1, 2, 3]),
    "bad_enum": lambda fn, types, x: fn.resize(x, interp_type="bogus"),
    "unknown": lambda fn, types, x: fn.resize(x, foo=1),
    "too_many_inputs": lambda fn, types, x: fn.resize(x, x, size=2),
    "bad_device": lambda fn, types, x: fn.flip(x, device="tpu"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_argument_is_value_and_type_error_and_still_a_build_error(case):
    with pytest.raises((ValueError, TypeError)) as info:
        run_graph("stoker", BAD_ARGUMENTS[case], IMAGES)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, TypeError)
    assert isinstance(err, PipelineBuildError) and isinstance(err, StokerError)
    try:  # a ported ``except TypeError`` (or ``except ValueError``) block catches it
        run_graph("stoker", BAD_ARGUMENTS[case], IMAGES)
    except TypeError as e:
        assert type(e) is ArgumentError


# --- 6. multiple input sets ---------------------------------------------------------------------------


def test_list_of_inputs_applies_the_operator_per_set_like_dali():
    ones, fives = [np.ones((2, 3), np.uint8)] * 2, [np.full((2, 3), 5, np.uint8)] * 2

    def build(fn, types, a, b):
        c1, c2 = fn.cast([a, b], dtype=types.FLOAT)
        s1, s2 = fn.cat([a, b], [b, a], axis=0)  # two list inputs, zipped
        (t1, t2) = fn.cat([a, b], a, axis=1)  # a plain input is shared by every set
        single = fn.cast([a], dtype=types.INT16)  # a one-element list gives the plain result
        return c1, c2, s1, s2, t1, t2, single

    outs = check(build, ones, fives, layouts=["HW", "HW"])
    np.testing.assert_array_equal(outs[3][0][0], np.concatenate([fives[0], ones[0]]))


def test_multiple_input_sets_of_a_multi_output_operator_group_by_output():
    structures = []

    def body(f, t):  # the graph only: the pipeline is neither built nor run
        boxes = [f.external_source(source=lambda: [np.array([[0.1, 0.1, 0.5, 0.5]], np.float32)], batch=True)
                 for _ in range(2)]
        out = f.random_bbox_crop(boxes, bbox_layout="xyXY")
        structures.append([len(x) for x in out])
        return tuple(node for group in out for node in group)

    for lib in ("stoker", "dali"):
        pipeline(lib, body, 1, num_threads=1, build=False)
    assert structures[0] == structures[1] == [2, 2, 2]


def test_decoder_on_a_list_of_encoded_batches(sample_jpeg_dir):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=1)
    def p():
        a, _ = fn.readers.file(file_root=sample_jpeg_dir, name="A")
        b, _ = fn.readers.file(file_root=sample_jpeg_dir, name="B", random_shuffle=True)
        decoded = fn.decoders.image([a, b])
        assert isinstance(decoded, list) and len(decoded) == 2
        return (*decoded, fn.decoders.image(a))

    x, y, ref = p().run()
    assert np.asarray(x[0]).ndim == 3 and np.asarray(y[0]).shape[-1] == 3
    np.testing.assert_array_equal(np.asarray(x[0]), np.asarray(ref[0]))


def test_input_set_lists_of_different_lengths_are_refused():
    def build(fn, types, a):
        return fn.cat([a, a], [a, a, a])

    with pytest.raises(ValueError, match="same length"):
        run_graph("stoker", build, IMAGES)
