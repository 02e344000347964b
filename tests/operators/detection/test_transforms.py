"""transforms.* (translation, scale, rotation, shear, crop, combine) against DALI's CPU operators."""

import numpy as np
import pytest
from oracle import check_samples as check  # layouts not compared
from oracle import run_graph_samples as run_graph  # samples only, no layouts

from stoker.errors import StokerError

TOL = 0
# sin/cos/tan: float32 results of DALI's trig may differ from NumPy's by an ulp or two
TRIG_TOL = 3e-7
RNG = np.random.default_rng(11)
BS = 3


def _per_sample(shape, lo=-2.0, hi=2.0):
    return [RNG.uniform(lo, hi, shape).astype(np.float32) for _ in range(BS)]


def _affine(n):
    return [np.concatenate([np.eye(n) + RNG.uniform(-.5, .5, (n, n)), RNG.uniform(-3, 3, (n, 1))],
                           1).astype(np.float32) for _ in range(BS)]


CASES = {
    "translation": [dict(offset=[1.5, -2]), dict(offset=[1, 2, 3])],
    "scale": [dict(scale=[2, 0.5]), dict(scale=[2, 3, 4], center=[1, 1, 1]), dict(scale=2.0, ndim=3),
              dict(scale=[1.5, -1], center=[0.5, 0.25])],
    "rotation": [dict(angle=30.0), dict(angle=-110.0, center=[1, 2]), dict(angle=45.0, axis=[0, 0, 1]),
                 dict(angle=73.0, axis=[1, 2, -0.5], center=[1, 0, 2])],
    "shear": [dict(shear=[0.5, -0.2]), dict(angles=[10, -30], center=[1, 1]),
              dict(shear=[0.1, 0.2, 0.3, -0.4, 0.5, 0.6]), dict(angles=[5, 10, 15, 20, 25, 30], center=[1, 2, 3])],
    "crop": [dict(from_start=[0, 0], from_end=[4, 2], to_start=[1, 1], to_end=[2, 3]), dict(to_start=[0.2, 0.3]),
             dict(from_start=[3, 0, 1], from_end=[1, 2, 5], absolute=True),
             dict(from_start=[3, 0], from_end=[1, 2], to_end=[-1, 2])],
}
PARAMS = [(name, kw) for name, kws in CASES.items() for kw in kws]


def _ndim(kw):
    for v in kw.values():
        if isinstance(v, list):
            return 2 if len(v) == 2 else 3
    return kw.get("ndim", 2)


@pytest.mark.oracle
@pytest.mark.parametrize("name,kw", PARAMS, ids=[f"{n}-{k}" for n, k in PARAMS])
def test_transform_matches_dali(name, kw):
    def build(fn, t, _dummy):
        return getattr(fn.transforms, name)(**kw)
    tol = TRIG_TOL if name == "rotation" or "angles" in kw else TOL
    check(build, [np.zeros(1, np.float32)] * BS, tol=tol, what=f"{name} {kw}")


@pytest.mark.oracle
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("name,kw", PARAMS[::2], ids=[f"{n}-{k}" for n, k in PARAMS[::2]])
def test_transform_composes_with_input_like_dali(name, kw, reverse):
    mats = _affine(_ndim(kw))
    tol = TRIG_TOL * 10 if name == "rotation" or "angles" in kw else TOL
    check(lambda fn, t, m: getattr(fn.transforms, name)(m, reverse_order=reverse, **kw), mats, tol=tol)


@pytest.mark.oracle
def test_per_sample_arguments_match_dali():
    check(lambda fn, t, o: fn.transforms.translation(offset=o), _per_sample(3), tol=TOL)
    check(lambda fn, t, s, c: fn.transforms.scale(scale=s, center=c), _per_sample(2), _per_sample(2), tol=TOL)
    angles = [np.array(a, np.float32) for a in (10, -45, 200)]
    check(lambda fn, t, a, c: fn.transforms.rotation(angle=a, center=c), angles, _per_sample(2), tol=TRIG_TOL * 10)
    check(lambda fn, t, a, ax: fn.transforms.rotation(angle=a, axis=ax), angles, _per_sample(3, 0.1, 1), tol=TRIG_TOL)
    check(lambda fn, t, s: fn.transforms.shear(shear=s), _per_sample((3, 2), -1, 1), tol=TOL)
    check(lambda fn, t, a, b: fn.transforms.crop(from_start=a, to_end=b), _per_sample(2, -2, 0),
          _per_sample(2, 1, 3), tol=TOL)


