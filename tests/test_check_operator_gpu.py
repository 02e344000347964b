"""The shared per-operator checker (tests/oracle.py: check_operator) on the GPU: each case runs in a
pipeline on the GPU and on the CPU, and the outputs (layouts, shapes, dtypes, values) must agree
within the case's ``gpu_tol``. Copies and integer sums are compared to the bit; float arithmetic
within float32 rounding (the kernels sum in another order); uint8 blurs within one level (a
rounding tie may move). The same cases' CPU checks (1 thread vs 4, pipeline vs eager) run here too,
so a case that is wrong on the CPU is told apart from a GPU difference."""

import numpy as np
import pytest
from oracle import Case, case_params, check_operator

from stoker import types

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(2024)
IMAGES = [RNG.integers(0, 256, (h, w, 3), np.uint8) for h, w in [(37, 53), (64, 48), (21, 90)]]
GRAY = [im[..., :1].copy() for im in IMAGES]
CHW = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in IMAGES]
FLOATS = [im.astype(np.float32) / 255.0 for im in IMAGES]
MEAN, STD = [0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255]

CASES = {
    "flip": [
        Case(IMAGES, dict(horizontal=1, vertical=1)),
        Case(CHW, per_sample={"horizontal": [np.int32(v) for v in (0, 1, 1)]}, layout="CHW"),
    ],
    "crop": [
        Case(IMAGES, dict(crop=(20, 24), crop_pos_x=0.3, crop_pos_y=0.8)),
        Case(GRAY, dict(crop=(80, 70), out_of_bounds_policy="pad", fill_values=9)),
    ],
    "crop_mirror_normalize": [
        Case(IMAGES, dict(crop=(16, 20), mean=MEAN, std=STD, mirror=1), gpu_tol=1e-4),
        Case(IMAGES, dict(crop=(16, 20), mean=MEAN, std=STD, dtype=types.FLOAT16, output_layout="HWC"), gpu_tol=1e-3),
    ],
    "laplacian": [
        # integer inputs and scales, windows up to 7: float32 sums are exact, so the same to the bit
        Case(IMAGES, dict(dtype=types.FLOAT, window_size=5)),
        Case(GRAY, dict(dtype=types.FLOAT), per_sample={"window_size": [np.int32(v) for v in (3, 5, 7)]}),
    ],
    "gaussian_blur": [
        Case(IMAGES, dict(sigma=1.5), gpu_tol=(0.05, 1)),
        Case(FLOATS, dict(sigma=(0.8, 2.0)), gpu_tol=1e-5),
    ],
    "pad": [
        Case(IMAGES, dict(fill_value=7, axes=(0, 1), shape=(100, 100))),
    ],
}
PARAMS = [pytest.param(name, *p.values, id=f"{name}-{p.id}")
          for name, cases in CASES.items() for p in case_params(cases, ["gpu", "threads", "eager"])]


@pytest.mark.parametrize("name, case, check", PARAMS)
def test_check_operator_on_gpu(name, case, check):
    check_operator(name, case, [check])


def test_all_checks_in_one_call():
    """check_operator with several cases and checks in one call, as a test without a table would."""
    check_operator("flip", CASES["flip"], ["gpu", "threads", "eager"])
