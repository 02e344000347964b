"""The "mixed" image decoders: encoded bytes on the host in, decoded HWC uint8 on the GPU out.

Implements ``decoders.image``, ``decoders.image_random_crop``,
``decoders.image_crop`` and ``decoders.image_slice`` with ``device="mixed"``.

Two paths, chosen per operator:

* **Hardware engines** (:mod:`.hardware`; default where nvJPEG's hardware backend exists:
  A100, H100, H200; ``STOKER_NVJPEG_HW=0`` turns it off). In the CPU stage each
  header is scanned (:func:`stoker.backend.nvjpeg.hardware_eligible`), the
  window drawn, and every sample given a slot in one flat output buffer (:mod:`.plan`); the
  baseline JPEGs (colour and grayscale) then decode in one nvJPEG call on the decoder's own
  thread (no GIL held, :mod:`.engines`), overlapping the previous batch's GPU work, while the
  others (progressive, PNG, ...) and a share of the JPEGs
  (``STOKER_CPU_DECODE_SHARE``: steered per batch by default, see
  :meth:`.state.DecoderState.balance_share`) decode in helper processes or on the thread
  pool and are copied into their slots (:mod:`.host_share`, :mod:`.helper_processes`). The
  batch leaves as a flat ``TensorListGPU``: no per-sample Python object.
* **nvImageCodec** otherwise (:mod:`.nvimgcodec`): headers parsed as ``CodeStream`` s, one
  batched ``decode`` with ROI on the legacy stream, the CPU share and the formats it
  cannot take on the pool.

Random crop windows come from
:func:`stoker.operators.random.crop_window.sample_crop_window` with the
sample's own random stream, so they do not depend on the device or the path.
Samples the GPU fails on are retried on the CPU; a sample that fails there
too raises an error naming the file. README.md in this folder maps the modules.
"""
from __future__ import annotations

import threading

import numpy as np

from stoker.operators.decoders.mixed.common import cpu_decode, frame_hints, strict_sound
from stoker.operators.decoders.mixed.hardware import PreparedBatch, finish_hardware, prepare_hardware
from stoker.operators.decoders.mixed.nvimgcodec import CodecBatch, finish_codec, prepare_codec
from stoker.operators.decoders.mixed.plan import MAX_AUTO_SHARE, DecodePlan, plan_batch
from stoker.operators.decoders.mixed.state import DecoderState, decoder_state
from stoker.operators.decoders.mixed.stats import DecodeStats
from stoker.operators.gpu_registry import register_gpu

__all__ = ["MAX_AUTO_SHARE", "CodecBatch", "DecodePlan", "DecodeStats", "DecoderState", "PreparedBatch",
           "cpu_decode", "frame_hints", "mixed_decode", "plan_batch", "prepare", "decoder_state", "strict_sound"]


def _outputs_for_gpu(op) -> tuple[bool, bool]:
    """(gray, on_gpu): whether the decoder outputs gray, and whether a GPU decoder can give its
    output type and dtype at all (else every sample decodes on the host)."""
    out_type = op.args.get("output_type")
    gray = out_type is not None and getattr(out_type, "name", str(out_type)).endswith("GRAY")
    dtype = op.args.get("dtype")
    on_gpu = (gray or out_type is None or getattr(out_type, "name", "") == "RGB") and \
        (dtype is None or np.dtype(dtype) == np.uint8)
    return gray, on_gpu


def start_engines_early(op, device_id: int) -> None:
    """Create the hardware decoder on a thread of its own now, at build, where the decoder will use
    it: nvJPEG's hardware backend takes about half a second to start, which was most of the first
    batch's wait. The first batch's prepare then finds it made, or waits for the rest."""
    gray, on_gpu = _outputs_for_gpu(op)
    if not on_gpu or gray or getattr(op, "_mixed_state", None) is not None:
        return
    st = op._mixed_state = DecoderState(device_id)

    def make():
        try:
            st.hardware()
        except Exception:  # noqa: BLE001 - the first batch makes it again and reports what fails
            pass

    threading.Thread(target=make, name="stoker-nvjpeg-start", daemon=True).start()


def prepare(op, kind, batch, inputs, arg_inputs) -> PreparedBatch | CodecBatch:
    """Host-side half of a mixed decode (runs in the CPU stage when the executor allows):
    :func:`prepare_hardware` where the engines decode, else :func:`prepare_codec`."""
    st = decoder_state(op, batch)
    enc = inputs[0].samples()
    gray, on_gpu = _outputs_for_gpu(op)
    # Baseline JPEGs go to the hardware engines through nvJPEG (one GIL-free call per
    # batch, on the decoder's own thread); the rest (progressive, EXIF-rotated) to the CPU.
    hw = st.hardware() if on_gpu and not gray else None
    if hw is not None:
        read = inputs[0].read_hints
        return prepare_hardware(op, kind, batch, enc, arg_inputs, st, frame_hints(inputs[0]),
                                read.located if read is not None else None)
    read = inputs[0].read_hints
    return prepare_codec(op, kind, batch, enc, arg_inputs, st, gray, on_gpu,
                         read.frame_hints if read is not None else None)


def mixed_decode(op, kind, batch, inputs, arg_inputs):
    """Decode a batch of encoded samples to a ``TensorListGPU`` of HWC uint8 images (flat on the
    hardware path, a list of samples on nvImageCodec's)."""
    import time

    from stoker.backend import cuda

    st = decoder_state(op, batch)
    stream = cuda.current_stream(batch)
    t_start = time.perf_counter()
    prep = batch.prepared if isinstance(batch.prepared, (PreparedBatch, CodecBatch)) else None
    if prep is None:
        prep = prepare(op, kind, batch, inputs, arg_inputs)
    if isinstance(prep, PreparedBatch):
        return finish_hardware(op, kind, batch, prep, arg_inputs, st, stream, t_start)
    return finish_codec(op, kind, batch, prep, arg_inputs, st, stream, t_start)


def _slice_inputs(op, kind, inputs, arg_inputs):
    """image_slice's anchor and shape inputs moved into the per-sample arguments, so that every
    step of the mixed decode (windows, host decodes) sees one input, the encoded data."""
    if kind != "image_slice" or len(inputs) != 3:
        return inputs, arg_inputs
    # (arg_samples: a batch held as one array stays one array, for the batch's windows in one step)
    return inputs[:1], {**arg_inputs, op.ANCHOR_INPUT: inputs[1].arg_samples(), op.SHAPE_INPUT: inputs[2].arg_samples()}


def _impl(kind):
    def run(op, batch, inputs, arg_inputs):
        return mixed_decode(op, kind, batch, *_slice_inputs(op, kind, inputs, arg_inputs))

    def prep(op, batch, inputs, arg_inputs):
        return prepare(op, kind, batch, *_slice_inputs(op, kind, inputs, arg_inputs))

    run.__name__ = f"mixed_{kind}"
    run.__doc__ = f"``fn.decoders.{kind}(device='mixed')``: nvImageCodec plus CPU threads."
    return run, prep


for _kind in ("image", "image_random_crop", "image_crop", "image_slice"):
    _run, _prep = _impl(_kind)
    register_gpu(f"decoders.{_kind}", devices=("mixed",), prepare=_prep)(_run)
