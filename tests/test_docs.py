"""docs/: every ```python block of docs/*.md runs (on the CPU, each in a fresh process and an
empty folder), and the generated operator reference and settings table are current.

A block that must not run is preceded by ``<!-- skip-test: REASON -->`` on the line before it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
BLOCK = re.compile(r"(?:<!-- skip-test: (?P<reason>[^>]*) -->\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks() -> list:
    params = []
    for name in sorted(os.listdir(DOCS)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(DOCS, name)) as f:
            text = f.read()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            marks = [pytest.mark.skip(reason=m.group("reason"))] if m.group("reason") else []
            params.append(pytest.param(m.group("code"), id=f"{name}:{line}", marks=marks))
    return params


def test_the_docs_have_code_to_run():
    assert len(_blocks()) >= 5


@pytest.mark.parametrize("code", _blocks())
def test_python_block_runs(code, tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # on the CPU, as the docs say they run
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr


def test_operator_reference_is_current():
    """The pages as docs/make_reference.py makes them now (in a fresh process, so that operators
    registered by other tests are not in it) equal the files; the pictures are not remade."""
    code = ("import json, sys; sys.path.insert(0, 'docs'); import make_reference; "
            "print(json.dumps(make_reference.pages()))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    pages = json.loads(r.stdout)
    folder = os.path.join(DOCS, "operators")
    stale = []
    for name, text in pages.items():
        path = os.path.join(folder, name)
        if not os.path.exists(path) or open(path).read() != text:
            stale.append(name)
    extra = {n for n in os.listdir(folder) if n.endswith(".md")} - set(pages)
    assert not stale and not extra, (f"docs/operators is out of date ({stale or sorted(extra)}): run "
                                     "python docs/make_reference.py --text (without --text to remake pictures)")


def test_reference_pictures_exist_and_stay_small():
    folder = os.path.join(DOCS, "operators")
    linked = set()
    for name in os.listdir(folder):
        if name.endswith(".md"):
            with open(os.path.join(folder, name)) as f:
                linked |= set(re.findall(r"\]\(img/([^)]+)\)", f.read()))
    assert linked
    missing = [n for n in sorted(linked) if not os.path.exists(os.path.join(folder, "img", n))]
    assert not missing, f"run python docs/make_reference.py to make {missing}"
    total = sum(os.path.getsize(os.path.join(folder, "img", n)) for n in os.listdir(os.path.join(folder, "img")))
    assert total < 3_000_000


def test_settings_table_in_performance_is_current():
    from stoker import settings

    with open(os.path.join(DOCS, "performance.md")) as f:
        text = f.read()
    parts = text.split("<!-- settings-table -->\n")
    assert len(parts) == 3, "performance.md needs the table between two <!-- settings-table --> lines"
    assert parts[1] == settings.markdown_table(), "update the table in docs/performance.md from " \
        "stoker.settings.markdown_table()"


def test_links_between_docs_resolve():
    for name in os.listdir(DOCS):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(DOCS, name)) as f:
            for target in re.findall(r"\]\(([^)#:]+\.md)\)", f.read()):
                assert os.path.exists(os.path.join(DOCS, target)), f"{name} links to missing {target}"
