"""Every registered stoker operator against DALI's own schema of the same operator.

DALI publishes its schemas through ``nvidia.dali.backend.GetSchema``. For each
stoker operator that DALI also has, this module checks that

(a) every non-deprecated DALI argument exists in stoker's schema,
(b) arguments DALI accepts as per-sample tensors are ``tensor=True`` in stoker,
(c) defaults agree where both sides have a plain value,
(d) the number of positional inputs agrees,
(e) arguments DALI accepts per frame (``fn.per_frame``) are in the operator's ``per_frame_args``
    (stoker may take more per frame than DALI).

Known differences are listed below with the reason; an entry that no longer
differs fails the test too, so the lists shrink as the gaps are closed.
"""

from __future__ import annotations

import ast
import inspect
import math

import numpy as np
import pytest

from stoker.operators.schema import REQUIRED, registered

dali_backend = pytest.importorskip("nvidia.dali.backend")
dali_fn = pytest.importorskip("nvidia.dali.fn")

pytestmark = pytest.mark.oracle

# stoker's public operators that DALI does not have (names starting with "_" are internal, the
# machinery behind DataNode arithmetic, indexing, .gpu() and conditionals, and are not compared).
NOT_IN_DALI = {
    "valid_mask": "stoker's own: marks samples that on_error='substitute' replaced",
}

# stoker names whose DALI function lives elsewhere than nvidia.dali.fn.<name>.
DALI_SCHEMA_NAMES = {
    "warp_perspective": "experimental__WarpPerspective",  # DALI 2.4 has only fn.experimental.warp_perspective
    "torch_python_function": "TorchPythonFunction",  # nvidia.dali.plugin.pytorch.fn
    "experimental.numba_function": "NumbaFuncImpl",  # nvidia.dali.plugin.numba
}


# (a) DALI arguments stoker does not accept yet.
MISSING_OK: dict[tuple[str, str], str] = {}

# (b) arguments DALI takes per sample that stoker takes only as one constant.
NOT_TENSOR_OK: dict[tuple[str, str], str] = {}

# (c) defaults that differ on purpose.
_DERIVED = "None means 'derived': stoker computes DALI's default when the argument is not given"
_FILTER = ("DALI's schema says LINEAR, but its operator sets both filters from interp_type and lets "
           "min_filter / mag_filter override; stoker's None = interp_type does the same (oracle-tested in "
           "tests/operators/image/test_resize.py)")
DEFAULT_OK = {
    ("experimental.numba_function", "setup_fn"): "DALI's schema stores a function pointer (0: none); "
                                                 "stoker keeps the Python function, None: none",
    ("readers.video_resize", "min_filter"): _FILTER,
    ("readers.video_resize", "mag_filter"): _FILTER,
    ("brightness_contrast", "contrast_center"): "DALI's schema says 0.5 but the operator uses half the "
                                                "input type's range (127.5 for uint8); stoker's None does that",
    ("contrast", "contrast_center"): "as brightness_contrast",
    ("laplacian", "scale"): _DERIVED + " (1 per axis; None also tells normalized_kernel=True apart)",
    ("random_bbox_crop", "ltrb"): "deprecated in DALI; None (= True) lets stoker reject it next to bbox_layout",
    ("erase", "axes"): _DERIVED + ": axis_names wins unless axes is given, as in DALI",
    ("erase", "axis_names"): _DERIVED,
    ("slice", "axes"): _DERIVED + ": axis_names wins unless axes is given, as in DALI",
    ("slice", "axis_names"): _DERIVED,
    ("transforms.crop", "from_start"): _DERIVED + " (0 per dimension, the dimension taken from the other args)",
    ("transforms.crop", "from_end"): _DERIVED + " (1 per dimension)",
    ("transforms.crop", "to_start"): _DERIVED + " (0 per dimension)",
    ("transforms.crop", "to_end"): _DERIVED + " (1 per dimension)",
    ("decoders.image_slice", "axes"): _DERIVED + " ([1, 0] via axis_names' 'WH'); None tells an unset axes "
                                               "apart, as DALI refuses axes together with axis_names",
    ("decoders.image_slice", "axis_names"): _DERIVED + " ('WH' unless axes is given)",
    ("resize", "mag_filter"): _FILTER,
    ("resize", "min_filter"): _FILTER,
    ("random_resized_crop", "mag_filter"): _FILTER,
    ("random_resized_crop", "min_filter"): _FILTER,
}

# (e) arguments DALI takes per frame that stoker takes only per sample.
NOT_PER_FRAME_OK: dict[tuple[str, str], str] = {}

