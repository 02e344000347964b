"""stoker's settings: every ``STOKER_*`` environment variable, in one table, each read once.

Each :class:`Setting` on :class:`Settings` is one setting; its environment variable is
``STOKER_`` plus the setting's name in capitals (``fuse`` -> ``STOKER_FUSE``). A setting
holds how its variable is parsed, a one-line description, and whether it is for users (listed
by ``stoker info`` and in README.md's table) or diagnostic only (a switch kept to measure or
to try against a known problem; it may go away).

Read a setting with ``settings.get().fuse``. Nothing is read at import: each variable is read
the first time its setting is used, then kept (the :class:`Settings` object cannot be
changed), so a variable set in a script before the pipeline first needs it still counts.
A bad value raises :class:`SettingsError` there, naming the variable and the values it
accepts. Every variable takes an empty value as "unset".

Tests change settings in process with ``with settings.override(fuse=False): ...``, or set the
variables and call :func:`reload`. Helper processes that stoker starts read their own
environment; :func:`child_environ` builds it, with the overrides in force written in, so that
a helper sees what its pipeline sees.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from stoker.errors import PipelineBuildError

PREFIX = "STOKER_"
T = TypeVar("T")


class SettingsError(PipelineBuildError):
    """A ``STOKER_*`` variable (or an override) holds a value its setting does not accept."""


# --- how a variable's text becomes a value -----------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Kind:
    """How a setting's text is parsed (``parse`` raises ValueError on a bad value), written
    back as text (``show``: what the variable would hold), and described (``accepts``)."""

    accepts: str
    parse: Callable[[str], Any]
    show: Callable[[Any], str] = str


def _flag(text: str) -> bool:
    word = text.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _count(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError(text)
    return value


def _number(low: float, high: float | None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text.strip())
        if math.isnan(value) or value < low or (high is not None and value > high):
            raise ValueError(text)
        return value
    return parse


def _choice(*names: str) -> Kind:
    def parse(text: str) -> str:
        word = text.strip().lower()
        if word not in names:
            raise ValueError(text)
        return word
    return Kind(" / ".join(names), parse)


def _or_auto(kind: Kind) -> Kind:
    """``kind``, or the word "auto" (the value None: stoker decides)."""
    def parse(text: str):
        return None if text.strip().lower() == "auto" else kind.parse(text)
    return Kind(f"auto or {kind.accepts}", parse, lambda v: "auto" if v is None else kind.show(v))


FLAG = Kind("1 / 0 (also true / false, yes / no, on / off)", _flag, lambda v: "1" if v else "0")
COUNT = Kind("a whole number >= 0", _count)
INTEGER = Kind("a whole number", lambda text: int(text.strip()))
SECONDS = Kind("a number of seconds >= 0", _number(0.0, None), repr)
SHARE = Kind("a number in [0, 1]", _number(0.0, 1.0), repr)
PATH = Kind("a path", lambda text: text, lambda v: v or "")


class Setting(Generic[T]):
    """One setting: its default, how its variable is read, a one-line description and whether
    it is for users. On a :class:`Settings` object it reads as its value (read-only)."""

    def __init__(self, default: T, kind: Kind, doc: str, *, user: bool = True, default_text: str | None = None):
        self.default, self.kind, self.doc, self.user = default, kind, doc, user
        self.default_text = default_text or kind.show(default)
        self.name = self.variable = ""

    def __set_name__(self, owner, name: str) -> None:
        self.name, self.variable = name, PREFIX + name.upper()

    @overload
    def __get__(self, obj: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, obj: Settings, owner: type) -> T: ...

    def __get__(self, obj, owner=None):
        return self if obj is None else obj._value(self)

    def __set__(self, obj, value) -> None:
        raise AttributeError(f"settings are read-only; tests use settings.override({self.name}=...)")

    def parse(self, text: str, where: str) -> T:
        """``text`` as this setting's value ("" gives the default); ``where`` names its origin."""
        if text == "":
            return self.default
        try:
            return self.kind.parse(text)
        except ValueError:
            raise SettingsError(f"{where} is {text!r}, but {self.variable} takes {self.kind.accepts}") from None


