"""DALI's ``nvidia.dali.plugin.tf.experimental``: datasets with ``tf.data`` inputs."""

from stoker.plugin.tf._dataset import DALIDatasetWithInputs, Input

__all__ = ["DALIDatasetWithInputs", "Input"]
