"""stoker.plugin.pytorch against DALI's own iterators (the oracle) and against the documented rules."""

import os

import numpy as np
import pytest
from oracle import pipeline, submodule

torch = pytest.importorskip("torch")

import stoker.fn as fn  # noqa: E402
from stoker import pipeline_def  # noqa: E402
from stoker.plugin.base_iterator import LastBatchPolicy as BaseLastBatchPolicy  # noqa: E402
from stoker.plugin.pytorch import (  # noqa: E402
    DALIClassificationIterator,
    DALIGenericIterator,
    DALIRaggedIterator,
    LastBatchPolicy,
    StokerClassificationIterator,
    StokerGenericIterator,
)

N_FILES = 7


@pytest.fixture(scope="module")
def seven_files(tmp_path_factory):
    """7 one-byte files in 7 class folders: the label of file k is k, its single byte is k + 1."""
    root = tmp_path_factory.mktemp("seven")
    for k in range(N_FILES):
        d = root / f"class{k}"
        d.mkdir()
        (d / "sample.jpg").write_bytes(bytes([k + 1]))
    return str(root)


def _reader_pipe(lib, root, pad, shard=0, shards=1, stick=False, batch_size=2, checkpointing=False):
    """An unbuilt pipeline of ``lib`` (the iterator builds it) over readers.file named "Reader"."""
    def body(f, t):
        data, label = f.readers.file(file_root=root, pad_last_batch=pad, shard_id=shard, num_shards=shards,
                                     stick_to_shard=stick, name="Reader")
        return data, label

    return pipeline(lib, body, batch_size, num_threads=1, seed=3, build=False, enable_checkpointing=checkpointing)


def _stoker_pipe(root, pad, shard=0, shards=1, stick=False, batch_size=2, checkpointing=False):
    return _reader_pipe("stoker", root, pad, shard, shards, stick, batch_size, checkpointing)


def _dali_pipe(root, pad, shard=0, shards=1, stick=False, batch_size=2):
    return _reader_pipe("dali", root, pad, shard, shards, stick, batch_size)


def _epochs(iterator, epochs):
    """Per epoch: len(iterator) and, per step, per pipeline, (labels, data bytes)."""
    out = []
    for _ in range(epochs):
        steps = []
        for step in iterator:
            steps.append([(b["label"].reshape(-1).tolist(), b["data"].reshape(-1).tolist()) for b in step])
        out.append((len(iterator), steps))
    return out


def _run(iter_cls, policy, pipes, epochs=2, **kw):
    it = iter_cls(pipes, ["data", "label"], reader_name="Reader", last_batch_policy=policy, **kw)
    return _epochs(it, epochs)


@pytest.mark.oracle
@pytest.mark.parametrize("policy", ["FILL", "DROP", "PARTIAL"])
@pytest.mark.parametrize("pad", [False, True])
def test_seven_samples_batch_two_matches_dali(seven_files, policy, pad):
    dali_torch = submodule("dali", "plugin.pytorch")
    ours = _run(DALIGenericIterator, LastBatchPolicy[policy], [_stoker_pipe(seven_files, pad)])
    theirs = _run(dali_torch.DALIGenericIterator, dali_torch.LastBatchPolicy[policy],
                  [_dali_pipe(seven_files, pad)])
    assert ours == theirs


@pytest.mark.oracle
@pytest.mark.parametrize("policy", ["FILL", "DROP", "PARTIAL"])
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("stick", [False, True])
def test_two_cpu_pipelines_as_shards_match_dali(seven_files, policy, pad, stick):
    dali_torch = submodule("dali", "plugin.pytorch")
    ours = _run(DALIGenericIterator, LastBatchPolicy[policy],
                [_stoker_pipe(seven_files, pad, s, 2, stick) for s in range(2)], epochs=3)
    theirs = _run(dali_torch.DALIGenericIterator, dali_torch.LastBatchPolicy[policy],
                  [_dali_pipe(seven_files, pad, s, 2, stick) for s in range(2)], epochs=3)
    assert ours == theirs


