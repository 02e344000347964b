"""Everything stoker asks of PyAV (FFmpeg): probe a clip, check its frame rate, decode chosen frames.

Frames are numbered in presentation order from 0, as DALI numbers them: frame
``k`` is the packet with the ``k``-th smallest timestamp. :func:`probe` lists
those timestamps and which frames are key frames by demuxing only (no decode),
so that :func:`decode_frames` can seek to the key frame before each run of
wanted frames and decode from there, never the whole clip.

Colors: frames are converted to RGB by one swscale call with accurate rounding
and full-resolution chroma (``_RGB_FLAGS``): the chroma is interpolated, not
taken for a 2x2 block of pixels. That is the conversion DALI's CPU video
decoder makes: its frames and stoker's are equal, level for level
(tests/operators/video/test_video_decoder.py), and it is one pass where
upsampling to 4:4:4 first took two.

Sizes: :func:`decode_frames` can also resize each frame in swscale
(``size``): the frame is converted as above to planar RGB, then its planes are
resampled by swscale's bilinear filter, which widens with the downscale as
DALI's antialiased linear ``resize`` does (``readers.video_resize`` uses it;
the differences to ``resize`` are measured in tests/operators/video/test_video_resize.py).

Errors: a clip that cannot be opened, demuxed or decoded raises ``OSError``
(a truncated or corrupt file: a sample error) naming ``where``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from stoker import types


def require_av():
    """The ``av`` module, or an ImportError saying how to install it."""
    try:
        import av
    except ImportError:
        raise ImportError("video decoding on the CPU needs PyAV: pip install 'stoker[video]' (or: pip install av)"
                          ) from None
    return av


@dataclass(frozen=True)
class ClipInfo:
    """What demuxing a clip tells: presentation timestamps (sorted, in ``time_base`` units), which of
    those frames are key frames, the frame size and the codec."""

    pts: np.ndarray  # int64 (n,)
    key: np.ndarray  # bool (n,)
    time_base: Fraction
    width: int
    height: int
    codec: str
    average_rate: Fraction | None

    @property
    def frames(self) -> int:
        return int(self.pts.size)

    def seconds(self, idx) -> np.ndarray:
        """Timestamps of frames ``idx`` in seconds (float64)."""
        return self.pts[np.asarray(idx, np.int64)] * float(self.time_base)

    def fps(self) -> float:
        """Frames per second: the stream's average rate, else from the timestamps."""
        if self.average_rate:
            return float(self.average_rate)
        if self.frames > 1:
            span = float((self.pts[-1] - self.pts[0]) * self.time_base)
            return (self.frames - 1) / span if span > 0 else 0.0
        return 0.0

    def is_vfr(self) -> bool:
        """Whether the gaps between consecutive frames differ: by more than one tick of the time
        base, since a rate such as 30000/1001 fps in a millisecond time base alternates 33/34."""
        if self.frames < 3:
            return False
        d = np.diff(self.pts)
        return bool(d.max() - d.min() > 1)


def _open(av, source):
    """An input container of ``source``: a path, a URL (through stoker's storage) or bytes."""
    if isinstance(source, (bytes, bytearray, memoryview, np.ndarray)):
        data = source.tobytes() if isinstance(source, np.ndarray) else bytes(source)
        return av.open(io.BytesIO(data), "r")
    from stoker.operators.readers import storage

    if storage.is_remote(source):
        return av.open(storage.open_binary(source), "r")
    return av.open(storage.local_path(source), "r")


def _fail(where: str, e: BaseException) -> OSError:
    why = str(e) or type(e).__name__
    return OSError(f"cannot read video {where}: {why}")


def probe(source, where: str) -> ClipInfo:
    """Demux ``source`` (no decoding) and list its video frames. Raises OSError naming ``where``."""
    av = require_av()
    try:
        with _open(av, source) as c:
            if not c.streams.video:
                raise OSError(f"cannot read video {where}: it has no video stream")
            s = c.streams.video[0]
            pts, key = [], []
            for p in c.demux(s):
                t = p.pts if p.pts is not None else p.dts
                if t is None or p.size == 0:  # (the demuxer's closing empty packet)
                    continue
                pts.append(t)
                key.append(p.is_keyframe)
            cc = s.codec_context
            info_args = (s.time_base or Fraction(1, 1), cc.width, cc.height, cc.name, s.average_rate)
    except OSError as e:
        if str(e).startswith("cannot read video"):
            raise
        raise _fail(where, e) from None
    except (av.FFmpegError, ValueError, EOFError) as e:
        raise _fail(where, e) from None
    if not pts:
        raise OSError(f"cannot read video {where}: its video stream holds no frames")
    order = np.argsort(np.asarray(pts, np.int64), kind="stable")
    return ClipInfo(np.asarray(pts, np.int64)[order], np.asarray(key, bool)[order], *info_args)


