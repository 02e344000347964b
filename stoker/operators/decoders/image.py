"""Image decoders: ``decoders.image``, ``image_random_crop``, ``image_crop``,
``image_slice`` and ``peek_image_shape``.

The CPU path lives here (per sample, on the pipeline's thread pool, through
:func:`stoker.operators.decoders.cpu.decode_cpu`); the "mixed" (GPU) path is
a separate module that falls back to ``decode_cpu`` for formats the GPU
cannot decode. Input: encoded files as 1D uint8 tensors (``readers.file``,
``external_source``...). Output: HWC images, layout "HWC".

A file that is not a decodable image (corrupt, truncated, unknown format,
over ``max_pixels`` or ``max_aspect_ratio``) fails with a per-sample error
whose message gives the reason; the executor adds the operator and the file's
path. ``strict`` (on by default, stoker only) makes the corrupt data that the
format libraries would decode through with a warning such an error too.
"""

from __future__ import annotations

import numpy as np

from stoker import settings, types
from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.decoders import roi as roi_mod
from stoker.operators.decoders.cpu import DEFAULT_MAX_ASPECT_RATIO, DEFAULT_MAX_PIXELS, ImageDecodeError, decode_cpu
from stoker.operators.decoders.formats import ImageFormatError, read_info
from stoker.operators.random.crop_window import sample_crop_window
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import DenseRows

_GPU_ONLY = "only matters for device='mixed'; accepted and ignored on the CPU"

# Arguments of every image decoder (DALI's names and defaults).
DECODER_ARGS = (
    Arg("output_type", "image_type", types.RGB,
        doc="colour space: RGB, BGR, GRAY, YCbCr, or ANY_DATA (channels as stored)"),
    Arg("dtype", "dtype", types.UINT8, doc="output type; values are scaled to its range (floats: [0, 1])"),
    Arg("adjust_orientation", "bool", True, doc="apply the EXIF orientation"),
    Arg("hw_decoder_load", "float", 0.65, doc="share of JPEGs sent to the hardware decoder; " + _GPU_ONLY),
    Arg("preallocate_width_hint", "int", 0, doc=_GPU_ONLY),
    Arg("preallocate_height_hint", "int", 0, doc=_GPU_ONLY),
    Arg("use_fast_idct", "bool", False, doc="OpenCV offers no fast-IDCT switch; accepted and ignored on the CPU"),
    Arg("jpeg_fancy_upsampling", "bool", False, doc=_GPU_ONLY),
    Arg("affine", "bool", True, doc=_GPU_ONLY),
    Arg("device_memory_padding", "int", 16 * 1024 * 1024, doc=_GPU_ONLY),
    Arg("host_memory_padding", "int", 8 * 1024 * 1024, doc=_GPU_ONLY),
    Arg("device_memory_padding_jpeg2k", "int", 0, doc=_GPU_ONLY),
    Arg("host_memory_padding_jpeg2k", "int", 0, doc=_GPU_ONLY),
    Arg("hybrid_huffman_threshold", "int", 1_000_000, doc=_GPU_ONLY),
    Arg("split_stages", "bool", False, doc="deprecated in DALI; ignored"),
    Arg("use_chunk_allocator", "bool", False, doc="deprecated in DALI; ignored"),
    Arg("memory_stats", "bool", False, doc="ignored"),
    Arg("max_pixels", "int", None,
        doc="stoker only: refuse images whose header claims more pixels (height * width) than this, "
            f"before allocating anything; 0 = no limit; default: the pipeline's max_pixels, else "
            f"{DEFAULT_MAX_PIXELS} (2**28)"),
    Arg("max_aspect_ratio", "float", DEFAULT_MAX_ASPECT_RATIO,
        doc="stoker only: refuse images whose header gives a side more than this many times the other "
            "(e.g. 1 x 100000), before allocating anything: such strips are damaged or hostile headers, and "
            "a fixed-shorter-side resize would blow them up to gigapixels; 0 = no limit"),
    Arg("strict", "bool", True,
        doc="stoker only (DALI has no such argument): make the corrupt-data warnings of the format "
            "libraries sample errors, so that a damaged file is dropped or replaced (on_error 'skip', "
            "'substitute') or stops the run with its name ('raise') instead of becoming a sample of garbage "
            "pixels. JPEG: any libjpeg warning (corrupt entropy-coded data, premature end of the file, "
            "more than 500 progressive scans), through TurboJPEG (pip install stoker[jpeg]; same pixels "
            "and speed as the default decode; without it only a missing end-of-image marker is caught); "
            "stray bytes between header segments are tolerated, as libjpeg skips them without changing a "
            "pixel. PNG: every chunk's CRC and the IEND chunk. Other formats: their libraries' errors fail "
            "the sample either way. The cropping decoders check the data they decode (down to the window's "
            "last row). On by default under every on_error policy: under 'raise' a corrupt file should stop "
            "the run with its name rather than train on garbage; False decodes what can be read, as DALI "
            "does. device='mixed': the GPU decoders cannot report corrupt data, so under on_error 'skip' or "
            "'substitute' (setting jpeg_structure_check: always or never) each JPEG's marker structure is "
            "checked first (no decoding: one pass over its bytes) and a file with a broken one "
            "(truncated, markers damaged or out of place, restart markers missing, out of order or "
            "miscounted, as bytes inserted or lost in a file with restart markers leave it) decodes on the "
            "CPU, which refuses it; so does a file whose Huffman data libjpeg-turbo warns about when it "
            "reads it at 1/8 scale (damage that keeps the structure intact: bits flipped or bytes zeroed; "
            "setting jpeg_entropy_check, same default: 60-70 % of a CPU decode's time a file, on the "
            "pipeline's threads)"),
)

