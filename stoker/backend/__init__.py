"""Device backends. ``cuda`` is imported only when a pipeline has GPU operators."""
