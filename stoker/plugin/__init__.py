"""Framework plugins: iterators that hand pipeline outputs to a training loop.

``stoker.plugin.pytorch`` holds the PyTorch iterators (DALI's names and
semantics); :mod:`stoker.plugin.base_iterator` their framework-neutral base;
``stoker.plugin.jax`` the JAX iterator and ``stoker.plugin.tf`` the TensorFlow dataset
(``DALIDataset``).
Frameworks are imported only when their plugin is used.
"""

from stoker.plugin.base_iterator import LastBatchPolicy

__all__ = ["LastBatchPolicy"]
