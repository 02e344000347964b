"""Fused CPU chains run in worker processes: the CPU stage on many cores, past one interpreter.

Why: a fused chain (decode -> resize -> normalize per sample, see :mod:`stoker.pipeline.fusion`)
spends most of its time in C code that releases the GIL, but the Python between those calls adds
up to about 1 ms of GIL per image. On a 16-core host the CPU training pipeline therefore stopped
at a few busy cores whatever its thread count (benchmarks/results_log.md), where torchvision's
DataLoader runs 16 interpreters. With ``STOKER_CPU_PROCESSES=N`` a fused chain's samples are
computed by N worker processes instead of the thread pool.

Data path, per batch: the chain's input samples (encoded files, usually) are copied into a
shared memory slot that every worker maps; each worker gets the positions, per-sample arguments
and sample contexts (index, iteration, seed, source) of its share, runs the chain with the same
operator instances (pickled to it once) and writes the last operator's outputs into a shared
memory slot of its own; the pipeline wraps them as NumPy views, with no copy. The results are
bit-identical to the in-process chain: same operators, same arguments, same counter-based random
streams.

Limits: chains whose intermediate outputs nobody else reads (they are not kept), a single batch
input and a single output at the end. When any sample fails, the batch is computed again in the
pipeline's process, so errors, skips and reports are exactly those of the in-process path.
"""

from __future__ import annotations

import logging
import pickle
import socket
import sys
import threading
import weakref

import numpy as np

from stoker import settings
from stoker.workers.messages import ready_came, recv_tagged, send_ready, send_tagged
from stoker.workers.processes import start_helper, stop_helper
from stoker.workers.slots import SharedFile, Slots, map_received

_log = logging.getLogger("stoker")

# --- the worker process ------------------------------------------------------------------------


def _run_chain(chain: list, links: list, x, member_args: list, contexts: list, reduced=None, padded=None):
    from stoker.operators.base import SampleContext
    from stoker.pipeline import padded_decode, reduced_decode

    out, start, pair = None, 0, None
    if reduced is not None:  # fast mode: the decoder and the resize as one step (or None: as usual)
        pair = reduced_decode.run_pair(reduced, chain[0], chain[1], x[0], member_args[0],
                                       SampleContext(*contexts[0]), member_args[1])
    elif padded is not None:  # the same, exact (stoker.pipeline.padded_decode)
        pair = padded_decode.run_pair(padded, chain[0], chain[1], x[0], member_args[0],
                                      SampleContext(*contexts[0]), member_args[1])
    if pair is not None:
        out, start = (pair[1],), 2
        if len(links) > 1:
            x = (out[links[1]],)
    for j, inst in enumerate(chain[start:], start):
        sctx = SampleContext(*contexts[j])
        out = inst.run_sample(x, member_args[j], sctx)
        out = out if isinstance(out, tuple) else (out,)
        if j < len(links):
            x = (out[links[j]],)
    return out[0]


def _serve(sock: socket.socket) -> None:
    try:
        _serve_batches(sock)
    except (BrokenPipeError, ConnectionError, EOFError):
        pass  # the pipeline closed (or exited) while a batch was under way


def _serve_batches(sock: socket.socket) -> None:
    try:  # one sample at a time per worker: the library thread pools would only compete
        import cv2

        cv2.setNumThreads(1)
    except ImportError:
        pass
    from stoker.operators.image import resample_torch

    resample_torch.available()  # imports torch now (when installed) rather than in the first batch
    send_ready(sock)  # until then the pipeline computes its batches itself
    chains: dict = {}
    mapped: dict = {}  # slot key -> read-only mapping of the pipeline's input slot
    inputs: dict = {}  # slot key -> uint8 view of it
    slots = Slots()
    while True:
        try:
            _, fds, (kind, *payload) = recv_tagged(sock)
        except (EOFError, ConnectionError):
            return
        if kind == "chain":
            cid, blob = payload
            chains[cid] = pickle.loads(blob)
            continue
        if kind == "map":
            key, capacity = payload
            map_received(mapped, key, fds, capacity)
            inputs[key] = np.frombuffer(mapped[key], np.uint8)
            continue
        cid, key, jobs, freed = payload
        slots.release(freed)
        chain, links, reduced, padded = chains[cid]
        view = inputs[key]
        outs, failed = [], False
        for off, nbytes, shape, dtype, member_args, contexts in jobs:
            x = (view[off:off + nbytes].view(np.dtype(dtype)).reshape(shape),)
            try:
                out = np.ascontiguousarray(_run_chain(chain, links, x, member_args, contexts, reduced, padded))
            except Exception:  # noqa: BLE001 - the pipeline recomputes the batch and reports it
                failed = True
                break
            outs.append(out)
        if failed:
            send_tagged(sock, b"N", None)
            continue
        sizes = [o.nbytes for o in outs]
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64).tolist() if outs else []
        k, fd, capacity, mm = slots.take(max(1, sum(sizes)))
        dst = np.frombuffer(mm, np.uint8)
        for o, at in zip(outs, offsets):
            dst[at:at + o.nbytes] = o.reshape(-1).view(np.uint8)
        del dst
        placed = [(at, o.shape, o.dtype.str) for o, at in zip(outs, offsets)]
        send_tagged(sock, b"F" if fd >= 0 else b"N", (k, capacity, placed), [fd] if fd >= 0 else ())