_DEVICES = ("cpu", "mixed")


def over_limits(op, heights, widths) -> np.ndarray:
    """Which images (header sizes, arrays) a decoder ``op`` refuses before decoding: more pixels
    than its ``max_pixels`` or a side more than ``max_aspect_ratio`` times the other (0 turns a
    limit off). The mixed decoders send these to the CPU decoder, whose header check fails the
    sample with the reason (so on_error applies as for any bad file)."""
    h = np.asarray(heights, np.float64)
    w = np.asarray(widths, np.float64)
    over = np.zeros(h.shape, bool)
    max_pixels = int(getattr(op, "max_pixels", 0) or 0)
    if max_pixels:
        over |= h * w > max_pixels
    ratio = float(getattr(op, "max_aspect_ratio", 0) or 0)
    if ratio:
        short, long = np.minimum(h, w), np.maximum(h, w)
        over |= (short > 0) & (long > ratio * short)
    return over


class _ImageDecoderBase(Operator):
    """Shared argument handling and the per-sample decode with error reporting."""

    def setup(self):
        a = self.args
        dtype = np.dtype(a["dtype"]) if a["dtype"] is not None else np.dtype(np.uint8)
        if dtype.kind not in "uif" or dtype.itemsize > 8:
            raise arg_error(self.schema.name, "dtype", f"{dtype} is not an image type; use UINT8, UINT16, "
                            "INT16, FLOAT ...")
        self.out_dtype = dtype
        self.output_type = a["output_type"] if a["output_type"] is not None else types.RGB
        max_pixels = a.get("max_pixels")
        if max_pixels is not None and max_pixels < 0:
            raise arg_error(self.schema.name, "max_pixels", f"must be >= 0 (0: no limit), got {max_pixels}")
        self.max_pixels = DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels
        self._max_pixels_given = max_pixels is not None
        ratio = a.get("max_aspect_ratio")
        if ratio is not None and ratio != 0 and not ratio >= 1:  # (also refuses NaN)
            raise arg_error(self.schema.name, "max_aspect_ratio", f"must be >= 1 (0: no limit), got {ratio}")
        self.max_aspect_ratio = DEFAULT_MAX_ASPECT_RATIO if ratio is None else float(ratio)
        self.strict = True if a.get("strict") is None else bool(a["strict"])

    def bind_pipeline(self, pipe) -> None:
        """Take the pipeline's max_pixels when the decoder was not given its own; a mixed decoder
        starts its hardware decoder now, beside the rest of the build."""
        default = getattr(pipe, "max_pixels", None)
        if not self._max_pixels_given and default is not None:
            self.max_pixels = default
        device_id = getattr(pipe, "device_id", None)
        if getattr(self, "device", None) == "mixed" and device_id is not None and settings.get().early_engines:
            from stoker.operators.decoders.mixed import start_engines_early

            start_engines_early(self, device_id)

    def decode(self, data, args, roi=None, roi_fn=None) -> np.ndarray:
        try:
            return decode_cpu(data, self.output_type, self.out_dtype, bool(args["adjust_orientation"]),
                              roi=roi, roi_fn=roi_fn, max_pixels=self.max_pixels, strict=self.strict,
                              max_aspect_ratio=self.max_aspect_ratio)
        except (ImageDecodeError, ImageFormatError) as e:
            raise self.error(str(e)) from None

    def output_layouts(self, input_layouts):
        return ["HWC"]

    def close(self) -> None:
        """Stop the mixed decoder's thread and free its nvJPEG state (``Pipeline.close``)."""
        state = getattr(self, "_mixed_state", None)
        if state is not None:
            state.close()
            self._mixed_state = None


