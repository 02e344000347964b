"""The geometric branch of auto_aug's select on GPU batches (stoker/auto_aug/gpu_warp_group.py):
the same pixels as one GPU branch per augmentation (the same matrices into the same kernel), the
CPU's pixels with nearest-neighbour sampling, within the warp kernel's bilinear rounding otherwise,
and no host fallback."""

import numpy as np
import pytest

import stoker
import stoker.fn as fn
from stoker import types
from stoker.auto_aug import grouping, rand_augment, trivial_augment
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

SCHEMES = {
    "trivial": lambda x: trivial_augment.trivial_augment_wide(x),
    "rand_n2": lambda x: rand_augment.rand_augment(x, n=2, m=9),
    "rand_nn": lambda x: rand_augment.rand_augment(x, n=3, m=17, interp_type=types.INTERP_NN, fill_value=None),
}


def _run(scheme, images, gpu, grouped=True):
    saved = grouping.GROUP_WARPS
    grouping.GROUP_WARPS = grouped
    try:
        @stoker.pipeline_def(batch_size=len(images), num_threads=2, device_id=0, seed=5, enable_conditionals=True)
        def pipe():
            x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
            return scheme(x.gpu() if gpu else x)

        p = pipe()
        p.build()
    finally:
        grouping.GROUP_WARPS = saved
    outs = []
    for _ in range(2):
        (out,) = p.run()
        outs.append([np.asarray(s) for s in (out.as_cpu() if gpu else out).samples()])
    p.close()
    return outs


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_grouped_gpu_branch_gives_the_separate_branches_pixels(name, make_images):
    images = make_images(64, 24, 80)
    before = gpu_registry.FALLBACKS["_auto_aug.warp_group"]
    got = _run(SCHEMES[name], images, True)
    assert gpu_registry.FALLBACKS["_auto_aug.warp_group"] == before
    want = _run(SCHEMES[name], images, True, grouped=False)
    for g_it, w_it in zip(got, want):
        for g, w in zip(g_it, w_it):
            np.testing.assert_array_equal(g, w)


def _warps_only(interp):
    from stoker.auto_aug import augmentations as aa

    suite = [aa.shear_x, aa.shear_y, aa.translate_x_no_shape, aa.translate_y_no_shape, aa.rotate, aa.identity]
    return lambda x: rand_augment.apply_rand_augment(suite, x, n=2, m=21, interp_type=interp, fill_value=40)


@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR], ids=["nn", "linear"])
def test_grouped_gpu_branch_against_the_cpu(interp, make_images):
    images = make_images(48, 24, 80)
    got, want = _run(_warps_only(interp), images, True), _run(_warps_only(interp), images, False)
    for g_it, w_it in zip(got, want):
        for g, w in zip(g_it, w_it):
            assert g.shape == w.shape and g.dtype == w.dtype
            if interp == types.INTERP_NN:
                np.testing.assert_array_equal(g, w)
            else:  # the GPU's bilinear warps differ from OpenCV's by a level or two at edges
                assert np.abs(g.astype(float) - w.astype(float)).mean() < 1.0
