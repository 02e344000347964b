"""stoker.settings: one table of STOKER_* variables, parsed one way, each read once, overridden
in tests; no other module reads them; README.md's table is generated from it."""

import ast
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stoker import settings
from stoker._cli_info import settings_lines
from stoker.errors import PipelineBuildError
from stoker.settings import SettingsError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stoker"

# Files that still read STOKER_* variables themselves, relative to the package.
STILL_READING: set = set()  # modules still reading STOKER_* variables themselves: none


def test_every_setting_has_a_variable_a_kind_and_a_description():
    names = [s.name for s in settings.table()]
    assert len(names) == len(set(names)) >= 30
    for s in settings.table():
        assert s.variable == "STOKER_" + s.name.upper() and settings.variable(s.name) == s.variable
        assert s.doc.endswith(".") and "\n" not in s.doc and s.kind.accepts
        assert s.parse(s.kind.show(s.default) if s.default is not None else "", "test") == s.default
    assert not settings.Settings.nvjpeg_host_wait.user  # unsafe: diagnostic only


@pytest.mark.parametrize("text, value", [
    ("1", True), ("0", False), ("true", True), ("False", False), ("YES", True), ("no", False),
    (" on ", True), ("off", False), ("", True)])
def test_flags_take_the_usual_words(text, value):
    assert settings.from_environ({"STOKER_FUSE": text}).fuse is value


@pytest.mark.parametrize("name, text, accepts", [
    ("STOKER_FUSE", "maybe", "true / false"),
    ("STOKER_CPU_PROCESSES", "-1", "auto or a whole number >= 0"),
    ("STOKER_CPU_DECODE_SHARE", "nan", "a number in [0, 1]"),
    ("STOKER_GPU_POOL", "cuda", "hybrid / caching / plain / async / torch / default"),
    ("STOKER_SWITCH_INTERVAL", "soon", "seconds >= 0"),
])
def test_a_bad_value_names_the_variable_and_what_it_takes(name, text, accepts):
    values = settings.from_environ({name: text})
    field = name[len("STOKER_"):].lower()
    with pytest.raises(SettingsError) as err:
        getattr(values, field)
    assert name in str(err.value) and repr(text) in str(err.value) and accepts in str(err.value)
    assert isinstance(err.value, PipelineBuildError)  # a configuration error, never a bad sample
    assert name == "STOKER_FUSE" or values.fuse is True  # the other settings still read


def test_values_are_typed():
    env = {"STOKER_CPU_PROCESSES": "auto", "STOKER_DECODES_AHEAD": "3", "STOKER_CPU_DECODE_SHARE": "0.25",
           "STOKER_GPU_POOL": " Async ", "STOKER_CACHE_DIR": "/tmp/c", "STOKER_CPU_DECODE_NICE": "-5"}
    s = settings.from_environ(env)
    assert (s.cpu_processes, s.decodes_ahead, s.cpu_decode_share, s.gpu_pool) == (None, 3, 0.25, "async")
    assert (s.cache_dir, s.cpu_decode_nice, s.turbojpeg_lib) == ("/tmp/c", -5, None)


def test_settings_are_read_only():
    with pytest.raises(AttributeError, match="override"):
        settings.get().fuse = False


def test_nothing_is_read_at_import():
    code = ("import stoker, stoker.fn, stoker.ops, stoker.backend.nvjpeg, stoker.operators.decoders.mixed.hardware\n"
            "from stoker import settings\n"
            "try:\n    settings.get().fuse\nexcept settings.SettingsError:\n    print('raised on use')\n")
    env = dict(os.environ, STOKER_FUSE="maybe", STOKER_NVJPEG_HOST_WAIT="maybe", STOKER_NVJPEG_STREAM="maybe")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "raised on use"


