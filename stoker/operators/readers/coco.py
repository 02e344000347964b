"""``fn.readers.coco``: images of a COCO data set with their boxes, labels and masks.

Outputs, in DALI's order:

1. the image file's bytes (1D uint8; decode them with ``fn.decoders.image``);
2. the boxes, float32 (M, 4): [x, y, w, h], or [l, t, r, b] with ``ltrb``; relative to
   the image size with ``ratio``;
3. the labels, int32 (M,);
4. with ``polygon_masks``: the polygons, int32 (P, 3) rows (object index, first vertex,
   end vertex), and the vertices, float32 (V, 2) (x, y); with the deprecated ``masks``
   the vertex indices are doubled (coordinate indices), as in DALI;
5. with ``pixelwise_masks``: the label mask, int32 (H, W, 1), layout "HWC" (needs the
   optional ``pycocotools`` package; see :mod:`._coco_masks`);
6. with ``image_ids``: the image's id in the annotations, int32 (1,).

How the annotations become samples is in :mod:`._coco_annotations`. A sample's
``source_info`` is the image's ``file_name`` as written in the annotations. With 4 or more
pipeline threads local image files are read by the I/O helper process one batch ahead
(:mod:`._batch_read`).

``save_preprocessed_annotations`` writes the parsed annotations to
``save_preprocessed_annotations_dir`` and ``preprocessed_annotations`` reads them back
instead of the JSON file, as DALI's arguments do; the file is stoker's own (one ``.npz``),
not DALI's set of ``.dat`` files, so the two libraries cannot read each other's.
"""

from __future__ import annotations

import logging

import numpy as np

from stoker.operators.readers import storage
from stoker.operators.readers._coco_annotations import CocoIndex, load, parse_json, save
from stoker.operators.readers._coco_masks import pixelwise_mask, require_pycocotools
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import Arg, Schema, register

_log = logging.getLogger("stoker")

# DALI's deprecated names and the arguments they stand for.
_ALIASES = {"save_img_ids": "image_ids", "dump_meta_files": "save_preprocessed_annotations",
            "dump_meta_files_path": "save_preprocessed_annotations_dir", "meta_files_path": "preprocessed_annotations"}
# What the parse depends on: refused next to preprocessed_annotations (the file has it baked in), as in DALI.
_PARSE_ARGS = {"annotations_file": None, "images": None, "ltrb": False, "ratio": False, "skip_empty": False,
               "size_threshold": 0.1}


def _resolve(args: dict) -> dict:
    """``args`` with each deprecated alias folded into its current name."""
    out = dict(args)
    for old, new in _ALIASES.items():
        if out.get(old) not in (None, False, ""):
            out[new] = out[old]
    return out


def _polygon_outputs(args: dict) -> bool:
    return bool(args.get("polygon_masks") or args.get("masks"))


def _coco_outputs(args: dict) -> int:
    a = _resolve(args)
    return 3 + 2 * _polygon_outputs(a) + int(bool(a.get("pixelwise_masks"))) + int(bool(a.get("image_ids")))


