"""stoker.plugin.jax against the pipelines' own outputs, DALI's JAX plugin (CPU) and stoker's PyTorch iterator."""

import os
import subprocess
import sys

# Four CPU devices for the sharding tests; XLA reads this once, when jax is first imported.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from oracle import pipeline, submodule  # noqa: E402

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install jax)")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import stoker.fn as fn  # noqa: E402
from stoker import pipeline_def  # noqa: E402
from stoker.plugin.jax import DALIGenericIterator, LastBatchPolicy, data_iterator, to_jax  # noqa: E402
from stoker.plugin.jax.clu import DALIGenericPeekableIterator, peekable_data_iterator  # noqa: E402

N_FILES = 7
needs_4_devices = pytest.mark.skipif(len(jax.devices()) < 4, reason="jax was imported before XLA_FLAGS asked "
                                     "for 4 CPU devices")


@pytest.fixture(scope="module")
def seven_files(tmp_path_factory):
    """7 one-byte files in 7 class folders: the label of file k is k, its single byte is k + 1."""
    root = tmp_path_factory.mktemp("seven")
    for k in range(N_FILES):
        d = root / f"class{k}"
        d.mkdir()
        (d / "sample.jpg").write_bytes(bytes([k + 1]))
    return str(root)


def _pipe(root, pad=False, shard=0, shards=1, batch_size=2, checkpointing=False, **kw):
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=3, enable_checkpointing=checkpointing)
    def pipe():
        data, label = fn.readers.file(file_root=root, pad_last_batch=pad, shard_id=shard, num_shards=shards,
                                      name="Reader")
        return data, label

    return pipe(**kw)


def _labels(it, epochs=2):
    """Per epoch, per step: the label array as a list (flattened rows)."""
    return [[np.asarray(b["label"]).reshape(-1).tolist() for b in it] for _ in range(epochs)]


def _drain(it):
    """The labels of the rest of the epoch (next() until StopIteration, without iter()'s reset)."""
    out = []
    while True:
        try:
            out.append(np.asarray(next(it)["label"]).reshape(-1).tolist())
        except StopIteration:
            return out


def test_arrays_are_the_pipeline_outputs(seven_files):
    direct = _pipe(seven_files)
    it = DALIGenericIterator(_pipe(seven_files), ["data", "label"], reader_name="Reader")
    for _ in range(len(it)):
        batch = next(it)
        data, label = direct.run()
        assert isinstance(batch["data"], jax.Array) and batch["data"].dtype == np.uint8
        assert batch["label"].dtype == np.int32 and batch["label"].shape == (2, 1)
        np.testing.assert_array_equal(np.asarray(batch["data"]), data.as_array())
        np.testing.assert_array_equal(np.asarray(batch["label"]), label.as_array())
        assert batch["data"].devices() == {jax.devices("cpu")[0]}


@pytest.mark.oracle
@pytest.mark.parametrize("policy", ["FILL", "DROP"])
@pytest.mark.parametrize("pad", [False, True])
def test_matches_dali_jax_plugin(seven_files, policy, pad):
    dali_jax = submodule("dali", "plugin.jax")
    dali_pipe = pipeline("dali", lambda fn, types: fn.readers.file(file_root=seven_files, pad_last_batch=pad,
                                                                   name="Reader"), 2, build=False)
    theirs = dali_jax.DALIGenericIterator([dali_pipe], ["data", "label"], reader_name="Reader",
                                          last_batch_policy=dali_jax.iterator.LastBatchPolicy[policy])
    ours = DALIGenericIterator([_pipe(seven_files, pad)], ["data", "label"], reader_name="Reader",
                               last_batch_policy=LastBatchPolicy[policy])
    assert len(ours) == len(theirs)
    assert _labels(ours, 3) == _labels(theirs, 3)


