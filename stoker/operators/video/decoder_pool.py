"""Open decoders kept between the samples of ``readers.video``, so that windows that follow each
other in a clip are decoded straight through instead of each seeking back to its key frame.

A window starting at frame ``s`` takes an idle decoder of its clip that stopped before ``s`` with
no key frame between (:meth:`.pyav.Decoder.continues_to`): decoding on costs less than a seek,
which would decode from that key frame again. Otherwise it takes a fresh decoder. Windows read on
several threads each hold their decoder alone; one is returned to the pool after the window, and
the least recently used idle decoders are closed past ``max_idle`` (each holds its reference
frames). The frames do not depend on which decoder served them: decoding on and seeking give the
same frames (tests/operators/video/test_video_decoder.py), so outputs stay the same for any
thread count and order.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from stoker.operators.video.pyav import ClipInfo, Decoder


class DecoderPool:
    """Idle :class:`Decoder` objects by clip; ``acquire`` / ``release`` around each window."""

    def __init__(self, max_idle: int = 8):
        self.max_idle = max_idle
        self._idle: OrderedDict[int, tuple[str, Decoder]] = OrderedDict()  # id -> (clip key, decoder), LRU first
        self._lock = threading.Lock()

    def acquire(self, key: str, source, info: ClipInfo, first: int, where: str) -> Decoder:
        """A decoder of clip ``key`` for a window whose first frame is ``first``: an idle one that
        reaches it without seeking (the closest behind it), else an idle one of the clip that will
        seek (its container stays open), else a new one."""
        with self._lock:
            best = any_of_clip = None
            for ident, (k, dec) in self._idle.items():
                if k != key:
                    continue
                any_of_clip = (ident, dec)
                if dec.continues_to(first) and (best is None or dec.pos > best[1].pos):
                    best = (ident, dec)
            best = best or any_of_clip
            if best is not None:
                del self._idle[best[0]]
                return best[1]
        return Decoder(source, info, where)

    def release(self, key: str, decoder: Decoder) -> None:
        """Give ``decoder`` back after a window read without error (a failed one is closed instead)."""
        with self._lock:
            self._idle[id(decoder)] = (key, decoder)
            while len(self._idle) > self.max_idle:
                _, (_, old) = self._idle.popitem(last=False)
                old.close()

    def close(self) -> None:
        """Close every idle decoder."""
        with self._lock:
            idle, self._idle = list(self._idle.values()), OrderedDict()
        for _, dec in idle:
            dec.close()
