"""``stoker --version`` and ``stoker info``: what stoker sees on this machine.

Nothing here may crash or hang when an optional package or the GPU is absent: every probe
catches its own errors, and the GPU probe runs in a daemon thread with a time limit because a
wedged CUDA driver can block ``cudaGetDeviceCount`` for minutes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
import threading

GPU_PROBE_SECONDS = 10.0


def stoker_version() -> str:
    """The installed distribution's version, else ``stoker.__version__``, else "unknown"."""
    try:
        return importlib.metadata.version("stoker")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        import stoker

        return str(getattr(stoker, "__version__", "unknown"))
    except Exception:  # noqa: BLE001 - a version string must never fail
        return "unknown"


def _dist_version(*names: str) -> str | None:
    """Version of the first installed distribution among ``names`` (metadata only: no import)."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing or a broken one
        return False


def _turbojpeg() -> str:
    try:
        from stoker.operators.decoders import turbo

        if turbo.available():
            return f"yes ({turbo.library_path()})"
    except Exception as e:  # noqa: BLE001 - report, never crash
        return f"no ({type(e).__name__}: {e})"
    return "no (pip install 'stoker[jpeg]'; the CPU cropping decoders then decode whole images)"


def _optional(module: str, dists: tuple[str, ...], hint: str) -> str:
    if not _module_present(module):
        return f"no ({hint})"
    version = _dist_version(*dists)
    return f"yes ({version})" if version else "yes"


def gpu_status(timeout: float = GPU_PROBE_SECONDS) -> str:
    """"yes (N GPU(s): names)" or "no (why)"; gives up after ``timeout`` seconds."""
    if not _module_present("cupy"):
        return "no (cupy is not installed: pip install 'stoker[gpu]')"
    result: list[str] = []

    def probe():
        try:
            from stoker.backend.cuda import unavailable_reason

            problem = unavailable_reason(0)
            if problem:
                result.append(f"no ({problem})")
                return
            import cupy

            n = cupy.cuda.runtime.getDeviceCount()
            names = []
            for i in range(n):
                name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
                names.append(name.decode() if isinstance(name, bytes) else str(name))
            result.append(f"yes ({n} GPU(s): {', '.join(names)})")
        except Exception as e:  # noqa: BLE001 - any driver error means "not usable"
            result.append(f"no ({type(e).__name__}: {e})")

    t = threading.Thread(target=probe, daemon=True, name="stoker-info-gpu-probe")
    t.start()
    t.join(timeout)
    return result[0] if result else f"unknown (the CUDA probe did not answer within {timeout:.0f} s)"


def info_lines() -> list[tuple[str, str]]:
    """(label, value) rows that ``stoker info`` prints."""
    import numpy

    rows = [
        ("stoker", stoker_version()),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", platform.platform()),
        ("NumPy", numpy.__version__),
    ]
    try:
        import cv2

        rows.append(("OpenCV", cv2.__version__))
    except Exception as e:  # noqa: BLE001
        rows.append(("OpenCV", f"not usable ({type(e).__name__}: {e})"))
    rows.append(("Pillow", _dist_version("pillow", "Pillow") or "not installed"))
    rows.append(("libjpeg-turbo (turbojpeg)", _turbojpeg()))
    rows.append(("torch", _optional("torch", ("torch",), "pip install 'stoker[torch]'")))
    rows.append(("CuPy", _optional("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
                                   "pip install 'stoker[gpu]'")))
    rows.append(("nvImageCodec", _optional("nvidia.nvimgcodec",
                                           ("nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12"),
                                           "pip install 'stoker[gpu]'")))
    rows.append(("CUDA GPU", gpu_status()))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = f"{os.cpu_count()}" + (f" ({usable} usable by this process)" if usable not in (None, os.cpu_count())
                                   else "")
    rows.append(("CPU cores", cores))
    try:
        from stoker.operators.schema import registered

        ops = [k for k in registered() if not k.startswith("_")]
        rows.append(("operators", str(len(ops))))
    except Exception as e:  # noqa: BLE001
        rows.append(("operators", f"could not be listed ({type(e).__name__}: {e})"))
    rows += settings_lines()
    return rows


def settings_lines() -> list[tuple[str, str]]:
    """(variable, value in force) for every user setting (stoker.settings); "(set)" marks the
    values that differ from the default, "not accepted" a bad value."""
    from stoker import settings

    current = settings.get()
    rows = []
    for s in settings.user_settings():
        try:
            value = getattr(current, s.name)
        except settings.SettingsError as e:
            rows.append((s.variable, f"not accepted: {e}"))
            continue
        rows.append((s.variable, s.default_text if value == s.default else f"{s.kind.show(value)} (set)"))
    return rows


def print_info() -> None:
    """Print the ``stoker info`` table."""
    rows = info_lines()
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
