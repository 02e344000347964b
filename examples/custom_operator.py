"""A custom operator: your own operator, registered from your code with ``stoker.custom``, then
used like a built-in one in ``fn``, ``ops`` and eager mode (``stoker.dynamic``).

DALI's "add your own operator" takes a C++ plugin library; here it is a decorated Python function
(or class), with an optional GPU function on CuPy arrays. Two operators are made:

* ``examples.posterize``: per sample, keeps the top ``bits`` bits of every pixel; ``bits`` may be
  a per-sample DataNode. Its GPU form is a CUDA kernel from a source string (NVRTC, via CuPy).
* ``examples.channel_stats``: a class with a ``setup`` that checks its argument and a per-batch
  CPU function with two outputs (mean and max of each channel).

    python examples/custom_operator.py [--cpu]
"""

from __future__ import annotations

import argparse

import numpy as np

import stoker.custom as custom
import stoker.dynamic as ndd
from stoker import fn, ops, pipeline_def, types
from stoker.backend.cuda import cuda_available

POSTERIZE_CU = r"""
extern "C" __global__ void posterize(const unsigned char* in, unsigned char* out, long long n, int mask) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] & mask;
}
"""


def _mask(bits: int) -> int:
    return (0xFF << (8 - int(bits))) & 0xFF


@custom.operator(
    name="examples.posterize",
    args=[custom.Arg("bits", "int", 4, tensor=True, doc="how many high bits to keep (1..8)")],
    replace=True,
)
def posterize(image, *, bits):
    """Keeps the ``bits`` highest bits of each uint8 value (fewer colour levels)."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bits must be within 1..8, got {bits}")
    return image & np.uint8(_mask(bits))


@posterize.gpu
def posterize_gpu(images, *, bits):
    """The GPU form: one launch per sample of a kernel compiled from POSTERIZE_CU."""
    import cupy as cp

    kernel = custom.kernel(POSTERIZE_CU, "posterize")
    outs = []
    for x, b in zip(images, bits):
        out = cp.empty_like(x)
        kernel(((x.size + 255) // 256,), (256,), (x, out, np.int64(x.size), np.int32(_mask(b))))
        outs.append(out)
    return outs


@custom.operator(name="examples.channel_stats", outputs=2, layouts="C", replace=True,
                 args=[custom.Arg("scale", "float", 1.0, doc="multiplies both statistics")])
class ChannelStats:
    """Mean and maximum of each channel of HWC images, for the whole batch at once."""

    def setup(self, *, scale):
        if scale <= 0:
            raise custom.ArgError("scale", f"must be positive, got {scale}")
        self.scale = scale

    def cpu_batch(self, images, *, scale):
        means = [img.reshape(-1, img.shape[-1]).mean(0).astype(np.float32) * self.scale for img in images]
        maxes = [img.reshape(-1, img.shape[-1]).max(0).astype(np.float32) * self.scale for img in images]
        return means, maxes


def images(info):
    y, x = np.mgrid[0:32, 0:48]
    level = 30 * info.idx_in_epoch
    return np.stack([x * 5 + level, y * 7, (x + y) * 3], axis=2).clip(0, 255).astype(np.uint8)


def build(gpu: bool):
    @pipeline_def(batch_size=4, num_threads=2, device_id=0 if gpu else None, seed=3)
    def custom_pipeline():
        image = fn.external_source(source=images, batch=False, layout="HWC")
        bits = fn.cast(fn.random.uniform(range=(1, 5), seed=11), dtype=types.INT32)
        shown = image.gpu() if gpu else image
        poster = fn.examples.posterize(shown, bits=bits)
        fixed = ops.examples.Posterize(bits=2)(shown)
        means, maxes = fn.examples.channel_stats(image, scale=0.5)
        return poster, fixed, bits, means, maxes

    pipe = custom_pipeline()
    pipe.build()
    return pipe


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    print("registered:", [n for n in dir(fn.examples) if not n.startswith("_")])
    poster, fixed, bits, means, maxes = build(gpu).run()
    poster, fixed = (poster.as_cpu(), fixed.as_cpu()) if gpu else (poster, fixed)
    for i in range(len(poster)):
        p = np.asarray(poster.at(i))
        print(f"sample {i}: bits {int(np.asarray(bits.at(i)))}, {len(np.unique(p))} levels, "
              f"channel means {[round(float(v), 2) for v in np.asarray(means.at(i))]}")
    eager = ndd.examples.posterize(np.asarray(images(types.SampleInfo(0, 0, 0, 0))), bits=3)
    print(f"eager: {len(np.unique(eager.numpy()))} levels")
    try:
        ndd.examples.posterize(np.zeros((2, 2, 3), np.uint8), bits=9)
    except Exception as e:  # noqa: BLE001 - shown to the reader
        print("a bad per-sample value is reported as:", str(e).splitlines()[0])
    try:
        ndd.examples.channel_stats(np.zeros((2, 2, 3), np.uint8), scale=-1.0)
    except Exception as e:  # noqa: BLE001
        print("a bad argument is reported as:", str(e).splitlines()[0])
    levels = [len(np.unique(np.asarray(fixed.at(i)))) for i in range(len(fixed))]
    print("result:", " ".join(str(v) for v in levels))


if __name__ == "__main__":
    main()
