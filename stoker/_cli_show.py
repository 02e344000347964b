"""``stoker show``: run a user's pipeline on the CPU and save a labelled grid of its images."""

from __future__ import annotations

import math
import os

import numpy as np

from stoker._cli_pipeline import CLIError, gpu_nodes, load_pipeline

LABEL_STRIP = 34  # pixels under each tile for its two text lines


def _gpu_problem() -> str | None:
    try:
        from stoker.backend.cuda import unavailable_reason

        return unavailable_reason(0)
    except Exception as e:  # noqa: BLE001 - any failure means no usable GPU
        return f"{type(e).__name__}: {e}"


def _image_like(samples: list[np.ndarray], layout: str) -> bool:
    if not samples:
        return False
    a = samples[0]
    if a.ndim == 2:
        return min(a.shape) > 1
    if a.ndim != 3:
        return False
    if layout in ("HWC", "CHW"):
        return True
    return a.shape[-1] in (1, 3, 4) or a.shape[0] in (1, 3, 4)


def _scalars(samples: list[np.ndarray]) -> bool:
    return bool(samples) and all(np.asarray(s).size == 1 for s in samples)


def to_rgb8(sample: np.ndarray, layout: str = "") -> np.ndarray:
    """One image sample as HxWx3 uint8: CHW is transposed; non-uint8 data is min-max scaled to
    0-255 per sample (so normalised float output is viewable); gray is repeated, alpha dropped."""
    a = np.asarray(sample)
    if a.ndim == 2:
        a = a[..., None]
    chw = layout == "CHW" or (layout != "HWC" and a.shape[0] in (1, 3, 4) and a.shape[-1] not in (1, 3, 4))
    if chw:
        a = a.transpose(1, 2, 0)
    if a.dtype != np.uint8:
        f = a.astype(np.float32)
        lo, hi = float(np.nanmin(f)), float(np.nanmax(f))
        a = ((f - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(f)).clip(0, 255).astype(np.uint8)
    if a.shape[-1] == 1:
        a = np.repeat(a, 3, axis=-1)
    return np.ascontiguousarray(a[..., :3])


def _fit(rgb: np.ndarray, tile: int) -> np.ndarray:
    """``rgb`` scaled to fit a tile x tile square (aspect kept), centred on dark gray."""
    import cv2

    h, w = rgb.shape[:2]
    s = tile / max(h, w)
    nh, nw = max(1, round(h * s)), max(1, round(w * s))
    small = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
    out = np.full((tile, tile, 3), 32, np.uint8)
    y, x = (tile - nh) // 2, (tile - nw) // 2
    out[y:y + nh, x:x + nw] = small
    return out


def grid_size(n: int, columns: int, tile: int) -> tuple[int, int]:
    """(height, width) in pixels of the grid of ``n`` tiles."""
    rows = math.ceil(n / columns)
    return rows * (tile + LABEL_STRIP), columns * tile


def make_grid(images: list[np.ndarray], shapes: list[tuple], labels: list | None, columns: int,
              tile: int) -> np.ndarray:
    """An RGB uint8 grid: each tile is an image fitted to ``tile`` pixels with its index, shape
    and (if given) label written under it."""
    import cv2

    h, w = grid_size(len(images), columns, tile)
    canvas = np.zeros((h, w, 3), np.uint8)
    for i, img in enumerate(images):
        r, c = divmod(i, columns)
        y, x = r * (tile + LABEL_STRIP), c * tile
        canvas[y:y + tile, x:x + tile] = _fit(img, tile)
        cv2.rectangle(canvas, (x, y), (x + tile - 1, y + tile - 1), (90, 90, 90), 1)
        lines = [f"#{i} {'x'.join(str(d) for d in shapes[i])}"]
        if labels is not None:
            lines.append(f"label {labels[i]}")
        # text is drawn on the tile's own strip, so a long line is cut off rather than spilling
        # into the neighbouring tile
        strip = np.zeros((LABEL_STRIP, tile, 3), np.uint8)
        for k, text in enumerate(lines):
            cv2.putText(strip, text, (4, 14 + 15 * k), cv2.FONT_HERSHEY_SIMPLEX, 0.42 if tile >= 120 else 0.33,
                        (235, 235, 235), 1, cv2.LINE_AA)
        canvas[y + tile:y + tile + LABEL_STRIP, x:x + tile] = strip
    return canvas


def _label_text(value) -> str:
    v = np.asarray(value).reshape(-1)[0]
    return f"{v:.4g}" if np.issubdtype(type(v), np.floating) else str(v)


def collect(pipe, n: int) -> tuple[list[np.ndarray], list[tuple], list | None, str]:
    """Run ``pipe`` until ``n`` samples of its first image-like output are gathered; returns the
    raw samples, their shapes, labels (from the first output of one number per sample) or None,
    and the image output's layout."""
    images, labels, layout = [], [], ""
    image_index = label_index = None
    iterations = 0
    while len(images) < n:
        outs = pipe.run()
        iterations += 1
        cpu = [o.as_cpu() if hasattr(o, "as_cpu") else o for o in outs]
        samples = [[np.asarray(o.at(i)) for i in range(len(o))] for o in cpu]
        if image_index is None:
            layouts = [o.layout() if hasattr(o, "layout") else "" for o in cpu]
            image_index = next((k for k, s in enumerate(samples) if _image_like(s, layouts[k])), None)
            if image_index is None:
                desc = ", ".join(f"output {k}: {o.shape()[0] if len(o) else '()'} {o.dtype}" for k, o in
                                 enumerate(cpu))
                raise CLIError(f"the pipeline has no image-like output (HWC, CHW or HW samples); got {desc}")
            layout = layouts[image_index]
            label_index = next((k for k, s in enumerate(samples) if k != image_index and _scalars(s)), None)
        if not samples[image_index]:
            if iterations > 3:  # readers at the end of a tiny data set return nothing more
                break
            continue
        images.extend(samples[image_index])
        if label_index is not None:
            labels.extend(_label_text(v) for v in samples[label_index])
    images = images[:n]
    return images, [tuple(a.shape) for a in images], (labels[:n] if label_index is not None else None), layout


def show(path: str, out: str, n: int = 16, function: str | None = None, data: str | None = None,
         columns: int | None = None, tile: int = 160, batch_size: int | None = None) -> str:
    """Build the pipeline of ``path`` on the CPU, take ``n`` samples and write a PNG grid to
    ``out``; returns a one-line summary."""
    import cv2

    from stoker.errors import StokerError

    if n < 1:
        raise CLIError(f"--n must be at least 1, got {n}")
    if tile < 16:
        raise CLIError(f"--tile must be at least 16 pixels, got {tile}")
    if not out.lower().endswith(".png"):
        raise CLIError(f"-o {out}: the grid is written as PNG; give a file name ending in .png")
    extra = {"batch_size": batch_size} if batch_size else {}
    loaded = load_pipeline(path, function, data, device_id=None, **extra)
    pipe = loaded.pipe
    on_gpu = gpu_nodes(pipe)
    if on_gpu:
        problem = _gpu_problem()
        first = on_gpu[0]
        if problem:
            raise CLIError(f"{path}: {loaded.function} puts {first.op_name} (device='{first.device}', "
                           f"{first.origin}) on the GPU, but {problem}. Use device='cpu' to view it here.")
        # a GPU is usable: run the pipeline where it asks to run
        loaded = load_pipeline(path, function, data, device_id=0, **extra)
        pipe = loaded.pipe
    try:
        pipe.build()
        images, shapes, labels, layout = collect(pipe, n)
    except StokerError as e:
        raise CLIError(f"{path}: running {loaded.function} failed: {e}") from None
    finally:
        pipe.close()
    if not images:
        raise CLIError(f"{path}: {loaded.function} produced no images")
    columns = columns or min(len(images), 8)
    grid = make_grid([to_rgb8(a, layout) for a in images], shapes, labels, columns, tile)
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    if not cv2.imwrite(out, cv2.cvtColor(grid, cv2.COLOR_RGB2BGR)):
        raise CLIError(f"-o {out}: could not write the PNG")
    return (f"{len(images)} samples of {loaded.function} ({path}) -> {out} "
            f"[{grid.shape[1]}x{grid.shape[0]} px, {columns} columns]")
