"""Type stubs of ``stoker.dynamic`` (eager mode), from the operator schemas; part of ``python -m stoker._stubs``.

Where the ``fn`` stubs say ``Any``, these carry what eager calls accept and return: each argument's
type from its schema kind (with ``Tensor``, or ``Batch`` too, where a per-sample value is allowed),
its default when it is a plain literal (``...`` otherwise, nothing when required), the docstring's
first line, and the result as dynamic mode gives it. Overloads say when that is a ``Batch``: a Batch
as the first input, ``batch_size=``, or a Batch as a per-sample argument; otherwise a ``Tensor``.
Operators with several outputs return a tuple. Source operators are left out (eager mode refuses
them) except the readers, which ``stoker.dynamic.readers`` offers as classes (``readers.File``).

The other public names of each module are declared from the module itself: re-exports (``Tensor``,
``as_batch`` ...) as imports from their real modules, classes and functions defined there (``RNG``,
``ReaderObject``) by their signatures, values (``ndd.float32``) by their types.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re

from stoker._stubs import HEADER, name_tree, namespace_class, operator_doc

MODULES = ("", "decoders", "random", "readers")  # namespaces of stoker.dynamic that are real modules

_KINDS = {
    "int": "int", "float": "float", "bool": "bool", "str": "str", "layout": "str",
    "float_list": "float | Sequence[float] | NDArray[Any]", "int_list": "int | Sequence[int] | NDArray[Any]",
    "str_list": "str | Sequence[str]", "dtype": "DALIDataType | DTypeLike",
    "image_type": "DALIImageType | str | int", "interp": "DALIInterpType | str | int",
}
# Names the generated text may use, by the import that gives them (kept only where used).
_IMPORTS = {
    "Sequence": "collections.abc", "Any": "typing", "overload": "typing",
    "DTypeLike": "numpy.typing", "NDArray": "numpy.typing",
    "Batch": "stoker.dynamic._data", "Tensor": "stoker.dynamic._data", "RNG": "stoker.dynamic.random",
    "DALIDataType": "stoker.types", "DALIImageType": "stoker.types", "DALIInterpType": "stoker.types",
}


class _Raw:
    """Text shown as is where ``inspect`` formats an annotation or a default."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _literal(value) -> str:
    """A default as stub text: plain literals as written, anything else ``...``."""
    if value is None or isinstance(value, (bool, int, str)) and not hasattr(value, "name"):
        return repr(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    return "..."


def _eager(cls) -> bool:
    return not hasattr(cls, "advance")  # sources keep state across batches: eager mode refuses them


def _arguments(cls, batch: bool) -> list[str]:
    """The keyword arguments of an eager call: the operator's, then the common ones (but ``device``)."""
    from stoker.operators.schema import COMMON_ARGS, REQUIRED

    own = {a.name for a in cls.schema.args}
    out = []
    for a in (*cls.schema.args, *(c for c in COMMON_ARGS if c.name not in own)):
        if not a.name.isidentifier() or a.name in ("device", "batch_size", "rng"):
            continue
        kind = _KINDS.get(a.kind, "Any")
        if a.tensor and kind != "Any":
            kind += " | Tensor | Batch | Sequence[Any]" if batch else " | Tensor"
        if a.default is REQUIRED:
            out.append(f"{a.name}: {kind}")
        else:  # None stands for "not given"
            out.append(f"{a.name}: {kind if kind == 'Any' else kind + ' | None'} = {_literal(a.default)}")
    return out


def _extra(cls) -> list[str]:
    """``rng`` for random operators; ``**kwargs`` where the schema takes names it does not list."""
    s = cls.schema
    loose = s.allow_unknown_args or any(not a.name.isidentifier() for a in s.args)
    return (["rng: RNG | None = None"] if s.random else []) + (["**kwargs: Any"] if loose else [])


def _result(cls, one: str) -> str:
    n = cls.schema.num_outputs
    if callable(n):
        return f"{one} | tuple[{one}, ...]"
    return "None" if n == 0 else one if n == 1 else f"tuple[{', '.join([one] * n)}]"


def _function(short: str, cls, indent: str = "", static: bool = False) -> str:
    """An operator's eager function: its overloads, by what makes the result a Batch."""
    s = cls.schema
    inputs = ["*inputs: Any"] if s.inputs[1] > 0 else ["*"]
    variants = []
    if s.inputs[1] > 0:
        variants.append((["input_0: Batch", "/", *inputs], True, "int | None = None", "Batch"))
    variants.append((inputs, True, "int", "Batch"))
    variants.append((inputs, False, "None = None", "Tensor"))
    if any(a.tensor for a in s.args):
        variants.append((inputs, True, "None = None", "Batch"))
    doc = operator_doc(cls).split("\n")[0]
    body = f'{indent}    """{doc}"""\n' if doc else f"{indent}    ...\n"
    out = []
    for head, batch, size, result in variants:
        params = [*head, *_arguments(cls, batch), "device: str | None = None", f"batch_size: {size}", *_extra(cls)]
        deco = (f"{indent}@staticmethod\n" if static else "") + f"{indent}@overload\n"
        out.append(f"{deco}{indent}def {short}({', '.join(params)}) -> {_result(cls, result)}:\n{body}")
    return "".join(out)


def _reader(class_name: str, cls) -> str:
    """A reader operator as ``stoker.dynamic.readers`` makes it: a ReaderObject subclass."""
    params = ["self", "batch_size: int | None = None", "*", *_arguments(cls, False), "device: str | None = None",
              *_extra(cls), *([] if cls.schema.random else ["rng: RNG | None = None"])]
    doc = operator_doc(cls).split("\n")[0]
    return (f"class {class_name}(ReaderObject):\n" + (f'    """{doc}"""\n' if doc else "")
            + f"    def __init__({', '.join(params)}) -> None: ...\n\n")


def _signature(fn) -> str:
    """``(params) -> result`` of a Python function, annotations as written in its source."""
    sig = inspect.signature(fn)

    def raw(annotation):
        if annotation is inspect.Parameter.empty or annotation is inspect.Signature.empty:
            return annotation
        return _Raw(annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))

    params = [p.replace(annotation=raw(p.annotation),
                        default=p.default if p.default is p.empty else _Raw(_literal(p.default)))
              for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=raw(sig.return_annotation)))