@pytest.mark.parametrize("policy", ["FILL", "DROP", "PARTIAL"])
@pytest.mark.parametrize("pad", [False, True])
def test_every_policy_matches_the_pytorch_iterator(seven_files, policy, pad):
    """Both plugins share the base iterator: the same batches, epoch after epoch."""
    torch_plugin = pytest.importorskip("stoker.plugin.pytorch")
    pytest.importorskip("torch")
    ours = DALIGenericIterator(_pipe(seven_files, pad), ["data", "label"], reader_name="Reader",
                               last_batch_policy=LastBatchPolicy[policy])
    ref = torch_plugin.DALIGenericIterator(_pipe(seven_files, pad), ["data", "label"], reader_name="Reader",
                                           last_batch_policy=LastBatchPolicy[policy])
    expected = [[b[0]["label"].reshape(-1).tolist() for b in ref] for _ in range(3)]
    assert _labels(ours, 3) == expected
    if policy == "PARTIAL":
        assert expected[0][-1] == [6]


def test_partial_needs_one_unsharded_pipeline(seven_files):
    with pytest.raises(ValueError, match="PARTIAL"):
        DALIGenericIterator([_pipe(seven_files, shard=s, shards=2) for s in range(2)], ["data", "label"],
                            reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL)


@needs_4_devices
@pytest.mark.parametrize("policy", ["FILL", "DROP"])
def test_sharded_global_array_over_four_devices(seven_files, policy):
    devices = jax.devices()[:4]
    sharding = NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))
    it = DALIGenericIterator([_pipe(seven_files, True, s, 4, batch_size=1) for s in range(4)], ["data", "label"],
                             reader_name="Reader", sharding=sharding, last_batch_policy=LastBatchPolicy[policy])
    direct = [_pipe(seven_files, True, s, 4, batch_size=1) for s in range(4)]
    steps = 0
    for batch in it:
        outs = [p.run() for p in direct]
        label = batch["label"]
        assert label.shape == (4, 1) and label.sharding == sharding
        np.testing.assert_array_equal(np.asarray(label), np.concatenate([o[1].as_array() for o in outs]))
        for shard in label.addressable_shards:  # device k holds pipeline k's rows
            k = devices.index(shard.device)
            np.testing.assert_array_equal(np.asarray(shard.data), outs[k][1].as_array())
        steps += 1
    assert steps == len(it) == (1 if policy == "DROP" else 2)


@needs_4_devices
def test_sharding_must_split_the_batch_into_one_piece_per_pipeline(seven_files):
    sharding = NamedSharding(Mesh(np.array(jax.devices()[:4]), ("batch",)), PartitionSpec("batch"))
    it = DALIGenericIterator([_pipe(seven_files, True, s, 2) for s in range(2)], ["data", "label"],
                             reader_name="Reader", sharding=sharding)
    with pytest.raises(ValueError, match="piece"):
        next(it)


def test_several_pipelines_without_sharding_stack_a_device_axis(seven_files):
    it = DALIGenericIterator([_pipe(seven_files, True, s, 2) for s in range(2)], ["data", "label"],
                             reader_name="Reader", pmap_compatible=True)
    batch = next(it)
    assert batch["label"].shape == (2, 2, 1)
    assert np.asarray(batch["label"]).reshape(2, 2).tolist() == [[0, 1], [3, 4]]


def test_data_iterator_decorator_single_pipeline(seven_files):
    @data_iterator(output_map=["data", "label"], reader_name="Reader", last_batch_policy=LastBatchPolicy.DROP)
    def iterator_fn():
        jpegs, labels = fn.readers.file(file_root=seven_files, name="Reader")
        return jpegs, labels

    it = iterator_fn(batch_size=2, seed=3)
    assert isinstance(it, DALIGenericIterator)
    assert _labels(it, 1) == [[[0, 1], [2, 3], [4, 5]]]


@needs_4_devices
def test_data_iterator_decorator_with_sharding_and_checkpoints(seven_files):
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), PartitionSpec("batch"))

    @data_iterator(output_map=["label"], reader_name="Reader", sharding=sharding)
    def iterator_fn(shard_id, num_shards):
        _, labels = fn.readers.file(file_root=seven_files, name="Reader", shard_id=shard_id,
                                    num_shards=num_shards, pad_last_batch=True)
        return labels

    it = iterator_fn(batch_size=len(jax.devices()), seed=3, enable_checkpointing=True)
    assert it.batch_size == 1 and len(it._pipes) == len(jax.devices())
    first = np.asarray(next(it)["label"]).reshape(-1).tolist()
    cps = it.checkpoints()
    rest = _drain(it)
    resumed = iterator_fn(batch_size=len(jax.devices()), seed=3, enable_checkpointing=True, checkpoints=cps)
    assert [np.asarray(b["label"]).reshape(-1).tolist() for b in resumed] == rest
    assert sorted(set(first + sum(rest, []))) == list(range(N_FILES))


