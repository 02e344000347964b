"""Framework plugins: iterators that hand pipeline outputs to a training loop.

``stoker.plugin.pytorch`` holds the PyTorch iterators (DALI's names and
semantics); :mod:`stoker.plugin.base_iterator` their framework-neutral base.
Frameworks are imported only when their plugin is used.
"""

from stoker.plugin.base_iterator import LastBatchPolicy

__all__ = ["LastBatchPolicy"]
