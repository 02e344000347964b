"""``fn.readers.video_resize``: ``readers.video`` whose frames are resized as they are read.

The arguments are those of ``readers.video`` plus ``resize``'s size, ROI and
filter arguments (``resize_x``, ``resize_y``, ``size``, ``resize_shorter``,
``resize_longer``, ``max_size``, ``mode``, ``interp_type``, ``antialias`` ...).
The output size is ``resize``'s plan. With the default filter (linear,
antialiased), a whole-frame region and RGB/BGR frames, the decoder resizes each
frame in swscale as it converts it (:func:`stoker.operators.video.pyav.decode_frames`
with ``size``): about 10x cheaper than ``resize`` on 720p frames, and within a
few levels of it (tests/operators/video/test_video_resize.py states by how
much). Other filters, regions and image types run stoker's own ``resize`` on
the FHWC sample, frame by frame. Both come before the conversion to ``dtype``;
the other outputs are ``readers.video``'s.

Resize arguments are taken as constants: per-sample values (DataNodes) are
refused when the pipeline runs; resize after the reader with ``fn.resize`` for those.
"""

from __future__ import annotations

import math

from stoker import types
from stoker.errors import arg_error
from stoker.operators.image.geometry import resize_plan
from stoker.operators.image.resize import Resize, resize_filters
from stoker.operators.readers.video import VIDEO_ARGS, VideoReader, video_outputs
from stoker.operators.schema import Schema, register

# resize's arguments that the reader takes as its own (dtype and image_type stay the reader's).
_RESIZE_ARG_NAMES = ("resize_x", "resize_y", "resize_z", "size", "resize_shorter", "resize_longer", "mode",
                     "max_size", "roi_start", "roi_end", "roi_relative", "subpixel_scale", "interp_type",
                     "min_filter", "mag_filter", "antialias", "temp_buffer_hint", "minibatch_size")
_RESIZE_ARGS = [Resize.schema.arg(n) for n in _RESIZE_ARG_NAMES]
_LINEAR = (types.INTERP_LINEAR, types.INTERP_TRIANGULAR)


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
        args = self._resize.args
        self._swscale = (all(f in _LINEAR for f in resize_filters(args)) and args["antialias"]
                         and args.get("roi_start") is None and args.get("roi_end") is None
                         and self.args["image_type"] in (types.RGB, types.BGR))
        self._sizes: dict[tuple[int, int], tuple[int, int] | None] = {}

    def bind_pipeline(self, pipe) -> None:
        super().bind_pipeline(pipe)
        self._resize.bind_pipeline(pipe)

    def run_cpu(self, batch, inputs, arg_inputs):
        if arg_inputs:
            name = sorted(arg_inputs)[0]
            raise arg_error(self.schema.name, name, "takes one constant value in stoker's readers.video_resize; "
                            "to resize by per-sample values, apply fn.resize to the reader's frames")
        return super().run_cpu(batch, inputs, arg_inputs)

    def decode_size(self, clip):
        """``(height, width)`` of ``resize``'s plan for the clip's frames when swscale can resize them
        as they are decoded (see the module docstring), else None (``transform`` resizes)."""
        if not self._swscale:
            return None
        in_size = (clip.info.height, clip.info.width)
        if in_size not in self._sizes:
            self._sizes[in_size] = self._plan_size(in_size)
        return self._sizes[in_size]

    def _plan_size(self, in_size):
        r = self._resize
        a = r.args
        if min(in_size) < 1:
            return None
        plan = resize_plan(list(in_size), r.requested(a, 2), mode=a["mode"], max_size=a["max_size"],
                           resize_shorter=float(a.get("resize_shorter") or 0),
                           resize_longer=float(a.get("resize_longer") or 0), roi_start=None, roi_end=None,
                           roi_relative=a["roi_relative"], subpixel_scale=a["subpixel_scale"])
        whole = list(plan.lo) == [0.0, 0.0] and list(plan.hi) == [float(in_size[0]), float(in_size[1])]
        too_big = r.max_output_pixels and math.prod(plan.out_size) > r.max_output_pixels
        # (a sub-pixel region, or an output over max_pixels whose error resize words: resize's path)
        return tuple(plan.out_size) if whole and not too_big else None

    def transform(self, video):
        """The frames resized, one by one (resize treats F as a batch of frames)."""
        return self._resize.run_sample((video,), {**self._resize.args, "__layout": "FHWC"}, None)
