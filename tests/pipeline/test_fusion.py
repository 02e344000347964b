"""Operator fusion (stoker.pipeline.fusion): chains found as expected, and outputs bit-identical to
the unfused executor (STOKER_FUSE=0) for 1 and 2 threads, random ops, argument inputs, branches and
on_error with samples failing in the middle of a chain."""

import os

import cv2
import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def
from stoker.errors import OperatorError
from stoker.pipeline import fusion
from stoker.pipeline.fusion import FusedStep

MEAN = [120.0, 110.0, 100.0]
STD = [60.0, 58.0, 57.0]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """14 JPEGs of varied sizes in 2 classes; img_005 is smaller than the 24x24 crops below."""
    root = tmp_path_factory.mktemp("fusion")
    rng = np.random.default_rng(3)
    for i in range(14):
        d = root / f"class_{i % 2}"
        d.mkdir(exist_ok=True)
        h, w = (18, 20) if i == 5 else (int(rng.integers(28, 60)), int(rng.integers(28, 60)))
        base = cv2.resize(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8), (w, h), interpolation=cv2.INTER_CUBIC)
        img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        (d / f"img_{i:03d}.jpg").write_bytes(cv2.imencode(".jpg", img)[1].tobytes())
    return str(root)


@pytest.fixture(scope="module")
def corrupt_dir(data_dir, tmp_path_factory):
    """The same files plus a truncated JPEG in the middle of the listing."""
    root = tmp_path_factory.mktemp("fusion_bad")
    for c in ("class_0", "class_1"):
        (root / c).mkdir()
        for name in sorted(os.listdir(os.path.join(data_dir, c))):
            with open(os.path.join(data_dir, c, name), "rb") as f:
                (root / c / name).write_bytes(f.read())
    good = (root / "class_0" / "img_004.jpg").read_bytes()
    (root / "class_0" / "img_004x.jpg").write_bytes(good[: len(good) // 3])
    return str(root)


def train(root, threads, on_error="raise", batch=4, prefetch=2):
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=7, on_error=on_error,
                  prefetch_queue_depth=prefetch)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        imgs = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        imgs = fn.resize(imgs, resize_x=20, resize_y=20)
        imgs = fn.crop_mirror_normalize(imgs, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                        mirror=fn.random.coin_flip())
        return imgs, labels

    return p()


def branchy(root, threads, on_error="raise", batch=4, prefetch=2):
    """A branch reads the decoded images between chain members; resize's output is also an output."""

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=3, on_error=on_error,
                  prefetch_queue_depth=prefetch)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, name="r")
        dec = fn.decoders.image(jpegs)
        # user code reading the decoded images, before resize in topological order: deferred
        flipped = fn.python_function(dec, function=lambda x: np.ascontiguousarray(x[:, ::-1]))
        small = fn.resize(dec, resize_x=fn.random.uniform(range=[26, 34]), resize_y=30)
        out = fn.crop_mirror_normalize(small, crop=(24, 24), mean=MEAN, std=STD,
                                       crop_pos_x=fn.random.uniform(range=[0, 1]))
        return flipped, small, out, labels

    return p()


def failing_middle(root, threads, on_error, batch=4, prefetch=2):
    """decode -> crop (img_005 is too small: fails in the 2nd member) -> random mirror/normalize ->
    rotate by a random angle: samples after a failure shift index in the unfused executor."""

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=5, on_error=on_error,
                  prefetch_queue_depth=prefetch)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, name="r")
        dec = fn.decoders.image(jpegs)
        cropped = fn.crop(dec, crop=(24, 24), crop_pos_x=fn.random.uniform(range=[0, 1]))
        normed = fn.crop_mirror_normalize(cropped, mean=MEAN, std=STD, mirror=fn.random.coin_flip(),
                                          dtype=types.FLOAT, output_layout="HWC")
        rot = fn.rotate(normed, angle=fn.random.uniform(range=[-30, 30]), keep_size=True)
        return rot, fn.get_property(jpegs, key="source_info"), labels

    return p()


def run_all(make, stoker_settings, fuse, iterations, **kw):
    stoker_settings(fuse=fuse)
    pipe = make(**kw)
    pipe.build()
    steps = [s for s in pipe._executor._cpu_steps if isinstance(s, FusedStep)]
    assert bool(steps) == fuse
    outs = []
    try:
        for _ in range(iterations):
            outs.append([[np.array(t.at(i)) for i in range(len(t))] for t in pipe.run()])
    finally:
        pipe.close()
    return outs


def assert_same(a, b):
    assert len(a) == len(b) and all(len(out) for it in a for out in it)
    for ia, ib in zip(a, b):
        assert len(ia) == len(ib)
        for oa, ob in zip(ia, ib):
            assert len(oa) == len(ob)
            for sa, sb in zip(oa, ob):
                assert sa.dtype == sb.dtype and sa.shape == sb.shape
                assert np.array_equal(sa, sb)