def _rgb_flags(av):
    """swscale flags of DALI's CPU colour conversion (see the module docstring)."""
    i = av.video.reformatter.Interpolation
    return i.BILINEAR | i.ACCURATE_RND | i.FULL_CHR_H_INT | i.FULL_CHR_H_INP


def _to_array(frame, image_type, size: tuple[int, int] | None = None) -> np.ndarray:
    """One decoded frame as HWC uint8 in ``image_type`` (RGB, BGR, YCbCr or GRAY); with ``size``
    ``(height, width)`` (RGB and BGR only) resized by swscale's bilinear filter."""
    if image_type == types.YCbCr:
        return np.ascontiguousarray(frame.to_ndarray(format="yuv444p").transpose(1, 2, 0))
    if image_type == types.GRAY:
        return frame.to_ndarray(format="gray")[..., None]
    av = require_av()
    flags = _rgb_flags(av)
    if size is None:
        rgb = frame.to_ndarray(format="rgb24", interpolation=flags)
    else:
        # Colours first at full size (as the frames readers.video gives), then planar RGB is
        # resampled plane by plane: no trip back through YUV, so the resize sees DALI's colours.
        planar = frame.reformat(format="gbrp", interpolation=flags)
        scale = av.video.reformatter.Interpolation.BILINEAR | av.video.reformatter.Interpolation.ACCURATE_RND
        rgb = planar.reformat(size[1], size[0], "gbrp", interpolation=scale).to_ndarray()
    return np.ascontiguousarray(rgb[..., ::-1]) if image_type == types.BGR else rgb


class Decoder:
    """One open clip and its decoder: frames come out in presentation order from where the last
    call stopped (``pos``), so a caller that asks for frames after ``pos`` before the next key frame
    gets them without a seek. Not thread-safe: one user at a time (:class:`.decoder_pool.DecoderPool`).
    Raises OSError naming ``where``; ``close`` releases the container."""

    def __init__(self, source, info: ClipInfo, where: str):
        self.source, self.info, self.where = source, info, where
        self._keys = np.flatnonzero(info.key)
        self._index_of = {int(t): k for k, t in enumerate(info.pts)}
        self._c = self._frames = None
        self.pos = -1  # index of the last frame decoded (-1: none since the last seek)

    def key_before(self, k: int) -> int:
        """The last key frame at or before frame ``k`` (0 when none is marked)."""
        before = self._keys[: np.searchsorted(self._keys, k, side="right")]
        return int(before[-1]) if before.size else 0

    def continues_to(self, k: int) -> bool:
        """Whether decoding on from ``pos`` reaches frame ``k`` with no more work than a seek: ``k``
        is ahead and the key frame a seek would go to is not past the next frame."""
        return self._frames is not None and k > self.pos and self.key_before(k) <= self.pos + 1

    def take(self, want: list[int], image_type=types.RGB, size=None) -> dict[int, np.ndarray]:
        """Frames ``want`` (sorted, unique, in ``[0, info.frames)``): {index: HWC uint8}. Frames between
        are decoded (they are references) but not converted."""
        av = require_av()
        out: dict[int, np.ndarray] = {}
        wanted = set(want)
        try:
            for w in want:
                if w in out:
                    continue
                if not self.continues_to(w):
                    self._seek(av, w)
                for frame in self._frames:
                    k = self._index_of.get(frame.pts if frame.pts is not None else -1)
                    if k is None:
                        continue
                    self.pos = k
                    if k in wanted and k not in out:
                        out[k] = _to_array(frame, image_type, size)
                    if k >= w:
                        break
                if w not in out:
                    break
        except (av.FFmpegError, EOFError) as e:
            self.close()
            raise _fail(self.where, e) from None
        missing = [k for k in want if k not in out]
        if missing:
            self.close()
            raise OSError(f"cannot read video {self.where}: frame {missing[0]} of {self.info.frames} could not be "
                          "decoded (the file may be truncated or corrupt)")
        return out

    def _seek(self, av, k: int) -> None:
        if self._c is None:
            self._c = _open(av, self.source)
        s = self._c.streams.video[0]
        self._c.seek(int(self.info.pts[self.key_before(k)]), stream=s, backward=True, any_frame=False)
        self._frames = self._c.decode(s)
        self.pos = -1

    def close(self) -> None:
        if self._c is not None:
            self._c.close()
        self._c = self._frames = None
        self.pos = -1


