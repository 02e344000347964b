"""paste against DALI's CPU operator."""


import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(7)
IMGS = [RNG.integers(0, 256, (5, 7, 3), np.uint8), RNG.integers(0, 256, (4, 4, 3), np.uint8),
        RNG.integers(0, 256, (33, 18, 3), np.uint8)]
FILL = [250, 10, 128]

CASES = [dict(ratio=2), dict(ratio=1.5, paste_x=0.3, paste_y=0.8), dict(ratio=1.7, paste_x=1, paste_y=0),
         dict(ratio=1.3, min_canvas_size=40), dict(ratio=2.5), dict(ratio=1.0), dict(ratio=3.33, paste_x=0.71)]


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=str)
def test_paste_matches_dali(case):
    check(lambda fn, t, x: fn.paste(x, fill_value=FILL, **case), IMGS, layouts=["HWC"], what=str(case))


@pytest.mark.oracle
def test_paste_per_sample_arguments_and_gray_match_dali():
    ratio = [np.float32(v) for v in (1.25, 2.0, 3.1)]
    px = [np.float32(v) for v in (0.0, 0.6, 1.0)]
    py = [np.float32(v) for v in (1.0, 0.15, 0.5)]
    check(lambda fn, t, x, r, a, b: fn.paste(x, ratio=r, paste_x=a, paste_y=b, fill_value=FILL), IMGS, ratio, px, py,
          layouts=["HWC", None, None, None])
    gray = [i[..., :1].copy() for i in IMGS]
    check(lambda fn, t, x: fn.paste(x, ratio=1.9, n_channels=1, fill_value=[77]), gray, layouts=["HWC"])


def test_paste_errors_name_the_argument():
    with pytest.raises(StokerError, match="paste: argument 'ratio'"):
        run_graph("stoker", lambda fn, t, x: fn.paste(x, ratio=0.5, fill_value=FILL), IMGS, layouts=["HWC"])
    with pytest.raises(StokerError, match="paste: argument 'fill_value'"):
        run_graph("stoker", lambda fn, t, x: fn.paste(x, ratio=2, fill_value=[1, 2]), IMGS, layouts=["HWC"])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64, np.uint32])
@pytest.mark.parametrize("channels", [1, 3, 4, 5])
def test_paste_gives_the_same_canvas_on_both_paths_for_every_type(dtype, channels, monkeypatch):
    """The OpenCV path (its types, up to 4 channels) against the NumPy one (the path DALI's oracle
    checks above for uint8), element for element; the corner holds the C-cast fill."""
    from stoker.operators.image import paste

    img = (RNG.integers(-50, 200, (9, 6, channels)) * 1.25).astype(dtype)
    fill = [7.6, -3.0, 250.0, 1.0, 2.0][:channels]

    def run():
        ((samples, _),) = run_graph("stoker", lambda fn, t, x: fn.paste(x, ratio=1.8, paste_x=0.25, paste_y=0.9,
                                                                       n_channels=channels, fill_value=fill),
                                    [img], layouts=["HWC"])
        return np.asarray(samples[0])

    fast = run()
    monkeypatch.setattr(paste, "OPENCV_TYPES", frozenset())
    plain = run()
    assert fast.dtype == plain.dtype == dtype and fast.shape == plain.shape == (16, 10, channels)
    np.testing.assert_array_equal(fast, plain)
    np.testing.assert_array_equal(fast[0, 0], np.array(fill, np.float64).astype(dtype))