# --- the table ---------------------------------------------------------------------------------

class Settings:
    """Every stoker setting (see the module docstring): ``settings.get().fuse`` and so on."""

    # The pipeline and its CPU stage
    fuse: Setting[bool] = Setting(
        True, FLAG, "Run chains of per-sample CPU operators as one task per chunk of samples (0: each operator "
        "on its own).")
    cpu_processes: Setting[int | None] = Setting(
        None, _or_auto(COUNT), "Worker processes for fused CPU chains; 0 keeps them in the pipeline's process, "
        "auto uses min(num_threads, cores) - 1 for 8+ threads on 8+ cores, and min(num_threads, cores) from 2 "
        "threads for chains with operators that hold the GIL (audio features, colour matrices, blur, laplacian, "
        "water, sphere, jitter; Linux).")
    batch_offload: Setting[bool | None] = Setting(
        None, _or_auto(FLAG), "Batch-wide CPU operators that opt in (random_bbox_crop, box_encoder) run in a "
        "helper process, off the pipeline's GIL (Linux); auto: in GPU pipelines whose CPU stage can run two "
        "lanes (see cpu_lanes), where it measured faster on an H100.")
    switch_interval: Setting[float] = Setting(
        0.0002, SECONDS, "The interpreter's thread switch interval that stoker sets where Python's is longer "
        "(0 keeps Python's).")
    tune_seconds: Setting[float] = Setting(
        5.0, SECONDS, "Longest time a pipeline with num_threads or prefetch_queue_depth \"auto\" measures "
        "candidates at build (plus the batch in flight); 0: the heuristic, no trials.")
    preload_cupyx: Setting[bool | None] = Setting(
        None, _or_auto(FLAG), "Import cupyx.scipy.sparse, which CuPy's first elementwise arithmetic loads (~0.5 s), "
        "on a thread at build: auto for pipelines with GPU arithmetic operators, 1 for every GPU pipeline, 0 "
        "never (a first-batch probe).", user=False)
    early_engines: Setting[bool] = Setting(
        True, FLAG, "Mixed decoders start nvJPEG's hardware decoder at build, on a thread of their own, "
        "rather than in the first batch.", user=False)
    rank_cores: Setting[bool] = Setting(
        True, FLAG, "With several ranks on one host (LOCAL_RANK / LOCAL_WORLD_SIZE or SLURM's) and no pinning, "
        "each rank's pipelines size their threads and helpers by, and run their decode helpers on, its own "
        "share of the cores.")
    cpu_lanes: Setting[int | None] = Setting(
        None, _or_auto(COUNT), "CPU-stage threads of a GPU pipeline (1-4): with 2 or more, one iteration's CPU "
        "operators run while the previous one waits for the batch-operator helper; the sources and the GPU nodes' host "
        "halves keep their order; one batch-operator helper per lane. auto: 2 exactly when the batch-operator "
        "helper runs.", user=False)
    split_gpu_stage: Setting[bool] = Setting(
        False, FLAG, "The GPU stage runs on two threads: the mixed nodes at its head (decoders, .gpu() uploads) on "
        "one, the operators after them on another, so that the operators' host work overlaps the next batch's "
        "decode (DALI's mixed and GPU stages). Off: on an H100 it was level on six zoo pipelines and 15-20 % "
        "slower on ssd and trivial_augment (benchmarks/RESULTS.md, session 22).", user=False)
    serial_stages: Setting[bool] = Setting(
        False, FLAG, "The CPU and GPU stages take turns instead of overlapping.", user=False)
    stage_uploads: Setting[bool] = Setting(
        False, FLAG, ".gpu() of a host batch of 1 MiB or more packs it into pinned memory in the CPU stage; the "
        "GPU stage only queues the copy (off: slower than the default for the GPU speech front end).", user=False)
    stage_queues: Setting[bool] = Setting(
        True, FLAG, "One prefetch queue per stage (0: one queue of cpu_size).", user=False)
    # Readers
    jpeg_structure_check: Setting[bool | None] = Setting(
        None, _or_auto(FLAG), "Mixed decoders with strict on check each JPEG's marker structure and decode broken "
        "files on the CPU, which refuses them (readers.file's I/O process does the check). It costs the GPU "
        "training pipeline about half its speed on an H100 (the I/O process is the limit), so auto turns it on "
        "only under on_error='skip' or 'substitute'.")
    jpeg_entropy_check: Setting[bool | None] = Setting(
        None, _or_auto(FLAG), "Mixed decoders with strict on also read the Huffman data of each JPEG bound for the "
        "GPU (libjpeg-turbo at 1/8 scale, stopping at its first warning) and decode damaged files on the CPU, which "
        "refuses them: 60-70 % of a CPU decode's time a file (0.6-0.9 ms for 500x375), on the pipeline's threads. "
        "auto: wherever jpeg_structure_check is on.")
    reader_process: Setting[bool | None] = Setting(
        None, _or_auto(FLAG), "readers.file reads files in a helper process; auto: with 4+ pipeline threads "
        "on Linux.")
    remote_retries: Setting[int] = Setting(5, COUNT, "Attempts after the first for a failed remote read.")
    remote_backoff: Setting[float] = Setting(
        0.2, SECONDS, "Wait before the first retry of a remote read (doubled for each further one).")
    remote_readahead: Setting[int] = Setting(
        4 << 20, COUNT, "Bytes read ahead from remote storage when records are read in order (0: none).",
        default_text="4194304 (4 MiB)")
    cache_dir: Setting[str | None] = Setting(
        None, PATH, "Folder where remote objects are cached whole on their first read.", default_text="unset")
    numpy_gds: Setting[bool] = Setting(
        False, FLAG, "GPU readers.numpy reads through GPUDirect Storage (needs kvikio).")
    # CPU decoding and resizing
    turbojpeg: Setting[bool] = Setting(True, FLAG, "Use libjpeg-turbo for JPEGs where it is installed.")
    turbojpeg_lib: Setting[str | None] = Setting(
        None, PATH, "The libturbojpeg library to load (unset: the turbojpeg wheel's, else the system's).",
        default_text="unset")
    malloc_tuning: Setting[bool] = Setting(
        True, FLAG, "Raise glibc malloc's trim and mmap thresholds on the first decode (skipped where any "
        "MALLOC_*_ variable is set).")
    torch_resize: Setting[bool] = Setting(
        False, FLAG, "Resize 8-bit images on the CPU through PyTorch's SIMD kernel where torch is installed: "
        "about 2x faster resizes, but up to 2 levels apart from the default path on a few percent of values, "
        "and torch is imported before the first batch. Off: the same pixels whatever is installed.")
    reduced_size_decode: Setting[bool] = Setting(
        False, FLAG, "Fast mode: colour JPEGs decode at 1/8 to 7/8 of their size (libjpeg-turbo's DCT scaling) "
        "where the next operator is a CPU resize that shrinks them at least that much, so that decode and "
        "resize both do less; not the exact path's pixels (PSNR and speed: docs/performance.md). Off: "
        "outputs as without it.")
    # GPU
    gpu_pool: Setting[str] = Setting(
        "hybrid", _choice("hybrid", "caching", "plain", "async", "torch", "default"), "CuPy's device allocator: "
        "the driver's pool for requests of 4 MiB or more and CuPy's caching pool with size classes for the rest, "
        "the caching pool with size classes for all, the caching pool as it is, the driver's pool for all, or "
        "PyTorch's caching allocator (default: hybrid).")
    cuda_sync: Setting[str] = Setting(
        "default", _choice("default", "spin", "yield", "blocking"), "How host threads wait for the GPU.")
    nvjpeg_hw: Setting[bool] = Setting(
        True, FLAG, "Mixed decoders use the GPU's hardware JPEG engines where it has them (0: nvImageCodec).")
    nvjpeg_threads: Setting[int] = Setting(
        0, COUNT, "Host threads nvJPEG parses a batch with (0: one per core).")
    nvimgcodec_threads: Setting[int] = Setting(
        0, COUNT, "Host threads of nvImageCodec's decoder (0: one per core).")
    decodes_ahead: Setting[int] = Setting(
        2, COUNT, "Decoded batches allowed to wait on the device (at least 1).")
    cpu_decode_share: Setting[float | None] = Setting(
        None, _or_auto(SHARE), "Share of the engines' JPEGs decoded on the host instead; auto steers it batch "
        "by batch from what the GPU stage waits on.")
    cpu_decode_processes: Setting[int] = Setting(
        4, COUNT, "Helper processes that decode the JPEGs the engines cannot take and the host share "
        "(0: the pipeline's threads).")
    cpu_decode_threads: Setting[int] = Setting(4, COUNT, "Threads in each decode helper process (at least 1).")
    cpu_decode_spare_cores: Setting[int | None] = Setting(
        None, _or_auto(COUNT), "Cores the decode helpers stay off; auto: a quarter of the usable cores, from "
        "8 up.")
    cpu_decode_nice: Setting[int] = Setting(0, INTEGER, "Niceness of the decode helper processes.")
    # Diagnostic switches: to measure, or to try against a known problem
    nvjpeg_pinned: Setting[bool] = Setting(True, FLAG, "Stage the engines' input in pinned memory.", user=False)
    nvjpeg_host_wait: Setting[bool] = Setting(
        True, FLAG, "Wait on the host before an engines' call (0 is unsafe: only to measure what the wait "
        "costs).", user=False)
    nvjpeg_stream: Setting[str] = Setting(
        "pipeline", _choice("pipeline", "own"), "The engines' call on the pipeline's stream or on one of its "
        "own.", user=False)

    def __init__(self, environ: Mapping[str, str] | None = None, parent: Settings | None = None,
                 fixed: Mapping[str, Any] | None = None):
        # environ: where variables are read (None: os.environ, when each is first needed).
        # parent and fixed: an override's view, the parent's values except those fixed.
        self._environ, self._parent = environ, parent
        self._values: dict[str, Any] = dict(fixed or {})
        self._lock = threading.Lock()

    def _value(self, setting: Setting):
        try:
            return self._values[setting.name]
        except KeyError:
            pass
        if self._parent is not None:
            return setting.__get__(self._parent, Settings)
        with self._lock:
            if setting.name not in self._values:
                env = os.environ if self._environ is None else self._environ
                text = env.get(setting.variable, "")
                self._values[setting.name] = setting.parse(text, f"environment variable {setting.variable}")
            return self._values[setting.name]

    def __repr__(self) -> str:
        read = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Settings({read}{', ...' if self._parent is not None else ''})"


