"""``decoders.audio``: WAV (PCM 8/16/24/32 bit, float), FLAC and Ogg/Vorbis through libsndfile.

Outputs per sample: the waveform, shape (T, C) with channels interleaved as stored (a mono file
gives (T, 1)), or (T,) with ``downmix`` (the channels' mean); and its sample rate as a float32
scalar (the target rate when ``sample_rate`` resamples it). Both outputs carry no layout, as in
DALI.

Values: with neither ``downmix`` nor resampling, libsndfile converts straight to ``dtype`` (an
int16 file read as INT32 is shifted left by 16; a float file read as an integer type gives
libsndfile's unscaled integers, in practice zeros, as DALI gives). Otherwise the file is decoded to
float in [-1, 1], mixed and/or resampled (see :mod:`._resampling`), then converted to ``dtype``
with the normalized conversion of :mod:`._convert`.

libsndfile comes with the ``soundfile`` package (``pip install stoker[audio]``); without it
the operator fails at build with an error that names the package.
"""

from __future__ import annotations

import io

import numpy as np

from stoker import types
from stoker.errors import PipelineBuildError, arg_error
from stoker.operators.audio._convert import from_float
from stoker.operators.audio._memory import keep_freed_memory
from stoker.operators.audio._resampling import resample, resampled_length
from stoker.operators.audio._wav import pcm16_as, read_pcm16
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register

DECODE_TYPES = tuple(np.dtype(t) for t in (np.int16, np.int32, np.float32))
_SF_TYPES = {np.dtype(np.int16): "int16", np.dtype(np.int32): "int32", np.dtype(np.float32): "float32"}


def soundfile_module(op: str):
    """The ``soundfile`` module, or a build error naming the package to install."""
    try:
        import soundfile
    except ImportError as e:  # also OSError-like failures to load libsndfile surface as ImportError
        raise PipelineBuildError(
            f"{op}: audio decoding needs the 'soundfile' package (libsndfile); install it with "
            f"'pip install soundfile' or 'pip install stoker[audio]' ({e})") from None
    return soundfile


def check_decode_args(op: str, args: dict) -> np.dtype:
    """The output dtype of an audio decoding operator, with ``dtype`` and ``quality`` checked."""
    dtype = np.dtype(args["dtype"])
    if dtype not in DECODE_TYPES:
        raise arg_error(op, "dtype", f"must be INT16, INT32 or FLOAT, got {dtype.name}")
    if not 0 <= args["quality"] <= 100:
        raise arg_error(op, "quality", f"must be in [0, 100], got {args['quality']}")
    soundfile_module(op)
    return dtype


def decode_audio(data, dtype: np.dtype, downmix: bool = False, sample_rate: float = 0.0,
                 quality: float = 50.0, offset: float = 0.0, duration: float = 0.0) -> tuple[np.ndarray, np.float32]:
    """Decodes one encoded audio file: bytes, a 1D uint8 array or a seekable binary file object.

    Returns (audio, file_rate): audio of ``dtype`` shaped (T, C), or (T,) when ``downmix``,
    resampled to ``sample_rate`` when that is positive; the file's own sample rate as float32.
    ``offset`` and ``duration`` (seconds, 0 = to the end) select a part of the file first.
    Raises ValueError naming the reason when the data is not a readable audio file.
    """
    import soundfile as sf

    target = float(sample_rate or 0.0)
    if isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        if not len(data):
            raise ValueError("the audio file is empty")
        pcm = read_pcm16(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data)
        if pcm is not None:
            return _from_pcm16(pcm, np.dtype(dtype), downmix, target, quality, offset, duration)
        data = io.BytesIO(data.tobytes() if isinstance(data, np.ndarray) else bytes(data))
    try:
        with sf.SoundFile(data) as f:
            rate = float(f.samplerate)
            convert = downmix or (target > 0 and target != rate)
            start = min(int(round(offset * rate)), f.frames) if offset > 0 else 0
            frames = int(round(duration * rate)) if duration > 0 else -1
            if start:
                f.seek(start)
            audio = f.read(frames, dtype="float32" if convert else _SF_TYPES[np.dtype(dtype)], always_2d=True)
    except (RuntimeError, sf.SoundFileError, TypeError) as e:
        raise ValueError(f"cannot decode the audio data: {e}") from None
    if not convert:
        return audio, np.float32(rate)
    return _mix_and_resample(audio, dtype, downmix, rate, target, quality), np.float32(rate)


