"""DALI's ``nvidia.dali.pipeline.experimental``: its ``pipeline_def`` adds a ``debug`` flag.

Without ``debug`` (or with ``debug=False``) this is :func:`stoker.pipeline_def`. Stoker has no
debug mode (DALI's runs each operator eagerly while the graph is defined): asking for it raises
NotImplementedError that says what to use instead, rather than silently running a normal
pipeline that the user expects to step through.
"""

from __future__ import annotations

import functools
import inspect

from stoker.pipeline.pipeline import pipeline_def as _pipeline_def

_NO_DEBUG = ("stoker has no pipeline debug mode (pipeline_def(debug=True)). To look at intermediate "
             "values, return them as extra pipeline outputs, or call the same operators eagerly on data "
             "with stoker.dynamic (DALI's experimental.dynamic); drop debug=True to run the pipeline.")


def _refuse_debug(debug) -> None:
    if debug:
        raise NotImplementedError(_NO_DEBUG)


def pipeline_def(fn=None, *, enable_conditionals: bool = False, debug: bool = False, **pipeline_kwargs):
    """:func:`stoker.pipeline_def` with DALI's experimental ``debug`` flag, which may be given
    to the decorator or to the factory call; ``debug=True`` raises NotImplementedError."""
    _refuse_debug(debug)

    def decorate(func):
        factory = _pipeline_def(func, enable_conditionals=enable_conditionals, **pipeline_kwargs)
        takes_debug = "debug" in inspect.signature(func).parameters  # then `debug` is the function's own

        @functools.wraps(func)
        def experimental_factory(*args, **kwargs):
            if not takes_debug:
                _refuse_debug(kwargs.pop("debug", False))
            return factory(*args, **kwargs)

        experimental_factory._is_pipeline_def = True
        return experimental_factory

    return decorate(fn) if fn is not None else decorate


__all__ = ["pipeline_def"]
