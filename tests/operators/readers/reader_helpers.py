"""Helpers of the reader tests: small folder trees whose files say who they are."""

import os


def write_tree(root, counts, ext=".jpg"):
    """``counts[c]`` files in class folder ``c{c}``; file bytes are (class, index, 0xAB...) so
    contents identify the file. Returns the relative paths in DALI's listing order."""
    paths = []
    for c, n in enumerate(counts):
        d = os.path.join(root, f"c{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            rel = f"c{c}/f{i:03d}{ext}"
            with open(os.path.join(root, rel), "wb") as f:
                f.write(bytes([c, i]) + b"\xab" * (i % 5))
            paths.append(rel)
    return paths


def sample_id(arr) -> int:
    """The (class, index) written by write_tree, as one int."""
    return int(arr[0]) * 1000 + int(arr[1])
