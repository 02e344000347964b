"""``fn.readers.video_resize``: ``readers.video`` whose frames are resized as they are read.

The arguments are those of ``readers.video`` plus ``resize``'s size, ROI and
filter arguments (``resize_x``, ``resize_y``, ``size``, ``resize_shorter``,
``resize_longer``, ``max_size``, ``mode``, ``interp_type``, ``antialias`` ...).
Every frame of a sample is resized by stoker's own ``resize`` (the same plan
and filters, applied to the FHWC sample frame by frame), before the conversion
to ``dtype``; the other outputs are ``readers.video``'s.

Resize arguments are taken as constants: per-sample values (DataNodes) are
refused when the pipeline runs; resize after the reader with ``fn.resize`` for those.
"""

from __future__ import annotations

from stoker.errors import arg_error
from stoker.operators.image.resize import Resize
from stoker.operators.readers.video import VIDEO_ARGS, VideoReader, video_outputs
from stoker.operators.schema import Schema, register

# resize's arguments that the reader takes as its own (dtype and image_type stay the reader's).
_RESIZE_ARG_NAMES = ("resize_x", "resize_y", "resize_z", "size", "resize_shorter", "resize_longer", "mode",
                     "max_size", "roi_start", "roi_end", "roi_relative", "subpixel_scale", "interp_type",
                     "min_filter", "mag_filter", "antialias", "temp_buffer_hint", "minibatch_size")
_RESIZE_ARGS = [Resize.schema.arg(n) for n in _RESIZE_ARG_NAMES]


@register
class VideoResizeReader(VideoReader):
    """Reads windows of frames from video files and resizes them (``fn.readers.video_resize``)."""

    schema = Schema(
        name="readers.video_resize",
        doc="readers.video with resize's arguments: every frame of each sample is resized (resize_x/resize_y, "
            "size, resize_shorter or resize_longer, and resize's filters) before the conversion to dtype.",
        args=[*VIDEO_ARGS, *_RESIZE_ARGS],
        inputs=(0, 0),
        devices=("cpu", "gpu"),
        num_outputs=lambda a: len(video_outputs(a)),
        legacy_name="VideoReaderResize",
    )

    def setup(self) -> None:
        super().setup()
        given = {n: self.args[n] for n in _RESIZE_ARG_NAMES if self.args.get(n) is not None}
        static, _ = Resize.schema.bind(given, lambda v: False)
        # A resize operator of the reader's own: its checks (one way of giving the size, mode...)
        # and its plan cache; its errors name the reader.
        self._resize = Resize(static, "cpu", op_seed=self.op_seed, origin=self.origin, name=self.instance_name)

    def bind_pipeline(self, pipe) -> None:
        super().bind_pipeline(pipe)
        self._resize.bind_pipeline(pipe)

    def run_cpu(self, batch, inputs, arg_inputs):
        if arg_inputs:
            name = sorted(arg_inputs)[0]
            raise arg_error(self.schema.name, name, "takes one constant value in stoker's readers.video_resize; "
                            "to resize by per-sample values, apply fn.resize to the reader's frames")
        return super().run_cpu(batch, inputs, arg_inputs)

    def transform(self, video):
        """The frames resized, one by one (resize treats F as a batch of frames)."""
        return self._resize.run_sample((video,), {**self._resize.args, "__layout": "FHWC"}, None)
