"""jpeg_compression_distortion and clahe against DALI's CPU operators and OpenCV."""

import cv2
import numpy as np
import pytest
from dali_oracle import compare_op, run_op

from stoker.errors import OperatorError, PipelineBuildError


@pytest.mark.oracle
@pytest.mark.parametrize("quality", [50, 10, 95, 0, 150])
def test_jpeg_matches_dali(quality, images):
    compare_op("jpeg_compression_distortion", [images["rgb"], images["noise"]], 0.0, 0, quality=quality)


@pytest.mark.oracle
def test_jpeg_per_sample_and_frames_match_dali(images):
    batch = [images["rgb"], images["rgb"]]
    compare_op("jpeg_compression_distortion", batch, 0.0, 0, per_sample={"quality": [np.int32(5), np.int32(80)]})
    frames = np.stack([images["noise"], images["noise"][::-1]])
    compare_op("jpeg_compression_distortion", [frames], 0.0, 0, layout="FHWC", quality=30)


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


CLAHE_CASES = [dict(clip_limit=2.0, tiles_x=8, tiles_y=8), dict(clip_limit=4.0, tiles_x=4, tiles_y=3),
               dict(clip_limit=1.5, tiles_x=2, tiles_y=5, luma_only=False)]


@pytest.mark.oracle
@pytest.mark.parametrize("kwargs", CLAHE_CASES, ids=str)
def test_clahe_matches_dali(kwargs, images):
    compare_op("clahe", [images["rgb"], images["gray"], images["noise"]], 0.0, 0, **kwargs)


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