@register
class COCOReader(IndexedReader):
    """Reads a COCO data set (``fn.readers.coco`` / ``ops.COCOReader``)."""

    schema = Schema(
        name="readers.coco",
        doc="Reads the images of a COCO data set with their annotations. Outputs: encoded image (1D uint8), "
            "boxes (float32 Mx4), labels (int32 M); then polygons (int32 Px3) and vertices (float32 Vx2) with "
            "polygon_masks, or the label mask (int32 HxWx1) with pixelwise_masks; then the image id "
            "(int32 (1,)) with image_ids.",
        args=[
            Arg("file_root", "str", None, doc="folder the images' file_name paths are relative to"),
            Arg("annotations_file", "str", None, doc="the COCO annotations JSON file"),
            Arg("images", "str_list", None,
                doc="file names to read, in this order (repeats give copies); default: every image, by id"),
            Arg("ltrb", "bool", False, doc="boxes as [left, top, right, bottom] instead of [x, y, w, h]"),
            Arg("ratio", "bool", False, doc="boxes and vertices relative to the image's width and height"),
            Arg("skip_empty", "bool", False, doc="leave out images without objects"),
            Arg("size_threshold", "float", 0.1, doc="leave out objects whose box is narrower or lower than this"),
            Arg("include_iscrowd", "bool", True, doc="keep the objects marked iscrowd=1"),
            Arg("avoid_class_remapping", "bool", False,
                doc="labels are the category ids; default: their ranks in 'categories', from 1"),
            Arg("polygon_masks", "bool", False, doc="add the polygons and vertices outputs"),
            Arg("pixelwise_masks", "bool", False, doc="add the (H, W, 1) label mask output (needs pycocotools)"),
            Arg("image_ids", "bool", False, doc="add the image id output"),
            Arg("save_preprocessed_annotations", "bool", False,
                doc="write the parsed annotations to save_preprocessed_annotations_dir (stoker's own format)"),
            Arg("save_preprocessed_annotations_dir", "str", None, doc="where save_preprocessed_annotations writes"),
            Arg("preprocessed_annotations", "str", None,
                doc="a folder written by save_preprocessed_annotations, read instead of the JSON file"),
            Arg("masks", "bool", False,
                doc="deprecated: polygon_masks with vertex indices doubled (indices of coordinates)"),
            Arg("save_img_ids", "bool", None, doc="deprecated name of image_ids"),
            Arg("dump_meta_files", "bool", None, doc="deprecated name of save_preprocessed_annotations"),
            Arg("dump_meta_files_path", "str", None, doc="deprecated name of save_preprocessed_annotations_dir"),
            Arg("meta_files_path", "str", None, doc="deprecated name of preprocessed_annotations"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=_coco_outputs,
        legacy_name="COCOReader",
    )

    def setup(self) -> None:
        super().setup()
        given = self.args
        for old, new in _ALIASES.items():
            if given.get(old) not in (None, False, "") and given.get(new) not in (None, False, ""):
                raise self._arg_error(old, f"is a deprecated name of '{new}'; give only one of them")
        a = self._opts = _resolve(given)
        self._polygons = _polygon_outputs(a)
        if self._polygons and a["pixelwise_masks"]:
            raise self._arg_error("pixelwise_masks", "cannot be combined with polygon_masks")
        if a["pixelwise_masks"]:
            require_pycocotools(self._label())
        if a["preprocessed_annotations"]:
            for arg, default in _PARSE_ARGS.items():
                if a[arg] != default:
                    raise self._arg_error(arg, "cannot be used with preprocessed_annotations (the parsed file "
                                               "already has it applied)")
        elif not a["annotations_file"]:
            raise self._arg_error("annotations_file", "is required unless preprocessed_annotations is given")
        if bool(a["save_preprocessed_annotations"]) != bool(a["save_preprocessed_annotations_dir"]):
            raise self._arg_error("save_preprocessed_annotations",
                                  "and save_preprocessed_annotations_dir must be given together")
        self._index: CocoIndex | None = None

    # --- listing -------------------------------------------------------------------------------
    def list_samples(self) -> int:
        a = self._opts
        segm = self._polygons or a["pixelwise_masks"]
        if a["preprocessed_annotations"]:
            index = load(a["preprocessed_annotations"])
            if segm and not index.has_segmentation or a["pixelwise_masks"] and not index.has_rle:
                what = "pixelwise_masks" if a["pixelwise_masks"] else "polygon_masks"
                raise ListingError(what, f"the preprocessed annotations in {a['preprocessed_annotations']!r} were "
                                         f"saved without masks; save them again with {what}=True")
        else:
            index = parse_json(
                a["annotations_file"], images=a["images"], ltrb=a["ltrb"], ratio=a["ratio"],
                skip_empty=a["skip_empty"], size_threshold=a["size_threshold"],
                include_iscrowd=a["include_iscrowd"], remap_classes=not a["avoid_class_remapping"],
                keep_segmentation=bool(segm), keep_rle=bool(a["pixelwise_masks"]))
            if index.missing_images:
                _log.warning("%s: %d of the %d names in 'images' are not in %s and are left out", self._label(),
                             index.missing_images, len(a["images"]), a["annotations_file"])
        if a["save_preprocessed_annotations"]:
            try:
                save(index, a["save_preprocessed_annotations_dir"])
            except OSError as e:
                raise ListingError("save_preprocessed_annotations_dir", f"cannot write there: {e}") from None
        self._index = index
        return len(index)

    def sample_source(self, i: int) -> str:
        return self._index.filenames[i]

    def listing_digest(self, digest) -> None:
        ix = self._index
        digest.update("\0".join(ix.filenames).encode("utf-8", "surrogateescape"))
        for arr in (ix.image_ids, ix.obj, ix.boxes, ix.labels):
            digest.update(np.ascontiguousarray(arr).tobytes())

    # --- reading -------------------------------------------------------------------------------
    def _path(self, i: int) -> str:
        root, name = self._opts["file_root"], self._index.filenames[i]
        return storage.join(root, name) if root else name

    def reads_ranges(self) -> bool:
        """Batches through the I/O helper process when the images are local files."""
        root = self._opts["file_root"]
        if root:
            return not storage.is_remote(root) and not any("://" in n for n in self._index.filenames)
        return not any(storage.is_remote(n) for n in self._index.filenames)

    def sample_range(self, i: int) -> tuple[str, int, None]:
        """The whole image file (the annotations come from the parsed index, not from a read)."""
        path = self._path(i)
        return (path if storage.is_remote(path) else storage.local_path(path)), 0, None

    def parse_sample(self, i: int, raw) -> tuple:
        """The outputs of sample ``i``: ``raw`` (the image file's bytes, a uint8 array) and its
        annotations."""
        ix, a = self._index, self._opts
        path = self._path(i)
        image = raw
        lo, hi = ix.obj[i], ix.obj[i + 1]
        out = [image, ix.boxes[lo:hi].copy(), ix.labels[lo:hi].copy()]
        if self._polygons or a["pixelwise_masks"]:
            polygons = ix.polygons[ix.poly[i]:ix.poly[i + 1]]
            vertices = ix.vertices[ix.vert[i]:ix.vert[i + 1]]
        if self._polygons:
            polygons = polygons.copy()
            if a["masks"]:  # the deprecated format counts coordinates, not vertices
                polygons[:, 1:] *= 2
            out += [polygons, vertices.copy()]
        if a["pixelwise_masks"]:
            r0, r1 = ix.rle[i], ix.rle[i + 1]
            out.append(pixelwise_mask(int(ix.heights[i]), int(ix.widths[i]), out[2], polygons, vertices,
                                      ix.rle_object[r0:r1], ix.rle_size[r0:r1], ix.rle_counts[r0:r1],
                                      where=f"{path} (image id {int(ix.image_ids[i])})"))
        if a["image_ids"]:
            out.append(ix.image_ids[i:i + 1].copy())
        return tuple(out)

    def output_layouts(self, input_layouts):
        layouts = [""] * self.num_outputs
        if self._opts["pixelwise_masks"]:
            layouts[3] = "HWC"
        return layouts