def test_documented_last_batches(seven_files):
    """The DALI docs' example: data set 1..7, batch 2 (labels here are 0..6)."""
    expected = {
        ("FILL", False): [[6, 0], [1, 2]], ("FILL", True): [[6, 6], [0, 1]],
        ("DROP", False): [[4, 5], [1, 2]], ("DROP", True): [[4, 5], [0, 1]],
        ("PARTIAL", False): [[6], [1, 2]], ("PARTIAL", True): [[6], [0, 1]],
    }
    for (policy, pad), (last, next_first) in expected.items():
        res = _run(DALIGenericIterator, LastBatchPolicy[policy], [_stoker_pipe(seven_files, pad)])
        first_epoch, second_epoch = res[0][1], res[1][1]
        assert first_epoch[-1][0][0] == last, (policy, pad)
        assert second_epoch[0][0][0] == next_first, (policy, pad)
        assert res[0][0] == (3 if policy == "DROP" else 4)


def test_outputs_are_torch_tensors_with_batch_axis(seven_files):
    it = DALIClassificationIterator(_stoker_pipe(seven_files, False), reader_name="Reader")
    batch = next(it)
    assert isinstance(batch, list) and len(batch) == 1
    assert set(batch[0]) == {"data", "label"}
    assert batch[0]["label"].dtype == torch.int32 and tuple(batch[0]["label"].shape) == (2, 1)
    assert batch[0]["data"].dtype == torch.uint8 and batch[0]["data"].reshape(-1).tolist() == [1, 2]


def test_aliases_and_policy_enum_are_shared():
    assert StokerGenericIterator is DALIGenericIterator
    assert StokerClassificationIterator is DALIClassificationIterator
    assert LastBatchPolicy is BaseLastBatchPolicy


def test_stop_iteration_without_auto_reset_until_reset(seven_files):
    it = DALIGenericIterator(_stoker_pipe(seven_files, False), ["data", "label"], reader_name="Reader")
    assert len(list(it)) == 4
    with pytest.raises(StopIteration):
        next(it)
    it.reset()
    assert next(it)[0]["label"].reshape(-1).tolist() == [1, 2]


@pytest.mark.parametrize("auto_reset", [True, "yes"])
def test_auto_reset_starts_next_epoch(seven_files, auto_reset):
    it = DALIGenericIterator(_stoker_pipe(seven_files, True), ["data", "label"], reader_name="Reader",
                             auto_reset=auto_reset)
    first = [b[0]["label"].reshape(-1).tolist() for b in it]
    second = [b[0]["label"].reshape(-1).tolist() for b in it]
    assert first == second == [[0, 1], [2, 3], [4, 5], [6, 6]]


def test_bad_auto_reset_and_policy_are_rejected(seven_files):
    pipe = _stoker_pipe(seven_files, False)
    with pytest.raises(ValueError, match="auto_reset"):
        DALIGenericIterator(pipe, ["data", "label"], reader_name="Reader", auto_reset="sometimes")
    with pytest.raises(ValueError, match="last_batch_policy"):
        DALIGenericIterator(pipe, ["data", "label"], reader_name="Reader", last_batch_policy="FILL")
    with pytest.raises(ValueError, match="distinct"):
        DALIGenericIterator(pipe, ["x", "x"], reader_name="Reader")


@pytest.mark.oracle
@pytest.mark.parametrize("policy", ["FILL", "DROP", "PARTIAL"])
def test_size_instead_of_reader_name_matches_dali(seven_files, policy):
    dali_torch = submodule("dali", "plugin.pytorch")

    def run(cls, pol, pipe):
        with pytest.warns(Warning):
            it = cls([pipe], ["data", "label"], size=N_FILES, last_batch_policy=pol)
        return _epochs(it, 2)

    ours = run(DALIGenericIterator, LastBatchPolicy[policy], _stoker_pipe(seven_files, False))
    theirs = run(dali_torch.DALIGenericIterator, dali_torch.LastBatchPolicy[policy], _dali_pipe(seven_files, False))
    assert ours == theirs


