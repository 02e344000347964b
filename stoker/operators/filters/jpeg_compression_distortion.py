"""``jpeg_compression_distortion``: encodes each RGB image as a JPEG of the given quality
(4:2:0 chroma subsampling) and decodes it again, leaving the compression artifacts.

OpenCV's libjpeg codec does the work (cv2.imencode / cv2.imdecode); on uint8
HWC (or FHWC, frame by frame) RGB input this gives the same pixels as DALI's
CPU operator.
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.color._common import check_channels_last
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register

_PARAMS = (cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420)


def jpeg_round_trip(rgb: np.ndarray, quality: int) -> np.ndarray:
    """One HWC uint8 RGB image through a JPEG encode and decode at ``quality`` (1..100)."""
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, int(quality), *_PARAMS])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


@register
class JpegCompressionDistortion(LayoutAware):
    """JPEG artifacts by an encode/decode round trip."""

    schema = Schema(
        name="jpeg_compression_distortion",
        doc="Introduces JPEG compression artifacts: encodes each uint8 RGB image (HWC, or FHWC frame by frame) "
            "at the given quality and decodes it.",
        args=[Arg("quality", "int", 50, tensor=True, doc="JPEG quality 1 (worst) to 100; values outside are clamped")],
    )

    def run_sample(self, inputs, args, ctx):
        img = np.asarray(inputs[0])
        check_channels_last(self, img, self.layout_of(args), (3,))
        if img.dtype != np.uint8 or img.ndim not in (3, 4):
            raise self.error(f"expects uint8 HWC or FHWC RGB input, got {img.dtype} of shape {img.shape}")
        q = args.get("quality")
        q = int(np.clip(int(np.asarray(q).reshape(-1)[0]), 1, 100)) if q is not None else 50
        if img.size == 0:
            return img.copy()
        if img.ndim == 3:
            return jpeg_round_trip(np.ascontiguousarray(img), q)
        return np.stack([jpeg_round_trip(np.ascontiguousarray(f), q) for f in img])
