"""Bounding-box, coordinate and affine-transform operators (object detection pipelines)."""
