"""No module of stoker reads the environment but stoker/settings.py (issue 18): its settings through
``settings.get()``, other programs' variables and helper processes' private ones through
``settings.external_env`` / ``external_env_names``, and a child's environment is built by
``settings.child_environ``. Read from the source with :mod:`ast` (nothing is
imported).

No exception is left: the helpers that start before stoker can be imported (the I/O helper, the
launcher) get what they must know on their standard input (``workers.processes.read_setup``), not
from the environment. ``ALLOWED`` would name a function and why; an entry that no longer reads
the environment fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "stoker"
NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}

# (file under stoker/, function): why it reads os.environ itself
ALLOWED: dict[tuple[str, str], str] = {}


def env_reads(path: pathlib.Path) -> set[tuple[str, int]]:
    """(enclosing function as ``Class.method`` or ``function``, line) of every mention of
    ``os.environ`` / ``os.getenv`` (and the rest of :data:`NAMES`) and of ``from os import ...``
    of one of them ("" outside any function)."""
    found = set()

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        hit = (isinstance(node, ast.Attribute) and node.attr in NAMES and isinstance(node.value, ast.Name)
               and node.value.id == "os")
        hit = hit or (isinstance(node, ast.ImportFrom) and node.module == "os"
                      and any(a.name in NAMES for a in node.names))
        if hit:
            found.add((".".join(scope), node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(ast.parse(path.read_text(), str(path)), [])
    return found


def test_only_settings_reads_the_environment():
    sources = sorted(ROOT.rglob("*.py"))
    assert len(sources) > 100  # (the package was found)
    bad, seen = [], set()
    for path in sources:
        name = path.relative_to(ROOT).as_posix()
        if name == "settings.py":
            continue
        for where, line in sorted(env_reads(path)):
            if (name, where) in ALLOWED:
                seen.add((name, where))
            else:
                bad.append(f"{name}:{line} ({where or 'module level'})")
    assert not bad, "read the environment through stoker.settings (external_env, child_environ): " + "; ".join(bad)
    gone = sorted(set(ALLOWED) - seen)
    assert not gone, f"no longer reading os.environ: take these out of ALLOWED: {gone}"


def test_the_check_sees_each_form(tmp_path):
    (tmp_path / "m.py").write_text(
        "import os\nfrom os import getenv\n"
        "A = os.environ.get('X')\n"
        "class C:\n    def f(self):\n        return os.getenv('Y')\n"
        "def g():\n    return os.environ\n")
    assert env_reads(tmp_path / "m.py") == {("", 2), ("", 3), ("C.f", 6), ("g", 8)}


def test_external_env_reads_now_and_refuses_settings(monkeypatch):
    import pytest

    from stoker import settings

    monkeypatch.setenv("STOKER_TEST_ONLY_EXTERNAL", "1")
    monkeypatch.setenv("LOCAL_RANK", "")
    assert settings.external_env("LOCAL_RANK") == ""  # (an empty value is returned as it is)
    monkeypatch.delenv("LOCAL_RANK")
    assert settings.external_env("LOCAL_RANK", "none") == "none"
    assert "STOKER_TEST_ONLY_EXTERNAL" in settings.external_env_names()
    with pytest.raises(ValueError, match="settings.get"):
        settings.external_env("STOKER_FUSE")
