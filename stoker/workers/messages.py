"""The messages between the pipeline's process and its helpers: pickled objects, framed by length.

A message is the object pickled (highest protocol) after its byte count as a little-endian
uint64 (:data:`HEADER`). Where a message may carry file descriptors (a shared memory slot
handed over), one tag byte goes first, sent with ``socket.send_fds`` when it carries them; the
receiver reads the tag with ``socket.recv_fds`` and then the framed object (see
``stoker/workers/README.md`` for each helper's tags).

Why pickles on a socket pair: both ends are this program (the pipeline and the children it
started, sharing the socket pair by inheritance, never by a name another process could
connect to), so pickle's generality costs no trust; the bulk data goes through shared memory
(:mod:`.slots`), the messages only say where it is.

This module needs the standard library only: the helpers that must start without stoker
(the reader's I/O helper, the decode helpers) load it by path.
"""

from __future__ import annotations

import pickle
import socket
import struct

HEADER = struct.Struct("<Q")


def send_msg(sock: socket.socket, obj) -> None:
    """Send ``obj`` pickled, after its length (read back whole by :func:`recv_msg`)."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock`` (EOFError when the peer closed it first). Reads at most
    1 MiB a call, so a large message is not one huge buffer allocation per ``recv``."""
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            # (the text predates the other helpers: logs and reports may match it)
            raise EOFError("the reader's I/O process closed the connection")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def recv_msg(sock: socket.socket):
    """The next object :func:`send_msg` sent on ``sock`` (EOFError when the peer closed it)."""
    (n,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    return pickle.loads(_recv_exact(sock, n))


def send_tagged(sock: socket.socket, tag: bytes, obj, fds: list | tuple = ()) -> None:
    """Send the one-byte ``tag`` (carrying the descriptors ``fds`` when there are any), then
    ``obj`` as :func:`send_msg` does. Without descriptors the tag is a plain byte on the stream,
    which the receiver's :func:`recv_tagged` reads the same way."""
    if fds:
        socket.send_fds(sock, [tag], list(fds))
    else:
        sock.sendall(tag)
    send_msg(sock, obj)


def recv_tagged(sock: socket.socket, gone: str = "the helper process exited"):
    """(tag, received descriptors, object) of a message :func:`send_tagged` sent (at most one
    descriptor). EOFError(``gone``) when the peer closed the socket before the tag. The caller
    owns the descriptors: close them (:func:`stoker.workers.slots.map_received` does)."""
    msg, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if not msg:
        raise EOFError(gone)
    return msg, fds, recv_msg(sock)


# --- the ready byte ----------------------------------------------------------------------------
# A helper that takes long to start (importing NumPy, torch, a JPEG library) sends READY, one
# byte, once it can take work; until then the pipeline does that work itself, so a helper's
# start costs the first batches nothing. The byte comes before any framed message.

READY = b"!"


def send_ready(sock: socket.socket) -> None:
    """In the helper: say it is ready for work (see :func:`ready_came`)."""
    sock.sendall(READY)


def ready_came(sock: socket.socket, wait: bool = False, gone: str = "the helper process exited before it was ready"):
    """Whether the helper's ready byte has come (it is read here: call until True, then no more).
    Never waits unless ``wait``. EOFError(``gone``) when the helper closed the socket first."""
    import select

    if not wait and not select.select([sock], [], [], 0)[0]:
        return False
    if sock.recv(1) != READY:
        raise EOFError(gone)
    return True
