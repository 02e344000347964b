"""Starting and stopping stoker's helper processes, isolated from the caller's current directory.

:func:`start_helper` starts every helper (the reader's I/O helper, the mixed decoders' JPEG
helpers, the CPU chain workers, the batch-operator helpers) the same way: a fresh interpreter
(never a fork: the pipeline's process may hold CUDA contexts and locked mutexes, which a forked
child would inherit half-alive), under ``python -I``, with one end of a new socket pair as its
first argument. :func:`stop_helper` closes the socket and reaps it.

This file is also run as a script, the launcher of helpers that import stoker
(``python -I processes.py --launch KIND TARGET FD ...``, :func:`_launch`): it must import nothing
but the standard library at module level. A helper learns what it must know before stoker can be
imported (where stoker and the import path are) from its standard input (:func:`read_setup`).

What happens when a helper dies is each user's choice (``stoker/workers/README.md``): the
socket raises EOFError or OSError on the next message, and the reader, the decoders and the
batch-operator helpers fall back to the pipeline's own process for good, while the chain
workers are started again. That is why no restart function lives here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

# The stoker package of this process (this file is stoker/workers/processes.py).
PACKAGE_DIR = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))


def start_helper(before_fd: list[str], after_fd: list[str] = (), env=None, setup: dict | None = None):
    """Start a helper process with FD the helper's end of a new socket pair, and return
    (process, the pipeline's end of the socket).

    ``setup`` (JSON-able) reaches the helper on its standard input, read once at its start with
    :func:`read_setup` (the launcher's own entries, where stoker and the import path are, come
    with it): what a helper must know before it can import stoker, handed over without
    environment variables or long command lines.

    ``before_fd`` names the helper: ``[path]`` (a script), ``["-m", module]`` (a stoker module
    run as ``__main__``) or ``["-S", path]`` (a script that needs the standard library only).
    The helper gets ``FD *after_fd`` as its arguments.

    Isolation: every helper runs under ``python -I``, which ignores ``PYTHON*`` variables
    (``PYTHONPATH``) and puts neither the current directory nor the script's directory on
    ``sys.path``. Before (``python -m``) a ``stoker/`` folder in the current directory was
    imported and run in every chain worker. A helper that imports more than the standard
    library is started through :func:`_launch` (this file), which imports stoker from this
    process's copy (:data:`PACKAGE_DIR`, also for an editable install) and everything else from
    this process's ``sys.path``, without its current-directory entry. The socket pair is
    inherited (``pass_fds``), so the pickled messages pass only between the pipeline and its
    own children: no path-named socket another process could connect to.
    """
    flags = [a for a in before_fd if a.startswith("-") and a != "-m"]
    rest = [a for a in before_fd if a not in flags]
    ours, theirs = socket.socketpair()
    fd = str(theirs.fileno())
    setup = dict(setup or {})
    if "-S" in flags:  # standard library only: run as is, no site-packages
        argv = [sys.executable, "-I", *flags, os.path.abspath(rest[0]), fd, *after_fd]
    else:
        kind, target = ("module", rest[1]) if rest[0] == "-m" else ("path", os.path.abspath(rest[0]))
        argv = [sys.executable, "-I", *flags, os.path.abspath(__file__), "--launch", kind, target, fd, *after_fd]
        setup.update(_launcher_sys_path=_helper_sys_path(), _launcher_package=PACKAGE_DIR)
    try:
        proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.PIPE, close_fds=True, env=env)
    finally:
        theirs.close()
    try:
        with proc.stdin:
            proc.stdin.write(json.dumps(setup).encode())
    except OSError:  # (a helper that died at once: its socket says so on the first message)
        pass
    return proc, ours


def read_setup() -> dict:
    """In a helper: what :func:`start_helper` was given as ``setup``, from standard input (read
    to its end, once; later calls get the same dictionary)."""
    global _setup
    if _setup is None:
        try:
            _setup = json.loads(sys.stdin.buffer.read() or b"{}")
        except (OSError, ValueError, AttributeError):  # (no standard input: started otherwise)
            _setup = {}
    return _setup


_setup: dict | None = None


def _helper_sys_path() -> list[str]:
    """This process's import path for a helper: its absolute entries. '' (the current directory,
    whatever it is when the helper imports) is left out."""
    out = []
    for p in sys.path:
        try:
            p = os.fspath(p)
        except TypeError:
            continue
        if isinstance(p, str) and p and os.path.isabs(p):
            out.append(p)
    return out


def _launch(kind: str, target: str, args: list[str]) -> None:
    """In the helper (``python -I processes.py --launch KIND TARGET FD ...``): take the
    pipeline's import path, import stoker from the pipeline's copy, and run ``TARGET`` (a stoker
    module, or a script by path) as ``__main__`` with ``TARGET FD ...`` as its argv."""
    import importlib
    import importlib.util
    import runpy

    setup = read_setup()
    sys.path[:] = setup.get("_launcher_sys_path") or sys.path
    package = setup.get("_launcher_package", "")
    if package:
        # stoker from the pipeline's own copy, whatever else the path holds: the package is in
        # sys.modules before anything imports it, and its submodules come from its folder.
        spec = importlib.util.spec_from_file_location("stoker", os.path.join(package, "__init__.py"),
                                                      submodule_search_locations=[package])
        module = importlib.util.module_from_spec(spec)
        sys.modules["stoker"] = module
        spec.loader.exec_module(module)
    # (this file runs as __main__ here: the target's stoker.workers.processes is another module,
    # whose read_setup must give the setup this one read)
    importlib.import_module("stoker.workers.processes")._setup = setup
    sys.argv = [target, *args]
    if kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")


def stop_helper(proc, sock) -> None:
    """Close the socket (the helper then exits on its own) and reap the process, killing it
    after 5 s."""
    try:
        sock.close()
    finally:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":  # the launcher: python -I processes.py --launch KIND TARGET FD ...
    # A terminal's Ctrl-C reaches the whole process group: the pipeline handles it and closes
    # its helpers (which exit when their socket closes), so a helper prints no traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _launch(sys.argv[2], sys.argv[3], sys.argv[4:])