# Argument kinds (stoker's converters) that take what DALI's argument types take.
KINDS_FOR_DALI_TYPE = {
    "FLOAT": ("float",), "INT32": ("int",), "INT64": ("int",), "UINT32": ("int",), "BOOL": ("bool",),
    "STRING": ("str", "layout"), "TENSOR_LAYOUT": ("layout",), "_FLOAT_VEC": ("float_list",),
    "_INT32_VEC": ("int_list", "float_list"), "_INT64_VEC": ("int_list",), "_STRING_VEC": ("str_list",),
    "DATA_TYPE": ("dtype",), "IMAGE_TYPE": ("image_type",), "INTERP_TYPE": ("interp",),
}
KIND_OK = {
    ("normalize", "mean"): "a list: DALI's scalar type, but per sample a whole tensor of means",
    ("normalize", "stddev"): "as mean",
}

# (d) input counts that differ on purpose.
INPUTS_OK: dict[str, str] = {
    "experimental.decoders.video": "DALI's deprecated alias schema declares no inputs; its wrapper forwards to "
                                   "decoders.video",
}

# DALI arguments that are never stoker's business: every DALI operator has them, or they
# steer DALI's own memory management.
DALI_ONLY_COMMON = {"bytes_per_sample_hint", "preserve", "seed"}


def _dali_schema_name(name: str) -> str | None:
    if name in DALI_SCHEMA_NAMES:
        return DALI_SCHEMA_NAMES[name]
    f = dali_fn
    for part in name.split("."):
        f = getattr(f, part, None)
        if f is None:
            return None
    return getattr(f, "_schema_name", None)


def _pairs():
    out = []
    for name, cls in sorted(registered().items()):
        if name in NOT_IN_DALI or name.startswith("_") or _dali_schema_name(name) is None:
            continue  # the last: reported once by test_every_operator_is_known
        out.append(pytest.param(name, cls.schema, id=name))
    return out


PAIRS = _pairs()


def _dali(name):
    schema_name = _dali_schema_name(name)
    return dali_backend.GetSchema(schema_name)


def _visible_args(d):
    """DALI's public, non-deprecated arguments."""
    return [a for a in d.GetArgumentNames() if not a.startswith("_") and not d.IsDeprecatedArg(a)]


def test_every_operator_is_known():
    """A new stoker operator either maps to a DALI schema or says why not."""
    unknown = [n for n in registered()
               if n not in NOT_IN_DALI and not n.startswith("_") and _dali_schema_name(n) is None]
    assert not unknown, f"no DALI schema found for {unknown}: map them in DALI_SCHEMA_NAMES or NOT_IN_DALI"


def _missing(name, schema):
    d = _dali(name)
    return {a for a in _visible_args(d) if schema.arg(a) is None and a not in DALI_ONLY_COMMON}


def _not_tensor(name, schema):
    d = _dali(name)
    return {a for a in _visible_args(d) if d.IsTensorArgument(a) and schema.arg(a) is not None
            and not schema.arg(a).tensor}


@pytest.mark.parametrize("name,schema", PAIRS)
def test_dali_arguments_exist(name, schema):
    missing = _missing(name, schema)
    allowed = {a for (n, a) in MISSING_OK if n == name}
    assert not missing - allowed, f"{name}: DALI arguments stoker lacks: {sorted(missing - allowed)}"
    stale = allowed - missing
    assert not stale, f"{name}: {sorted(stale)} exist now; drop them from MISSING_OK"


@pytest.mark.parametrize("name,schema", PAIRS)
def test_deprecated_aliases_still_accepted(name, schema):
    """DALI's deprecated argument names that it still accepts (renamed, not removed) work in
    ported scripts too."""
    d = _dali(name)
    aliases = [a for a in d.GetArgumentNames() if not a.startswith("_") and d.IsDeprecatedArg(a)
               and not d.DeprecatedArgInfo(a).get("removed") and d.DeprecatedArgInfo(a).get("renamed_to")]
    missing = [a for a in aliases if schema.arg(a) is None]
    assert not missing, f"{name}: DALI still accepts the deprecated names {missing}; stoker does not"


@pytest.mark.parametrize("name,schema", PAIRS)
def test_per_sample_arguments_are_tensor(name, schema):
    bad = _not_tensor(name, schema)
    allowed = {a for (n, a) in NOT_TENSOR_OK if n == name}
    assert not bad - allowed, f"{name}: DALI takes {sorted(bad - allowed)} per sample; stoker only as constants"
    stale = allowed - bad
    assert not stale, f"{name}: {sorted(stale)} are per-sample now; drop them from NOT_TENSOR_OK"


