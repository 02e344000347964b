"""Module boundaries of stoker (issue 18), read from the source with :mod:`ast` (nothing is imported).

1. No module imports an underscore-prefixed name (``_x``, not ``__x__``) from another stoker module:
   ``from stoker.a import _b`` and ``import stoker.a._b``, at any depth (inside functions too) and
   relative ones resolved. A name shared between modules is public (no underscore); a module that
   uses the public names of a package-private module imports them by name
   (``from stoker.operators.readers._proto import fields``).
2. No import cycles among stoker's modules through module-level imports (those that run when the
   module is imported: top level, class bodies, ``try`` / ``if`` blocks; not function bodies nor
   ``if TYPE_CHECKING:``). ``from pkg import name`` is an edge to ``pkg.name`` where that is a
   module, else to ``pkg`` (its ``__init__``). The implicit import of a module's parent packages
   is not an edge: otherwise every ``__init__`` that re-exports from its submodules would be in a
   cycle with each of them, and those cycles are harmless (Python initialises the package first).
   A cycle is a strongly connected component of more than one module (or a module importing itself).

Each allow-list entry says why it is there; an entry that no longer occurs fails the test, so the
lists only shrink.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "stoker"

# (importer, module imported from, name): why it stays for now
ALLOWED_PRIVATE_IMPORTS: dict[tuple[str, str, str], str] = {
    ("stoker.operators.audio.gpu_signal", "stoker.operators.audio._resampling", "_window"):
        "both modules were being edited in another change (audio); make _window public there",
    ("stoker.operators.decoders.mixed.common", "stoker.backend.cuda", "_cupy"):
        "mixed/common.py was being edited in another change; it should import cuda.cupy (then drop the "
        "_cupy alias in stoker/backend/cuda.py, which the audio GPU modules and gpu_warp.py also still use)",
    ("stoker.operators.image.gpu_warp", "stoker.operators.image.rotate", "_half_centre_matrix"):
        "rotate.py and gpu_warp.py (both register rotate) were being edited in another change; "
        "make _half_centre_matrix public in rotate.py",
}

# frozenset of the modules of one cycle: why it stays for now
ALLOWED_CYCLES: dict[frozenset, str] = {}


def modules(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    """{dotted module name: path} of every .py file under ``root`` (the folder of ``package``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module an ImportFrom names, relative ones resolved against the importer's package."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(root: pathlib.Path, package: str) -> set[tuple[str, str, str]]:
    """(importer, module, name) of every import of a private name from another module of ``package``."""
    found = set()
    for importer, path in modules(root, package).items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                module = _absolute(node, importer, is_package)
                if module == package or module.startswith(package + "."):
                    found |= {(importer, module, a.name) for a in node.names if _is_private(a.name)}
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] != package:
                        continue
                    for i, part in enumerate(parts[1:], 1):
                        if _is_private(part):
                            found.add((importer, ".".join(parts[:i]), part))
                            break
    return found


def _module_level_imports(tree: ast.Module):
    """The import statements that run when the module is imported (see the module docstring)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def import_graph(root: pathlib.Path, package: str) -> dict[str, set[str]]:
    """{module: the modules of ``package`` it imports at module level}."""
    mods = modules(root, package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for importer, path in mods.items():
        for node in _module_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[importer] |= {a.name for a in node.names if a.name in mods}
                continue
            module = _absolute(node, importer, path.name == "__init__.py")
            for a in node.names:
                target = f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module
                if target in mods:
                    graph[importer].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset]:
    """The strongly connected components of more than one module, and modules importing themselves
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.add(m)
                        if m == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        out.append(frozenset(component))
    return out


def test_no_module_imports_a_private_name_of_another():
    found = private_imports(ROOT, "stoker")
    assert len(modules(ROOT, "stoker")) > 100  # (the package was found)
    new = sorted(found - set(ALLOWED_PRIVATE_IMPORTS))
    assert not new, ("make these names public (or import a public one instead): "
                     + "; ".join(f"{i} imports {n} from {m}" for i, m, n in new))
    gone = sorted(set(ALLOWED_PRIVATE_IMPORTS) - found)
    assert not gone, f"no longer imported: take these out of ALLOWED_PRIVATE_IMPORTS: {gone}"


def test_no_import_cycles_at_module_level():
    found = set(cycles(import_graph(ROOT, "stoker")))
    new = [sorted(c) for c in found - set(ALLOWED_CYCLES)]
    assert not new, f"import cycles (move an import into the function that needs it, or split a module): {new}"
    gone = [sorted(c) for c in set(ALLOWED_CYCLES) - found]
    assert not gone, f"no longer a cycle: take these out of ALLOWED_CYCLES: {gone}"


@pytest.fixture
def fake_package(tmp_path):
    """A tiny package ``fake``: a.py imports b.py at module level and b.py imports a.py, c.py takes
    a private name of a.py inside a function, d.py a private module by relative import; sub/ is a
    package whose __init__ re-exports from its submodule (not a cycle)."""
    root = tmp_path / "fake"
    (root / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from fake import b\n_secret = 1\n",
        "b.py": "import fake.a\n",
        "c.py": "def f():\n    from fake.a import _secret\n    return _secret\n",
        "d.py": "from . import _hidden\nfrom .sub import leaf\n",
        "_hidden.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fake import d\n",
        "e.py": "import fake.sub._inner\n",
        "sub/__init__.py": "from fake.sub.leaf import x\n",
        "sub/leaf.py": "x = 1\ndef g():\n    from fake import e\n",
        "sub/_inner.py": "",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_the_checks_see_a_planted_private_import_and_cycle(fake_package):
    assert private_imports(fake_package, "fake") == {
        ("fake.c", "fake.a", "_secret"), ("fake.d", "fake", "_hidden"), ("fake.e", "fake.sub", "_inner")}
    graph = import_graph(fake_package, "fake")
    assert graph["fake.d"] == {"fake._hidden", "fake.sub.leaf"}  # (from pkg import module: that module)
    assert graph["fake._hidden"] == set() and graph["fake.sub.leaf"] == set()  # TYPE_CHECKING, function
    assert cycles(graph) == [frozenset({"fake.a", "fake.b"})]
    (fake_package / "b.py").write_text("def f():\n    import fake.a\n")  # imported when called: no cycle
    assert cycles(import_graph(fake_package, "fake")) == []