# --- the pipeline side -------------------------------------------------------------------------

# One thread per native pool in a worker: the workers are the parallelism (one per core), and
# OpenMP, OpenBLAS, MKL and OpenCV would each start a thread per core in every worker
# otherwise (8+ threads a worker on 8+ cores, competing for the cores the other workers use).
# torch's resize kernel follows OMP_NUM_THREADS, as in torch's own DataLoader workers.
_SINGLE_THREADED = {name: "1" for name in (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS", "OPENCV_FOR_THREADS_NUM")}


class _Worker:
    def __init__(self):
        # Started isolated (start_helper): stoker from this process's copy, never from the
        # current directory or a PYTHONPATH set later.
        self.proc, self.sock = start_helper(["-m", "stoker.pipeline.chain_processes"],
                                            env={**settings.child_environ(), **_SINGLE_THREADED})
        self.chains: set = set()
        self.inputs: dict = {}  # input slot key -> capacity the worker has mapped
        self.maps: dict = {}  # worker slot id -> our read-only mapping
        self.freed: list = []
        self.freed_lock = threading.Lock()
        self.ready = False

    def is_ready(self) -> bool:
        """Whether the worker has started (its ready byte has come); never waits."""
        if not self.ready and ready_came(self.sock, gone="a chain worker process exited before it was ready"):
            self.ready = True
        return self.ready

    def _free(self, k: int) -> None:
        with self.freed_lock:
            self.freed.append(k)

    def close(self) -> None:
        if not self.ready and self.proc.poll() is None:
            # Still importing stoker and torch (about 2 s): it holds nothing yet, and waiting
            # for it would only delay the pipeline's close (and the program's exit).
            self.proc.kill()
        stop_helper(self.proc, self.sock)


class ChainWorkers:
    """``processes`` worker processes running fused chains (see the module docstring)."""

    def __init__(self, processes: int):
        self.workers = [_Worker() for _ in range(processes)]
        self.lock = threading.Lock()  # one batch at a time: the CPU stage is one thread anyway
        self.chain_ids: dict = {}  # id(step) -> chain id, or None where the chain cannot go
        self.input_file = None  # the batch's samples, mapped by the workers (a SharedFile)
        self.input_capacity = 0
        self.input_key = 0
        self.batches_done = 0  # batches computed by the workers (for tests and benchmarks)

    def _chain_id(self, step, members, graph):
        key = id(step)
        if key not in self.chain_ids:
            cid = None
            blob = None
            if eligible(step, graph):
                try:
                    blob = pickle.dumps(([m[0] for m in members],
                                         [node.inputs[0].index for node in step.chain[1:]], step.reduced,
                                         step.padded))
                except Exception:  # noqa: BLE001 - an operator that does not pickle stays in process
                    blob = None
            if blob is not None:
                cid = len(self.chain_ids) + 1
                for w in self.workers:  # (a dead worker raises here: compute restarts them)
                    send_tagged(w.sock, b"C", ("chain", cid, blob))
            self.chain_ids[key] = cid
        return self.chain_ids[key]

    def _input_slot(self, nbytes: int):
        if nbytes > self.input_capacity:
            if self.input_file is not None:
                self.input_file.close()
            self.input_key += 1
            self.input_capacity = max(nbytes + nbytes // 4, 4 << 20)
            self.input_file = SharedFile(f"stoker-chain-in-{self.input_key}", self.input_capacity)
        return self.input_key, np.frombuffer(self.input_file.mm, np.uint8)

    def compute(self, step, samples: list, members: list, graph, sample_contexts) -> list | None:
        """The last member's output of every sample, or None when the chain cannot run here, a
        sample failed, or a worker died (the caller then computes the batch in process; the
        workers are started again for the next batch)."""
        with self.lock:
            try:
                return self._compute(step, samples, members, graph, sample_contexts)
            except (EOFError, OSError) as e:  # a worker crashed (e.g. killed): lose nothing, restart
                _log.warning("stoker: a CPU chain worker process failed (%s); restarting the workers", e)
                self._restart()
                return None

    def _restart(self) -> None:
        count = len(self.workers)
        for w in self.workers:
            w.proc.kill()
            w.close()
        self.workers = [_Worker() for _ in range(count)]
        self.chain_ids = {}  # chains are sent again to the new workers

    def ready(self) -> bool:
        """Whether every worker has started (imported stoker and torch). Until then the pipeline
        computes batches in its own process, so the workers cost the first batch nothing."""
        return all(w.is_ready() for w in self.workers)

    def _compute(self, step, samples: list, members: list, graph, sample_contexts) -> list | None:
        if not self.ready():
            return None
        cid = self._chain_id(step, members, graph)
        if cid is None:
            return None
        arrays = [np.ascontiguousarray(s) for s in samples]
        offsets = np.concatenate([[0], np.cumsum([a.nbytes for a in arrays])]).astype(np.int64).tolist()
        key, view = self._input_slot(offsets[-1])
        n, w = len(arrays), len(self.workers)
        shares = [list(range(k * n // w, (k + 1) * n // w)) for k in range(w)]
        # Each worker's share is packed and sent before the next one is packed, so the first
        # workers start while the pipeline still packs for the others.
        for worker, share in zip(self.workers, shares):
            jobs = []
            for i in share:
                a, off = arrays[i], offsets[i]
                view[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
                member_args = [inst.sample_args(arg_inputs, i) for inst, _, arg_inputs, _ in members]
                jobs.append((off, a.nbytes, a.shape, a.dtype.str, member_args, sample_contexts(i)))
            if worker.inputs.get(key) != self.input_capacity:
                send_tagged(worker.sock, b"M", ("map", key, self.input_capacity), [self.input_file.fd])
                worker.inputs = {key: self.input_capacity}
            with worker.freed_lock:
                freed, worker.freed = worker.freed, []
            send_tagged(worker.sock, b"R", ("run", cid, key, jobs, freed))
        del view
        results: list = [None] * n
        ok = True
        for worker, share in zip(self.workers, shares):
            _, fds, reply = recv_tagged(worker.sock, "a chain worker process exited")
            if reply is None:
                ok = False
                continue
            k, capacity, placed = reply
            if fds:
                map_received(worker.maps, k, fds, capacity)
            base = np.frombuffer(worker.maps[k], np.uint8)
            weakref.finalize(base, worker._free, k)
            for i, (at, shape, dtype) in zip(share, placed):
                size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                results[i] = base[at:at + size].view(np.dtype(dtype)).reshape(shape)
        self.batches_done += ok
        return results if ok else None

    def close(self) -> None:
        for w in self.workers:
            w.close()
        if self.input_file is not None:
            self.input_file.close()
            self.input_file = None


def eligible(step, graph) -> bool:
    """Whether ``step``'s chain can run in the workers: one batch input at its head, one output
    at its end, and no reader of its intermediate outputs other than the next member."""
    chain = step.chain
    if len(chain[0].inputs) != 1 or graph.instances[chain[-1].id].num_outputs != 1:
        return False
    inside = {node.id for node in chain}
    outputs = {(o.source.id, o.index) for o in graph.outputs}
    for node in graph.nodes:
        for j, x in enumerate([*node.inputs, *node.arg_inputs.values(), *node.control_inputs]):
            src = x.source.id
            if src in inside and src != chain[-1].id:
                nxt = chain[[n.id for n in chain].index(src) + 1]
                if node is not nxt or j >= len(node.inputs):
                    return False
    return not any(key[0] in inside and key[0] != chain[-1].id for key in outputs)


def intermediate_keys(step, graph) -> list:
    """The value keys of the chain's members before the last (dropped in process mode)."""
    return [(node.id, k) for node in step.chain[:-1] for k in range(graph.instances[node.id].num_outputs)]


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
