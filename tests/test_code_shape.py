"""The code stays easy to enter (issue 18): no module of stoker over 600 lines and no function
over 80. A new long function or file fails here and names itself; split it."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "stoker"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def _too_long(path: pathlib.Path) -> list[str]:
    text = path.read_text()
    name = str(path.relative_to(ROOT))
    out = []
    lines = len(text.splitlines())
    if lines > MAX_FILE_LINES:
        out.append(f"{name}: {lines} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = node.end_lineno - node.lineno + 1
            if size > MAX_FUNCTION_LINES:
                out.append(f"{name}: {node.name}() {size} lines")
    return out


def test_no_file_over_600_lines_and_no_function_over_80():
    sources = sorted(ROOT.rglob("*.py"))
    assert len(sources) > 100  # (the package was found)
    problems = [p for path in sources for p in _too_long(path)]
    assert not problems, "split these: " + "; ".join(problems)


def test_the_check_sees_a_long_function(tmp_path, monkeypatch):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def f():\n{body}\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert _too_long(tmp_path / "long.py") == [f"long.py: f() {MAX_FUNCTION_LINES + 1} lines"]
