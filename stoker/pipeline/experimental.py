"""DALI's ``nvidia.dali.pipeline.experimental``: its ``pipeline_def`` with the ``debug`` flag.

Both are :func:`stoker.pipeline_def`, which takes ``debug`` (see :mod:`stoker.pipeline.debug`):
this module only keeps DALI's import path working.
"""

from __future__ import annotations

from stoker.pipeline.pipeline import pipeline_def

__all__ = ["pipeline_def"]
