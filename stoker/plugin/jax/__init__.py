"""JAX plugin: an iterator that hands stoker pipeline outputs to JAX as ``jax.Array``.

``from stoker.plugin.jax import DALIGenericIterator, data_iterator`` works as DALI's
``nvidia.dali.plugin.jax`` does; :mod:`stoker.plugin.jax.clu` adds the peekable iterator.
JAX is imported when an iterator is made, so importing this module does not load it.
"""

from stoker.plugin.base_iterator import LastBatchPolicy
from stoker.plugin.jax.iterator import DALIGenericIterator, data_iterator, default_num_threads_value, to_jax

# stoker's own name for the same class.
StokerGenericIterator = DALIGenericIterator

__all__ = ["DALIGenericIterator", "StokerGenericIterator", "LastBatchPolicy", "data_iterator",
           "default_num_threads_value", "to_jax"]