@register
class ImageDecoder(_ImageDecoderBase):
    """Decodes encoded images (JPEG, PNG, BMP, TIFF, WebP, JPEG 2000, PNM) to HWC arrays."""

    schema = Schema(
        name="decoders.image",
        doc="Decodes images to HWC. Formats (found from the data, not the file name): JPEG, PNG, BMP, "
            "TIFF, WebP, JPEG 2000, PNM. 16-bit PNG/TIFF are scaled to the output dtype; EXIF "
            "orientation is applied unless adjust_orientation=False. ANY_DATA keeps the stored channels "
            "(1 gray, 2 gray + alpha, 3, or 4 with alpha); CMYK JPEGs are converted to RGB.",
        args=list(DECODER_ARGS) + [
            Arg("cache_size", "int", 0, doc="ignored"), Arg("cache_threshold", "int", 0, doc="ignored"),
            Arg("cache_type", "str", "", doc="ignored"), Arg("cache_debug", "bool", False, doc="ignored"),
            Arg("cache_batch_copy", "bool", True, doc="ignored")],
        devices=_DEVICES,
        legacy_name="ImageDecoder",
    )

    def run_sample(self, inputs, args, ctx):
        return self.decode(inputs[0], args)


@register
class ImageDecoderRandomCrop(_ImageDecoderBase):
    """Decodes images and returns a random window (random area and aspect ratio)."""

    schema = Schema(
        name="decoders.image_random_crop",
        doc="Decodes images and crops a random window whose area fraction is drawn from random_area and "
            "aspect ratio (width / height, log-uniform) from random_aspect_ratio, as "
            "fn.random_resized_crop does. On the CPU, colour JPEGs decode only the window when a "
            "TurboJPEG 3 library is installed (pip install stoker[jpeg]; same pixels as decoding the "
            "whole image); otherwise the whole image is decoded and then cropped.",
        args=list(DECODER_ARGS) + [
            Arg("random_area", "float_list", [0.08, 1.0], doc="range of the window's area fraction"),
            Arg("random_aspect_ratio", "float_list", [3 / 4, 4 / 3], doc="range of the window's width/height"),
            Arg("num_attempts", "int", 10, doc="random windows tried before the fallback window")],
        devices=_DEVICES,
        random=True,
        legacy_name="ImageDecoderRandomCrop",
    )

    def setup(self):
        super().setup()
        self.area = _range_arg(self, "random_area", positive=False)
        self.aspect = _range_arg(self, "random_aspect_ratio", positive=True)
        if self.area[0] < 0 or self.area[1] <= 0:
            raise arg_error(self.schema.name, "random_area", f"{self.area} must lie in (0, 1]")
        if self.args["num_attempts"] is not None and self.args["num_attempts"] < 1:
            raise arg_error(self.schema.name, "num_attempts", "must be at least 1")

    def run_sample(self, inputs, args, ctx):
        attempts = int(self.args["num_attempts"] or 10)

        def window(h, w):
            return sample_crop_window(ctx.rng, h, w, self.area, self.aspect, attempts)

        return self.decode(inputs[0], args, roi_fn=window)


