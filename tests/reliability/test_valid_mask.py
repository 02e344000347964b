"""on_error="substitute" and fn.valid_mask(): a bad sample is replaced in place and marked False."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import PipelineBuildError

pytestmark = pytest.mark.timeout(60)
N = 11
B = 4
BAD = {2, 3, 8, 10}  # 10 is the last file: pad_last_batch repeats a bad sample


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("valid_mask")
    paths = []
    for i in range(N):
        ok, buf = cv2.imencode(".png", np.full((3, 4, 3), 10 * i, np.uint8))
        path = root / f"{i:02d}.png"
        path.write_bytes(b"\x89PNG broken" if i in BAD else buf.tobytes())
        paths.append(str(path))
    return paths


def _pipe(files, on_error="substitute", decoder_on_error=None, pad=False, shuffle=False):
    @pipeline_def(batch_size=B, num_threads=2, device_id=None, seed=5, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(files=files, labels=list(range(N)), name="Reader", pad_last_batch=pad,
                                        random_shuffle=shuffle)
        dec = {"on_error": decoder_on_error} if decoder_on_error else {}
        return fn.decoders.image(jpegs, **dec), labels, fn.valid_mask()

    return p()


def _reader_order(files, pad, shuffle, batches):
    """The reader's label order alone (nothing can fail there): the independent reference."""
    @pipeline_def(batch_size=B, num_threads=1, device_id=None, seed=5)
    def p():
        _, labels = fn.readers.file(files=files, labels=list(range(N)), name="Reader", pad_last_batch=pad,
                                    random_shuffle=shuffle)
        return labels

    pipe = p()
    out = [[int(x) for x in np.asarray(pipe.run()[0].as_array()).reshape(-1)] for _ in range(batches)]
    pipe.close()
    return out


def _check_batch(images, labels, mask, expected_labels):
    mask = [bool(np.asarray(mask.at(i))) for i in range(len(mask))]
    got = [int(np.asarray(labels.at(i))[0]) for i in range(len(labels))]
    pixels = [int(np.asarray(images.at(i))[0, 0, 0]) for i in range(len(images))]
    assert len(mask) == len(got) == len(pixels) == B
    # False exactly where the reader put a bad file; True samples are the reader's, in order
    assert mask == [x not in BAD for x in expected_labels]
    for k in range(B):
        if mask[k]:
            assert got[k] == expected_labels[k] and pixels[k] == 10 * got[k]
        else:  # a copy of a good sample of the same batch (image and label together)
            assert got[k] not in BAD and got[k] in [g for g, m in zip(got, mask) if m]
            assert pixels[k] == 10 * got[k]
    return mask


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_mask_is_false_exactly_at_substituted_samples(files, pad, shuffle):
    pipe = _pipe(files, pad=pad, shuffle=shuffle)
    order = _reader_order(files, pad, shuffle, 8)
    falses = 0
    for expected in order:
        images, labels, mask = pipe.run()
        falses += B - sum(_check_batch(images, labels, mask, expected))
    report = [r for r in pipe.error_report() if r["iteration"] < len(order)]  # not the prefetched ones
    pipe.close()
    assert falses > 0 and all(r["action"] == "substituted" for r in report)
    # a padded pass repeats its last (bad) file at position 11 of 12: substituted, reported once
    flat = [x for batch in order for x in batch]
    assert len(report) == sum(x in BAD and not (pad and j % 12 == 11) for j, x in enumerate(flat))


def test_substitute_comes_from_the_same_pass(files):
    """Unshuffled, batch [8, 9, 10, 0]: 10 (bad, last of pass 0) is replaced by 9, not by 0."""
    pipe = _pipe(files)
    for _ in range(3):
        images, labels, mask = pipe.run()
    got = [int(np.asarray(labels.at(i))[0]) for i in range(B)]
    assert got == [9, 9, 9, 0]  # 8 (bad) has no good sample of pass 0 before it: the next one, 9
    assert [bool(np.asarray(mask.at(i))) for i in range(B)] == [False, True, False, True]
    pipe.close()


def test_decoder_argument_on_error_substitute_under_a_raising_pipeline(files):
    pipe = _pipe(files, on_error="raise", decoder_on_error="substitute")
    order = _reader_order(files, False, False, 3)
    for expected in order:
        _check_batch(*pipe.run(), expected)
    assert [r["action"] for r in pipe.error_report() if r["iteration"] == 0] == ["substituted"] * 2
    pipe.close()


def test_mask_is_all_true_under_skip_and_raise(files):
    pipe = _pipe(files, on_error="skip")
    for _ in range(4):
        images, labels, mask = pipe.run()
        assert len(mask) == B and all(bool(np.asarray(mask.at(i))) for i in range(B))
        assert all(int(np.asarray(labels.at(i))[0]) not in BAD for i in range(B))
    pipe.close()

    @pipeline_def(batch_size=B, num_threads=1, device_id=None)
    def clean():
        jpegs, _ = fn.readers.file(files=[f for i, f in enumerate(files) if i not in BAD])
        return fn.decoders.image(jpegs), fn.valid_mask()

    pipe = clean()
    _, mask = pipe.run()
    assert np.asarray(mask.as_array()).dtype == np.bool_ and bool(np.all(mask.as_array()))
    pipe.close()


def test_mask_through_the_pytorch_iterator(files):
    torch = pytest.importorskip("torch")
    from stoker.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    order = _reader_order(files, True, False, 3)
    it = DALIGenericIterator([_pipe(files, pad=True)], ["data", "label", "valid"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.PARTIAL)
    steps = list(it)
    assert len(steps) == 3  # substitutes keep the count: 11 files padded to 12, PARTIAL cuts the padding
    for step, expected in zip(steps, order):
        b = step[0]
        assert b["valid"].dtype == torch.bool and b["valid"].shape == (len(b["label"]),)
        n = len(b["label"])
        assert b["valid"].tolist() == [x not in BAD for x in expected[:n]]
        valid = b["valid"]
        assert b["label"].reshape(-1)[valid].tolist() == [x for x in expected[:n] if x not in BAD]
    assert sum(len(s[0]["label"]) for s in steps) == N
    for p in it._pipes:
        p.close()


def test_mask_cannot_feed_a_cpu_operator(files):
    @pipeline_def(batch_size=B, num_threads=1, device_id=None, on_error="substitute")
    def p():
        jpegs, labels = fn.readers.file(files=files)
        return fn.decoders.image(jpegs), fn.cast(fn.valid_mask(), dtype=types.INT32)

    pipe = p()
    with pytest.raises(PipelineBuildError, match="valid_mask"):
        pipe.build()
    pipe.close()


@pytest.mark.gpu
def test_mask_moved_to_the_gpu_matches_the_host_mask(files):
    """.gpu() of the mask runs in the GPU stage, after the batch was repaired: same values."""
    def build(device_id):
        @pipeline_def(batch_size=B, num_threads=2, device_id=device_id, seed=5, on_error="substitute")
        def p():
            jpegs, labels = fn.readers.file(files=files, labels=list(range(N)), name="Reader")
            mask = fn.valid_mask()
            images = fn.decoders.image(jpegs)
            return (images.gpu(), labels, mask.gpu()) if device_id is not None else (images, labels, mask)

        return p()

    gpu, cpu = build(0), build(None)
    for _ in range(3):
        gi, gl, gm = gpu.run()
        ci, cl, cm = cpu.run()
        assert np.array_equal(np.asarray(gm.as_cpu().as_array()), np.asarray(cm.as_array()))
        assert np.array_equal(np.asarray(gl.as_array()), np.asarray(cl.as_array()))
    gpu.close()
    cpu.close()
