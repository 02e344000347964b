"""Numba: an operator written as a Numba-compiled Python function (``numba_function``, import
renamed from ``nvidia.dali.plugin.numba``).

Two CPU forms of DALI's numba tutorial: a per-sample transpose whose output shape is set by a
``setup_fn``, and a per-batch (``batch_processing=True``) function that inverts every image.
Where a GPU is found the transpose also runs as a numba.cuda kernel (``device="gpu"``, one
launch per sample with ``blocks`` x ``threads_per_block``). Needs ``numba``
(``pip install numba``; ``numba-cuda`` for the GPU form).

    python examples/numba_function.py [--cpu]
"""

from __future__ import annotations

import argparse

import numpy as np
from stoker.plugin.numba.fn.experimental import numba_function

from stoker import fn, pipeline_def, types
from stoker.backend.cuda import cuda_available


def swap_hw(outs, ins):
    """Output shape: the input's with height and width exchanged (every sample, once per batch)."""
    for i in range(len(outs[0])):
        outs[0][i][0] = ins[0][i][1]
        outs[0][i][1] = ins[0][i][0]
        outs[0][i][2] = ins[0][i][2]


def transpose(out0, in0):
    for y in range(in0.shape[0]):
        for x in range(in0.shape[1]):
            for c in range(in0.shape[2]):
                out0[x, y, c] = in0[y, x, c]


def invert_batch(outs, ins):
    for k in range(len(ins)):
        out, img = outs[k], ins[k]
        for y in range(img.shape[0]):
            for x in range(img.shape[1]):
                for c in range(img.shape[2]):
                    out[y, x, c] = 255 - img[y, x, c]


def transpose_kernel(out0, in0):
    """The GPU form: one thread per (y, x) pixel (numba.cuda compiles it)."""
    from numba import cuda

    y, x = cuda.grid(2)
    if y < in0.shape[0] and x < in0.shape[1]:
        for c in range(in0.shape[2]):
            out0[x, y, c] = in0[y, x, c]


def images(info):
    i = info.idx_in_epoch
    y, x = np.mgrid[0:10 + i, 0:14]
    return np.stack([x * 9 + i, y * 11, (x * y) % 255], axis=2).astype(np.uint8)


def build(gpu: bool):
    @pipeline_def(batch_size=3, num_threads=2, device_id=0 if gpu else None)
    def numba_pipeline():
        image = fn.external_source(source=images, batch=False, layout="HWC")
        common = dict(out_types=[types.UINT8], in_types=[types.UINT8], outs_ndim=[3], ins_ndim=[3])
        swapped = numba_function(image, run_fn=transpose, setup_fn=swap_hw, **common)
        inverted = numba_function(image, run_fn=invert_batch, batch_processing=True, **common)
        outs = [swapped, inverted]
        if gpu:
            outs.append(numba_function(image.gpu(), run_fn=transpose_kernel, setup_fn=swap_hw, device="gpu",
                                       blocks=[4, 4, 1], threads_per_block=[8, 8, 1], **common))
        return tuple(outs)

    pipe = numba_pipeline()
    pipe.build()
    return pipe


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    outs = build(gpu).run()
    swapped, inverted = outs[0], outs[1]
    sums = []
    for i in range(len(swapped)):
        src = images(type("Info", (), {"idx_in_epoch": i})())
        s, v = np.asarray(swapped.at(i)), np.asarray(inverted.at(i))
        ok = np.array_equal(s, src.transpose(1, 0, 2)) and np.array_equal(v, 255 - src)
        sums += [int(s.astype(np.int64).sum()), int(v.astype(np.int64).sum())]
        print(f"sample {i}: {src.shape} -> transposed {s.shape}, inverted {v.shape}, as NumPy computes: {ok}")
    if gpu:
        g = outs[2].as_cpu()
        same = all(np.array_equal(np.asarray(g.at(i)), np.asarray(swapped.at(i))) for i in range(len(g)))
        print(f"GPU kernel gives the CPU result: {same}")
    print("result:", " ".join(str(v) for v in sums))


if __name__ == "__main__":
    main()
