"""Axis selection shared by the tensor and geometry operators: ``axes`` (indices,
negative counted from the end) or ``axis_names`` (letters of the input's layout)."""

from __future__ import annotations

from collections.abc import Sequence


def resolve_axes(op: str, axes: Sequence[int] | None, axis_names: str | None, layout: str, ndim: int,
                 default: Sequence[int] | None = None) -> list[int]:
    """Indices of the selected axes, in the order given.

    ``axis_names`` wins over ``axes`` when both are set, as in DALI; with neither,
    ``default`` (None means every axis). Raises ValueError naming ``op`` and the
    argument when an axis does not exist in a sample of rank ``ndim``.
    """
    if axis_names:
        if not layout:
            raise ValueError(f"{op}: argument 'axis_names' ({axis_names!r}) needs an input with a layout")
        out = []
        for name in axis_names:
            if name not in layout:
                raise ValueError(f"{op}: argument 'axis_names': axis {name!r} is not in the layout {layout!r}")
            out.append(layout.index(name))
        return out
    if axes is None:
        return list(range(ndim)) if default is None else [int(a) for a in default]
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"{op}: argument 'axes': axis {a} is out of range for a {ndim}D sample")
        out.append(a % ndim)
    return out


def drop_layout(layout: str, removed: Sequence[int]) -> str:
    """The layout without the letters at the ``removed`` indices ("" stays "")."""
    if not layout:
        return ""
    gone = set(removed)
    return "".join(ch for i, ch in enumerate(layout) if i not in gone)