@pytest.mark.parametrize("name,schema", PAIRS)
def test_argument_kinds_take_dalis_types(name, schema):
    """A value DALI accepts converts in stoker ('any' takes everything)."""
    d = _dali(name)
    bad = {}
    for a in _visible_args(d):
        spec = schema.arg(a)
        dali_type = str(d.GetArgumentType(a)).rsplit(".", 1)[-1]
        kinds = KINDS_FOR_DALI_TYPE.get(dali_type)
        if spec is None or kinds is None or spec.kind == "any" or (name, a) in KIND_OK:
            continue
        if spec.kind not in kinds:
            bad[a] = f"DALI {dali_type}, stoker {spec.kind}"
    assert not bad, f"{name}: argument kinds narrower than DALI's types: {bad}"


def _parse_default(text: str):
    """DALI's default-value string as a Python value ('[0.5, ]' -> [0.5], "'HWC'" -> 'HWC')."""
    text = text.replace(", ]", "]")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _python_default(name: str, arg: str):
    """A default that DALI's Python wrapper sets over its C++ schema (python_function's
    batch_processing), or REQUIRED when the wrapper sets none."""
    cls_name = {"python_function": "PythonFunction", "dl_tensor_python_function": "DLTensorPythonFunction"}.get(name)
    if name == "torch_python_function":
        from nvidia.dali.plugin.pytorch import TorchPythonFunction as cls
    elif cls_name:
        import nvidia.dali.ops as dali_ops
        cls = getattr(dali_ops, cls_name)
    else:
        return REQUIRED
    p = inspect.signature(cls.__init__).parameters.get(arg)
    return REQUIRED if p is None or p.default is inspect.Parameter.empty else p.default


def _norm(v):
    """Values in a comparable form: enums as ints, empty as None, sequences as lists."""
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return np.dtype(v).name
    if hasattr(v, "value") and not isinstance(v, (int, float, str)):
        v = v.value
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v] or None
    if v == "":
        return None
    return v


def _same(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)  # DALI prints 6 decimals
    return a == b


def _default_mismatches(name, schema):
    d = _dali(name)
    out = {}
    for a in _visible_args(d):
        spec = schema.arg(a)
        if spec is None or a in DALI_ONLY_COMMON:
            continue
        theirs = _python_default(name, a)
        if theirs is REQUIRED and d.HasArgumentDefaultValue(a):
            theirs = _parse_default(d.GetArgumentDefaultValueString(a))
        if theirs is REQUIRED:
            # Optional without a default, or required: stoker must not invent a value.
            if not d.IsArgumentOptional(a) and spec.default not in (None, REQUIRED):
                out[a] = f"DALI requires it; stoker defaults to {spec.default!r}"
            continue
        if spec.default is REQUIRED:
            out[a] = f"DALI defaults to {theirs!r}; stoker requires it"
            continue
        try:
            ours = _norm(spec.convert(name, spec.default))
            theirs_n = _norm(spec.convert(name, theirs))
        except Exception as e:  # noqa: BLE001 - a default stoker cannot even convert is a mismatch
            out[a] = f"cannot compare {spec.default!r} with DALI's {theirs!r}: {e}"
            continue
        if not _same(ours, theirs_n):
            out[a] = f"stoker {spec.default!r}, DALI {theirs!r}"
    return out


@pytest.mark.parametrize("name,schema", PAIRS)
def test_defaults_agree(name, schema):
    bad = _default_mismatches(name, schema)
    allowed = {a for (n, a) in DEFAULT_OK if n == name}
    wrong = {a: why for a, why in bad.items() if a not in allowed}
    assert not wrong, f"{name}: defaults differ from DALI's: {wrong}"
    stale = allowed - set(bad)
    assert not stale, f"{name}: {sorted(stale)} agree with DALI now; drop them from DEFAULT_OK"


@pytest.mark.parametrize("name,schema", PAIRS)
def test_input_counts_agree(name, schema):
    d = _dali(name)
    theirs = (d.MinNumInput(), d.MaxNumInput())
    if name in INPUTS_OK:
        assert tuple(schema.inputs) != theirs, f"{name}: inputs agree now; drop it from INPUTS_OK"
        return
    assert tuple(schema.inputs) == theirs, f"{name}: stoker takes {schema.inputs} inputs, DALI {theirs}"


def _not_per_frame(name, schema):
    d = _dali(name)
    ours = getattr(registered()[name], "per_frame_args", frozenset())
    return {a for a in _visible_args(d) if d.ArgSupportsPerFrameInput(a) and schema.arg(a) is not None
            and a not in ours}


@pytest.mark.parametrize("name,schema", PAIRS)
def test_per_frame_arguments_are_per_frame(name, schema):
    bad = _not_per_frame(name, schema)
    allowed = {a for (n, a) in NOT_PER_FRAME_OK if n == name}
    assert not bad - allowed, f"{name}: DALI takes {sorted(bad - allowed)} per frame (fn.per_frame); stoker does not"
    stale = allowed - bad
    assert not stale, f"{name}: {sorted(stale)} are per-frame now; drop them from NOT_PER_FRAME_OK"
