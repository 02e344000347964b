"""Random number generators: per-sample values from counter-based streams."""

from stoker.fn._factory import make_fn, namespace_dir, namespace_getattr

uniform = make_fn("random.uniform")
normal = make_fn("random.normal")
coin_flip = make_fn("random.coin_flip")
choice = make_fn("random.choice")

__getattr__ = namespace_getattr("random.")
__dir__ = namespace_dir("random.", globals())
