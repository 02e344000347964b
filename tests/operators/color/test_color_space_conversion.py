"""color_space_conversion against DALI's CPU operator, and round trips."""

import numpy as np
import pytest
from oracle import compare_op, run_op

from stoker import types
from stoker.errors import OperatorError, PipelineBuildError

T = types
PAIRS = [(T.RGB, T.YCbCr), (T.BGR, T.YCbCr), (T.RGB, T.GRAY), (T.BGR, T.GRAY), (T.RGB, T.BGR),
         (T.BGR, T.RGB), (T.GRAY, T.RGB), (T.GRAY, T.BGR), (T.GRAY, T.YCbCr)]


@pytest.mark.oracle
@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda t: t.name)
def test_matches_dali(src, dst, images):
    batch = [images["gray"]] if src == T.GRAY else [images["rgb"], images["noise"]]
    # GRAY is OpenCV's fixed-point formula in both (exact); matrices in float32: ties one apart
    compare_op("color_space_conversion", batch, 0.001, 1, image_type=src, output_type=dst)


@pytest.mark.oracle
@pytest.mark.parametrize("dst", [T.RGB, T.BGR, T.GRAY])
def test_from_ycbcr_matches_dali(dst, images):
    # in-gamut YCbCr made from RGB pixels (random triples are mostly outside the RGB cube)
    ycc = run_op("stoker", "color_space_conversion", [images["rgb"], images["noise"]],
                       image_type=T.RGB, output_type=T.YCbCr)
    compare_op("color_space_conversion", ycc, 0.001, 1, image_type=T.YCbCr, output_type=dst)


def test_ycbcr_round_trip_is_close(images):
    x = images["noise"]
    ycc = run_op("stoker", "color_space_conversion", [x], image_type=T.RGB, output_type=T.YCbCr)[0]
    assert ycc[..., 0].min() >= 16 and ycc[..., 0].max() <= 235
    back = run_op("stoker", "color_space_conversion", [ycc], image_type=T.YCbCr, output_type=T.RGB)[0]
    assert np.abs(back.astype(int) - x).max() <= 2  # 8-bit studio range loses < 1 level per channel


def test_same_space_is_a_copy(images):
    """On purpose unlike DALI (which refuses): converting to the same space copies."""
    x = images["rgb"]
    np.testing.assert_array_equal(
        run_op("stoker", "color_space_conversion", [x], image_type=T.RGB, output_type=T.RGB)[0], x)


def test_errors(images):
    with pytest.raises(PipelineBuildError, match="color_space_conversion.*'output_type'.*required"):
        run_op("stoker", "color_space_conversion", [images["rgb"]], image_type=T.RGB)
    with pytest.raises(OperatorError, match="(?s)color_space_conversion.*uint8"):
        run_op("stoker", "color_space_conversion", [images["rgb_f"]], image_type=T.RGB, output_type=T.GRAY)
    with pytest.raises(OperatorError, match="(?s)color_space_conversion.*3 channels"):
        run_op("stoker", "color_space_conversion", [images["gray"]], image_type=T.RGB, output_type=T.GRAY)
    with pytest.raises(PipelineBuildError, match="'image_type'"):
        run_op("stoker", "color_space_conversion", [images["rgb"]], image_type=T.ANY_DATA,
                     output_type=T.GRAY)


@pytest.mark.parametrize("shape", [(5, 7, 3), (2, 5, 7, 3), (1, 1, 3)])
def test_channel_swaps_and_repeats_are_exact(shape):
    """RGB <-> BGR reverses the channels and GRAY -> RGB / BGR repeats the one, element for element,
    also for sequences (FHWC) and views that are not contiguous."""
    rng = np.random.default_rng(4)
    rgb = rng.integers(0, 256, (*shape[:-1], 6), np.uint8)[..., ::2]  # a strided view
    for src, dst in ((T.RGB, T.BGR), (T.BGR, T.RGB)):
        layout = "FHWC" if len(shape) == 4 else "HWC"
        out = run_op("stoker", "color_space_conversion", [rgb], image_type=src, output_type=dst, layout=layout)[0]
        np.testing.assert_array_equal(out, rgb[..., ::-1])
    gray = rgb[..., :1]
    for dst in (T.RGB, T.BGR):
        layout = "FHWC" if len(shape) == 4 else "HWC"
        out = run_op("stoker", "color_space_conversion", [gray], image_type=T.GRAY, output_type=dst, layout=layout)[0]
        np.testing.assert_array_equal(out, np.repeat(gray, 3, axis=-1))
