"""One benchmark per data-set format: the same images read by each reader, stoker beside DALI.

    python benchmarks/reader_formats.py DATA_DIR [--formats tfrecord,webdataset,mxnet,caffe,caffe2,coco,numpy,file]
        [--threads 16] [--batch 256] [--seconds 8] [--rounds 1] [--device cpu|gpu] [--libs stoker,dali]
        [--work DIR]

DATA_DIR is an ImageNet-like folder (one sub-folder of JPEGs per class, as written by
``python -m stoker.sample_data OUT N``). It is repacked once into each format under ``--work``
(kept for later runs; packed again when DATA_DIR's listing changes), with an index where the
format has one. The packing needs only NumPy and OpenCV: TFRecord framing and its masked
CRC-32C, RecordIO, tar, COCO JSON and protobuf records are written here; the LMDB formats
(caffe, caffe2) need the ``lmdb`` package and are skipped with a message without it.

Pipeline per format: reader -> decoders.image (device "cpu", or "mixed" with ``--device gpu``)
-> resize to 224x224 -> crop_mirror_normalize to float CHW. For ``numpy`` the files hold the
images already decoded and resized to 256x256 (uint8 HWC): reader (on the GPU with
``--device gpu``) -> crop_mirror_normalize with a 224x224 centre crop. Samples are read in
order (no shuffling), one shard.

First, once per format, each library reads the first batch without decoding (in its own
process); both must give the same number of samples, the same bytes and the same labels, or
the format is reported as a mismatch and not timed. Then each (format, library) runs in its own
subprocess, libraries interleaved per round (stoker, dali, stoker, dali with ``--rounds 2``)
so that drift of the machine shows. Each prints one JSON line: images/s over ``--seconds``
after warm-up, CPU time per image (the process and its children), the time from building the
pipeline to its first batch, and the load average. A table of stoker/DALI ratios ends the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

FORMATS = ("tfrecord", "webdataset", "mxnet", "caffe", "caffe2", "coco", "numpy", "file")
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
SHARD = 1024  # images per TFRecord file / tar archive, about the size of ImageNet's shards
NPY_SIDE = 256


# --- the source folder ----------------------------------------------------------------------------
def list_images(root: str) -> list[tuple[str, int]]:
    """(path, label) of every JPEG, in readers.file's order: class folders sorted, files sorted."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        folder = os.path.join(root, c)
        out += [(os.path.join(folder, n), label) for n in sorted(os.listdir(folder))
                if n.lower().endswith((".jpg", ".jpeg"))]
    if not out:
        sys.exit(f"no JPEGs in class sub-folders of {root!r}: give a folder such as "
                 "`python -m stoker.sample_data OUT 512` writes")
    return out


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def jpeg_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a JPEG's frame header, without decoding it (for the COCO JSON)."""
    pos = 2
    while pos + 9 < len(data):
        marker, length = data[pos + 1], struct.unpack_from(">H", data, pos + 2)[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            h, w = struct.unpack_from(">HH", data, pos + 5)
            return w, h
        pos += 2 + length
    raise ValueError("no JPEG frame header")


# --- CRC-32C for TFRecord framing -------------------------------------------------------------------
# A crc32c package may be missing on the benchmark host, and a Python loop per byte would take
# minutes for a large folder, so the CRC is computed with NumPy: every message is cut into chunks
# of _CHUNK bytes (zeros in front of the first, which leave a CRC register of 0 unchanged), the
# chunks of all messages advance one byte per step together, and each message's chunk CRCs are
# then folded with the linear map "append _CHUNK zero bytes".
_CHUNK = 1024


def _crc_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(0x82F63B78), t >> 1)
    return t.astype(np.uint32)


_TABLE = _crc_table()


def _advance(crc: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """The CRC registers ``crc`` after the bytes of ``columns`` (one row per step)."""
    for col in columns:
        crc = _TABLE[(crc ^ col) & 0xFF] ^ (crc >> 8)
    return crc


def _shift_tables() -> np.ndarray:
    """For each byte of a register and each value of it: that part of the register after _CHUNK
    zero bytes; the register's image is the xor of its four bytes' images (the map is linear)."""
    start = (np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32)[:, None])).ravel()
    return _advance(start, np.zeros((_CHUNK, 1), np.uint8)).reshape(4, 256)


