"""Operator fusion in the CPU stage: each sample goes through a chain of per-sample operators in
one go, on pool tasks that take the next sample until the batch is done.

Why it exists: unfused, the CPU stage runs one operator at a time over the whole batch (its
samples in chunks on the pool, then a wait). Each operator's tail (the last chunk running while
the other threads idle) and its per-batch Python (argument gathering, building the output batch)
serialize the pool. Fused, sample i goes decode -> resize -> crop_mirror_normalize inside one
task, so the threads only meet once per chain. On the 2-core box this raised the busy cores of the
training pipeline from 1.60-1.69 to 1.68-1.78, but images/s stayed level within noise there (each
operator got slower by about as much with both vCPUs busy; see benchmarks/results_log.md). With more
threads each barrier idles more of them. ``STOKER_FUSE=0`` turns it off (the executor then runs
every node on its own), for comparison or should a fused chain ever misbehave.

A chain is a run of CPU nodes c0, c1, ... cm (m >= 1) in the graph's topological order where:

* every member computes per sample: its ``run_cpu`` is ``Operator.run_cpu`` (or a wrapper whose
  class sets ``Operator.run_cpu_wraps_samples``: it only checks or adds argument inputs),
  ``parallel_samples`` is true, it is not a source, not in a conditional branch, and has no control inputs;
* c(j+1)'s only batch input is an output of c(j); its argument inputs come from nodes outside
  the chain that do not depend on it.

Intermediate outputs are all kept in the iteration's values, as unfused, so any other reader of
them (a branch, a pipeline output) sees the same batches.

Nodes that lie between chain members in topological order are either *hoisted* (they do not
depend on the chain: e.g. ``fn.random.coin_flip`` feeding ``mirror``; run before the chain) or
*deferred* (they read chain outputs; run after it). A hoisted node must be stateless, because a
sample failure makes the executor replay the unfused order, running it again (see below).

Results are bit-identical to the unfused executor: each operator gets the same SampleContext
(sample index, iteration, op_seed, source) and per-sample arguments. When a sample fails in some
member c(k), the samples after the failure would, unfused, run the later members at a shifted
index in a shorter batch; so the fused results of c(k+1).. are thrown away and the segment is
replayed in its original order from c(k) on: c(0..k-1) keep their fused outputs, c(k) its
outputs with the failed samples dropped (as ``Executor.drop_samples`` does), everything after runs
unfused. Under ``on_error="raise"``, or for an exception that is not a sample failure, c(k) is
run again unfused, which raises exactly as the unfused executor does.

With 8 or more pipeline threads (or ``STOKER_CPU_PROCESSES``), a chain whose intermediate
outputs nobody else reads runs in worker processes instead of the thread pool
(:mod:`stoker.pipeline.chain_processes`); its intermediate values are then not kept, in either
path, so that refilled batches concatenate the same keys.

With the setting ``reduced_size_decode`` (fast mode, off by default), a chain that starts with a
decoder read only by a resize runs those two as one step that decodes JPEGs at a reduced size
(:mod:`stoker.pipeline.reduced_decode`); the decoder's value is then not kept. A sample failure in
either of them drops the sample from both, keeping the fast results of the others.

Without fast mode, such a chain runs those two as one exact step instead
(:mod:`stoker.pipeline.padded_decode`): libjpeg-turbo decodes into the buffer the resize's Pillow
path reads, saving a copy of every decoded image; same pixels, the decoder's value is a view of that
buffer. A sample it does not take, or that fails, runs both members the usual way, so failures are
those of the usual path.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from stoker import settings
from stoker.errors import OperatorBugError, OperatorError, detached
from stoker.operators.base import SAMPLE_ERRORS, BatchContext, Operator, SampleContext
from stoker.pipeline import padded_decode, reduced_decode
from stoker.tensors import TensorListCPU


def enabled() -> bool:
    """Fusion is on unless STOKER_FUSE=0."""
    return settings.get().fuse


@dataclass
class FusedStep:
    """A chain and the segment of the topological order it spans."""

    chain: list  # OpNodes c0..cm
    segment: list  # every node from c0 to cm, in topological order
    hoisted: list = field(default_factory=list)  # run before the chain
    deferred: list = field(default_factory=list)  # run after the chain
    unread: list | None = None  # intermediate value keys nobody else reads (chain_processes)
    reduced: reduced_decode.ReducedDecode | None = None  # fast mode for chain[0:2] (reduced_decode)
    padded: padded_decode.PaddedDecode | None = None  # otherwise chain[0:2] as one exact step (padded_decode)

    def __repr__(self) -> str:
        return "Fused(" + " -> ".join(n.op_name for n in self.chain) + ")"


def per_sample(node, inst) -> bool:
    """True when ``node`` computes each sample on its own through run_sample."""
    if node.scope is not None or node.control_inputs or node.device != "cpu":
        return False
    if hasattr(inst, "advance") or not inst.parallel_samples or getattr(inst, "valid_mask", False):
        return False
    if not getattr(inst, "samples_independent", True):  # (this instance's arguments need the batch)
        return False
    for cls in type(inst).__mro__:
        if cls is Operator:
            return True
        if "run_batch" in cls.__dict__:  # computes whole batches (Operator.run_batch)
            return False
        # (the class's own flag: a subclass overriding a wrapper's run_cpu does not inherit it)
        if "run_cpu" in cls.__dict__ and not cls.__dict__.get("run_cpu_wraps_samples", False):
            return False
    return False


def _stateless(node, inst) -> bool:
    """Safe to run again with the same inputs (random generators draw from counter-based streams)."""
    if node.scope is not None or node.control_inputs or hasattr(inst, "advance"):
        return False
    return per_sample(node, inst) or type(inst).__module__.startswith("stoker.operators.random.")


def _sources(node) -> list:
    return [x.source for x in [*node.inputs, *node.arg_inputs.values(), *node.control_inputs]]


def plan(graph) -> list:
    """The CPU stage's steps: OpNodes run one by one and FusedSteps."""
    order = graph.cpu_nodes
    inst = graph.instances
    steps: list = []
    pos = 0
    while pos < len(order):
        step = _chain_from(order, pos, inst)
        if step is None:
            steps.append(order[pos])
            pos += 1
        else:
            step.reduced = reduced_decode.plan_for(step.chain, graph)
            if step.reduced is None:
                step.padded = padded_decode.plan_for(step.chain, graph)
            steps.append(step)
            pos += len(step.segment)
    return steps


