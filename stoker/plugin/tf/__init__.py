"""TensorFlow plugin: stoker pipelines as ``tf.data.Dataset`` (DALI's ``nvidia.dali.plugin.tf``).

``import stoker.plugin.tf as dali_tf`` gives DALI's names: :class:`DALIDataset`,
``experimental.DALIDatasetWithInputs`` and ``experimental.Input`` (``tf.data`` inputs for
external sources), :func:`DALIIterator` (the older op-style API), plus :func:`to_tf`,
:data:`to_tf_type`, :func:`to_tf_dtype` and :func:`from_tf_dtype`.

There is no compiled TensorFlow op: the dataset runs the live pipeline from a Python generator
(``tf.data.Dataset.from_generator``); :class:`DALIDataset`'s docstring says what that implies.
Importing this module imports TensorFlow (``pip install tensorflow-cpu`` or ``tensorflow``);
``import stoker`` does not.
"""

from __future__ import annotations

try:
    import tensorflow as tf
except ImportError:
    raise ImportError("stoker.plugin.tf needs TensorFlow: pip install tensorflow (or tensorflow-cpu)") from None

from stoker.plugin.tf import experimental
from stoker.plugin.tf._convert import from_tf_dtype, to_tf, to_tf_dtype, to_tf_type
from stoker.plugin.tf._dataset import DALIDataset
from stoker.plugin.tf._iterator import DALIIterator, DALIIteratorWrapper


def _tf_version() -> tuple[int, int]:
    major, minor = (tf.__version__.split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


# stoker's own name for the same class.
StokerDataset = DALIDataset


def serialize_pipeline(pipeline) -> bytes:
    """``pipeline.serialize()`` (stoker's format: for ``DALIIterator(serialized_pipeline=...)``)."""
    return pipeline.serialize()


def dataset_compatible_tensorflow() -> bool:
    """Whether this TensorFlow can run :class:`DALIDataset` (2.4 and newer)."""
    return _tf_version() >= (2, 4)


def dataset_inputs_compatible_tensorflow() -> bool:
    """Whether this TensorFlow can run datasets with ``input_datasets`` (2.4 and newer)."""
    return _tf_version() >= (2, 4)


def dataset_distributed_compatible_tensorflow() -> bool:
    """Whether ``tf.distribute`` can take a :class:`DALIDataset` (2.5 and newer, as DALI says; a
    generator-backed dataset works with one-process strategies only)."""
    return _tf_version() >= (2, 5)


__all__ = ["DALIDataset", "DALIIterator", "DALIIteratorWrapper", "StokerDataset", "experimental",
           "from_tf_dtype", "serialize_pipeline", "to_tf", "to_tf_dtype", "to_tf_type",
           "dataset_compatible_tensorflow", "dataset_inputs_compatible_tensorflow",
           "dataset_distributed_compatible_tensorflow"]
