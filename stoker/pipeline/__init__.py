"""Graph tracing, the Pipeline object and the executor."""

from stoker.pipeline.pipeline import Pipeline, pipeline_def

__all__ = ["Pipeline", "pipeline_def"]
