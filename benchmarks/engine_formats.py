"""Which JPEG kinds nvJPEG's hardware engines and its GPU-hybrid backend decode, and how fast.

    python benchmarks/engine_formats.py

For a grayscale, a colour (4:2:0) and a progressive JPEG of 375x500 (smoothed noise, quality
90): decode with each backend (stoker.backend.nvjpeg), the largest difference from OpenCV's
colour decode, and for the engines the rate of a batch of 256 copies (three calls, after the
first). A backend that refuses a kind prints FAILED with nvJPEG's status.
"""

import time

import cupy as cp
import cv2
import numpy as np

from stoker.backend.nvjpeg import HardwareDecoder, HybridDecoder


def encode(img, progressive=False):
    params = [cv2.IMWRITE_JPEG_QUALITY, 90] + ([cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else [])
    return np.ascontiguousarray(cv2.imencode(".jpg", img, params)[1].reshape(-1))


def main():
    rng = np.random.default_rng(0)
    base = cv2.GaussianBlur(rng.integers(0, 255, (375, 500, 3), np.uint8), (9, 9), 3)
    cases = {"gray": encode(cv2.cvtColor(base, cv2.COLOR_BGR2GRAY)), "color": encode(base),
             "progressive": encode(base, True)}
    for cls in (HardwareDecoder, HybridDecoder):
        for name, data in cases.items():
            try:
                decoder = cls(0)
                stream = cp.cuda.Stream(non_blocking=True)
                ref = cv2.imdecode(data, cv2.IMREAD_COLOR)[:, :, ::-1]
                win = [(0, 0, ref.shape[0], ref.shape[1])]
                if cls is HybridDecoder:
                    buf = cp.empty(ref.size, cp.uint8)
                    decoder.decode_full_into([data], np.array([ref.shape[:2]]), np.array([buf.data.ptr]), stream)
                    out = buf.reshape(ref.shape)
                else:
                    out = decoder.decode([data], win, stream)[0]
                stream.synchronize()
                diff = np.abs(cp.asnumpy(out).astype(int) - ref).max()
                rate = ""
                if cls is HardwareDecoder:
                    n, t = 256, time.perf_counter()
                    for _ in range(3):
                        decoder.decode([data] * n, win * n, stream)
                        stream.synchronize()
                    rate = f"{n * 3 / (time.perf_counter() - t):.0f} img/s"
                print(cls.__name__, name, "OK, max diff", diff, rate, flush=True)
            except Exception as e:  # noqa: BLE001 - a refusal is the answer for that kind
                print(cls.__name__, name, "FAILED", type(e).__name__, e, flush=True)


if __name__ == "__main__":
    main()