def table() -> list[Setting]:
    """Every setting, in table order."""
    return [v for v in vars(Settings).values() if isinstance(v, Setting)]


def _by_name() -> dict[str, Setting]:
    return {s.name: s for s in table()}


def variable(name: str) -> str:
    """The environment variable of setting ``name`` (``"fuse"`` -> ``"STOKER_FUSE"``)."""
    return _by_name()[name].variable


def from_environ(environ: Mapping[str, str]) -> Settings:
    """The settings that ``environ`` gives (unset variables keep their defaults)."""
    return Settings(environ)


# --- the settings in force ---------------------------------------------------------------------

_lock = threading.Lock()
_current = Settings()
_overridden: dict[str, Any] = {}  # values of the overrides in force, by setting name


def get() -> Settings:
    """The settings in force: the environment's (each variable read when first needed), with any
    overrides."""
    return _current


def reload() -> Settings:
    """Forget what was read: each variable is read again when next needed (for tests that set
    variables; drops the overrides in force)."""
    global _current, _overridden
    with _lock:
        _current, _overridden = Settings(), {}
        return _current


def _checked(values: Mapping[str, Any]) -> dict[str, Any]:
    """Override values by setting name: text is parsed as the variable's would be, other values
    through their text form, so that they meet the same rules; None is the default."""
    known = _by_name()
    out = {}
    for name, value in values.items():
        setting = known.get(name)
        if setting is None:
            raise SettingsError(f"no setting named {name!r}; the settings are {', '.join(sorted(known))}")
        if value is None:
            out[name] = setting.default
            continue
        text = value if isinstance(value, str) else setting.kind.show(value)
        out[name] = setting.parse(text, f"settings.override({name}=...)")
    return out


