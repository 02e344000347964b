"""Helpers of the readers.numpy device tests (null device and real GPU): data sets, runs, checks."""

import os

import numpy as np

from stoker import fn, pipeline_def


def load_gpu_numpy():
    """Load the GPU module (a GPU_MODULES entry; also where the registry has not loaded it yet)."""
    import stoker.operators.readers.gpu_numpy  # noqa: F401 - registers the GPU half
    from stoker.operators import gpu_registry

    gpu_registry.load_gpu_impls()


def write_set(root, n=10, fortran=True, ndim=3, dtype=np.float32, seed=1):
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        a = (rng.random(tuple(int(x) for x in rng.integers(3, 8, ndim))) * 100).astype(dtype)
        np.save(os.path.join(root, f"a{i:02d}.npy"), np.asfortranarray(a) if fortran and i % 2 else a)


def run(device, batch_size, iterations, on_error="raise", **reader_args):
    """Per iteration: [(array on the host, source_info)] and the batch's layout."""
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=0 if device == "gpu" else None, seed=5,
                  on_error=on_error)
    def p():
        return fn.readers.numpy(device=device, name="R", **reader_args)

    pipe = p()
    pipe.build()
    out = []
    for _ in range(iterations):
        (o,) = pipe.run()
        host = o.as_cpu() if device == "gpu" else o
        out.append([(np.array(host.at(i)), o[i].source_info()) for i in range(len(o))])
    reports = list(pipe.error_report())
    pipe.close()
    return out, reports


def assert_same(a, b):
    assert [[s for _, s in batch] for batch in a] == [[s for _, s in batch] for batch in b]
    for ba, bb in zip(a, b):
        for (x, s), (y, _) in zip(ba, bb):
            assert x.dtype == y.dtype and x.shape == y.shape, s
            np.testing.assert_array_equal(x, y, err_msg=s)


CASES = {
    "whole": dict(),
    "roi": dict(roi_start=[1, 0], roi_end=[3, 2], roi_axes=[0, 2]),
    "rel_roi_pad": dict(rel_roi_start=[-0.2], rel_roi_end=[0.7], roi_axes=[1], out_of_bounds_policy="pad",
                        fill_value=3),
    "sharded_padded": dict(num_shards=3, shard_id=2, pad_last_batch=True),
    "shuffled": dict(random_shuffle=True, num_shards=3, shard_id=1),
}


def break_two(root):
    full = open(os.path.join(root, "a03.npy"), "rb").read()
    with open(os.path.join(root, "a03.npy"), "wb") as f:
        f.write(full[:-7])
    with open(os.path.join(root, "a05.npy"), "wb") as f:
        f.write(b"garbage")