def test_prepare_first_batch_false_gives_same_batches(seven_files):
    a = _run(DALIGenericIterator, LastBatchPolicy.FILL, [_stoker_pipe(seven_files, False)])
    b = _run(DALIGenericIterator, LastBatchPolicy.FILL, [_stoker_pipe(seven_files, False)],
             prepare_first_batch=False)
    assert a == b


def test_constant_pipeline_without_reader(tmp_path):
    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        return fn.constant(fdata=[1.5, 2.5], shape=[2])

    with pytest.warns(UserWarning, match="reader_name"):
        it = DALIGenericIterator(pipe(), ["x"], size=6, last_batch_policy=LastBatchPolicy.PARTIAL)
    got = [b[0]["x"] for b in it]
    assert len(got) == 2 and all(tuple(t.shape) == (3, 2) and t.dtype == torch.float32 for t in got)
    np.testing.assert_array_equal(got[0].numpy(), np.tile([1.5, 2.5], (3, 1)).astype(np.float32))


def test_ragged_outputs(seven_files):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        data, label = fn.readers.file(file_root=seven_files, name="Reader")
        return fn.constant(fdata=[1.0, 2.0, 3.0]), label

    it = DALIRaggedIterator(pipe(), ["v", "label"], reader_name="Reader",
                            output_types=[DALIRaggedIterator.SPARSE_LIST_TAG, DALIRaggedIterator.DENSE_TAG])
    b = next(it)[0]
    assert isinstance(b["v"], list) and [t.tolist() for t in b["v"]] == [[1.0, 2.0, 3.0]] * 2
    assert b["label"].reshape(-1).tolist() == [0, 1]
    it2 = DALIRaggedIterator(pipe(), ["v", "label"], reader_name="Reader",
                             output_types=[DALIRaggedIterator.SPARSE_COO_TAG, DALIRaggedIterator.DENSE_TAG])
    coo = next(it2)[0]["v"]
    assert coo.is_sparse and coo.to_dense().tolist() == [[1.0, 2.0, 3.0]] * 2


def test_state_dict_resumes_exactly(seven_files):
    def make():
        return [_stoker_pipe(seven_files, False, s, 2, checkpointing=True) for s in range(2)]

    ref = DALIGenericIterator(make(), ["data", "label"], reader_name="Reader")
    reference = _epochs(ref, 3)
    flat = [step for _, steps in reference for step in steps]

    it = DALIGenericIterator(make(), ["data", "label"], reader_name="Reader")
    consumed = []
    for _ in range(1):  # part of the first epoch
        consumed.append([(b["label"].reshape(-1).tolist(), b["data"].reshape(-1).tolist()) for b in next(it)])
    state = it.state_dict()
    assert consumed == flat[:1]

    it.load_state_dict(state)
    rest = _epochs(it, 3)
    rest_flat = [step for _, steps in rest for step in steps]
    assert rest_flat[:len(flat) - 1] == flat[1:]
    assert rest[0][0] == reference[0][0]


def test_checkpoints_restore_through_pipeline_argument(seven_files):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3, enable_checkpointing=True)
    def pipe():
        data, label = fn.readers.file(file_root=seven_files, name="Reader")
        return data, label

    it = DALIGenericIterator(pipe(), ["data", "label"], reader_name="Reader")
    first = [next(it)[0]["label"].reshape(-1).tolist() for _ in range(2)]
    cps = it.checkpoints()
    expected = []
    while True:
        try:
            expected.append(next(it)[0]["label"].reshape(-1).tolist())
        except StopIteration:
            break
    resumed = DALIGenericIterator(pipe(checkpoint=cps[0]), ["data", "label"], reader_name="Reader")
    assert [b[0]["label"].reshape(-1).tolist() for b in resumed] == expected
    assert first == [[0, 1], [2, 3]]


def test_plugin_imports_without_touching_torch_at_stoker_import():
    import subprocess
    import sys

    code = "import sys, stoker, stoker.plugin, stoker.plugin.base_iterator; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.stdout.strip() == "False"


