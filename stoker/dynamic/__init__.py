"""Eager (dynamic) mode: stoker's operators called directly on data, no pipeline.

DALI calls this mode ``nvidia.dali.experimental.dynamic``; the names match::

    import stoker.dynamic as ndd

    img = ndd.as_tensor(np_image, layout="HWC")          # NumPy, torch, DLPack ...
    small = ndd.resize(img, size=[224, 224])             # a Tensor
    batch = ndd.as_batch([img1, img2])                   # samples may differ in shape
    flipped = ndd.flip(batch, horizontal=1)              # a Batch
    rng = ndd.random.RNG(seed=7)
    angles = ndd.random.uniform(range=(-10, 10), batch_size=2, rng=rng)
    rotated = ndd.rotate(batch, angle=angles)            # per-sample arguments as Batches
    for jpegs, labels in ndd.readers.File(file_root="data/").next_epoch(batch_size=32):
        images = ndd.decoders.image(jpegs)
    t = images.torch(pad=True)

Every function is made from the operator's schema and runs the same operator
class a pipeline runs (one cached instance per operator, static arguments and
device), on a shared thread pool (:func:`set_num_threads`). Results are
computed when the call returns. ``device="gpu"`` needs CUDA and CuPy.
"""

from stoker.dynamic import decoders, random, readers
from stoker.dynamic._data import Batch, Tensor, as_batch, as_tensor, batch, tensor
from stoker.dynamic._invoke import get_num_threads, set_num_threads
from stoker.dynamic._namespace import module_dir, module_getattr

__all__ = [
    "Batch",
    "Tensor",
    "as_batch",
    "as_tensor",
    "batch",
    "tensor",
    "decoders",
    "random",
    "readers",
    "get_num_threads",
    "set_num_threads",
]

# ndd.resize, ndd.flip, ndd.noise.gaussian ... come from the operator registry.
__getattr__ = module_getattr("")
__dir__ = module_dir("", globals())

# Element types under dynamic mode's short names (ndd.float32 ...); they are stoker.types values.
from stoker import types as _types  # noqa: E402

uint8, uint16, uint32, uint64 = _types.UINT8, _types.UINT16, _types.UINT32, _types.UINT64
int8, int16, int32, int64 = _types.INT8, _types.INT16, _types.INT32, _types.INT64
float16, float32, float64, bool_ = _types.FLOAT16, _types.FLOAT, _types.FLOAT64, _types.BOOL
