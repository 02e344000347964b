"""element_rng, the element-wise generator the CPU noise operators share with their GPU kernels:
its words are Philox4x64-10 of the counter (block + 1, draw, 0, 0), checked against a plain
Python cipher that reproduces Random123's published answers; keys come from the sample's
stream; normals pair words as the kernel does; the noise operators use it as documented."""

import numpy as np
import pytest

from stoker.operators.base import SampleContext
from stoker.operators.filters import element_rng
from stoker.operators.filters.gpu_noise import noise_tables, salt_and_pepper_group

M64 = (1 << 64) - 1


def philox4x64_10(counter, key):
    """Philox4x64-10 of four 64-bit words under two, in Python integers (Salmon et al., 2011)."""
    c, (k0, k1) = list(counter), key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B97F4A7C15) & M64, (k1 + 0xBB67AE8584CAA73B) & M64
        p0, p1 = 0xD2E7470EE14C6C93 * c[0], 0xCA5A826395121157 * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k0, p1 & M64, (p0 >> 64) ^ c[3] ^ k1, p0 & M64]
    return c


def test_the_reference_cipher_gives_random123s_known_answers():
    assert philox4x64_10([0] * 4, (0, 0)) == [0x16554D9ECA36314C, 0xDB20FE9D672D0FDC,
                                              0xD7E772CEE186176B, 0x7E68B68AEC7BA23B]
    assert philox4x64_10([M64] * 4, (M64, M64)) == [0x87B092C3013FE90B, 0x438C3C67BE8D0224,
                                                    0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0]


@pytest.mark.parametrize("draw", [0, 3])
def test_words_are_the_cipher_of_block_plus_one_and_draw(draw):
    key = (123456789012345, 987654321)
    want = [w for b in range(4) for w in philox4x64_10([b + 1, draw, 0, 0], key)]
    assert element_rng.words(key, 14, draw).tolist() == want[:14]


def test_keys_come_from_the_samples_stream():
    keys = element_rng.batch_keys(77, 5, [0, 3, 9])
    for row, index in zip(keys, (0, 3, 9)):
        rng = SampleContext(index, 5, 77).rng
        assert row.tolist() == element_rng.sample_key(rng).tolist()
    assert len({tuple(k) for k in keys.tolist()}) == 3
    assert int(keys.max()) < 1 << 53  # (they fit the kernel's int64 table as they are)


def test_normals_pair_two_words_into_cosine_and_sine():
    key = (5, 6)
    w = [int(x) for x in element_rng.words(key, 4)]
    u1 = (((w[0] >> 12) << 1) | 1) * 2.0 ** -53
    angle = (w[1] >> 11) * 2.0 ** -53 * element_rng.TWO_PI
    radius = np.sqrt(-2.0 * np.log(u1))
    z = element_rng.normals(key, 3)  # an odd count: the last pair's sine is dropped
    np.testing.assert_allclose(z[:2], [radius * np.cos(angle), radius * np.sin(angle)], rtol=1e-15)
    assert z.shape == (3,)
    big = element_rng.normals((11, 12), 200_001)
    assert abs(big.mean()) < 0.01 and abs(big.std() - 1) < 0.01
    assert abs(np.corrcoef(big[0:-1:2], big[1::2])[0, 1]) < 0.01  # a pair's two values independent


def test_threshold32_rounds_p_times_two_to_the_32():
    assert element_rng.threshold32(0.0) == 0
    assert element_rng.threshold32(1.0) == 1 << 32
    assert element_rng.threshold32(0.5) == 1 << 31
    assert element_rng.threshold32(0.3) == round(0.3 * 2 ** 32)


def test_gaussian_noise_adds_the_samples_normals(monkeypatch):
    """noise.gaussian's values are element_rng's normals of the sample's key, in float32, scaled,
    shifted and added in that order: what the kernel reproduces."""
    import stoker.fn as fn
    from stoker import pipeline_def

    img = np.random.default_rng(0).integers(0, 256, (7, 9, 3), np.uint8)
    keys = []
    real_key = element_rng.sample_key
    monkeypatch.setattr(element_rng, "sample_key", lambda rng: keys.append(real_key(rng)) or keys[-1])

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, seed=3)
    def pipe():
        return fn.noise.gaussian(fn.external_source(source=[[img]], cycle=True, layout="HWC"), stddev=9.0, mean=2.0)

    p = pipe()
    p.build()
    (out,) = p.run()
    noise = element_rng.normals(keys[0], img.size).astype(np.float32) * np.float32(9.0) + np.float32(2.0)
    want = np.clip(np.floor(noise.reshape(img.shape) + img + np.float32(0.5)), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(out.at(0), want)


def test_kernel_tables_hold_keys_sizes_and_draw_groups():
    shapes = [(4, 5, 3), (2, 3, 3), (3, 2, 1)]
    itab, ftab = noise_tables(9, 2, [10, 11, 12], shapes, [(1.5, 2.5), (3.0,), ()], [(3, 1), (1, 1), (1, 1)])
    assert itab[:, 2].tolist() == [60, 18, 6]
    assert itab[:, 3:5].tolist() == element_rng.batch_keys(9, 2, [10, 11, 12]).tolist()
    assert itab[:, 5:7].tolist() == [[3, 1], [1, 1], [1, 1]]
    assert ftab[:, :2].tolist() == [[1.5, 2.5], [3.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("layout,shape,per_channel", [("HWC", (4, 5, 3), False), ("CHW", (3, 4, 5), False),
                                                      ("FHWC", (2, 3, 4, 3), False), ("HWC", (4, 5, 3), True),
                                                      ("HW", (4, 5), False)])
def test_draw_groups_index_the_cpus_draws(layout, shape, per_channel):
    """The kernel's draw of element j, (j // (channels * inner)) * inner + j % inner, is the
    row-major index of the element's pixel in the CPU's draw array (the channel axis set to 1)."""
    channels, inner = salt_and_pepper_group(layout, shape, per_channel)
    j = np.arange(int(np.prod(shape)))
    kernel_draw = (j // (channels * inner)) * inner + j % inner
    from stoker.operators.filters.noise import shared_axis

    draw_shape = list(shape)
    axis = shared_axis(layout, len(shape), per_channel)
    if axis is not None:
        draw_shape[axis] = 1
    cpu_draw = np.broadcast_to(np.arange(int(np.prod(draw_shape))).reshape(draw_shape), shape).reshape(-1)
    np.testing.assert_array_equal(kernel_draw, cpu_draw)