def _masked_crcs_numpy(messages: list[bytes]) -> list[int]:
    shift = _shift_tables()
    counts = np.array([-(-len(m) // _CHUNK) for m in messages])
    padded = bytearray()
    for m, k in zip(messages, counts):
        head = bytearray(k * _CHUNK - len(m)) + m[:4]
        # The standard initial register 0xFFFFFFFF equals inverting the first four message bytes
        # under a register of 0; then the zeros in front change nothing.
        head[-4:] = bytes(b ^ 0xFF for b in head[-4:])
        padded += head + m[4:]
    chunks = np.frombuffer(bytes(padded), np.uint8).reshape(-1, _CHUNK)
    chunk_crc = _advance(np.zeros(len(chunks), np.uint32), np.ascontiguousarray(chunks.T))
    # Right-align each message's chunk CRCs in a row; the leading zeros fold to nothing.
    grid = np.zeros((len(messages), int(counts.max())), np.uint32)
    rows = np.repeat(np.arange(len(messages)), counts)
    cols = np.concatenate([np.arange(grid.shape[1] - k, grid.shape[1]) for k in counts])
    grid[rows, cols] = chunk_crc
    crc = np.zeros(len(messages), np.uint32)
    for j in range(grid.shape[1]):
        crc = (shift[0][crc & 0xFF] ^ shift[1][(crc >> 8) & 0xFF] ^ shift[2][(crc >> 16) & 0xFF]
               ^ shift[3][crc >> 24] ^ grid[:, j])
    crc = crc ^ np.uint32(0xFFFFFFFF)
    return (((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)).tolist()  # uint32 wraps: TFRecord's mask


def masked_crcs(messages: list[bytes]) -> list[int]:
    """TFRecord's masked CRC-32C of each message (each at least 4 bytes long)."""
    try:
        import crc32c

        return [((((c := crc32c.crc32c(m)) >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF for m in messages]
    except ImportError:
        return _masked_crcs_numpy(messages)


# --- the writers ------------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pb_bytes(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _pb_int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _example(image: bytes, label: int) -> bytes:
    """A tf.train.Example with image/encoded (bytes) and image/class/label (int64)."""
    def entry(key: str, feature: bytes) -> bytes:
        return _pb_bytes(1, _pb_bytes(1, key.encode()) + _pb_bytes(2, feature))

    encoded = entry("image/encoded", _pb_bytes(1, _pb_bytes(1, image)))  # Feature.bytes_list.value
    labelled = entry("image/class/label", _pb_bytes(3, _pb_bytes(1, _varint(label))))  # packed int64_list
    return _pb_bytes(1, encoded + labelled)


def pack_tfrecord(images, out: str) -> dict:
    paths, indexes = [], []
    for s in range(0, len(images), SHARD):
        part = images[s:s + SHARD]
        data = [_example(read(p), label) for p, label in part]
        heads = [struct.pack("<Q", len(d)) for d in data]
        crcs = masked_crcs(heads + data)
        stem = os.path.join(out, f"part-{s // SHARD:05d}")
        path, index = stem + ".tfrecord", stem + ".idx"
        offset, lines = 0, []
        with open(path, "wb") as f:
            for k, (h, d) in enumerate(zip(heads, data)):
                f.write(h + struct.pack("<I", crcs[k]) + d + struct.pack("<I", crcs[len(data) + k]))
                lines.append(f"{offset} {16 + len(d)}\n")
                offset += 16 + len(d)
        with open(index, "w") as f:
            f.writelines(lines)
        paths.append(path)
        indexes.append(index)
    return {"path": paths, "index_path": indexes}


def pack_webdataset(images, out: str) -> dict:
    paths, indexes = [], []
    for s in range(0, len(images), SHARD):
        path = os.path.join(out, f"shard-{s // SHARD:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (p, label) in enumerate(images[s:s + SHARD], s):
                for ext, data in (("jpg", read(p)), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{i:08d}.{ext}")
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, _BytesReader(data))
        with tarfile.open(path) as tar:  # where each member's data landed: DALI's index "v1.2"
            members = [m for m in tar if m.isreg()]
        lines = [f"v1.2 {len(members) // 2}"]
        for a, b in zip(members[::2], members[1::2]):
            lines.append(" ".join(f"{m.name.split('.', 1)[1]} {m.offset_data} {m.size} {m.name}" for m in (a, b)))
        index = path[:-4] + ".idx"
        with open(index, "w") as f:
            f.write("\n".join(lines) + "\n")
        paths.append(path)
        indexes.append(index)
    return {"paths": paths, "index_paths": indexes}


class _BytesReader:
    """The file object tarfile.addfile reads a member's data from."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        chunk, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return chunk


_RECORDIO_MAGIC = struct.pack("<I", 0xCED7230A)


def _recordio(payload: bytes) -> bytes:
    """One RecordIO record: the payload cut where it holds the magic at an aligned position (the
    magic dropped, continuation flags 1, 2..., 3), each part padded to 4 bytes."""
    cuts = [i for i in range(0, len(payload) - 3, 4) if payload[i:i + 4] == _RECORDIO_MAGIC]
    bounds = list(zip([0] + [c + 4 for c in cuts], cuts + [len(payload)]))
    flags = [0] if not cuts else [1] + [2] * (len(cuts) - 1) + [3]
    return b"".join(_RECORDIO_MAGIC + struct.pack("<I", flag << 29 | (b - a)) + payload[a:b] + bytes(-(b - a) % 4)
                    for flag, (a, b) in zip(flags, bounds))


def pack_mxnet(images, out: str) -> dict:
    rec, idx = os.path.join(out, "data.rec"), os.path.join(out, "data.idx")
    offset = 0
    with open(rec, "wb") as f, open(idx, "w") as ix:
        for i, (p, label) in enumerate(images):
            r = _recordio(struct.pack("<IfQQ", 0, float(label), i, 0) + read(p))  # IRHeader, then the JPEG
            ix.write(f"{i}\t{offset}\n")
            f.write(r)
            offset += len(r)
    return {"path": [rec], "index_path": [idx]}


def _pack_lmdb(images, out: str, value) -> dict:
    import lmdb  # the caller checked that it imports

    total = sum(os.path.getsize(p) for p, _ in images)
    env = lmdb.open(out, map_size=2 * total + (64 << 20))
    with env.begin(write=True) as txn:
        for i, (p, label) in enumerate(images):
            txn.put(f"{i:08d}".encode(), value(read(p), label))
    env.close()
    return {"path": [out]}


def pack_caffe(images, out: str) -> dict:
    # caffe.Datum: data = 4, label = 5, encoded = 7
    return _pack_lmdb(images, out, lambda data, label: _pb_bytes(4, data) + _pb_int(5, label) + _pb_int(7, 1))


def pack_caffe2(images, out: str) -> dict:
    # caffe2.TensorProtos.protos = 1: a STRING (4) image tensor with string_data (6), then an INT32 (2)
    # label tensor with int32_data (4, packed); data_type is field 2
    def value(data, label):
        image = _pb_int(2, 4) + _pb_bytes(6, data)
        labelled = _pb_int(2, 2) + _pb_bytes(4, _varint(label))
        return _pb_bytes(1, image) + _pb_bytes(1, labelled)

    return _pack_lmdb(images, out, value)


def pack_coco(images, out: str, root: str) -> dict:
    """An annotations file over DATA_DIR's own images: one box per image, category = class + 1."""
    doc = {"images": [], "annotations": [], "categories": []}
    for i, (p, label) in enumerate(images, 1):
        w, h = jpeg_size(read(p))
        doc["images"].append({"id": i, "file_name": os.path.relpath(p, root), "width": w, "height": h})
        box = [0.1 * w, 0.1 * h, 0.5 * w, 0.5 * h]
        doc["annotations"].append({"id": i, "image_id": i, "category_id": label + 1, "bbox": box,
                                   "area": box[2] * box[3], "iscrowd": 0})
    doc["categories"] = [{"id": c + 1, "name": f"class_{c}"} for c in range(max(lb for _, lb in images) + 1)]
    path = os.path.join(out, "instances.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return {"file_root": os.path.abspath(root), "annotations_file": path}


def pack_numpy(images, out: str) -> dict:
    import cv2

    def one(k: int) -> None:
        img = cv2.imdecode(np.frombuffer(read(images[k][0]), np.uint8), cv2.IMREAD_COLOR)
        img = cv2.resize(img, (NPY_SIDE, NPY_SIDE), interpolation=cv2.INTER_AREA)[:, :, ::-1]
        np.save(os.path.join(out, f"{k:08d}.npy"), np.ascontiguousarray(img))

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # OpenCV lets go of the GIL
        list(pool.map(one, range(len(images))))
    return {"file_root": out}


def packed(fmt: str, root: str, images, work: str) -> dict | None:
    """The reader arguments of ``fmt``'s copy of the folder, packed now unless done before for the
    same listing; None (with a message) where the format cannot be written here."""
    if fmt == "file":
        return {"file_root": os.path.abspath(root)}
    if fmt in ("caffe", "caffe2"):
        try:
            import lmdb  # noqa: F401
        except ImportError:
            print(f"{fmt}: skipped, the 'lmdb' package is not installed (pip install lmdb)", flush=True)
            return None
    listing = hashlib.sha256("\n".join(f"{p} {lb} {os.path.getsize(p)}" for p, lb in images).encode()).hexdigest()
    out = os.path.join(work, fmt)
    stamp = os.path.join(out, "packed.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            done = json.load(f)
        if done["listing"] == listing:
            return done["args"]
    if os.path.isdir(out):
        for name in os.listdir(out):
            os.remove(os.path.join(out, name))
    os.makedirs(out, exist_ok=True)
    t = time.perf_counter()
    writer = {"tfrecord": pack_tfrecord, "webdataset": pack_webdataset, "mxnet": pack_mxnet, "caffe": pack_caffe,
              "caffe2": pack_caffe2, "numpy": pack_numpy}.get(fmt)
    args = pack_coco(images, out, root) if fmt == "coco" else writer(images, out)
    with open(stamp, "w") as f:
        json.dump({"listing": listing, "args": args}, f)
    print(f"{fmt}: packed {len(images)} images into {out} [{time.perf_counter() - t:.1f} s]", flush=True)
    return args


def files_of(fmt: str, args: dict, images) -> list[str]:
    """The files a format's reader reads, to bring them into the page cache before timing."""
    if fmt in ("file", "coco"):
        return [p for p, _ in images]
    out = []
    for key in ("path", "paths", "index_path", "index_paths", "annotations_file", "file_root"):
        for p in [args[key]] if isinstance(args.get(key), str) else args.get(key) or []:
            out += [os.path.join(p, n) for n in sorted(os.listdir(p))] if os.path.isdir(p) else [p]
    return out


# --- the pipelines (in a child process, one library each) -------------------------------------------
def reader(fmt: str, args: dict, fn, tfrec, device: str):
    """(data, label) of the format's reader; label None for numpy (arrays, no labels)."""
    if fmt == "tfrecord":
        feats = {"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                 "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)}
        out = fn.readers.tfrecord(**args, features=feats, name="r")
        return out["image/encoded"], out["image/class/label"]
    if fmt == "webdataset":
        return tuple(fn.readers.webdataset(**args, ext=["jpg", "cls"], name="r"))
    if fmt == "coco":
        images, _, labels = fn.readers.coco(**args, name="r")
        return images, labels
    if fmt == "numpy":
        return fn.readers.numpy(**args, device=device, name="r"), None
    read_op = {"mxnet": fn.readers.mxnet, "caffe": fn.readers.caffe, "caffe2": fn.readers.caffe2,
               "file": fn.readers.file}[fmt]
    return tuple(read_op(**args, name="r"))


def api(lib: str, fmt: str, device: str):
    """The library's (fn, tfrecord, types, pipeline_def)."""
    if lib == "stoker":
        import stoker.fn as fn
        import stoker.tfrecord as tfrec
        import stoker.types as types
        from stoker import pipeline_def
    else:
        import nvidia.dali.fn as fn
        import nvidia.dali.tfrecord as tfrec
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def
    return fn, tfrec, types, pipeline_def


def build(lib: str, fmt: str, args: dict, batch: int, threads: int, device: str, decode: bool):
    """The built pipeline: the reader alone (``decode`` False: its outputs as read), or the timed
    pipeline (float CHW 224x224 images and the labels; for numpy the images only)."""
    fn, tfrec, types, pipeline_def = api(lib, fmt, device)

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if device == "gpu" else None, seed=1)
    def pipe():
        data, label = reader(fmt, args, fn, tfrec, device if fmt == "numpy" else "cpu")
        if not decode:
            return (data,) if label is None else (data, label)
        norm = dict(dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD)
        if fmt == "numpy":
            return fn.crop_mirror_normalize(fn.reshape(data, layout="HWC"), crop=(224, 224), **norm)
        images = fn.decoders.image(data, device="mixed" if device == "gpu" else "cpu", output_type=types.RGB)
        images = fn.crop_mirror_normalize(fn.resize(images, resize_x=224, resize_y=224), **norm)
        return images, label

    p = pipe()
    p.build()
    return p


def host_arrays(batch) -> list[np.ndarray]:
    """The samples of a batch (CPU or GPU) as NumPy arrays."""
    if "GPU" in type(batch).__name__:
        batch = batch.as_cpu()
    return [np.array(batch[i]) for i in range(len(batch))]


def child_first_batch(lib: str, fmt: str, args: dict, batch: int, device: str, out: str) -> None:
    """Write the first batch of the reader alone (per output, per sample) to ``out``."""
    outputs = build(lib, fmt, args, batch, 1, device, decode=False).run()
    with open(out, "wb") as f:
        pickle.dump([host_arrays(o) for o in outputs], f)
    os._exit(0)  # skip slow teardown of worker pools


def child_time(lib: str, fmt: str, args: dict, batch: int, threads: int, device: str, seconds: float) -> None:
    from cpu_pipeline import cpu_seconds, workers_ready  # this folder is on sys.path (a script beside it)

    t0 = time.perf_counter()
    api(lib, fmt, device)  # imported apart: the first batch's time is the pipeline's own
    imported = time.perf_counter() - t0
    t0 = time.perf_counter()
    pipe = build(lib, fmt, args, batch, threads, device, decode=True)
    pipe.run()
    first = time.perf_counter() - t0
    for _ in range(2):
        pipe.run()
    # stoker computes its first batches in process while its chain worker processes start (many
    # cores); its throughput is measured once they run
    ready = workers_ready(pipe.run)
    while ready is False and time.perf_counter() - t0 < 90:
        pipe.run()
        ready = workers_ready(pipe.run)
    warm = time.perf_counter() - t0
    n, t1, c1 = 0, time.perf_counter(), cpu_seconds()
    while time.perf_counter() - t1 < seconds:
        outputs = pipe.run()
        n += batch
    if device == "gpu":  # wait for the last batch on the device (one copy: the same cost for both)
        host_arrays(outputs[0])
    rate = n / (time.perf_counter() - t1)
    print(json.dumps({"format": fmt, "lib": lib, "device": device, "threads": threads, "batch": batch,
                      "img_s": round(rate, 1), "cpu_ms_per_img": round((cpu_seconds() - c1) / n * 1e3, 3),
                      "import_s": round(imported, 2), "first_batch_s": round(first, 2),
                      "measured_after_s": round(warm, 2),
                      "load_avg_1min": round(os.getloadavg()[0], 2)}), flush=True)
    os._exit(0)


# --- the parent ------------------------------------------------------------------------------------
def run_child(mode: str, lib: str, fmt: str, args: dict, a, extra: str = "") -> subprocess.CompletedProcess:
    cmd = [sys.executable, __file__, "--child", mode, lib, fmt, json.dumps(args), str(a.batch), str(a.threads),
           a.device, str(a.seconds), extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300 + 4 * a.seconds)


def same_first_batch(fmt: str, args: dict, a) -> bool:
    """Whether both libraries read the same first batch; prints what differs otherwise."""
    got = {}
    for lib in ("stoker", "dali"):
        out = os.path.join(a.work, f"first-{fmt}-{lib}.pkl")
        p = run_child("first", lib, fmt, args, a, out)
        if p.returncode != 0:
            print(f"{fmt}: MISMATCH CHECK FAILED, {lib} could not read the first batch:\n"
                  f"{p.stderr.strip()[-1500:]}", flush=True)
            return False
        with open(out, "rb") as f:
            got[lib] = pickle.load(f)
    ours, theirs = got["stoker"], got["dali"]
    names = ["data", "label"]
    if len(ours) != len(theirs):
        print(f"{fmt}: MISMATCH, stoker gives {len(ours)} outputs, DALI {len(theirs)}", flush=True)
        return False
    for j, (x, y) in enumerate(zip(ours, theirs)):
        if len(x) != len(y):
            print(f"{fmt}: MISMATCH in {names[j]}: stoker read {len(x)} samples, DALI {len(y)}", flush=True)
            return False
        for i, (u, v) in enumerate(zip(x, y)):
            if u.tobytes() != v.tobytes() or u.shape != v.shape:
                print(f"{fmt}: MISMATCH in {names[j]} of sample {i}: stoker {u.dtype}{list(u.shape)} "
                      f"{u.ravel()[:8].tolist()}, DALI {v.dtype}{list(v.shape)} {v.ravel()[:8].tolist()}", flush=True)
                return False
    print(f"{fmt}: first batch identical in both libraries ({len(ours[0])} samples)", flush=True)
    return True


def ratio_table(results: list[dict], formats: list[str], rounds: int) -> None:
    """Per format and round: stoker's images/s over DALI's, and DALI's CPU time per image over
    stoker's (steadier than the rate where other work shares the machine)."""
    print("\nstoker/DALI per round: images/s (CPU time per image, DALI/stoker); first batch s, stoker | DALI")
    for fmt in formats:
        rates = {(r["lib"], r["round"]): r for r in results if r["format"] == fmt and "img_s" in r}
        rounds_done = [k for k in range(1, rounds + 1) if ("stoker", k) in rates and ("dali", k) in rates]
        if not rounds_done:
            continue
        parts = [f"{rates['stoker', k]['img_s'] / rates['dali', k]['img_s']:.2f}x "
                 f"({rates['dali', k]['cpu_ms_per_img'] / rates['stoker', k]['cpu_ms_per_img']:.2f}x)"
                 for k in rounds_done]
        k = rounds_done[0]
        print(f"  {fmt:11s} {'  '.join(parts):34s} first batch {rates['stoker', k]['first_batch_s']:.2f} | "
              f"{rates['dali', k]['first_batch_s']:.2f}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        mode, lib, fmt, args, batch, threads, device, seconds, extra = sys.argv[2:]
        if mode == "first":
            child_first_batch(lib, fmt, json.loads(args), int(batch), device, extra)
        else:
            child_time(lib, fmt, json.loads(args), int(batch), int(threads), device, float(seconds))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--libs", default="stoker,dali")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--work", help="where the packed copies are kept (default: a folder in the temp dir)")
    a = ap.parse_args()
    formats = [f for f in a.formats.split(",") if f]
    unknown = set(formats) - set(FORMATS)
    if unknown:
        sys.exit(f"unknown formats {sorted(unknown)}; choose from {','.join(FORMATS)}")
    root = os.path.abspath(a.data_dir)
    a.work = os.path.abspath(a.work or os.path.join(
        tempfile.gettempdir(), "stoker_reader_formats", hashlib.sha1(root.encode()).hexdigest()[:10]))
    os.makedirs(a.work, exist_ok=True)
    images = list_images(root)
    print(f"{len(images)} images in {root}; packed copies in {a.work}", flush=True)
    libs = [lb for lb in a.libs.split(",") if lb]
    results = []
    for fmt in formats:
        args = packed(fmt, root, images, a.work)
        if args is None:
            continue
        if set(libs) >= {"stoker", "dali"} and not same_first_batch(fmt, args, a):
            continue
        for path in files_of(fmt, args, images):  # into the page cache: both libraries read it warm
            read(path)
        for rnd in range(1, a.rounds + 1):
            for lib in libs:
                p = run_child("time", lib, fmt, args, a)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                res = json.loads(lines[-1]) if lines else {"format": fmt, "lib": lib,
                                                           "error": p.stderr.strip()[-600:]}
                res["round"] = rnd
                results.append(res)
                print(json.dumps(res), flush=True)
    ratio_table(results, formats, a.rounds)


if __name__ == "__main__":
    main()