@contextlib.contextmanager
def override(**values: Any) -> Iterator[Settings]:
    """Change settings for the body of a ``with`` block (every thread sees it), by name::

        with settings.override(fuse=False, cpu_processes=0):
            ...

    A value may be text (as the variable would hold) or a value of the setting's type; None
    means the default. Overrides nest; each puts back what was in force before it."""
    global _current, _overridden
    changed = _checked(values)
    with _lock:
        before = (_current, _overridden)
        _current = Settings(parent=_current, fixed=changed)
        _overridden = {**_overridden, **changed}
        inside = _current
    try:
        yield inside
    finally:
        with _lock:
            _current, _overridden = before


def child_environ(base: Mapping[str, str] | None = None, **values: Any) -> dict[str, str]:
    """The environment for a helper process that stoker starts: ``base`` (default: this
    process's), with the overrides in force and ``values`` (settings by name) written into their
    variables, so that the helper's settings are this process's."""
    env = dict(os.environ if base is None else base)
    known = _by_name()
    for name, value in {**_overridden, **_checked(values)}.items():
        setting = known[name]
        text = "" if value is None else setting.kind.show(value)
        if text:
            env[setting.variable] = text
        else:
            env.pop(setting.variable, None)
    return env


# --- variables that are not stoker's settings --------------------------------------------------
# Every read of the environment in stoker goes through this module (tests/test_env_reads.py), so
# that what a process's behaviour depends on is found in one place.