def _batches_source():
    """A re-iterable source of 3 batches of 2 samples (a fresh pass each epoch)."""

    class Source:
        def __iter__(self):
            for k in range(3):
                yield [np.array([2 * k], np.int32), np.array([2 * k + 1], np.int32)]

    return Source()


@pytest.mark.oracle
@pytest.mark.parametrize("auto_reset", [False, True])
def test_external_source_epochs_end_with_the_source_like_dali(auto_reset):
    dali_torch = submodule("dali", "plugin.pytorch")

    def make(lib):
        return pipeline(lib, lambda f, t: f.external_source(source=_batches_source(), batch=True, cycle="raise"), 2,
                        num_threads=1, build=False)

    def run(cls, pipe):
        it = cls(pipe, ["x"], auto_reset=auto_reset)
        epochs = []
        for _ in range(2):
            epochs.append([b[0]["x"].reshape(-1).tolist() for b in it])
            if not auto_reset:
                it.reset()
        return epochs

    ours = run(DALIGenericIterator, make("stoker"))
    theirs = run(dali_torch.DALIGenericIterator, make("dali"))
    assert ours == theirs == [[[0, 1], [2, 3], [4, 5]]] * 2


@pytest.mark.gpu
def test_gpu_outputs_become_cuda_tensors(seven_files):
    @pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def pipe():
        data, label = fn.readers.file(file_root=seven_files, name="Reader")
        return data.gpu(), label

    it = DALIGenericIterator(pipe(), ["data", "label"], reader_name="Reader")
    b = next(it)[0]
    assert b["data"].is_cuda and not b["label"].is_cuda
    assert b["data"].cpu().reshape(-1).tolist() == [1, 2]


def test_feed_ndarray_and_type_table():
    from stoker import types
    from stoker.plugin import pytorch as plugin
    from stoker.tensors import TensorCPU, TensorListCPU

    tl = TensorListCPU([np.full((2, 3), k, np.float32) for k in range(4)])
    dst = torch.empty((4, 2, 3), dtype=torch.float32)
    assert plugin.feed_ndarray(tl, dst) is dst
    np.testing.assert_array_equal(dst.numpy(), np.stack([np.full((2, 3), k) for k in range(4)]))
    one = torch.zeros((2, 3), dtype=torch.float32)
    plugin.feed_ndarray(TensorCPU(np.ones((2, 3), np.float32)), one)
    assert one.sum().item() == 6
    with pytest.raises(TypeError, match="float32"):
        plugin.feed_ndarray(tl, torch.empty((4, 2, 3), dtype=torch.int32))
    with pytest.raises(ValueError, match="shapes"):
        plugin.feed_ndarray(tl, torch.empty((4, 3, 2), dtype=torch.float32))
    assert plugin.to_torch_type[types.UINT8] is torch.uint8


def test_reset_before_epoch_end_is_ignored(seven_files):
    it = DALIGenericIterator(_stoker_pipe(seven_files, False), ["data", "label"], reader_name="Reader")
    next(it)
    with pytest.warns(UserWarning, match="ignored"):
        it.reset()
    with pytest.warns(UserWarning, match="ignored"):  # iter() on a started epoch also tries a reset
        rest = [b[0]["label"].reshape(-1).tolist() for b in it]
    assert rest == [[2, 3], [4, 5], [6, 0]]



def test_ragged_output_needs_the_ragged_iterator(tmp_path):
    for k in range(2):
        (tmp_path / f"c{k}").mkdir()
        (tmp_path / f"c{k}" / "f.jpg").write_bytes(bytes(range(k + 1)))

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        data, label = fn.readers.file(file_root=str(tmp_path), name="Reader")
        return data, label

    with pytest.raises(ValueError, match="output 'data' has samples of different shapes"):
        DALIGenericIterator(pipe(), ["data", "label"], reader_name="Reader")
    it = DALIRaggedIterator(pipe(), ["data", "label"], reader_name="Reader",
                            output_types=[DALIRaggedIterator.SPARSE_LIST_TAG, DALIRaggedIterator.DENSE_TAG])
    b = next(it)[0]
    assert [t.tolist() for t in b["data"]] == [[0], [0, 1]]
