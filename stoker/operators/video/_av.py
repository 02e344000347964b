"""Everything stoker asks of PyAV (FFmpeg): probe a clip, check its frame rate, decode chosen frames.

Frames are numbered in presentation order from 0, as DALI numbers them: frame
``k`` is the packet with the ``k``-th smallest timestamp. :func:`probe` lists
those timestamps and which frames are key frames by demuxing only (no decode),
so that :func:`decode_frames` can seek to the key frame before each run of
wanted frames and decode from there, never the whole clip.

Colors: frames are converted to RGB by swscale after upsampling the chroma to
4:4:4 (two steps). A direct 4:2:0 to RGB conversion in swscale takes each
chroma sample for a 2x2 block of pixels, which differs from DALI's CPU video
decoder by up to ~80 levels at sharp color edges; through 4:4:4 it agrees
within 2 levels (tests/operators/video/test_video_decoder.py).

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
    from stoker.operators.readers import _storage

    if _storage.is_remote(source):
        return av.open(_storage.open_binary(source), "r")
    return av.open(_storage.local_path(source), "r")


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


def _to_array(frame, image_type) -> np.ndarray:
    """One decoded frame as HWC uint8 in ``image_type`` (RGB, BGR, YCbCr or GRAY)."""
    name = frame.format.name
    if image_type == types.YCbCr:
        return np.ascontiguousarray(frame.to_ndarray(format="yuv444p").transpose(1, 2, 0))
    if image_type == types.GRAY:
        return frame.to_ndarray(format="gray")[..., None]
    if name.startswith(("yuv", "nv")) and "444" not in name:
        # Chroma up to 4:4:4 first (see the module docstring); yuvj formats stay full range.
        frame = frame.reformat(format="yuvj444p" if name.startswith("yuvj") else "yuv444p")
    rgb = frame.to_ndarray(format="rgb24")
    return np.ascontiguousarray(rgb[..., ::-1]) if image_type == types.BGR else rgb


def decode_frames(source, info: ClipInfo, wanted, where: str, image_type=types.RGB) -> dict[int, np.ndarray]:
    """Decode frames ``wanted`` (indices in ``[0, info.frames)``) of ``source``: {index: HWC uint8}.

    For each run of wanted frames the decoder seeks to the last key frame at or before the run's
    first frame, unless the frames it decodes from where it is already get there first; frames
    before a wanted one are decoded (they are references) but not converted. Raises OSError
    naming ``where`` when the clip cannot be decoded or a frame never comes out.
    """
    av = require_av()
    want = sorted({int(k) for k in wanted})
    if not want:
        return {}
    if want[0] < 0 or want[-1] >= info.frames:
        raise ValueError(f"video {where}: frames {want[0]}..{want[-1]} asked of a clip of {info.frames} frames")
    keys = np.flatnonzero(info.key)
    index_of = {int(t): k for k, t in enumerate(info.pts)}
    out: dict[int, np.ndarray] = {}
    try:
        with _open(av, source) as c:
            s = c.streams.video[0]
            pos = -1  # index of the last frame decoded
            frames = None
            for w in want:
                if w in out:
                    continue
                before = keys[keys <= w]
                key = int(before[-1]) if before.size else 0
                if frames is None or key > pos or w <= pos:
                    # Seek when the key frame is ahead of us (cheaper than decoding the gap) or
                    # the frame is behind (duplicates aside, the sorted list never goes back).
                    c.seek(int(info.pts[key]), stream=s, backward=True, any_frame=False)
                    frames = c.decode(s)
                    pos = -1
                for frame in frames:
                    k = index_of.get(frame.pts if frame.pts is not None else -1)
                    if k is None:
                        continue
                    pos = k
                    if k in want and k not in out:
                        out[k] = _to_array(frame, image_type)
                    if k >= w:
                        break
                if w not in out:
                    break
    except (av.FFmpegError, EOFError) as e:
        raise _fail(where, e) from None
    missing = [k for k in want if k not in out]
    if missing:
        raise OSError(f"cannot read video {where}: frame {missing[0]} of {info.frames} could not be decoded "
                      "(the file may be truncated or corrupt)")
    return out


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
