"""Checkpoints: their structure, and the fingerprint that ties one to the pipeline that made it.

``Pipeline.checkpoint()`` writes a JSON object::

    {"iteration": 12, "sources": {"reader": {"epoch": 1, "position": 5, "shard": 0}},
     "fingerprint": {"stoker": "0.1.0", "seed": 42,
                     "readers": {"reader": {"epoch_size": 1000, "files": "5c0f..."}}},
     "iterator": {...}}                      # only in a framework iterator's checkpoints

The positions alone would fit another pipeline too: one with another seed, a renamed reader
or another data set resumed silently with other data, or from epoch 0. So a checkpoint
carries a *fingerprint* of what its positions mean: the pipeline's seed, the names of its
sources, each reader's data set size and a hash of its file list, and the stoker version (the
random streams and the order of files are a version's). :func:`verify` refuses a checkpoint
whose fingerprint differs, naming every difference. A checkpoint without one (written before
fingerprints existed) is restored with a warning.

:func:`parse` turns anything malformed (not JSON, not an object, keys missing, wrong types)
into one error type, :class:`stoker.errors.CheckpointError`.
"""

from __future__ import annotations

import json
import warnings

from stoker.errors import CheckpointError, printable

_KNOWN_KEYS = {"iteration", "sources", "fingerprint", "iterator"}


def restorable(checkpoint) -> dict | None:
    """``Pipeline(checkpoint=...)``'s argument parsed: None, one checkpoint (:func:`parse`) or a
    list of the ranks' checkpoints of another world size (:func:`resharded`)."""
    if checkpoint is None:
        return None
    return resharded(checkpoint) if isinstance(checkpoint, (list, tuple)) else parse(checkpoint)


def resharded(checkpoints) -> dict:
    """One checkpoint from those of every rank of a run with another number of shards (a list, in
    shard order), for a pipeline of this run to resume from (``Pipeline(checkpoint=[...])``).

    Each reader gets all the old ranks' states and works out its own part of the interrupted pass
    (:func:`stoker.operators.readers._order.resharded_state`); a framework iterator starts its
    epoch bookkeeping over for that pass. The checkpoints must come from one pipeline (one
    fingerprint) and be taken at one step (the same iteration). A source that is not a reader
    (an external source with a position) cannot be spread over another number of ranks: refused."""
    if not isinstance(checkpoints, (list, tuple)) or not checkpoints:
        raise CheckpointError("checkpoint: expected a non-empty list of the old ranks' checkpoints")
    parsed = [parse(c) for c in checkpoints]
    prints = [json.dumps(p.get("fingerprint"), sort_keys=True) for p in parsed]
    if len(set(prints)) != 1:
        raise CheckpointError("checkpoint: the ranks' checkpoints come from different pipelines (their fingerprints "
                              "differ); pass the checkpoints of one run, one per rank")
    iterations = {p["iteration"] for p in parsed}
    if len(iterations) != 1:
        raise CheckpointError(f"checkpoint: the ranks' checkpoints were taken at different iterations "
                              f"{sorted(iterations)}; take them at the same step on every rank")
    names = {frozenset(p["sources"]) for p in parsed}
    if len(names) != 1:
        raise CheckpointError("checkpoint: the ranks' checkpoints hold different sources")
    sources = {}
    for name in parsed[0]["sources"]:
        states = [p["sources"][name] for p in parsed]
        if all(not s for s in states):
            sources[name] = {}
        elif all("position" in s for s in states):  # (one old rank too: its shard is the whole data set)
            sources[name] = {"resharded_from": states}
        elif len(states) == 1:  # (a source of a one-rank run that is not a reader keeps its position)
            sources[name] = states[0]
        else:
            raise CheckpointError(f"checkpoint: source {printable(name)!s} is not a reader (its position is "
                                  f"{printable(json.dumps(states[0])[:80])!s}) and cannot be spread over another "
                                  "number of ranks")
    merged = {"iteration": iterations.pop(), "sources": sources}
    if parsed[0].get("fingerprint") is not None:
        merged["fingerprint"] = parsed[0]["fingerprint"]
    if any(p.get("iterator") is not None for p in parsed):
        merged["iterator"] = {"resharded_from": [p.get("iterator") for p in parsed]}
    return merged


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def parse(checkpoint) -> dict:
    """The checkpoint as a dict, checked for the structure ``Pipeline.checkpoint()`` writes.

    ``checkpoint``: its JSON text (str or bytes) or the dict it decodes to. Raises
    CheckpointError, saying what is wrong, for anything else."""
    if isinstance(checkpoint, (str, bytes, bytearray)):
        try:
            data = json.loads(checkpoint)
        except (ValueError, UnicodeDecodeError) as e:
            text = checkpoint if isinstance(checkpoint, str) else repr(checkpoint[:40])
            hint = " (to restore from a file, pass its contents: open(path).read())" \
                if isinstance(checkpoint, str) and not text.lstrip().startswith(("{", "[")) else ""
            raise CheckpointError(f"checkpoint: not valid JSON ({e}){hint}; expected the text that "
                                  f"Pipeline.checkpoint() returns, got {printable(text[:60])!s}") from None
    elif isinstance(checkpoint, dict):
        data = checkpoint
    else:
        raise CheckpointError(f"checkpoint: expected the JSON text that Pipeline.checkpoint() returns (or the "
                              f"dict it decodes to), got {type(checkpoint).__name__}")
    if not isinstance(data, dict):
        raise CheckpointError(f"checkpoint: expected a JSON object as Pipeline.checkpoint() writes, got "
                              f"{_kind(data)}")
    missing = sorted({"iteration", "sources"} - set(data))
    if missing:
        raise CheckpointError(f"checkpoint: key(s) {missing} missing (keys found: {sorted(data)}); expected what "
                              "Pipeline.checkpoint() writes")
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise CheckpointError(f"checkpoint: unknown key(s) {unknown}; expected {sorted(_KNOWN_KEYS)}")
    iteration = data["iteration"]
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise CheckpointError(f"checkpoint: 'iteration' must be an integer >= 0, got {iteration!r}")
    sources = data["sources"]
    if not isinstance(sources, dict) or not all(isinstance(v, dict) for v in sources.values()):
        raise CheckpointError(f"checkpoint: 'sources' must map each source's name to its state (an object), "
                              f"got {printable(json.dumps(sources)[:80])}")
    for key in ("fingerprint", "iterator"):
        if key in data and not isinstance(data[key], dict):
            raise CheckpointError(f"checkpoint: '{key}' must be an object, got {_kind(data[key])}")
    fp = data.get("fingerprint")
    if fp is not None:
        readers = fp.get("readers")
        if not {"stoker", "seed", "readers"} <= set(fp) or not isinstance(readers, dict) \
                or not all(isinstance(v, dict) for v in readers.values()):
            raise CheckpointError(f"checkpoint: malformed 'fingerprint' (expected keys stoker, seed, readers): "
                                  f"{printable(json.dumps(fp)[:120])}")
    return data


