"""``stoker.experimental.dynamic`` is :mod:`stoker.dynamic` itself, under DALI's name
``nvidia.dali.experimental.dynamic``.

This module puts stoker.dynamic in its own place in ``sys.modules`` while it is imported, so the
import statement (and ``from stoker.experimental import dynamic``) yields the very same module
object: one set of caches, thread pool and settings whichever name the code uses.
"""

import sys

import stoker.dynamic as _dynamic

sys.modules[__name__] = _dynamic