def chains(pipe):
    pipe.build()
    try:
        return [([n.op_name for n in s.chain], [n.op_name for n in s.hoisted], [n.op_name for n in s.deferred])
                for s in pipe._executor._cpu_steps if isinstance(s, FusedStep)]
    finally:
        pipe.close()


def test_chains_detected(data_dir, stoker_settings):
    stoker_settings(fuse=True)
    assert chains(train(data_dir, 2)) == [
        (["decoders.image_random_crop", "resize", "crop_mirror_normalize"], ["random.coin_flip"], [])]
    assert chains(branchy(data_dir, 2)) == [
        (["decoders.image", "resize", "crop_mirror_normalize"], ["random.uniform", "random.uniform"],
         ["python_function"])]
    # get_property reads the reader's output only; it sits after the chain and stays on its own
    assert chains(failing_middle(data_dir, 2, "skip")) == [
        (["decoders.image", "crop", "crop_mirror_normalize", "rotate"],
         ["random.uniform", "random.coin_flip", "random.uniform"], [])]


def test_unfusable_nodes_stay_apart(data_dir, stoker_settings):
    stoker_settings(fuse=True)

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1, enable_conditionals=True)
    def cond():
        jpegs, _ = fn.readers.file(file_root=data_dir)
        img = fn.decoders.image(jpegs)
        if fn.random.coin_flip():
            img = fn.flip(img, horizontal=1)
        else:
            img = fn.flip(img, vertical=1)
        return fn.resize(img, resize_x=8, resize_y=8)

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
    def pyfunc():
        jpegs, _ = fn.readers.file(file_root=data_dir)
        img = fn.python_function(fn.decoders.image(jpegs), function=lambda x: x[::2])
        return fn.flip(fn.resize(img, resize_x=8, resize_y=8), horizontal=1)

    for chain, _, _ in chains(cond()):  # members of a branch are never fused
        assert "flip" not in chain
    assert chains(pyfunc()) == [(["resize", "flip"], [], [])]


@pytest.mark.parametrize("threads", [1, 2])
def test_training_chain_identical(data_dir, stoker_settings, threads):
    a = run_all(train, stoker_settings, True, 5, root=data_dir, threads=threads)
    b = run_all(train, stoker_settings, False, 5, root=data_dir, threads=threads)
    assert_same(a, b)
    assert a[0][0][0].shape == (3, 20, 20) and a[0][0][0].dtype == np.float32


@pytest.mark.parametrize("threads,prefetch", [(1, 1), (2, 3)])
def test_branch_and_kept_intermediate_identical(data_dir, stoker_settings, threads, prefetch):
    a = run_all(branchy, stoker_settings, True, 4, root=data_dir, threads=threads, prefetch=prefetch)
    b = run_all(branchy, stoker_settings, False, 4, root=data_dir, threads=threads, prefetch=prefetch)
    assert_same(a, b)
    # the kept intermediate really is resize's output, and the branch flips the decoded image
    assert a[0][1][0].shape[0] == 30 and 26 <= a[0][1][0].shape[1] <= 34
    assert a[0][2][0].shape == (3, 24, 24)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("on_error", ["skip", "substitute"])
def test_failures_in_chain_identical(corrupt_dir, monkeypatch, stoker_settings, threads, on_error):
    # batch 4 over 15 files: the corrupt file (decode, 1st member) and the small one (crop, 2nd)
    # fail in different batches and the later samples of their batches shift index
    replays = []
    real = fusion._replay
    monkeypatch.setattr(fusion, "_replay", lambda *a, **k: replays.append(k["done"]) or real(*a, **k))
    a = run_all(failing_middle, stoker_settings, True, 6, root=corrupt_dir, threads=threads, on_error=on_error)
    b = run_all(failing_middle, stoker_settings, False, 6, root=corrupt_dir, threads=threads, on_error=on_error)
    assert_same(a, b)
    assert sorted(set(replays)) == [0, 1]  # failures handled in the 1st and the 2nd member
    names = [bytes(s).decode() for it in a for s in it[1]]
    assert len(names) == 6 * 4
    if on_error == "skip":
        assert not any("img_004x" in n or "img_005" in n for n in names)


@pytest.mark.parametrize("threads", [1, 2])
def test_both_failures_in_one_batch_identical(corrupt_dir, stoker_settings, threads):
    a = run_all(failing_middle, stoker_settings, True, 3, root=corrupt_dir, threads=threads, on_error="skip",
                batch=15)
    b = run_all(failing_middle, stoker_settings, False, 3, root=corrupt_dir, threads=threads, on_error="skip",
                batch=15)
    assert_same(a, b)


