"""The decode helpers' answer bookkeeping (``mixed.helper_processes._Helper``): the GPU stage
waiting for one batch's answers while the CPU stage sends the next batches to the same helper.
The helper here is a stand-in (no process): each job message is answered, in order, on a queue."""

import collections
import queue
import sys
import threading
from types import SimpleNamespace

from stoker.operators.decoders.mixed.helper_processes import Pending, _Helper


class _Messages:
    """send_tagged / recv_msg of stoker.workers.messages over an in-process queue of answers."""

    def __init__(self):
        self.answers: queue.SimpleQueue = queue.SimpleQueue()

    def send_tagged(self, sock, tag, msg, fds=()):
        if tag == b"J":
            self.answers.put(([], 0.0, 0.0))  # (failed positions, started, finished)

    def recv_msg(self, sock):
        return self.answers.get(timeout=10)

    def ready_came(self, sock, wait, why):
        return True


def _helper():
    h = _Helper.__new__(_Helper)
    h.proc, h.sock = None, None
    h.send_lock, h.recv_lock = threading.Lock(), threading.Lock()
    h.mapped, h.waiting, h.messages, h.ready = {}, collections.deque(), _Messages(), True
    return h


def test_waiting_for_a_batch_while_later_batches_are_sent():
    helper = _helper()
    slot = SimpleNamespace(key=1, capacity=1, fd=-1)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (thread switches inside the wait's loop, as under load)
    try:
        backlog = []
        for _ in range(2000):  # a long queue of answers not yet read, for the wait to go through
            p = Pending(None, [(helper, [0])])
            helper.send(slot, [()], p, 0)
            backlog.append(p)
        errors, stop = [], threading.Event()

        def keep_sending():
            try:
                while not stop.is_set():
                    p = Pending(None, [(helper, [0])])
                    helper.send(slot, [()], p, 0)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        sender = threading.Thread(target=keep_sending)
        sender.start()
        try:
            for p in backlog:
                assert p.failed() == []
                assert 0 in p.answers
        finally:
            stop.set()
            sender.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors


def test_a_part_never_sent_is_not_waited_for():
    helper = _helper()
    p = Pending(None, [(helper, [0])])  # the send failed before the jobs went out
    assert p.failed() == []  # returns at once: nothing to read