@register
class ImageDecoderCrop(_ImageDecoderBase):
    """Decodes images and returns a fixed-size window at a relative position."""

    schema = Schema(
        name="decoders.image_crop",
        doc="Decodes images and crops a (crop_h, crop_w) window whose corner is at "
            "crop_pos * (extent - size), as fn.crop does. The window must fit in the image.",
        args=list(DECODER_ARGS) + [
            Arg("crop", "float_list", None, tensor=True, doc="(crop_h, crop_w) window size"),
            Arg("crop_h", "float", 0.0, tensor=True, doc="window height (with crop_w, instead of crop)"),
            Arg("crop_w", "float", 0.0, tensor=True, doc="window width"),
            Arg("crop_d", "float", 0.0, tensor=True, doc="volumetric only; must stay 0 for images"),
            Arg("crop_pos_x", "float", 0.5, tensor=True, doc="horizontal position in [0, 1]"),
            Arg("crop_pos_y", "float", 0.5, tensor=True, doc="vertical position in [0, 1]"),
            Arg("crop_pos_z", "float", 0.5, tensor=True, doc="volumetric only; ignored"),
            Arg("rounding", "str", "round", doc="'round' or 'truncate': how the corner is made whole")],
        devices=_DEVICES,
        legacy_name="ImageDecoderCrop",
    )

    def setup(self):
        super().setup()
        a = self.args
        name = self.schema.name
        if a["rounding"] not in ("round", "truncate"):
            raise arg_error(name, "rounding", f"{a['rounding']!r}: use 'round' or 'truncate'")
        has_hw = _given(a, "crop_h") or _given(a, "crop_w")
        if _given(a, "crop") and has_hw:
            raise arg_error(name, "crop", "give either crop or crop_h/crop_w, not both")
        if not _given(a, "crop") and not has_hw:
            raise arg_error(name, "crop", "is required (or crop_h and crop_w)")

    def run_sample(self, inputs, args, ctx):
        if args.get("crop") is not None:
            crop = np.asarray(args["crop"], np.float64).reshape(-1)
            if crop.size == 1:
                crop = np.repeat(crop, 2)
            if crop.size != 2:
                raise self.error(f"argument 'crop' needs (crop_h, crop_w), got {crop.tolist()}")
            ch, cw = crop
        else:
            ch, cw = float(args["crop_h"] or 0), float(args["crop_w"] or 0)
        px, py, rounding = float(args["crop_pos_x"]), float(args["crop_pos_y"]), self.args["rounding"]

        def window(h, w):
            try:
                return roi_mod.crop_window(h, w, ch, cw, px, py, rounding)
            except ValueError as e:
                raise ImageDecodeError(str(e)) from None

        return self.decode(inputs[0], args, roi_fn=window)