def source_key(k: int, node) -> str:
    """The name under which source node ``k`` (of ``graph.source_nodes``) is saved."""
    return node.args.get("name") or f"#{k}:{node.op_name}"


def fingerprint(graph, seed: int) -> dict:
    """What a checkpoint's positions mean in ``graph`` (see the module docstring)."""
    from stoker import __version__

    readers = {}
    for k, node in enumerate(graph.source_nodes):
        inst = graph.instances[node.id]
        info = getattr(inst, "fingerprint", None)
        readers[source_key(k, node)] = dict(info()) if info is not None else {}
    return {"stoker": __version__, "seed": int(seed), "readers": readers}


def differences(saved: dict, current: dict) -> list[str]:
    """What differs between the fingerprint ``saved`` in a checkpoint and ``current``'s, in words."""
    out = []
    if saved.get("seed") != current["seed"]:
        out.append(f"seed: checkpoint {saved.get('seed')!r}, this pipeline {current['seed']!r} (pass "
                   f"seed={saved.get('seed')!r}, or leave seed out to take the checkpoint's)")
    old, new = saved.get("readers", {}), current["readers"]
    if set(old) != set(new):
        out.append(f"sources (readers) by name: checkpoint {sorted(old)}, this pipeline {sorted(new)} (a reader "
                   "renamed or added?)")
    labels = {"epoch_size": "data set size", "files": "file list (hash of paths and labels)"}
    for name in sorted(set(old) & set(new)):
        for key in sorted(set(old[name]) | set(new[name])):
            a, b = old[name].get(key), new[name].get(key)
            if a != b:
                out.append(f"reader {printable(name)!s}: {labels.get(key, key)}: checkpoint {a!r}, "
                           f"this pipeline {b!r}")
    if saved.get("stoker") != current["stoker"]:
        out.append(f"stoker version: checkpoint {saved.get('stoker')!r}, this one {current['stoker']!r} (random "
                   "streams and file order may differ between versions)")
    return out


def verify(state: dict, current: dict, *, stacklevel: int = 3) -> None:
    """Refuse the checkpoint ``state`` (parsed) unless its fingerprint is ``current``; one without
    a fingerprint passes with a warning."""
    saved = state.get("fingerprint")
    if saved is None:
        warnings.warn("checkpoint: it has no fingerprint (it was written by an older stoker), so nothing "
                      "checks that it comes from this pipeline; resuming anyway", UserWarning,
                      stacklevel=stacklevel)
        return
    diffs = differences(saved, current)
    if diffs:
        raise CheckpointError("checkpoint: it was taken from another pipeline, resuming would give other data; "
                              "what differs:\n  " + "\n  ".join(diffs))


def restore_sources(graph, state: dict) -> None:
    """Set the sources of ``graph`` to the positions in ``state`` (parsed); a source's state that
    does not fit (wrong keys or types, another shard, a position past the data set) raises
    CheckpointError naming the source."""
    saved = state["sources"]
    keys = {source_key(k, node): node for k, node in enumerate(graph.source_nodes)}
    unknown = sorted(set(saved) - set(keys))
    if unknown:
        raise CheckpointError(f"checkpoint: it holds the state of source(s) {unknown}, which this pipeline does "
                              f"not have (its sources: {sorted(keys)}); a reader renamed?")
    for key, node in keys.items():
        inst = graph.instances[node.id]
        if key not in saved:
            if inst.state():  # a source with a position is always saved: this one was not there
                raise CheckpointError(f"checkpoint: it holds no state for source {key!r} of this pipeline "
                                      f"(it holds {sorted(saved)})")
            continue
        try:
            inst.set_state(saved[key])
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            what = f"missing key {e}" if isinstance(e, KeyError) else str(e)
            raise CheckpointError(f"checkpoint: the state of source {key!r} does not fit it ({what}): "
                                  f"{printable(json.dumps(saved[key])[:120])}") from None
