"""Operator seeds: the same definition gives the same random streams, and moving operators to
the GPU with .gpu() changes none of them (the copy takes no place in the creation order)."""

import stoker.fn as fn
from stoker import Pipeline
from stoker.pipeline.graph import Graph


def _seeds(define, seed=7):
    """op name -> op_seed of the random operators ``define`` builds (traced, never run)."""
    p = Pipeline(batch_size=2, num_threads=1, device_id=0, seed=seed)
    with p:
        outs = define()
    p.set_outputs(*outs)
    graph = Graph(p._outputs, p._recorded, seed)
    return {n.op_name: graph.instances[n.id].op_seed for n in graph.nodes
            if n.op_name in ("random_resized_crop", "random.coin_flip", "random.uniform")}


def _define(gpu):
    def define():
        x = fn.external_source(source=[[]], layout="HWC")
        flip = fn.random.coin_flip()
        x = x.gpu() if gpu else x
        y = fn.random_resized_crop(x, size=(8, 8))
        return y, flip, fn.random.uniform(range=(0, 1))
    return define


def test_gpu_copies_leave_every_operator_seed_unchanged():
    cpu, gpu = _seeds(_define(False)), _seeds(_define(True))
    assert set(cpu) == {"random_resized_crop", "random.coin_flip", "random.uniform"}
    assert cpu == gpu


def test_seeds_differ_per_operator_and_follow_the_pipeline_seed():
    a, b = _seeds(_define(False), seed=7), _seeds(_define(False), seed=8)
    assert len(set(a.values())) == 3
    assert a == _seeds(_define(False), seed=7)
    assert all(a[k] != b[k] for k in a)
