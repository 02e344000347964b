"""Errors that say what went wrong, where in the user's pipeline, and on which sample."""

from __future__ import annotations

import re


class StokerError(Exception):
    """Base class of stoker's errors."""


class PipelineBuildError(StokerError):
    """The pipeline graph or an operator's arguments cannot be built."""


class ArgumentError(PipelineBuildError, ValueError, TypeError):
    """An operator argument (or positional input) that is unknown, missing, of the wrong type or
    out of range. It is also a ValueError and a TypeError because DALI raises one or the other for
    these, so ``except ValueError`` / ``except TypeError`` blocks of ported code still catch it."""


class CheckpointError(PipelineBuildError):
    """A checkpoint cannot be restored: it is malformed (not the JSON object that
    ``Pipeline.checkpoint()`` writes), or it was taken from another pipeline (another seed, other
    readers, another data set, another stoker version: the message says what differs)."""


class OperatorError(StokerError, RuntimeError):
    """An operator failed while running (also a RuntimeError, which is what DALI raises, so that
    ported ``except RuntimeError`` blocks catch it).

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
            parts.append(f"(sample: {printable(source)})")
        elif sample_index is not None:
            parts.append(f"(sample {sample_index} of the batch)")
        if origin:
            parts.append(f"\n  operator created at {origin}")
        super().__init__(" ".join(p for p in parts if p))


class OperatorBugError(OperatorError):
    """An operator failed on a sample because of code, not data: a TypeError, KeyError,
    AssertionError, AttributeError... raised in the operator, or in the user's function of a
    ``python_function``. Raised whatever ``on_error`` says, since skipping the sample would
    report a bug as a bad file (see ``stoker.operators.base.SAMPLE_ERRORS``)."""


class SampleError(StokerError):
    """Raised inside an operator for one sample; the executor adds operator, origin and source."""


class EndOfEpoch(StokerError, StopIteration):
    """The readers have no more data in this epoch (``run`` raises ``StopIteration``)."""


class ExternalSourceExhausted(StopIteration):
    """An external source raised StopIteration."""


# Characters that must not reach a log or a report as they are: C0/C1 controls (a newline forges a
# log line, an escape sequence drives the terminal), line and paragraph separators (new lines to
# some log viewers) and the invisible format characters (bidirectional overrides reorder text).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff"
                     "\ud800-\udfff]")


def printable(name) -> str:
    """``name`` as it may appear in a log line, an error message or an error report: unchanged
    unless it holds control characters (see ``_UNSAFE``), else escaped as Python's ``repr``
    writes it (quotes included), so that a file named ``"a\\nWARNING ..."`` cannot forge a
    separate log line. Used for every file name and sample source stoker writes out."""
    text = name if isinstance(name, str) else str(name)
    return repr(text) if _UNSAFE.search(text) else text


def arg_error(op: str, arg: str, message: str) -> ArgumentError:
    """A build error about one argument of one operator."""
    return ArgumentError(f"{op}: argument '{arg}': {message}")


def detached(err: BaseException) -> BaseException:
    """``err`` without tracebacks (its own, its cause's and its context's), for a failure that is
    kept rather than raised: a traceback holds the frames that made it, and with them the whole
    batch being computed, in a reference cycle that only the garbage collector's rare full
    passes free. A soak run under ``on_error="skip"`` grew by hundreds of MB that way."""
    seen = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return err