def _chain_from(order: list, pos: int, inst: dict) -> FusedStep | None:
    head = order[pos]
    if not per_sample(head, inst[head.id]):
        return None
    chain, tainted = [head], {head.id}  # tainted: the chain and whatever reads it
    hoisted: list = []
    deferred: list = []
    best = None  # (chain, hoisted, deferred, end position) of the longest valid chain so far
    for k in range(pos + 1, len(order)):
        node = order[k]
        if node.scope is not None or node.op_name.startswith("_conditional."):
            break  # a branch runs on a sub-batch: its nodes are not members of an outer chain
        srcs = _sources(node)
        link = len(node.inputs) == 1 and node.inputs[0].source is chain[-1]
        args_ok = all(x.source.id not in tainted for x in node.arg_inputs.values())
        if link and args_ok and per_sample(node, inst[node.id]):
            chain.append(node)
            tainted.add(node.id)
            best = (list(chain), list(hoisted), list(deferred), k)
            continue
        if any(s.id in tainted for s in srcs):
            tainted.add(node.id)
            deferred.append(node)
        elif _stateless(node, inst[node.id]):
            hoisted.append(node)
        else:
            break
    if best is None:
        return None
    chain, hoisted, deferred, end = best
    return FusedStep(chain, order[pos:end + 1], hoisted, deferred)


def run_steps(ex, steps: list, it) -> None:
    """Run the CPU stage's ``steps`` for iteration ``it`` on executor ``ex``."""
    for step in steps:
        if isinstance(step, FusedStep):
            run_fused(ex, step, it)
        else:
            ex.run_node(step, it, gpu=False)


def _key(x) -> tuple:
    return (x.source.id, x.index)


class _Stub:
    """Stands in for a batch when asking run_cpu for the per-sample arguments (layout, length)."""

    def __init__(self, layout: str, n: int):
        self._layout, self._n = layout, n

    def layout(self) -> str:
        return self._layout

    def __len__(self) -> int:
        return self._n


