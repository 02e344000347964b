"""Errors that say what went wrong, where in the user's pipeline, and on which sample."""

from __future__ import annotations


class StokerError(Exception):
    """Base class of stoker's errors."""


class PipelineBuildError(StokerError):
    """The pipeline graph or an operator's arguments cannot be built."""


class OperatorError(StokerError):
    """An operator failed while running.

    Carries ``operator`` (its name), ``origin`` (file:line of the user's code
    that created it), ``source`` (the sample's source, such as a file path, when
    known) and ``sample_index`` (position in the batch when known).
    """

    def __init__(self, message: str, *, operator: str = "", origin: str = "", source: str = "",
                 sample_index: int | None = None):
        self.operator = operator
        self.origin = origin
        self.source = source
        self.sample_index = sample_index
        self.reason = message
        parts = [f"[{operator}]" if operator else "", message]
        if source:
            parts.append(f"(sample: {source})")
        elif sample_index is not None:
            parts.append(f"(sample {sample_index} of the batch)")
        if origin:
            parts.append(f"\n  operator created at {origin}")
        super().__init__(" ".join(p for p in parts if p))


class SampleError(StokerError):
    """Raised inside an operator for one sample; the executor adds operator, origin and source."""


class EndOfEpoch(StokerError, StopIteration):
    """The readers have no more data in this epoch (``run`` raises ``StopIteration``)."""


class ExternalSourceExhausted(StopIteration):
    """An external source raised StopIteration."""


def arg_error(op: str, arg: str, message: str) -> PipelineBuildError:
    """A build error about one argument of one operator."""
    return PipelineBuildError(f"{op}: argument '{arg}': {message}")
