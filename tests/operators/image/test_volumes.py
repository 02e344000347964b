"""Volumes (DHWC): ``warp_affine`` with 3x4 matrices, ``rotate`` with ``axis``, 3-D ``resize``,
``crop`` and ``flip``, and ``transforms.*`` matrices driving a volume warp, against DALI's CPU
operators on random volumes (issue 19).

Tolerances, and why:
* NN (warp_affine, rotate): exact on random matrices. Where a source point falls on a voxel
  boundary to float32 precision (axis-aligned rotations about the volume centre do that), DALI
  steps positions along x incrementally and may pick the neighbour: at most 3% of voxels there.
* LINEAR (trilinear): at most 1 level, mean <= 0.01. Both compute in float32, but the order of
  the float32 operations differs slightly, which moves a result across a rounding boundary.
* resize: at most 1 level, mean <= 0.05 (the separable filters sum in another order); crop and
  flip: exact.
"""

import numpy as np
import pytest
from oracle import run_graph, run_op

from stoker import types
from stoker.errors import StokerError

RNG = np.random.default_rng(19)
VOLS = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((9, 10, 11, 2), (7, 12, 8, 3), (6, 5, 13, 1))]
NN, LINEAR = types.INTERP_NN, types.INTERP_LINEAR


def _random_matrix(seed):
    rng = np.random.default_rng(seed)
    m = np.hstack([np.eye(3), np.zeros((3, 1))]) + rng.uniform(-0.4, 0.4, (3, 4)) * [1, 1, 1, 5]
    return [float(v) for v in m.reshape(-1)]


def _compare(op, kw, interp, batch=VOLS, layout="DHWC", nn_frac=0.0):
    ours = run_op("stoker", op, batch, layout, interp_type=interp, **kw)
    theirs = run_op("dali", op, batch, layout, interp_type=interp, **kw)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{op} {kw} sample {i}: {a.shape} vs DALI {b.shape}"
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if interp == NN:
            assert (d > 0).mean() <= nn_frac, f"{op} {kw} sample {i}: {(d > 0).mean():.4f} of voxels differ"
        else:
            assert d.max() <= 1 and d.mean() <= 0.01, f"{op} {kw} sample {i}: max {d.max()}, mean {d.mean():.4f}"
    return ours


WARP_CASES = [dict(matrix=_random_matrix(1)), dict(matrix=_random_matrix(2), fill_value=17.0),
              dict(matrix=_random_matrix(3), inverse_map=False),
              dict(matrix=_random_matrix(4), size=[5, 13, 9], fill_value=0.0)]


@pytest.mark.oracle
@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
@pytest.mark.parametrize("kw", WARP_CASES, ids=range(len(WARP_CASES)))
def test_warp_affine_3x4_matches_dali(kw, interp):
    _compare("warp_affine", kw, interp)


@pytest.mark.oracle
def test_warp_affine_volume_float_output_and_dhw_layout():
    m = _random_matrix(5)
    ours = run_op("stoker", "warp_affine", VOLS, "DHWC", matrix=m, dtype=types.FLOAT)
    theirs = run_op("dali", "warp_affine", VOLS, "DHWC", matrix=m, dtype=types.FLOAT)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(a, b, atol=1e-3)  # float32 operation order: about 1e-4 apart
    # DHW (no channel axis; DALI refuses that layout): the DHWC result without its channel axis
    one = [v[..., :1].copy() for v in VOLS]
    with_c = run_op("stoker", "warp_affine", one, "DHWC", matrix=m)
    without = run_op("stoker", "warp_affine", [v[..., 0] for v in one], "DHW", matrix=m)
    for a, b in zip(with_c, without):
        np.testing.assert_array_equal(a[..., 0], b)


ROTATE_CASES = [dict(angle=-65.0, axis=[1, 0.3, 0.2]), dict(angle=100.0, axis=[0.2, 1, -0.4], fill_value=7.0),
                dict(angle=45.0, axis=[1, 1, 1], keep_size=True), dict(angle=170.0, axis=[0.3, -0.5, 1]),
                dict(angle=30.0, axis=[0, 0, 1]), dict(angle=12.0, axis=[0, 1, 0], size=[5, 6, 7])]


@pytest.mark.oracle
@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
@pytest.mark.parametrize("kw", ROTATE_CASES, ids=range(len(ROTATE_CASES)))
def test_rotate_about_an_axis_matches_dali(kw, interp):
    _compare("rotate", kw, interp, nn_frac=0.03)


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(size=[5, 6, 7]), dict(size=[18, 7, 20]),
                                dict(resize_x=16, resize_y=5, resize_z=12), dict(resize_z=4)])
@pytest.mark.parametrize("interp", [LINEAR, types.INTERP_CUBIC], ids=["linear", "cubic"])
def test_resize_volumes_matches_dali(kw, interp):
    ours = run_op("stoker", "resize", VOLS, "DHWC", interp_type=interp, **kw)
    theirs = run_op("dali", "resize", VOLS, "DHWC", interp_type=interp, **kw)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        d = np.abs(a.astype(int) - b)
        assert d.max() <= 1 and d.mean() <= 0.05


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(crop_d=4, crop_h=5, crop_w=6, crop_pos_z=0.2),
                                dict(crop=(3, 4, 5), crop_pos_x=0.9, crop_pos_y=0.1)])
