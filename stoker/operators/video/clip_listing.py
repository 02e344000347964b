"""Listing the clips of ``readers.video``: which files, their labels, frame ranges and windows.

Three ways to name the clips, as DALI's video reader takes them (one at a time):

* ``filenames`` (+ ``labels``; an empty list numbers the clips 0, 1, ...);
* ``file_root``: every file in each sub-folder is a clip of that folder's class
  (label = rank of the folder's sorted name);
* ``file_list``: lines ``path label [start [end]]``; start/end are seconds
  (frames with ``file_list_frame_num``), negative ones count from the clip's
  end, and restrict the windows to that range.

Each clip is demuxed once (:func:`stoker.operators.video.pyav.probe`, on a few
threads) for its frame count and time base. A clip that cannot be demuxed is
not a listing error: it stays in the list as one sample that fails when read,
so ``on_error`` applies to it as to a corrupt image.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from stoker.operators.readers import storage
from stoker.operators.readers._listing import ListingError, list_class_folders
from stoker.operators.video import pyav

_PROBE_THREADS = 8  # demuxing is mostly reading: a few threads hide the I/O of many small clips


@dataclass
class Clip:
    """One listed clip: its name as samples report it, where to open it, its label, the frame range
    ``[start, end)`` its windows come from, and its probe (or why it could not be probed)."""

    name: str
    path: str
    label: int | None
    range_spec: tuple | None = None  # (start, end) as the file list gives them, or None
    info: pyav.ClipInfo | None = None
    broken: str | None = None
    start: int = 0
    end: int = 0


def _parse_file_list(file_list: str) -> list[tuple[str, int, tuple | None]]:
    try:
        if storage.is_remote(file_list):
            text = storage.read_bytes(file_list).decode("utf-8")
        else:
            with open(storage.local_path(file_list), encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ListingError("file_list", f"cannot read {file_list!r}: {e}") from None
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            if not 2 <= len(parts) <= 4:
                raise ValueError
            label = int(parts[1])
            span = tuple(float(p) for p in parts[2:]) or None
        except ValueError:
            raise ListingError("file_list", f"{file_list}:{lineno}: expected 'path label [start [end]]', "
                               f"got {line!r}") from None
        out.append((parts[0], label, span))
    if not out:
        raise ListingError("file_list", f"{file_list!r} lists no files")
    return out


def _list_file_list(file_list: str) -> list[Clip]:
    base = storage.parent(file_list)
    clips = []
    for path, label, span in _parse_file_list(file_list):
        full = path
        if not os.path.isabs(path) and "://" not in path:
            # Relative to the list's folder (as stoker's file reader), else to the working folder
            # (as DALI's video reader, for lists written that way).
            cand = storage.join(base, path)
            full = cand if storage.is_remote(cand) or os.path.exists(cand) or not os.path.exists(path) else path
        clips.append(Clip(path, full, label, span))
    return clips


def list_clips(a: dict) -> list[Clip]:
    """The clips that ``a`` (the reader's arguments) names, unprobed."""
    given = [k for k in ("filenames", "file_root", "file_list") if a.get(k)]
    if len(given) != 1:
        raise ListingError("filenames", "give exactly one of filenames, file_root or file_list"
                           + (f" (got {', '.join(given)})" if given else ""))
    if a.get("labels") is not None and given[0] != "filenames":
        raise ListingError("labels", "is used only together with filenames")
    if given[0] == "filenames":
        names = list(a["filenames"])
        labels = a.get("labels")
        if labels is not None and len(labels) == 0:
            labels = list(range(len(names)))
        if labels is not None and len(labels) != len(names):
            raise ListingError("labels", f"{len(labels)} labels for {len(names)} filenames")
        return [Clip(n, n, None if labels is None else int(labels[k])) for k, n in enumerate(names)]
    if given[0] == "file_root":
        root = a["file_root"]
        paths, labels, broken = list_class_folders(root, ["*"], None, True)
        clips = [Clip(p, storage.join(root, p), lab) for p, lab in zip(paths, labels)]
        for k, why in broken.items():
            clips[k].broken = why
        return clips
    return _list_file_list(a["file_list"])


def _frame_range(clip: Clip, a: dict) -> tuple[int, int]:
    """``[start, end)`` of the frames the clip's windows may use."""
    n = clip.info.frames
    if clip.range_spec is None:
        return 0, n
    start = clip.range_spec[0]
    end = clip.range_spec[1] if len(clip.range_spec) > 1 else 0.0
    if not a["file_list_frame_num"]:
        s, e = start * clip.info.fps(), end * clip.info.fps()
        # (a small tolerance: 0.4 s at 25 fps is 10.000000000000002 frames, not 11)
        if a["file_list_include_preceding_frame"]:
            start, end = math.floor(s + 1e-6), math.ceil(e - 1e-6)
        else:
            start, end = math.ceil(s - 1e-6), math.floor(e + 1e-6)
    else:
        start, end = math.ceil(start), math.floor(end)
    start = start + n if start < 0 else start
    end = end + n if end <= 0 else end  # 0 (or absent): up to the clip's end
    return max(0, min(int(start), n)), max(0, min(int(end), n))


def probe_clips(clips: list[Clip], a: dict) -> None:
    """Probe every clip (in place): its info and frame range, or why it cannot be read. A variable
    frame rate clip is a listing error unless ``skip_vfr_check``."""

    def one(clip: Clip):
        if clip.broken is not None:
            return
        try:
            clip.info = pyav.probe(clip.path, repr(clip.path))
        except (OSError, ValueError) as e:
            clip.broken = str(e)

    with ThreadPoolExecutor(min(_PROBE_THREADS, max(1, len(clips))), thread_name_prefix="stoker-video") as pool:
        list(pool.map(one, clips))
    for clip in clips:
        if clip.info is None:
            continue
        if not a["skip_vfr_check"] and clip.info.is_vfr():
            d = np.diff(clip.info.pts) * float(clip.info.time_base)
            raise ListingError("skip_vfr_check", f"{clip.path!r} has a variable frame rate (frames {d.min():.4f} "
                               f"to {d.max():.4f} s apart); frame numbers and timestamps of such a clip do not "
                               "follow one rate. Pass skip_vfr_check=True to read it anyway")
        clip.start, clip.end = _frame_range(clip, a)


def windows(clips: list[Clip], length: int, stride: int, step: int, pad: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(clip index, first frame)`` of every sample, clip by clip in listing order; first frame -1
    is a clip that cannot be read (one sample that fails when loaded).

    A window fits when ``first + length * stride <= end`` (DALI's rule: the frame a further step of
    ``stride`` would take must be in range too), or with ``pad`` when ``first < end``."""
    span = length * stride
    which, first = [], []
    for k, clip in enumerate(clips):
        if clip.info is None:
            which.append(np.asarray([k]))
            first.append(np.asarray([-1]))
            continue
        last = clip.end if pad else clip.end - span + 1
        starts = np.arange(clip.start, max(last, clip.start), step, dtype=np.int64)
        which.append(np.full(starts.size, k, np.int64))
        first.append(starts)
    if not which:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(which).astype(np.int64), np.concatenate(first).astype(np.int64)
