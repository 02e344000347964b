"""Video: ``decoders.video`` (and its ``experimental`` alias) on the CPU through PyAV.

The readers (``readers.video``, ``readers.video_resize``) live in
:mod:`stoker.operators.readers`; both share :mod:`.pyav`, the one module that
talks to PyAV (FFmpeg): probing a clip's frames without decoding them, the
variable-frame-rate check, and decoding a chosen set of frames by seeking to
the key frame before each run of them. ``gpu_video_reader`` is the NVDEC path
of ``readers.video(device="gpu")`` through PyNvVideoCodec.

PyAV is an optional dependency (``pip install stoker[video]``); it is imported
when the first clip is read, and an operator built without it raises an
ImportError that names the package.
"""