def test_peekable_iterator(seven_files):
    it = DALIGenericPeekableIterator([_pipe(seven_files)], ["data", "label"], reader_name="Reader")
    peeked = it.peek()
    assert it.peek() is peeked
    assert next(it) is peeked
    assert it.element_spec["label"].shape == (2, 1) and it.element_spec["label"].dtype == np.int32
    assert np.asarray(it.peek_async().result()["label"]).reshape(-1).tolist() == [2, 3]
    rest = [np.asarray(b["label"]).reshape(-1).tolist() for b in it]
    assert rest == [[2, 3], [4, 5], [6, 0]]
    assert it.is_nonpadding.tolist() == [True, False]


def test_peekable_decorator_and_checkpoint_refusal(seven_files):
    @peekable_data_iterator(output_map=["data", "label"], reader_name="Reader")
    def iterator_fn():
        return fn.readers.file(file_root=seven_files, name="Reader")

    it = iterator_fn(batch_size=2, enable_checkpointing=True)
    it.peek()
    with pytest.raises(RuntimeError, match="peeked"):
        it.checkpoints()
    next(it)
    assert len(it.checkpoints()) == 1


def test_state_dict_resumes(seven_files):
    def make():
        return DALIGenericIterator(_pipe(seven_files, checkpointing=True), ["data", "label"], reader_name="Reader")

    ref = _labels(make(), 2)
    it = make()
    next(it)
    state = it.state_dict()
    it2 = make()
    it2.load_state_dict(state)
    again = _labels(it2, 2)
    assert again[0] == ref[0][1:] and again[1] == ref[1]


def test_ragged_output_is_refused_by_name(tmp_path):
    for k in range(2):
        (tmp_path / f"c{k}").mkdir()
        (tmp_path / f"c{k}" / "f.jpg").write_bytes(bytes(range(k + 1)))

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.readers.file(file_root=str(tmp_path), name="Reader")

    with pytest.raises(ValueError, match="output 'jpegs' has samples of different shapes"):
        DALIGenericIterator(pipe(), ["jpegs", "label"], reader_name="Reader")


def test_host_hand_off_is_zero_copy_when_aligned():
    from stoker.plugin.jax.iterator import _aligned_stack
    from stoker.tensors import TensorCPU, TensorListCPU

    stacked = _aligned_stack([np.full((3, 5), k, np.float32) for k in range(4)])
    assert stacked.ctypes.data % 64 == 0
    arr = to_jax(TensorCPU(stacked))
    assert arr.unsafe_buffer_pointer() == stacked.ctypes.data
    batch = to_jax(TensorListCPU([np.full((3, 5), k, np.float32) for k in range(4)]))
    assert batch.unsafe_buffer_pointer() % 64 == 0
    np.testing.assert_array_equal(np.asarray(batch), stacked)


@pytest.mark.gpu
def test_gpu_outputs_become_device_arrays(seven_files):
    if jax.devices()[0].platform != "gpu":
        pytest.skip("JAX has no GPU backend here")

    @pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def pipe():
        data, label = fn.readers.file(file_root=seven_files, name="Reader")
        return data.gpu(), label

    batch = next(DALIGenericIterator(pipe(), ["data", "label"], reader_name="Reader"))
    assert batch["data"].devices() == {jax.devices()[0]}
    assert np.asarray(batch["data"]).reshape(-1).tolist() == [1, 2]


def test_stoker_and_the_plugin_import_without_jax():
    code = "import sys, stoker, stoker.plugin.jax, stoker.plugin.jax.clu; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.stdout.strip() == "False"