@register
class ImageDecoderSlice(_ImageDecoderBase):
    """Decodes images and returns a slice given by anchor/shape inputs or named arguments."""

    schema = Schema(
        name="decoders.image_slice",
        doc="Decodes images and extracts a slice, as fn.slice does: either positional inputs "
            "(data, anchor, shape) or named arguments start/rel_start with end/rel_end/shape/rel_shape. "
            "Coordinates follow axis_names (default 'WH', i.e. x first) or axes. The slice must fit.",
        args=list(DECODER_ARGS) + [
            Arg("start", "float_list", None, tensor=True, doc="absolute start coordinates"),
            Arg("rel_start", "float_list", None, tensor=True, doc="relative start coordinates"),
            Arg("end", "float_list", None, tensor=True, doc="absolute end coordinates"),
            Arg("rel_end", "float_list", None, tensor=True, doc="relative end coordinates"),
            Arg("shape", "float_list", None, tensor=True, doc="absolute slice shape"),
            Arg("rel_shape", "float_list", None, tensor=True, doc="relative slice shape"),
            Arg("axes", "int_list", None, tensor=True,
                doc="axis indices (in [-2, 1]: 0 or -2 is H, 1 or -1 is W) of the coordinates; per "
                    "sample allowed; not together with axis_names (None: axis_names' order)"),
            Arg("axis_names", "layout", None,
                doc="axis names ('H', 'W') of the coordinates; not together with axes (None: 'WH', "
                    "x first, unless axes is given)"),
            Arg("normalized_anchor", "bool", True, doc="float anchor input is relative"),
            Arg("normalized_shape", "bool", True, doc="float shape input is relative")],
        inputs=(1, 3),
        devices=_DEVICES,
        legacy_name="ImageDecoderSlice",
    )

    def setup(self):
        super().setup()
        a = self.args
        name = self.schema.name
        if _given(a, "start") and _given(a, "rel_start"):
            raise arg_error(name, "start", "start and rel_start are mutually exclusive")
        ends = [k for k in ("end", "rel_end", "shape", "rel_shape") if _given(a, k)]
        if len(ends) > 1:
            raise arg_error(name, ends[1], f"{', '.join(ends)} are mutually exclusive")
        # A per-sample axes tensor is absent from the static args (_given says True then).
        if _given(a, "axes") and a.get("axis_names"):
            raise arg_error(name, "axes", "axes and axis_names are mutually exclusive")
        self.axes = None  # per sample: run_sample reads each sample's axes
        if "axes" in a:
            try:
                self.axes = roi_mod.slice_axes(a.get("axes"), a.get("axis_names"))
            except ValueError as e:
                raise arg_error(name, "axis_names" if a.get("axis_names") else "axes", str(e)) from None
        self.named = ("start", "rel_start", "end", "rel_end", "shape", "rel_shape")

    # The anchor and shape inputs as the mixed decoder hands them to the per-sample rules: as
    # per-sample arguments under these names (its host half takes one input, the encoded data).
    ANCHOR_INPUT, SHAPE_INPUT = "_anchor_input", "_shape_input"

    def run_sample(self, inputs, args, ctx):
        if len(inputs) not in (1, 3):
            raise self.error("expected 1 input (with named slice arguments) or 3 (data, anchor, shape), "
                             f"got {len(inputs)}")
        anchor, shape = (inputs[1], inputs[2]) if len(inputs) == 3 else \
            (args.get(self.ANCHOR_INPUT), args.get(self.SHAPE_INPUT))
        return self.decode(inputs[0], args, roi_fn=self.window_rule(args, anchor, shape))

    def batch_windows(self, arg_inputs: dict, sizes: np.ndarray, known: np.ndarray):
        """The (N, 4) windows of a mixed decode's batch from the anchor and shape inputs (as
        arguments, see ANCHOR_INPUT), rows of unknown size zero; None where the per-sample rule
        must run (named slice arguments, per-sample axes, a sample it would refuse)."""
        if self.ANCHOR_INPUT not in arg_inputs or self.axes is None or \
                any(self.args.get(k) is not None or k in arg_inputs for k in self.named):
            return None
        rows = np.flatnonzero(known)
        try:
            wins = roi_mod.positional_slice_windows(
                sizes[rows, 0], sizes[rows, 1], self.axes, _at_rows(arg_inputs[self.ANCHOR_INPUT], rows),
                _at_rows(arg_inputs[self.SHAPE_INPUT], rows), bool(self.args["normalized_anchor"]),
                bool(self.args["normalized_shape"]))
        except ValueError:
            return None
        out = np.zeros((len(sizes), 4), np.int64)
        out[rows] = wins
        return out

    def window_rule(self, args, anchor=None, shape=None):
        """``(h, w) -> (y0, x0, height, width)``: one sample's window from its anchor and shape
        inputs (when given) or the named slice arguments."""
        named = {k: args.get(k) for k in self.named if args.get(k) is not None}
        axes = self.axes
        if axes is None:
            try:
                axes = roi_mod.slice_axes(np.asarray(args["axes"]).reshape(-1).tolist(), None)
            except ValueError as e:
                raise self.error(f"argument 'axes': {e}") from None
        if anchor is not None:
            if named:
                raise self.error("named slice arguments (start, end, shape ...) cannot be combined with "
                                 "the anchor and shape inputs")

            def window(h, w):
                try:
                    return roi_mod.positional_slice_window(h, w, axes, anchor, shape,
                                                           bool(self.args["normalized_anchor"]),
                                                           bool(self.args["normalized_shape"]))
                except ValueError as e:
                    raise ImageDecodeError(str(e)) from None
            return window
        if not named:
            raise self.error("give the slice as (data, anchor, shape) inputs or with start/end/shape arguments")

        def window(h, w):
            try:
                return roi_mod.slice_window(h, w, axes, **named)
            except ValueError as e:
                raise ImageDecodeError(str(e)) from None
        return window


