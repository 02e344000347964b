"""The entropy check of the mixed decoders' ``strict`` mode: damage inside a JPEG's Huffman data.

Why: the GPU decoders (nvJPEG's engines, nvImageCodec) decode damaged entropy-coded data
silently into garbage pixels. The structure check (:mod:`stoker.backend.jpeg_scan_check`) finds
broken markers, but a bit flipped or a few bytes overwritten between two markers leave the
structure intact; only reading the Huffman codes finds those, as the strict CPU decoder does when
libjpeg warns ("Corrupt JPEG data: ..."). This check reads them the same way, for the JPEGs that
passed the structure check and would decode on the GPU, and the mixed decoders send the files it
flags to the CPU decoder, which then refuses them with their name (or, for stray bytes between
header segments, which libjpeg warns about too, decodes them as usual).

How: libjpeg-turbo decodes the file at 1/8 scale, stopping at its first warning
(:func:`stoker.operators.decoders.turbo.entropy_problem`): every Huffman code is read, through the
same code as a full decode, so it flags exactly the files the strict CPU decoder refuses (the
benchmark below checks that on damaged files), but the inverse DCT, upsampling and colour
conversion are 1/64 of a full decode's. What is left is the entropy decoding itself, 60-70 % of a
decode: benchmarks/jpeg_entropy_check_cost.py, one core, 500x375 JPEGs of ~60 KB:

    machine                          files            structure  entropy   full decode
    2-core x86 VM (shared)           1,024 ImageNet-like  23 us   573 us     935 us
    2-core x86 VM (shared)           512 generated        25 us   629 us     910 us
    H200 host, 16-core Xeon          512 generated        24 us   856 us    1225 us

The candidates it was chosen over cost as much or more: TurboJPEG's lossless transform with no
output (it reads the coefficients into a whole-image buffer) 660-920 us; a 1/8 decode cropped to
the last row, whose rows above are Huffman-decoded only, within 4 % either way. Nothing cheaper is
exact: a bit flip is found only by decoding the codes after it.

Where: on the pipeline's thread pool (``batch.pool``), one task a file, in the decoder's host half
(the CPU stage), which waits for the results before it plans the batch. The library call releases
the GIL (ctypes), and a task holds it for under 10 us (the whole check of an 8x8 file takes 10 us):
on the H200 host the check ran at 1,160 files a second on one thread and 11,500 on 16 (the 2-core
VM, whose other core was busy, showed no gain). Not in readers.file's I/O process: that is one process,
which a 30 us check already made the GPU pipeline's bottleneck; at 0.6-0.9 ms a file it would cap
the pipeline near 1,100-1,700 files a second.

Cost to a pipeline: 60-70 % of a CPU decode's time per image, so it is on by default only where
the structure check is (on_error 'skip' / 'substitute'); setting ``jpeg_entropy_check``. Without
TurboJPEG (pip install stoker[jpeg]) nothing is checked, as the strict CPU decoder then cannot
tell either.
"""

from __future__ import annotations

import numpy as np


def entropy_check_wanted(strict: bool, on_error: str | None) -> bool:
    """Whether the mixed decoders run this check: the decoder is strict, TurboJPEG is there, and
    the ``jpeg_entropy_check`` setting says so (auto: wherever the structure check runs, see
    :func:`stoker.backend.jpeg_scan_check.structure_check_wanted`: only under on_error 'skip' /
    'substitute' unless ``jpeg_structure_check`` says otherwise)."""
    if not strict:
        return False
    from stoker import settings

    wanted = settings.get().jpeg_entropy_check
    if wanted is None:
        from stoker.backend.jpeg_scan_check import structure_check_wanted

        wanted = structure_check_wanted(strict, on_error)
    if not wanted:
        return False
    from stoker.operators.decoders import turbo

    return turbo.available()


def entropy_problem(data) -> str | None:
    """libjpeg's first warning (or error) on a JPEG's data, or None when it reads clean (or
    TurboJPEG is missing). ``data``: the encoded file (bytes or a uint8 array)."""
    from stoker.operators.decoders import turbo

    buf = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else \
        np.asarray(data).reshape(-1).view(np.uint8)
    return turbo.entropy_problem(buf)


def damaged(arrays, idx=None, pool=None) -> np.ndarray:
    """Boolean mask over ``idx`` (default: all of ``arrays``): the files :func:`entropy_problem`
    flags. ``pool``: an executor to check them on, one task a file (the caller waits); None
    checks them here, one after the other."""
    idx = list(range(len(arrays))) if idx is None else list(idx)
    if pool is None or len(idx) < 2:
        return np.fromiter((entropy_problem(arrays[i]) is not None for i in idx), bool, len(idx))
    futures = [pool.submit(entropy_problem, arrays[i]) for i in idx]
    return np.fromiter((f.result() is not None for f in futures), bool, len(idx))