@pytest.mark.parametrize("fuse", [True, False])
def test_raise_names_the_failing_member(corrupt_dir, data_dir, stoker_settings, fuse):
    stoker_settings(fuse=fuse)
    pipe = failing_middle(data_dir, 2, "raise", batch=14)  # only the crop fails
    pipe.build()
    with pytest.raises(OperatorError) as info:
        pipe.run()
    pipe.close()
    assert "crop" in str(info.value) and "img_005" in str(info.value)
    assert "decoders" not in str(info.value)
    pipe = failing_middle(corrupt_dir, 2, "raise", batch=15)  # decode fails first
    pipe.build()
    with pytest.raises(OperatorError) as info:
        pipe.run()
    pipe.close()
    assert "decoders.image" in str(info.value) and "img_004x" in str(info.value)


def conditional(root, threads, on_error="raise", batch=4, prefetch=2):
    """Chains before and after an if/else on a per-sample coin: branch members stay unfused."""

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=9, on_error=on_error,
                  prefetch_queue_depth=prefetch, enable_conditionals=True)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, name="r")
        img = fn.resize(fn.decoders.image(jpegs), resize_x=30, resize_y=26)
        if fn.random.coin_flip(probability=0.5):
            img = fn.rotate(img, angle=fn.random.uniform(range=[-20, 20]), keep_size=True)
        else:
            img = fn.flip(img, horizontal=1)
        out = fn.crop_mirror_normalize(fn.resize(img, resize_x=20, resize_y=20), mean=MEAN, std=STD,
                                       mirror=fn.random.coin_flip())
        return out, labels

    return p()


@pytest.mark.parametrize("threads", [1, 2])
def test_conditionals_identical(data_dir, stoker_settings, threads):
    a = run_all(conditional, stoker_settings, True, 4, root=data_dir, threads=threads)
    b = run_all(conditional, stoker_settings, False, 4, root=data_dir, threads=threads)
    assert_same(a, b)
    stoker_settings(fuse=True)
    found = chains(conditional(data_dir, threads))
    assert (["decoders.image", "resize"], [], []) in found
    assert all("rotate" not in c and "flip" not in c for c, _, _ in found)


@pytest.mark.parametrize("threads", [1, 2])
def test_normalize_joins_the_chain_with_per_sample_statistics(data_dir, stoker_settings, threads):
    """normalize with per-sample statistics is computed sample by sample, so it is fused (with the
    same outputs); with batch=True it needs the batch's statistics first and stays apart."""

    def make(batch_stats=False, threads=2):
        @pipeline_def(batch_size=3, num_threads=threads, device_id=None, seed=4)
        def pipe():
            jpegs, _ = fn.readers.file(file_root=data_dir)
            img = fn.resize(fn.decoders.image(jpegs), resize_x=16, resize_y=12)
            return fn.normalize(img, axes=(0, 1), batch=batch_stats)

        return pipe()

    stoker_settings(fuse=True)
    assert chains(make()) == [(["decoders.image", "resize", "normalize"], [], [])]
    assert chains(make(batch_stats=True)) == [(["decoders.image", "resize"], [], [])]
    assert_same(run_all(make, stoker_settings, True, 3, threads=threads),
                run_all(make, stoker_settings, False, 3, threads=threads))


def test_run_cpu_wrappers_fuse_only_with_the_class_flag():
    """A run_cpu override keeps an operator out of chains unless the class defining it sets
    Operator.run_cpu_wraps_samples; the flag is read from that class, not inherited by a subclass
    that overrides run_cpu again."""
    from types import SimpleNamespace

    from stoker.operators.base import Operator
    from stoker.operators.image.resize import Resize

    node = SimpleNamespace(scope=None, control_inputs=[], device="cpu")

    class Plain(Operator):
        pass

    class Wrapper(Operator):
        def run_cpu(self, batch, inputs, arg_inputs):
            return super().run_cpu(batch, inputs, arg_inputs)

    class Flagged(Wrapper):
        run_cpu_wraps_samples = True

        def run_cpu(self, batch, inputs, arg_inputs):
            return super().run_cpu(batch, inputs, arg_inputs)

    class FlaggedOverWrapper(Flagged):
        pass

    class Unflagged(Flagged):  # overrides again without promising anything
        def run_cpu(self, batch, inputs, arg_inputs):
            return super().run_cpu(batch, inputs, arg_inputs)

    class MyResize(Resize):
        def run_cpu(self, batch, inputs, arg_inputs):
            return super().run_cpu(batch, inputs, arg_inputs)

    def fused(cls):
        return fusion.per_sample(node, object.__new__(cls))

    assert fused(Plain)
    assert not fused(Wrapper)
    assert not fused(Flagged)  # (its base Wrapper defines run_cpu without the flag)
    Wrapper.run_cpu_wraps_samples = True
    assert fused(Flagged) and fused(FlaggedOverWrapper)
    assert not fused(Unflagged)
    assert fused(Resize) and not fused(MyResize)