def decode_frames(source, info: ClipInfo, wanted, where: str, image_type=types.RGB, size=None,
                  decoder: Decoder | None = None) -> dict[int, np.ndarray]:
    """Decode frames ``wanted`` (indices in ``[0, info.frames)``) of ``source``: {index: HWC uint8},
    resized to ``size`` ``(height, width)`` when given (see :func:`_to_array`).

    For each run of wanted frames the decoder seeks to the last key frame at or before the run's
    first frame, unless decoding on from where it is gets there with no more work. ``decoder``: an
    open :class:`Decoder` of this clip to continue from (left open for the caller); without it one
    is opened and closed here. Raises OSError naming ``where`` when the clip cannot be decoded or a
    frame never comes out.
    """
    want = sorted({int(k) for k in wanted})
    if not want:
        return {}
    if want[0] < 0 or want[-1] >= info.frames:
        raise ValueError(f"video {where}: frames {want[0]}..{want[-1]} asked of a clip of {info.frames} frames")
    if decoder is not None:
        return decoder.take(want, image_type, size)
    own = Decoder(source, info, where)
    try:
        return own.take(want, image_type, size)
    finally:
        own.close()


class FrameStream:
    """Decodes a clip's frames in presentation order, one run after the other (``read``), with one
    open container and decoder: what streaming a long clip needs, where :func:`decode_frames` would
    seek to the key frame before every run. A run that does not start where the last one stopped
    seeks as :func:`decode_frames` does. Raises OSError naming ``where``; ``close`` releases the
    container (a stream left open closes when collected)."""

    def __init__(self, source, info: ClipInfo, where: str, image_type=types.RGB):
        self.source, self.info, self.where, self.image_type = source, info, where, image_type
        self._index_of = {int(t): k for k, t in enumerate(info.pts)}
        self._c = self._frames = None
        self.pos = -1  # the next frame ``read`` gives without seeking (-1: none yet)

    def read(self, start: int, stop: int) -> list[np.ndarray]:
        """Frames ``start`` to ``stop - 1`` (HWC uint8 each)."""
        av = require_av()
        if not 0 <= start < stop <= self.info.frames:
            raise ValueError(f"video {self.where}: frames {start}..{stop - 1} asked of a clip of "
                             f"{self.info.frames} frames")
        out: dict[int, np.ndarray] = {}
        try:
            if self._frames is None or start != self.pos:
                self._seek(av, start)
            for frame in self._frames:
                k = self._index_of.get(frame.pts if frame.pts is not None else -1)
                if k is None or k < start:
                    continue
                if k < stop:
                    out[k] = _to_array(frame, self.image_type)
                if k >= stop - 1:
                    break
        except (av.FFmpegError, EOFError) as e:
            self.close()
            raise _fail(self.where, e) from None
        missing = [k for k in range(start, stop) if k not in out]
        if missing:
            self.close()
            raise OSError(f"cannot read video {self.where}: frame {missing[0]} of {self.info.frames} could not be "
                          "decoded (the file may be truncated or corrupt)")
        self.pos = stop
        return [out[k] for k in range(start, stop)]

    def _seek(self, av, start: int) -> None:
        if self._c is None:
            self._c = _open(av, self.source)
        s = self._c.streams.video[0]
        before = np.flatnonzero(self.info.key[: start + 1])
        key = int(before[-1]) if before.size else 0
        self._c.seek(int(self.info.pts[key]), stream=s, backward=True, any_frame=False)
        self._frames = self._c.decode(s)

    def close(self) -> None:
        if self._c is not None:
            self._c.close()
        self._c = self._frames = None
        self.pos = -1


def stack(frames: list[np.ndarray], where: str) -> np.ndarray:
    """Frames of one clip as FHWC; frames of different sizes are a sample error."""
    first = frames[0].shape
    for f in frames[1:]:
        if f.shape != first:
            raise ValueError(f"video {where}: frame sizes change within the clip ({first[1]}x{first[0]} and "
                             f"{f.shape[1]}x{f.shape[0]}); stoker needs one size per sequence")
    return np.stack(frames)