def _declare(name: str, obj, indent: str = "") -> str:
    """A class or function defined in a stubbed module, by its signatures."""
    doc = (inspect.getdoc(obj) or "").split("\n")[0].replace('"""', "'''").replace("\\", "\\\\")
    if not inspect.isclass(obj):
        return f"{indent}def {name}{_signature(obj)}:\n{indent}    " + (f'"""{doc}"""\n' if doc else "...\n")
    bases = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
    lines = [f"{indent}class {name}{f'({bases})' if bases else ''}:\n"]
    if doc:
        lines.append(f'{indent}    """{doc}"""\n')
    for attr, ann in obj.__dict__.get("__annotations__", {}).items():
        lines.append(f"{indent}    {attr}: {ann}\n")
    for attr, value in obj.__dict__.items():
        if attr.startswith("_") and attr not in ("__init__", "__call__"):
            continue
        if isinstance(value, property):
            lines.append(f"{indent}    @property\n{indent}    def {attr}{_signature(value.fget)}: ...\n")
            if value.fset is not None:
                lines.append(f"{indent}    @{attr}.setter\n{indent}    def {attr}{_signature(value.fset)}: ...\n")
        elif inspect.isfunction(value):
            lines.append(f"{indent}    def {attr}{_signature(value)}: ...\n")
    return "".join(lines)