def external_env(name: str, default: str | None = None) -> str | None:
    """Environment variable ``name``, one that is not a stoker setting: another program's
    (``LOCAL_RANK``, ``CUDA_VISIBLE_DEVICES``, glibc's ``MALLOC_TOP_PAD_``) or a private variable
    that a stoker helper process reads at startup (``_STOKER_DECODE_AFFINITY``). Read now, each
    call, and returned as it is (an empty value too); ``default`` where it is unset."""
    if name.startswith(PREFIX):
        raise ValueError(f"{name} is a stoker setting: read it with settings.get()")
    return os.environ.get(name, default)


def external_env_names() -> list[str]:
    """The names of the variables set in this process's environment now (for checks such as
    "does the user tune glibc malloc with a ``MALLOC_*_`` variable")."""
    return list(os.environ)


# --- documentation -----------------------------------------------------------------------------

def user_settings() -> list[Setting]:
    """The settings meant for users (the diagnostic switches left out)."""
    return [s for s in table() if s.user]


def markdown_table() -> str:
    """The user settings as a Markdown table. README.md holds this text between its
    ``<!-- settings-table -->`` markers; tests/test_settings.py checks that it is current."""
    rows = ["| Variable | Default | Accepts | What it does |", "| --- | --- | --- | --- |"]
    for s in user_settings():
        rows.append(f"| `{s.variable}` | {s.default_text} | {s.kind.accepts} | {s.doc} |")
    return "\n".join(rows) + "\n"