def test_crop_volumes_matches_dali(kw):
    ours, theirs = (run_op(lib, "crop", VOLS, "DHWC", **kw) for lib in ("stoker", "dali"))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.oracle
def test_depthwise_flip_matches_dali():
    ours, theirs = (run_op(lib, "flip", VOLS, "DHWC", per_sample={"depthwise": [np.int32(1), np.int32(0),
                                                                                 np.int32(1)]})
                    for lib in ("stoker", "dali"))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.oracle
def test_transforms_3x4_chain_drives_a_volume_warp_like_dali():
    def build(fn, t, vol):
        m = fn.transforms.translation(offset=[-5.5, -5, -4.5])
        m = fn.transforms.rotation(m, angle=25.0, axis=[0.3, 1, 0.2])
        m = fn.transforms.shear(m, shear=[0.1, 0.0, -0.1, 0.05, 0.0, 0.1])
        m = fn.transforms.scale(m, scale=[1.2, 0.9, 1.1])
        m = fn.transforms.combine(m, fn.transforms.translation(offset=[5.5, 5, 4.5]))
        box = fn.transforms.crop(from_start=[0, 0, 0], from_end=[1, 1, 1], to_start=[0.5, 0, 0],
                                 to_end=[10.5, 10, 9])
        return m, box, fn.warp_affine(vol, matrix=m, fill_value=0), fn.warp_affine(vol, matrix=box)

    batch = [VOLS[0], VOLS[0][::-1].copy()]
    ours = run_graph("stoker", build, batch, layouts=["DHWC"])
    theirs = run_graph("dali", build, batch, layouts=["DHWC"])
    for k in (0, 1):  # the matrices: 3x4, float32, equal within trig rounding
        for a, b in zip(ours[k][0], theirs[k][0]):
            assert a.shape == b.shape == (3, 4)
            np.testing.assert_allclose(a, b, atol=1e-5)
    for k in (2, 3):
        for a, b in zip(ours[k][0], theirs[k][0]):
            assert a.shape == b.shape
            d = np.abs(a.astype(int) - b)
            assert d.max() <= 1 and d.mean() <= 0.01


# --- bad arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("op,kw,arg", [
    ("warp_affine", dict(matrix=[1.0] * 7), "matrix"),
    ("warp_affine", dict(matrix=[1, 0, 0, 0, 1, 0]), "matrix"),  # 2x3 for a volume
    ("warp_affine", dict(matrix=_random_matrix(1), size=[4, 5]), "size"),
    ("warp_affine", dict(matrix=_random_matrix(1), interp_type=types.INTERP_CUBIC), "interp_type"),
    ("rotate", dict(angle=10.0), "axis"),  # a volume needs an axis
    ("rotate", dict(angle=10.0, axis=[0, 0]), "axis"),
    ("rotate", dict(angle=10.0, axis=[0, 0, 0]), "axis"),
    ("rotate", dict(angle=10.0, axis=[0, 0, 1], size=[4, 5]), "size"),
])
def test_bad_volume_arguments_name_operator_and_argument(op, kw, arg):
    with pytest.raises(StokerError) as err:
        run_op("stoker", op, VOLS[:1], "DHWC", **kw)
    assert op in str(err.value) and arg in str(err.value)


def test_axis_on_an_image_names_the_argument():
    with pytest.raises(StokerError, match="axis"):
        run_op("stoker", "rotate", [VOLS[0][0]], "HWC", angle=10.0, axis=[0, 0, 1])


# --- GPU operators hand volumes to the host ---------------------------------------------------

@pytest.mark.parametrize("op,kw", [
    ("warp_affine", dict(matrix=_random_matrix(1))),
    ("rotate", dict(angle=30.0, axis=[0.2, 0.4, 1])),
    ("resize", dict(size=[4, 6, 7])),
    ("crop", dict(crop=(3, 4, 5))),
    ("flip", dict(depthwise=1, horizontal=0)),
])
@pytest.mark.parametrize("layout", ["DHWC", ""])
def test_gpu_volume_inputs_take_the_host_path(op, kw, layout):
    """On the null device (CuPy's host half on NumPy) a GPU volume batch goes through the host
    fallback: the pixels are the CPU's, never the 2-D kernel's reading of D, H as H, W."""
    import null_device

    from stoker.operators.schema import get_operator
    from stoker.tensors import TensorListCPU

    def make(device):
        cls = get_operator(op)
        static, _ = cls.schema.bind(kw, lambda v: False)
        return cls(static, device)

    vols = [v for v in VOLS[:2]]
    cpu_op = make("cpu")
    from stoker.operators.base import BatchContext

    want = cpu_op.run_cpu(BatchContext(batch_size=2), [TensorListCPU(vols, layout or None)], {})[0].samples()
    with null_device.installed():
        x, ctx = null_device.device_batch(vols, layout)
        got = make("gpu").run_gpu(ctx, [x], {})[0].as_cpu().samples()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
