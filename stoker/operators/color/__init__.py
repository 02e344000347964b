"""Colour operators: brightness/contrast, hue/saturation/value, colour twist,
colour space conversion. Each module registers its operators on import."""
