"""``fn.per_frame`` and per-frame argument inputs for sequence operators.

DALI processes sequences (layouts starting with ``F``, e.g. ``FHWC``) frame by
frame, and some arguments of those operators (``angle`` of ``rotate``,
``brightness`` of ``brightness``, ``matrix`` of ``warp_affine`` ...) may hold
one value *per frame*: an argument input whose samples have the frames as
their outermost axis, marked with ``fn.per_frame``::

    angles = fn.random.uniform(range=[-30, 30], shape=(num_frames,))
    video = fn.rotate(video, angle=fn.per_frame(angles), keep_size=True)

Sample ``i`` of such an argument holds ``F`` values (the sequence's frame
count) or a single one, which then applies to every frame. The data is not
touched: ``per_frame`` only marks it (the layout gets a leading ``F``, and the
arrays are tagged with :class:`FrameArray`, which is how an operator finds a
per-frame argument among its per-sample ones).

Operators opt in with the :func:`frame_args` class decorator, which names the
arguments that accept per-frame values. It converts each frame's value with
the argument's own checks, splits the sequence into frames, runs the
operator's ``run_sample`` on each frame with that frame's values and stacks
the results. An argument input that is an ``F``-layout batch from another
operator (DALI accepts e.g. ``fn.reshape(x, layout="F")`` too) is not
recognised: pass it through ``fn.per_frame``.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import TensorListCPU


class FrameArray(np.ndarray):
    """A sample of a per-frame argument (a view of the data; frames on the outermost axis)."""


class FrameValues(list):
    """One sample's per-frame argument after conversion: one value per frame (or one for all)."""


@register
class PerFrame(Operator):
    """Marks an argument input as holding one value per frame of a sequence."""

    schema = Schema(
        name="per_frame",
        legacy_name="PerFrame",
        doc="Marks its input as a sequence (layout starting with 'F'): used as an argument input of a "
            "sequence operator, sample i gives one value per frame of sequence i (or one for all "
            "frames). Only the layout changes; the data is passed on untouched.",
        args=[Arg("replace", "bool", False,
                  doc="an input layout not starting with 'F' has its first letter replaced (False: "
                      "such a layout is an error); an input without layout gets 'F' padded with '*'")],
    )

    def _layout(self, layout: str, ndim: int) -> str:
        if not layout:
            return "F" + "*" * max(ndim - 1, 0)
        if layout[0] != "F" and not self.args["replace"]:
            raise ValueError(f"per_frame: argument 'replace': the input's layout {layout!r} does not start "
                             "with 'F' (frames); pass replace=True to relabel its first axis as frames")
        return "F" + layout[1:]

    def run_cpu(self, batch, inputs, arg_inputs):
        x = inputs[0]
        samples = x.samples()
        for i, s in enumerate(samples):
            if np.ndim(s) == 0:
                raise ValueError(f"per_frame: sample {i} is a scalar; per-frame values need a frame axis "
                                 f"(shape (F,) or (F, ...)) (source {x.source_info()[i]!r})")
        ndim = np.ndim(samples[0]) if samples else 1
        layout = self._layout(x.layout(), ndim)
        return [TensorListCPU([np.asarray(s).view(FrameArray) for s in samples], layout, x.source_info())]

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        return ["F" + lay[1:] if lay else ""]


def _frame_layout(args: dict) -> tuple[str | None, str]:
    """(key, layout) of the sample's layout as the operator's run_cpu passes it."""
    for key in ("__layout", "_layout"):
        if key in args:
            return key, str(args[key] or "")
    return None, ""


def frame_args(*names: str, split_sequences: bool = False, common=None):
    """Class decorator: the operator accepts per-frame values (``fn.per_frame``) for ``names``.

    The operator must see its input's layout (``LayoutAware``, or a run_cpu that adds
    ``_layout``). With ``split_sequences`` an ``F...`` input is processed frame by frame
    even without per-frame arguments (for operators whose ``run_sample`` takes single
    images only). ``common(op, frames, frame_args)`` may return argument updates that apply
    to every frame (e.g. one output size for the whole sequence).
    """
    allowed = frozenset(names)

    def deco(cls):
        plain_sample_args = cls.sample_args
        plain_run = cls.run_sample

        def sample_args(self, arg_inputs, i):
            framed = {k: v[i] for k, v in arg_inputs.items() if isinstance(v[i], FrameArray)}
            if not framed:
                return plain_sample_args(self, arg_inputs, i)
            merged = dict(plain_sample_args(self, {k: v for k, v in arg_inputs.items() if k not in framed}, i))
            for k, arr in framed.items():
                if k not in allowed:
                    ok = ", ".join(sorted(allowed))
                    raise ValueError(f"argument '{k}' does not take per-frame values (fn.per_frame); "
                                     f"{self.schema.name} takes them for: {ok}")
                spec = self.schema.arg(k)
                merged[k] = FrameValues(spec.sample_value(np.asarray(f)) for f in np.asarray(arr))
            return merged

        def run_sample(self, inputs, args, ctx):
            framed = {k: v for k, v in args.items() if isinstance(v, FrameValues)}
            key, layout = _frame_layout(args)
            if not framed and not (split_sequences and layout.startswith("F")):
                return plain_run(self, inputs, args, ctx)
            return _run_frames(self, plain_run, inputs, args, ctx, framed, key, layout, common)

        cls.sample_args = sample_args
        cls.run_sample = run_sample
        cls.per_frame_args = allowed
        return cls

    return deco


def _run_frames(op, run, inputs, args, ctx, framed, key, layout, common):
    seq = np.asarray(inputs[0])
    if not layout.startswith("F"):
        name = next(iter(framed))
        raise op.error(f"argument '{name}' holds per-frame values (fn.per_frame), but the input is not a "
                       f"sequence: its layout is {layout!r} (sequences have layouts starting with 'F', "
                       "e.g. 'FHWC')")
    n = seq.shape[0]
    for k, vals in framed.items():
        if len(vals) not in (1, n):
            raise op.error(f"argument '{k}' has {len(vals)} per-frame values, but the sequence has {n} "
                           "frames; give one value per frame (or one for all)")
    per_frame = []
    for f in range(n):
        fa = dict(args)
        for k, vals in framed.items():
            fa[k] = vals[f if len(vals) > 1 else 0]
        if key is not None:
            fa[key] = layout[1:]
        per_frame.append(fa)
    if common is not None and n:
        extra = common(op, seq, per_frame)
        for fa in per_frame:
            fa.update(extra)
    outs = [run(op, (seq[f], *inputs[1:]), per_frame[f], ctx) for f in range(n)]
    if not outs:
        return seq.copy()
    shapes = {o.shape for o in outs}
    if len(shapes) > 1:
        raise op.error(f"the frames' outputs differ in shape {sorted(shapes)}; fix the output size "
                       "(e.g. keep_size=True or size=...) to process this sequence")
    return np.stack(outs)
