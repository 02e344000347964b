"""jpeg_compression_distortion and clahe against DALI's CPU operators and OpenCV."""

import cv2
import numpy as np
import pytest
from generated_images import small_images
from oracle import Case, case_params, check_operator, run_op

from stoker.errors import OperatorError, PipelineBuildError

IM = small_images()
JPEG_CASES = [
    *[Case([IM["rgb"], IM["noise"]], dict(quality=q)) for q in (50, 10, 95, 0, 150)],
    Case([IM["rgb"], IM["rgb"]], per_sample={"quality": [np.int32(5), np.int32(80)]}),
    Case([np.stack([IM["noise"], IM["noise"][::-1]])], dict(quality=30), layout="FHWC", id="FHWC"),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case, check", case_params(JPEG_CASES))
def test_jpeg_check_operator(case, check):
    """DALI to the bit (qualities, per-sample quality, frames), 1 thread vs 4, pipeline vs eager."""
    check_operator("jpeg_compression_distortion", case, [check])


def test_jpeg_lower_quality_loses_more(images):
    x = images["rgb"]
    err = [np.abs(run_op("stoker", "jpeg_compression_distortion", [x], quality=q)[0].astype(int) - x).mean()
           for q in (5, 50, 95)]
    assert err[0] > err[1] > err[2] > 0


def test_jpeg_errors(images):
    with pytest.raises(OperatorError, match="(?s)jpeg_compression_distortion.*3 channels"):
        run_op("stoker", "jpeg_compression_distortion", [images["gray"]])
    with pytest.raises(OperatorError, match="(?s)jpeg_compression_distortion.*uint8"):
        run_op("stoker", "jpeg_compression_distortion", [images["rgb_f"]])


CLAHE_CASES = [Case([IM["rgb"], IM["gray"], IM["noise"]], kw) for kw in (
    dict(clip_limit=2.0, tiles_x=8, tiles_y=8), dict(clip_limit=4.0, tiles_x=4, tiles_y=3),
    dict(clip_limit=1.5, tiles_x=2, tiles_y=5, luma_only=False))]


@pytest.mark.oracle
@pytest.mark.parametrize("case, check", case_params(CLAHE_CASES))
def test_clahe_check_operator(case, check):
    """DALI to the bit, 1 thread vs 4, pipeline vs eager."""
    check_operator("clahe", case, [check])


def test_clahe_gray_is_opencv(images):
    x = images["gray"]
    out = run_op("stoker", "clahe", [x], clip_limit=3.0, tiles_x=3, tiles_y=3)[0]
    np.testing.assert_array_equal(out[..., 0], cv2.createCLAHE(3.0, (3, 3)).apply(x[..., 0]))


def test_clahe_errors(images):
    with pytest.raises(PipelineBuildError, match="clahe.*'tiles_x'.*required"):
        run_op("stoker", "clahe", [images["gray"]], clip_limit=2.0, tiles_y=4)
    with pytest.raises(PipelineBuildError, match="clahe.*'tiles_y'.*positive"):
        run_op("stoker", "clahe", [images["gray"]], clip_limit=2.0, tiles_x=4, tiles_y=0)
    with pytest.raises(PipelineBuildError, match="clahe.*'bins'"):
        run_op("stoker", "clahe", [images["gray"]], clip_limit=2.0, tiles_x=4, tiles_y=4, bins=128)
    with pytest.raises(OperatorError, match="(?s)clahe.*uint8"):
        run_op("stoker", "clahe", [images["gray_f"]], clip_limit=2.0, tiles_x=4, tiles_y=4)