@pytest.mark.oracle
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("reverse", [False, True])
def test_combine_matches_dali(n, reverse):
    a, b, c = _affine(n), _affine(n), _affine(n)
    check(lambda fn, t, x, y: fn.transforms.combine(x, y, reverse_order=reverse), a, b, tol=TOL)
    check(lambda fn, t, x, y, z: fn.transforms.combine(x, y, z, reverse_order=reverse), a, b, c, tol=TOL)


@pytest.mark.oracle
def test_chain_applied_to_points_matches_dali():
    pts = [RNG.uniform(0, 10, (6, 2)).astype(np.float32) for _ in range(BS)]

    def build(fn, t, p):
        m = fn.transforms.rotation(angle=25.0, center=[5, 5])
        m = fn.transforms.scale(m, scale=[1.2, 0.8])
        m = fn.transforms.combine(m, fn.transforms.translation(offset=[-1, 2]))
        return fn.coord_transform(p, MT=m)
    check(build, pts, tol=1e-4)


def test_transforms_compose_like_matrices():
    """Independent of DALI: translation then scale equals the product of the two matrices."""
    (out,) = run_graph("stoker", lambda fn, t, _: fn.transforms.scale(fn.transforms.translation(offset=[1, 2]),
                                                                    scale=[3, 4]), [np.zeros(1)] * 2)
    expected = np.array([[3, 0, 3], [0, 4, 8]], np.float32)
    for m in out:
        np.testing.assert_array_equal(m, expected)


@pytest.mark.parametrize("name,kw,arg", [("shear", dict(shear=[1, 2, 3]), "shear"),
                                         ("rotation", dict(angle=10.0, axis=[0, 0, 0]), "axis"),
                                         ("scale", dict(scale=[1, 2], center=[1, 2, 3]), "center"),
                                         ("translation", dict(), "offset")])
def test_bad_arguments_name_operator_and_argument(name, kw, arg):
    with pytest.raises(StokerError, match=f"transforms.{name}.*'{arg}'"):
        run_graph("stoker", lambda fn, t, _: getattr(fn.transforms, name)(**kw), [np.zeros(1)] * 2)


def test_combine_mismatched_dims_fail_clearly():
    with pytest.raises(StokerError, match="transforms.combine"):
        run_graph("stoker", lambda fn, t, x, y: fn.transforms.combine(x, y), _affine(2), _affine(3))


def test_legacy_ops_classes_give_the_same_matrices():
    from stoker import ops

    rot, comb = ops.transforms.Rotation(angle=30.0, center=[1, 2]), ops.transforms.Combine()
    legacy = run_graph("stoker", lambda fn, t, _: comb(rot(), ops.transforms.Translation(offset=[1, 1])()),
                       [np.zeros(1)] * 2)
    ours = run_graph("stoker", lambda fn, t, _: fn.transforms.combine(fn.transforms.rotation(angle=30.0, center=[1, 2]),
                                                                      fn.transforms.translation(offset=[1, 1])),
                     [np.zeros(1)] * 2)
    for a, b in zip(legacy[0], ours[0]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, kw", [("translation", dict(offset=[1.0, 2.0])), ("rotation", dict(angle=30.0)),
                                      ("scale", dict(scale=[2.0, 3.0])), ("shear", dict(shear=[0.1, 0.2])),
                                      ("crop", dict(from_start=[0.0, 0.0], from_end=[1.0, 1.0],
                                                    to_start=[0.0, 0.0], to_end=[2.0, 2.0]))])
def test_matrices_have_dalis_layout(name, kw):
    import stoker.fn as fn
    from stoker import pipeline_def

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        op = getattr(fn.transforms, name)
        m = op(**kw)
        return m, fn.transforms.combine(m, op(**kw))

    pipe = p()
    pipe.build()
    single, combined = pipe.run()
    pipe.close()
    assert single.layout() == combined.layout() == "**"  # DALI 2.4 reports "**" for these


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int16])
def test_integer_coordinates_saturate_like_dali(dtype):
    """Integer points scaled far past their type's range come out at its bounds, as DALI's; int32's
    upper bound once came out as its lower one (a float32 clip rounds 2^31 - 1 up to 2^31)."""
    info = np.iinfo(dtype)
    pts = [np.array([[1, 0], [3, 1], [0, 2]], dtype), np.array([[info.max, info.max]], dtype)]
    type_name = np.dtype(dtype).name.upper()

    def build(fn, t, p):
        return fn.coord_transform(p, M=[3e9, 0.0, 0.0, -3e9], T=[0.5, 0.0], dtype=getattr(t, type_name))

    (got,) = check(build, pts)
    assert got[0].dtype == dtype
    assert got[1][0, 0] == info.max and got[1][0, 1] == info.min