def _public(module) -> tuple[list[str], list[str]]:
    """(import lines, declarations) of a module's public names other than its operators."""
    imports, decls, values = [], [], []
    exported = set(getattr(module, "__all__", ()))
    for name, obj in vars(module).items():
        if name.startswith("_") or type(obj).__name__ == "_Feature":  # (from __future__ import ...)
            continue
        if inspect.ismodule(obj):
            if obj.__name__.startswith(module.__name__ + "."):
                imports.append(f"from {module.__name__} import {name} as {name}")
        elif inspect.isclass(obj) or inspect.isfunction(obj):
            if obj.__module__ == module.__name__:
                decls.append(_declare(name, obj) + "\n")
            elif name in exported:
                imports.append(f"from {obj.__module__} import {name} as {name}")
        elif not callable(obj):  # a value: ndd.float32 ...
            kind = type(obj)
            if kind.__module__ != "builtins":
                imports.append(f"from {kind.__module__} import {kind.__qualname__}")
            values.append(f"{name}: {kind.__qualname__}\n")
    return imports, decls + ([*values, "\n"] if values else [])


def _header(imports: list[str], body: str) -> str:
    """The imports of a stub (those of ``_IMPORTS`` that ``body`` uses), grouped as isort does."""
    given = {line.rsplit(" ", 1)[-1] for line in imports}
    wanted = dict.fromkeys(imports)
    for name, module in _IMPORTS.items():
        declared = re.search(rf"^class {name}\b", body, re.M)
        if name not in given and not declared and re.search(rf"\b{name}\b", body):
            wanted[f"from {module} import {name}"] = None
    merged: dict[str, list[str]] = {}
    for line in wanted:
        module, names = line[len("from "):].split(" import ", 1)
        merged.setdefault(module, []).append(names)
    groups: dict[int, list[str]] = {}
    for module in sorted(merged):
        plain = sorted(n for n in set(merged[module]) if " as " not in n)
        lines = [f"from {module} import {', '.join(plain)}"] if plain else []
        lines += [f"from {module} import {n}" for n in sorted(n for n in set(merged[module]) if " as " in n)]
        group = 2 if module.startswith("stoker") else 1 if module.startswith("numpy") else 0
        groups.setdefault(group, []).extend(lines)
    return HEADER + "\n".join("\n".join(groups[g]) + "\n" for g in sorted(groups)) + "\n"


def dynamic_stubs(schemas: dict) -> dict[str, str]:
    """{path relative to the package: stub text} for stoker.dynamic."""
    from stoker import ops

    eager = {name: cls for name, cls in schemas.items() if _eager(cls)}
    tree = name_tree(list(eager))
    files = {}
    for module_name in MODULES:
        module = importlib.import_module("stoker.dynamic" + (f".{module_name}" if module_name else ""))
        imports, parts = _public(module)
        if module_name == "readers":
            readers = {ops._camel(n.split(".", 1)[1]): cls for n, cls in schemas.items() if n.startswith("readers.")}
            parts += [_reader(name, cls) for name, cls in sorted(readers.items())]
        for key, value in sorted((tree if not module_name else tree.get(module_name, {})).items()):
            if isinstance(value, dict):
                if not module_name and key in MODULES:
                    continue
                parts.append(namespace_class(f"_{key}", value, eager, "", _function))
                parts.append(f"{key}: _{key}\n\n")
            elif module_name != "readers":
                parts.append(_function(key, eager[value]) + "\n")
        body = "".join(parts)
        for name, where in _IMPORTS.items():  # a reader class may take a typing name (readers.Sequence)
            if re.search(rf"^class {name}\b", body, re.M) and re.search(rf"\b{name}\[", body):
                body = re.sub(rf"\b{name}\[", f"_{name}[", body)
                imports.append(f"from {where} import {name} as _{name}")
        path = os.path.join("dynamic", "__init__.pyi" if not module_name else f"{module_name}.pyi")
        files[path] = (_header(imports, body) + body).rstrip() + "\n"
    return files