@register
class PeekImageShape(Operator):
    """The (H, W, C) shape an image will have once decoded, read from its header."""

    schema = Schema(
        name="peek_image_shape",
        doc="Returns the shape (H, W, C) that decoding would produce, from the file header only (no "
            "decoding). C follows image_type: 3 for RGB/BGR/YCbCr, 1 for GRAY, stored channels for "
            "ANY_DATA.",
        args=[Arg("dtype", "dtype", types.INT64, doc="element type of the shape"),
              Arg("adjust_orientation", "bool", True, doc="swap H and W when EXIF says the image is rotated"),
              Arg("image_type", "image_type", types.RGB, doc="colour space the channel count refers to")],
        devices=("cpu",),
        legacy_name="PeekImageShape",
    )

    def run_sample(self, inputs, args, ctx):
        try:
            info = read_info(memoryview(np.ascontiguousarray(inputs[0]).reshape(-1)))
        except ImageFormatError as e:
            raise self.error(str(e)) from None
        h, w, c = info.shape(bool(self.args["adjust_orientation"]))
        image_type = self.args["image_type"] if self.args["image_type"] is not None else types.RGB
        if image_type == types.GRAY:
            c = 1
        elif image_type != types.ANY_DATA:
            c = 3
        return np.array([h, w, c], dtype=self.args["dtype"])

    def output_layouts(self, input_layouts):
        return [""]



def _at_rows(values, rows: np.ndarray):
    """The per-sample values of ``rows``: one array when the batch is held as one (DenseRows), else
    a list of the samples' arrays."""
    if isinstance(values, DenseRows):
        return values.array[rows]
    return [values[i] for i in rows.tolist()]


def _given(args: dict, name: str) -> bool:
    """Whether an argument was set: a value, or a per-sample tensor (absent from the static args)."""
    if name not in args:
        return True
    v = args[name]
    return v is not None and not (isinstance(v, float) and v == 0.0)


def _range_arg(op, name, positive):
    v = op.args[name]
    if v is None:
        return None
    if len(v) == 1:
        v = [v[0], v[0]]
    if len(v) != 2 or v[0] > v[1]:
        raise arg_error(op.schema.name, name, f"{v} must be a (min, max) range with min <= max")
    if positive and v[0] <= 0:
        raise arg_error(op.schema.name, name, f"{v} must be positive")
    return float(v[0]), float(v[1])