def _prepare(ex, step: FusedStep, it):
    """Per member: its instance, BatchContext, per-sample arguments and output layouts."""
    head = step.chain[0]
    inputs = [it.values[_key(x)] for x in head.inputs]
    sources = inputs[0].source_info() if inputs and hasattr(inputs[0], "source_info") else []
    n = len(inputs[0]) if inputs else it.batch_size
    layouts = [t.layout() for t in inputs]
    members = []
    for node in step.chain:
        inst = ex.graph.instances[node.id]
        ctx = BatchContext(n, it.index, pool=ex.pool, sources=sources,
                           device_id=ex.gpu.device_id if ex.gpu else None)
        ctx.on_error = ex.on_error
        ctx.index_offset = it.offset
        arg_inputs = {k: it.values[_key(x)].arg_samples() for k, x in node.arg_inputs.items()}
        for k, v in arg_inputs.items():
            if len(v) != n:
                raise OperatorError(f"argument '{k}' has {len(v)} samples but the batch has {n}",
                                    operator=inst.instance_name, origin=node.origin)
        probe = BatchContext(n, it.index, fuse_probe={})
        inst.run_cpu(probe, [_Stub(lay, n) for lay in layouts] or [], arg_inputs)
        out_layouts = inst.output_layouts(layouts)
        members.append((inst, ctx, probe.fuse_probe["arg_inputs"], out_layouts))
        if node is not step.chain[-1]:
            nxt = step.chain[step.chain.index(node) + 1]
            layouts = [out_layouts[nxt.inputs[0].index]]
    return inputs, n, members


def _compute(step: FusedStep, inputs: list, n: int, members: list, pool):
    """Every sample through the chain. Returns per-member result lists (tuples, None where the
    sample did not get there) and the failures [(member, sample, error, is_sample_failure)]."""
    links = [node.inputs[0].index for node in step.chain[1:]]
    results = [[None] * n for _ in members]
    head_samples = [t.samples() for t in inputs]

    def one(i: int, failures: list) -> None:
        x = tuple(s[i] for s in head_samples)
        fast = False  # members 0 and 1 computed together (fast mode)
        for j, (inst, ctx, arg_inputs, _) in enumerate(members):
            if fast and j == 1:
                continue
            try:
                args = inst.sample_args(arg_inputs, i)
                sctx = _sample_context(inst, ctx, i)
                pair = None
                if j == 0 and step.reduced is not None:
                    pair = _reduced_pair(step.reduced, members, x, args, sctx, i)
                elif j == 0 and step.padded is not None:
                    pair = _padded_pair(step.padded, members, x, args, sctx, i)
                if pair is not None:
                    fast = True
                    results[0][i] = (pair[0],)
                    j, out = 1, pair[1]  # (the output of member 1 then feeds member 2)
                else:
                    out = inst.run_sample(x, args, sctx)
            except OperatorBugError as e:  # (the unfused rerun names the operator and raises)
                failures.append((j, i, detached(e), False))
                return
            except OperatorError as e:
                failures.append((j, i, detached(e), True))
                return
            except SAMPLE_ERRORS as e:
                err = inst.sample_failure(e, ctx, i)
                err.__cause__ = e
                failures.append((j, i, detached(err), True))
                return
            except Exception as e:  # noqa: BLE001 - a bug: the unfused rerun raises it properly
                failures.append((j, i, detached(e), False))
                return
            out = out if isinstance(out, tuple) else (out,)
            results[j][i] = out
            if j < len(links):
                x = (out[links[j]],)

    if pool is None or n < 2:
        failures: list = []
        for i in range(n):
            one(i, failures)
        return results, failures
    # One task per thread, each taking the next sample until none is left: the batch ends with at
    # most one sample per thread still running rather than a chunk (a whole chain per sample
    # makes chunks long). Results land by index, so the order samples are taken in is irrelevant.
    # (Largest inputs first made no difference on 2 cores: the speech front end, train, val.)
    todo, lock = iter(range(n)), threading.Lock()

    def worker() -> list:
        failures: list = []
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return failures
            one(i, failures)

    futures = [pool.submit(worker) for _ in range(min(n, pool._max_workers))]
    return results, [f for fut in futures for f in fut.result()]