def _mix_and_resample(audio: np.ndarray, dtype: np.dtype, downmix: bool, rate: float, target: float,
                      quality: float) -> np.ndarray:
    """Float (T, C) ``audio`` downmixed and/or resampled, then converted to ``dtype``."""
    if downmix:
        # one channel: the mean is the channel itself (a reduction over an axis of 1 costs a pass)
        audio = audio.reshape(-1) if audio.shape[1] == 1 else audio.mean(axis=1, dtype=np.float32)
    if target > 0 and target != rate:
        audio = resample(audio, rate, target, resampled_length(audio.shape[0], rate, target), quality)
    return from_float(audio, dtype)


def _from_pcm16(pcm: tuple[float, np.ndarray], dtype: np.dtype, downmix: bool, target: float, quality: float,
                offset: float, duration: float) -> tuple[np.ndarray, np.float32]:
    """:func:`decode_audio` of a 16-bit PCM WAV read by :func:`._wav.read_pcm16`."""
    rate, samples = pcm
    frames = samples.shape[0]
    start = min(int(round(offset * rate)), frames) if offset > 0 else 0
    stop = min(start + int(round(duration * rate)), frames) if duration > 0 else frames
    samples = samples[start:stop]
    if not (downmix or (target > 0 and target != rate)):
        return pcm16_as(samples, dtype), np.float32(rate)
    audio = pcm16_as(samples, np.dtype(np.float32))
    return _mix_and_resample(audio, dtype, downmix, rate, target, quality), np.float32(rate)


@register
class AudioDecoder(Operator):
    """Decodes encoded audio files into waveforms and their sample rates."""

    schema = Schema(
        name="decoders.audio",
        legacy_name="AudioDecoder",
        doc="Decodes WAV, FLAC and Ogg/Vorbis files (1D uint8) with libsndfile. Outputs the waveform, "
            "(T, C) interleaved or (T,) when downmixed, and its sample rate (float32 scalar).",
        args=[Arg("dtype", "dtype", types.FLOAT, doc="output type: INT16, INT32 or FLOAT"),
              Arg("downmix", "bool", False, doc="average all channels into one (1D output)"),
              Arg("sample_rate", "float", 0.0, tensor=True,
                  doc="if positive, resample to this rate (Hz) while decoding"),
              Arg("quality", "float", 50.0,
                  doc="resampling quality in [0, 100]: 3 sinc lobes at 0, 16 at 50, 64 at 100")],
        num_outputs=2,
    )

    def setup(self):
        self.dtype = check_decode_args(self.schema.name, self.args)
        keep_freed_memory()  # (see ._memory: per-sample arrays of a few MB, freed a batch at a time)

    def output_layouts(self, input_layouts):
        return ["", ""]

    def run_sample(self, inputs, args, ctx):
        data = np.asarray(inputs[0])
        if data.dtype != np.uint8 or data.ndim != 1:
            raise self.error(f"expects encoded files as 1D uint8, got {data.dtype} of shape {data.shape}")
        rate = float(np.float32(args["sample_rate"] or 0.0))  # a float32 argument in DALI
        if rate < 0:
            raise self.error(f"argument 'sample_rate' must not be negative, got {rate}")
        audio, file_rate = decode_audio(data, self.dtype, self.args["downmix"], rate, self.args["quality"])
        return audio, (np.float32(rate) if rate > 0 else file_rate)