def test_a_variable_is_read_once(stoker_environ):
    stoker_environ(STOKER_DECODES_AHEAD="5")
    assert settings.get().decodes_ahead == 5
    os.environ["STOKER_DECODES_AHEAD"] = "6"  # (stoker_environ's monkeypatch puts it back)
    assert settings.get().decodes_ahead == 5
    assert settings.reload().decodes_ahead == 6


def test_override_nests_restores_and_reaches_every_thread():
    before = settings.get()
    with settings.override(fuse=False, cpu_processes="3") as outer:
        assert (outer.fuse, outer.cpu_processes) == (False, 3)
        with settings.override(fuse="on", cpu_decode_share=None):
            seen = []
            t = threading.Thread(target=lambda: seen.append((settings.get().fuse, settings.get().cpu_processes)))
            t.start()
            t.join()
            assert seen == [(True, 3)] and settings.get().cpu_decode_share is None
        assert settings.get().fuse is False
    assert settings.get() is before


@pytest.mark.parametrize("values, message", [
    ({"fuse": "maybe"}, "STOKER_FUSE"), ({"decodes_ahead": -1}, "STOKER_DECODES_AHEAD"),
    ({"decodes_ahead": True}, "STOKER_DECODES_AHEAD"), ({"no_such_thing": 1}, "no setting named 'no_such_thing'")])
def test_override_checks_its_values(values, message):
    with pytest.raises(SettingsError, match=message), settings.override(**values):
        pass


def test_helpers_get_the_overrides_in_their_environment():
    with settings.override(fuse=False, cpu_processes=None, switch_interval=0.001):
        env = settings.child_environ({"PATH": "/bin", "STOKER_CPU_PROCESSES": "4"}, turbojpeg_lib="/lib/t.so")
    assert env == {"PATH": "/bin", "STOKER_FUSE": "0", "STOKER_SWITCH_INTERVAL": "0.001",
                   "STOKER_TURBOJPEG_LIB": "/lib/t.so"}
    assert settings.from_environ(env).switch_interval == 0.001
    assert settings.child_environ({"PATH": "/bin"}) == {"PATH": "/bin"}


def _reads_of_variables(tree: ast.AST) -> list[int]:
    """Lines naming a STOKER_* variable in code (string constants that are a variable's name or
    prefix, keyword arguments such as dict(os.environ, STOKER_X=...)); docstrings and comments
    may mention them. _STOKER_* names are private hand-offs to helper processes."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"STOKER_\w*", node.value):
            lines.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg and node.arg.startswith("STOKER_"):
            lines.append(node.value.lineno)
    return lines


def test_only_the_settings_module_reads_stoker_variables():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "settings.py" or rel in STILL_READING:
            continue
        lines = _reads_of_variables(ast.parse(path.read_text(), str(path)))
        if lines:
            found[rel] = lines
    assert not found, f"read STOKER_* variables through stoker.settings instead: {found}"
    sample = ast.parse('os.environ.get("STOKER_FUSE")\ndict(os.environ, STOKER_FUSE="0")\nx = "STOKER_"\n')
    assert sorted(_reads_of_variables(sample)) == [1, 2, 3]  # (the scan finds what it looks for)


def test_readme_holds_the_generated_table():
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- settings-table -->\n(.*?)<!-- /settings-table -->", text, re.S)
    assert found, "README.md lost its <!-- settings-table --> markers"
    assert found.group(1) == settings.markdown_table(), (
        "README.md's settings table is out of date: paste stoker.settings.markdown_table() between the markers")
    for s in settings.table():
        if not s.user:
            assert s.variable not in text, f"{s.variable} is diagnostic only: keep it out of README.md"


def test_info_lists_the_user_settings():
    with settings.override(fuse=False):
        rows = dict(settings_lines())
    assert list(rows) == [s.variable for s in settings.user_settings()]
    assert rows["STOKER_FUSE"] == "0 (set)" and rows["STOKER_GPU_POOL"] == "hybrid"
    assert "STOKER_NVJPEG_LANES" not in rows