def numpy_heavy(graph, steps) -> bool:
    """Whether a fused chain among ``steps`` holds an operator that ``prefers_worker_processes``."""
    return any(getattr(graph.instances[node.id], "prefers_worker_processes", False)
               for step in steps if isinstance(step, FusedStep) for node in step.chain)


def _reduced_pair(plan, members: list, x: tuple, dec_args: dict, dec_ctx: SampleContext, i: int):
    """Fast mode: the decoder's and the resize's outputs of sample ``i`` in one step, or None where
    the exact path computes them (a sample error here is left to it too, to report)."""
    rsz, _, rsz_arg_inputs, _ = members[1]
    try:
        return reduced_decode.run_pair(plan, members[0][0], rsz, x[0], dec_args, dec_ctx,
                                       rsz.sample_args(rsz_arg_inputs, i))
    except SAMPLE_ERRORS:
        return None


def _padded_pair(plan, members: list, x: tuple, dec_args: dict, dec_ctx: SampleContext, i: int):
    """The decoder's and the resize's outputs of sample ``i`` in one step (padded_decode: exact), or
    None where the usual path computes them (a sample error here is left to it too, to report)."""
    rsz, _, rsz_arg_inputs, _ = members[1]
    try:
        return padded_decode.run_pair(plan, members[0][0], rsz, x[0], dec_args, dec_ctx,
                                      rsz.sample_args(rsz_arg_inputs, i))
    except SAMPLE_ERRORS:
        return None


def _sample_context(inst, ctx: BatchContext, i: int) -> SampleContext:
    return SampleContext(ctx.sample_index(i), ctx.iteration, inst.op_seed, ctx.source(i))


def _outputs(node, inst, ctx: BatchContext, layouts: list, results: list, kept: list) -> list:
    sources = [ctx.source(i) for i in kept] if ctx.sources else None
    try:
        return [TensorListCPU([results[i][k] for i in kept], layouts[k], sources) for k in range(inst.num_outputs)]
    except OperatorError:
        raise
    except Exception as e:
        from stoker.pipeline.executor import annotated_error

        raise annotated_error(e, node) from e


def run_fused(ex, step: FusedStep, it) -> None:
    """Run one FusedStep; see the module docstring for how failures keep the unfused results."""
    for node in step.hoisted:
        ex.run_node(node, it, gpu=False)
    try:
        inputs, n, members = _prepare(ex, step, it)
    except Exception:  # noqa: BLE001 - a batch-level error: the unfused order raises it where it would
        _replay(ex, step, it, done=0)
        return
    workers = ex.chain_workers() if ex.wants_chain_processes() and _intermediates(ex, step) else None
    if workers is not None and _in_processes(ex, step, it, inputs, n, members, workers):
        return
    results, failures = _compute(step, inputs, n, members, ex.pool)
    if step.reduced is not None and failures:
        _finish_reduced(ex, step, it, n, members, results, failures)
    else:
        _finish_fused(ex, step, it, inputs, n, members, results, failures)
    if workers is not None:  # as in the worker path (refills concatenate the same keys)
        for key in _intermediates(ex, step):
            it.values.pop(key, None)
    if step.reduced is not None:  # reduced-size decodes, which nothing reads (reduced_decode)
        it.values.pop((step.chain[0].id, 0), None)


def _intermediates(ex, step) -> list:
    from stoker.pipeline import chain_processes

    if step.unread is None:
        step.unread = chain_processes.intermediate_keys(step, ex.graph) \
            if chain_processes.eligible(step, ex.graph) else []
    return step.unread


def _in_processes(ex, step, it, inputs, n, members, workers) -> bool:
    """The chain's samples through the worker processes (stoker.pipeline.chain_processes).
    False when it cannot run there or a sample failed: the caller computes it in process."""
    if not inputs:
        return False

    def contexts(i):
        return [(c.index, c.iteration, c.op_seed, c.source)
                for c in (_sample_context(inst, ctx, i) for inst, ctx, _, _ in members)]

    outs = workers.compute(step, inputs[0].samples(), members, ex.graph, contexts)
    if outs is None:
        return False
    node = step.chain[-1]
    inst, ctx, _, layouts = members[-1]
    it.values[(node.id, 0)] = TensorListCPU(outs, layouts[0], [ctx.source(i) for i in range(n)] if ctx.sources
                                            else None)
    for dnode in step.deferred:
        ex.run_node(dnode, it, gpu=False)
    return True


