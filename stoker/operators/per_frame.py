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
recognised: pass it through ``fn.per_frame``. The exception: the sequences that
operators decorated with ``expand`` make (``transforms.*`` with per-frame
arguments, ``transforms.combine`` of sequences, ``coord_transform``) come out
tagged, so a sequence of matrices feeds e.g. ``warp_affine``'s ``matrix`` as in DALI.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import DenseRows, TensorListCPU


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


def frame_args(*names: str, split_sequences: bool = False, common=None, expand: bool = False):
    """Class decorator: the operator accepts per-frame values (``fn.per_frame``) for ``names``.

    The operator must see its input's layout (``LayoutAware``, or a run_cpu that adds
    ``_layout``; with ``expand`` the decorator adds it). With ``split_sequences`` an ``F...``
    input is processed frame by frame even without per-frame arguments (for operators whose
    ``run_sample`` takes single items only). ``common(op, frames, frame_args)`` may return
    argument updates that apply to every frame (e.g. one output size for the whole sequence).

    ``expand`` is for operators whose per-frame arguments make sequences by themselves (DALI's
    ``transforms.*`` and ``coord_transform``): without a sequence input (or without any input)
    the frame count comes from the per-frame arguments, the input is used for every frame, and
    the output layout gets a leading ``F`` (``"**"`` -> ``"F**"``).
    """
    allowed = frozenset(names)

    def deco(cls):
        plain_sample_args = cls.sample_args
        plain_run = cls.run_sample
        plain_run_cpu = cls.run_cpu

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
            return _run_frames(self, plain_run, inputs, args, ctx, framed, key, layout, common, expand)

        def run_cpu(self, batch, inputs, arg_inputs):
            layout = inputs[0].layout() if inputs else ""
            if not (layout.startswith("F") or has_frame_values(arg_inputs)):
                return plain_run_cpu(self, batch, inputs, arg_inputs)
            n = len(inputs[0]) if inputs else batch.batch_size
            outs = plain_run_cpu(self, batch, inputs, {**arg_inputs, "_layout": [layout] * n})
            return [frame_tagged(out) for out in outs]

        cls.sample_args = sample_args
        cls.run_sample = run_sample
        if expand:
            cls.run_cpu = run_cpu
        cls.per_frame_args = allowed
        return cls

    return deco


def frame_tagged(out: TensorListCPU) -> TensorListCPU:
    """``out``, a batch of sequences, relabelled ``F...`` (``"**"`` -> ``"F**"``; no layout stays
    none, as DALI leaves it) with its samples tagged :class:`FrameArray`: DALI takes any argument
    input with a leading ``F`` as per-frame values, so e.g. a ``transforms.rotation`` with a
    per-frame angle can feed ``warp_affine``'s ``matrix`` without another ``fn.per_frame``."""
    lay = out.layout()
    if lay and not lay.startswith("F"):
        out._layout = "F" + lay
    if out.layout().startswith("F"):  # (without a layout DALI would not take them per frame either)
        out._samples = [s.view(FrameArray) for s in out._samples]
    return out


def has_frame_values(arg_inputs: dict) -> bool:
    """Whether any argument input holds per-frame values (``fn.per_frame``)."""
    return any(is_per_frame(v) for v in arg_inputs.values())


def is_per_frame(values) -> bool:
    """Whether one argument input's samples (a list, or :class:`~stoker.tensors.DenseRows`,
    whose rows are all of its array's type) hold per-frame values."""
    if isinstance(values, DenseRows):
        return isinstance(values.array, FrameArray)
    return FrameArray in set(map(type, values))  # (map/set: no Python frame per sample)


def _frame_count(op, framed: dict, inputs, seq_in: bool) -> int:
    """Frames of one sample: the input sequence's, else (``expand``) the per-frame arguments'.
    Each per-frame argument holds one value per frame or one for all."""
    if seq_in:
        n = np.shape(inputs[0])[0]
        for k, vals in framed.items():
            if len(vals) not in (1, n):
                raise op.error(f"argument '{k}' has {len(vals)} per-frame values, but the sequence has {n} "
                               "frames; give one value per frame (or one for all)")
        return n
    # DALI takes the count from one argument (the first by name) and wants 1 or that many in
    # the others; the largest count is the same wherever DALI accepts the values.
    counts = {k: len(vals) for k, vals in framed.items()}
    most = max(counts, key=counts.get)
    for k, c in counts.items():
        if c == 0:
            raise op.error(f"argument '{k}' has no per-frame values; a sequence needs at least one frame")
        if c not in (1, counts[most]):
            raise op.error(f"argument '{k}' has {c} per-frame values, but argument '{most}' has "
                           f"{counts[most]}; give the same number of frames (or one value for all)")
    return counts[most]


def _run_frames(op, run, inputs, args, ctx, framed, key, layout, common, expand=False):
    seq_in = bool(inputs) and layout.startswith("F")
    if not seq_in and not expand:
        name = next(iter(framed))
        raise op.error(f"argument '{name}' holds per-frame values (fn.per_frame), but the input is not a "
                       f"sequence: its layout is {layout!r} (sequences have layouts starting with 'F', "
                       "e.g. 'FHWC')")
    n = _frame_count(op, framed, inputs, seq_in)
    seq = np.asarray(inputs[0]) if seq_in else None
    per_frame = []
    for f in range(n):
        fa = dict(args)
        for k, vals in framed.items():
            fa[k] = vals[f if len(vals) > 1 else 0]
        if key is not None and seq_in:
            fa[key] = layout[1:]
        per_frame.append(fa)
    if common is not None and n and seq_in:
        extra = common(op, seq, per_frame)
        for fa in per_frame:
            fa.update(extra)
    # a non-sequence input (expand) is the same for every frame
    outs = [run(op, (seq[f], *inputs[1:]) if seq_in else inputs, per_frame[f], ctx) for f in range(n)]
    if not outs:
        return seq.copy()
    shapes = {o.shape for o in outs}
    if len(shapes) > 1:
        raise op.error(f"the frames' outputs differ in shape {sorted(shapes)}; fix the output size "
                       "(e.g. keep_size=True or size=...) to process this sequence")
    return np.stack(outs)