def _finish_fused(ex, step, it, inputs, n, members, results, failures) -> None:
    k = min((f[0] for f in failures), default=len(step.chain))
    for j in range(k):
        node = step.chain[j]
        inst, ctx, _, layouts = members[j]
        for m, out in enumerate(_outputs(node, inst, ctx, layouts, results[j], list(range(n)))):
            it.values[(node.id, m)] = out
    if not failures:
        for node in step.deferred:
            ex.run_node(node, it, gpu=False)
        return
    node = step.chain[k]
    inst, ctx, _, layouts = members[k]
    failed = sorted((i, err) for j, i, err, caught in failures if j == k)
    policy = inst.args.get("on_error") or ctx.on_error
    if policy == "raise" or not all(caught for j, _, _, caught in failures if j == k):
        _replay(ex, step, it, done=k)  # c(k) runs again unfused and raises as it would there
        return
    ctx.failures = dict(failed)
    kept = [i for i in range(n) if i not in ctx.failures]
    outs = _outputs(node, inst, ctx, layouts, results[k], kept)
    _replay(ex, step, it, done=k, dropped=(ctx, n, outs))


def _finish_reduced(ex, step, it, n, members, results, failures) -> None:
    """Fast mode, some sample failed: members 0 and 1 (decoder and resize, computed together) drop
    their failed samples in turn and keep their results for the others; the rest runs as unfused.
    Under on_error='raise' (or for a bug) the whole segment runs again on the exact path, which
    raises as it would without fast mode."""
    k = min(f[0] for f in failures)
    if k >= 2:  # the fast pair went through for every sample: the usual way
        _finish_fused(ex, step, it, None, n, members, results, failures)
        return
    for j in (0, 1):
        inst, ctx, _, _ = members[j]
        failed = [f for f in failures if f[0] == j]
        if (inst.args.get("on_error") or ctx.on_error) == "raise" or not all(f[3] for f in failed):
            _replay(ex, step, it, done=0)
            return
    left = list(range(n))  # the batch's samples still in it, by their index in the whole batch
    for j in (0, 1):
        node, (inst, ctx, _, layouts) = step.chain[j], members[j]
        failed = {i: err for jj, i, err, _ in failures if jj == j}
        ctx.failures = {pos: failed[i] for pos, i in enumerate(left) if i in failed}
        kept = [i for i in left if i not in failed]
        outs = _outputs(node, inst, ctx, layouts, results[j], kept)
        ex.drop_samples(it, node, ctx, len(left))
        for m, out in enumerate(outs):
            it.values[(node.id, m)] = out
        left = kept
    if len(step.chain) > 2:
        _replay(ex, step, it, done=2)
    else:
        for node in step.deferred:
            ex.run_node(node, it, gpu=False)


def _replay(ex, step: FusedStep, it, done: int, dropped=None) -> None:
    """The segment in unfused order: members before c(done) are stored already, c(done) gets the
    ``dropped`` outputs (and its failures dropped) when given, the rest runs node by node. Hoisted
    nodes placed before c(done) ran already with the same batch, those after run again."""
    stop = step.chain[done].id if done < len(step.chain) else None
    chain_ids = {n.id: j for j, n in enumerate(step.chain)}
    hoisted = {n.id for n in step.hoisted}
    passed = False  # reached c(done) in the segment
    for node in step.segment:
        j = chain_ids.get(node.id)
        if j is not None and j < done:
            continue
        if node.id == stop:
            passed = True
            if dropped is not None:
                ctx, n, outs = dropped
                ex.drop_samples(it, node, ctx, n)
                for m, out in enumerate(outs):
                    it.values[(node.id, m)] = out
                continue
        if node.id in hoisted and not passed and stop is not None:
            continue
        ex.run_node(node, it, gpu=False)
