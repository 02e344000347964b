"""The test oracle: the same graph or operator call through stoker and through DALI's CPU
operators, and the per-operator checker every operator test can use.

Importable from every test folder as ``oracle`` (pytest puts ``tests/`` on ``sys.path`` for
``tests/conftest.py``). DALI is imported lazily and only here or in tests: a test that asks for
``lib="dali"`` is skipped where DALI is missing.

Three ways in:

* one operator, a table of cases: :class:`Case` and :func:`check_operator` (stoker's CPU
  operator against DALI's, 1 thread against 4, graph against eager, GPU against CPU);
  :func:`case_params` makes one pytest parameter per (case, check).
* graphs: ``build(fn, types, *inputs)`` is written once and called with each library's ``fn``
  and ``types``; inputs are batches (lists of NumPy arrays) fed by external sources.
  :func:`run_graph`, :func:`check`, :func:`check_samples`.
* one operator, ad hoc: ``fn.<op_name>(batch, **kwargs)`` with per-sample arguments fed by
  external sources. :func:`run_op`, :func:`compare_op`.

Tests that build a whole pipeline themselves (readers, conditionals, plugins) take both
libraries' modules from :func:`libs`, or :func:`pipeline` for a pipeline from a body, and read
its outputs with :func:`run_pipeline` (or :func:`samples` for one output); a library's other
modules (``auto_aug.augmentations``, ``plugin.pytorch``) come from :func:`submodule`.
"""

from __future__ import annotations

import dataclasses
import importlib
import types as pytypes
from typing import Any

import numpy as np
import pytest

# ---------------------------------------------------------------------------------------------
# the two libraries


def libs(lib: str):
    """(fn, pipeline_def, types) of ``lib`` ("stoker" or "dali"); skips the test for "dali"
    where DALI is not installed."""
    if lib == "dali":
        pytest.importorskip("nvidia.dali")
        from nvidia.dali import fn, pipeline_def, types
    elif lib == "stoker":
        from stoker import fn, pipeline_def, types
    else:
        raise ValueError(f"lib must be 'stoker' or 'dali', not {lib!r}")
    return fn, pipeline_def, types


def lib_namespace(lib: str):
    """``lib``'s modules as one namespace: ``.fn``, ``.pipeline_def``, ``.types`` and ``.name``
    (what tests that write ``lib.fn.resize(...)`` take)."""
    fn, pipeline_def, types = libs(lib)
    return pytypes.SimpleNamespace(fn=fn, pipeline_def=pipeline_def, types=types, name=lib)


def submodule(lib: str, name: str):
    """``lib``'s module ``name`` (dotted, below the package: "auto_aug.augmentations",
    "plugin.pytorch"): ``stoker.<name>`` or ``nvidia.dali.<name>``; skips the test where DALI (or
    that module of it) is missing."""
    if lib == "dali":
        return pytest.importorskip(f"nvidia.dali.{name}")
    if lib == "stoker":
        return importlib.import_module(f"stoker.{name}")
    raise ValueError(f"lib must be 'stoker' or 'dali', not {lib!r}")


def default_threads(lib: str, num_threads: int | None = None) -> int:
    """DALI with one thread keeps its results independent of scheduling; stoker runs two to
    exercise its thread pool."""
    return num_threads or (1 if lib == "dali" else 2)


def pipeline(lib: str, body, batch_size: int, *, num_threads: int | None = None, seed: int = 3,
             build: bool = True, **opts):
    """``body(fn, types)`` as a pipeline of ``lib`` (CPU only: ``device_id=None`` unless ``opts``
    says otherwise; a list of outputs is returned as a tuple), built unless ``build=False`` (for
    an iterator that builds it). ``opts`` are further ``pipeline_def`` arguments (``on_error``,
    ``enable_conditionals``, ``prefetch_queue_depth``, ...)."""
    fn, pipeline_def, types = libs(lib)
    opts.setdefault("device_id", None)

    @pipeline_def(batch_size=batch_size, num_threads=default_threads(lib, num_threads), seed=seed, **opts)
    def pipe():
        out = body(fn, types)
        return tuple(out) if isinstance(out, list) else out

    p = pipe()
    if build:
        p.build()
    return p


def samples(out) -> list[np.ndarray]:
    """One output of a pipeline of either library (a TensorList, CPU or GPU) as a list of
    NumPy arrays, one per sample."""
    if type(out).__name__.endswith("GPU"):
        out = out.as_cpu()
    return [np.array(out.at(i)) for i in range(len(out))]


def run_pipeline(pipe, iterations: int = 1) -> list[list[list[np.ndarray]]]:
    """``iterations`` runs of a built pipeline of either library: per run, per output, the
    samples as NumPy arrays (``run_pipeline(p, 2)[1][0][3]``: run 2, output 0, sample 3)."""
    return [[samples(o) for o in pipe.run()] for _ in range(iterations)]


def to_dali(value):
    """stoker's enums -> DALI's (same names and numbers); anything else unchanged."""
    from stoker import types as st

    if isinstance(value, (st.DALIDataType, st.DALIImageType, st.DALIInterpType)):
        import nvidia.dali.types as dt

        return getattr(dt, value.name)
    return value


def batch_source(values):
    """A zero-argument callable giving the same batch every time."""
    batch = [np.asarray(a) for a in values]
    return lambda: batch


def lookup(namespace, name: str):
    """``namespace.<name>`` for a dotted name ("noise.gaussian"): an operator of fn or stoker.dynamic."""
    for part in name.split("."):
        namespace = getattr(namespace, part)
    return namespace


# ---------------------------------------------------------------------------------------------
# comparisons


def assert_same(ours, theirs, tol=0.0, what="", layouts=True, other="DALI"):
    """Same number of outputs, layouts (unless ``layouts=False``), shapes and dtypes; values
    equal, or within ``tol`` (a float: relative and absolute tolerance of every element; a pair
    (mean, max): bounds of the mean and the largest absolute difference per sample). Outputs
    are (list of arrays, layout) pairs, as :func:`run_graph` gives them."""
    assert len(ours) == len(theirs), f"{what}: {len(ours)} outputs, {other} gives {len(theirs)}"
    for k, ((a_list, a_lay), (b_list, b_lay)) in enumerate(zip(ours, theirs)):
        assert not layouts or a_lay == b_lay, f"{what} output {k}: layout {a_lay!r} != {other}'s {b_lay!r}"
        if isinstance(tol, tuple):
            assert_close(a_list, b_list, *tol, what=f"{what} output {k}", other=other)
            continue
        assert len(a_list) == len(b_list), f"{what} output {k}: {len(a_list)} samples != {other}'s {len(b_list)}"
        for i, (a, b) in enumerate(zip(a_list, b_list)):
            assert a.shape == b.shape, f"{what} output {k} sample {i}: shape {a.shape} != {other}'s {b.shape}"
            assert a.dtype == b.dtype, f"{what} output {k} sample {i}: dtype {a.dtype} != {other}'s {b.dtype}"
            if tol == 0:
                np.testing.assert_array_equal(a, b, err_msg=f"{what} output {k} sample {i} (vs {other})")
            else:
                np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol,
                                           err_msg=f"{what} output {k} sample {i} (vs {other})")


def assert_close(ours, theirs, mean_tol, max_tol, what="", other="DALI"):
    """Same number of samples, shapes and dtypes; mean and max absolute difference of each
    sample within tolerance."""
    assert len(ours) == len(theirs), f"{what}: {len(ours)} samples != {other}'s {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, f"{what} sample {i}: shape {a.shape} != {other}'s {b.shape}"
        assert a.dtype == b.dtype, f"{what} sample {i}: dtype {a.dtype} != {other}'s {b.dtype}"
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if d.size:
            assert d.mean() <= mean_tol and d.max() <= max_tol, \
                f"{what} sample {i}: mean diff {d.mean():.5f}, max diff {d.max()} (tolerance {mean_tol}, {max_tol})"


# ---------------------------------------------------------------------------------------------
# graphs


def run_graph(lib: str, build, *batches, layouts=None, batch_size=None, seed=3, num_threads=None):
    """Outputs of ``build(fn, types, *inputs)`` in ``lib``'s pipeline as a list (one entry per
    output) of (list of arrays, layout)."""
    fn, pipeline_def, types = libs(lib)
    bs = batch_size or len(batches[0])
    layouts = layouts or [None] * len(batches)

    @pipeline_def(batch_size=bs, device_id=None, seed=seed, num_threads=default_threads(lib, num_threads))
    def pipe():
        xs = [fn.external_source(source=batch_source(b), batch=True, layout=lay) for b, lay in zip(batches, layouts)]
        out = build(fn, types, *xs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    p.build()
    return [(samples(o), o.layout()) for o in p.run()]


def run_graph_samples(lib: str, build, *batches, **kwargs):
    """:func:`run_graph` without the layouts: one list of arrays per output."""
    return [samples for samples, _ in run_graph(lib, build, *batches, **kwargs)]


def check(build, *batches, layouts=None, tol=0.0, what="", batch_size=None):
    """stoker's outputs equal DALI's for the same graph (layouts, shapes, dtypes, values within
    ``tol``); returns stoker's outputs as :func:`run_graph` gives them."""
    ours = run_graph("stoker", build, *batches, layouts=layouts, batch_size=batch_size)
    theirs = run_graph("dali", build, *batches, layouts=layouts, batch_size=batch_size)
    assert_same(ours, theirs, tol, what)
    return ours


def check_samples(build, *batches, tol=0.0, what="", batch_size=None):
    """:func:`check` without comparing layouts (DALI gives transforms' matrices the layout
    "**", stoker none); returns stoker's samples, one list per output."""
    ours = run_graph("stoker", build, *batches, batch_size=batch_size)
    theirs = run_graph("dali", build, *batches, batch_size=batch_size)
    assert_same(ours, theirs, tol, what, layouts=False)
    return [samples for samples, _ in ours]


# ---------------------------------------------------------------------------------------------
# one operator, ad hoc


def run_op(lib: str, op_name: str, batch, layout="HWC", per_sample=None, seed=5, num_threads=None, **kwargs):
    """``fn.<op_name>(x, **kwargs)`` of ``lib`` on one batch; ``per_sample`` maps argument names to
    per-sample values fed through external sources. Returns the first output's samples."""
    case = Case(list(batch), kwargs, per_sample or {}, layout=layout, seed=seed)
    return run_case(lib, op_name, case, default_threads(lib, num_threads))[0][0]


def compare_op(op_name, batch, mean_tol, max_tol, layout="HWC", per_sample=None, **kwargs):
    """stoker vs DALI for one operator on the same batch and arguments (first output: shapes,
    dtypes, mean and max difference within tolerance); returns stoker's samples."""
    ours = run_op("stoker", op_name, batch, layout, per_sample, **kwargs)
    theirs = run_op("dali", op_name, batch, layout, per_sample, **kwargs)
    assert_close(ours, theirs, mean_tol, max_tol, f"{op_name}({kwargs}, per_sample={per_sample})")
    return ours


# ---------------------------------------------------------------------------------------------
# one operator, a table of cases

CPU_CHECKS = ("dali", "threads", "eager")
ALL_CHECKS = CPU_CHECKS + ("gpu",)


@dataclasses.dataclass
class Case:
    """One call of an operator for :func:`check_operator`.

    ``inputs``: one batch (a list of arrays) or a tuple of batches, one per positional input;
    ``args``: the operator's scalar arguments; ``per_sample``: argument name -> one value per
    sample (fed through an external source); ``layout``: of every input (a str) or per input (a
    tuple). ``tol``: stoker against DALI (0: to the bit; a float: relative and absolute; a pair:
    mean and max absolute difference); ``gpu_tol`` the same for the GPU against the CPU.
    ``checks``: the checks this case takes part in (the others are skipped, saying why);
    ``layouts``: whether DALI's output layouts must match; ``iterations``: runs compared;
    ``seed``: the pipeline's; ``batch_size``: for operators without inputs.
    """

    inputs: Any
    args: dict = dataclasses.field(default_factory=dict)
    per_sample: dict = dataclasses.field(default_factory=dict)
    layout: str | tuple | None = "HWC"
    tol: float | tuple = 0.0
    gpu_tol: float | tuple = 0.0
    id: str | None = None
    checks: tuple = ALL_CHECKS
    layouts: bool = True
    iterations: int = 1
    seed: int = 5
    batch_size: int | None = None

    def batches(self) -> list[list[np.ndarray]]:
        """The positional inputs, each a list of arrays."""
        batches = self.inputs if isinstance(self.inputs, tuple) else (self.inputs,)
        return [[np.asarray(a) for a in b] for b in batches]

    def input_layouts(self) -> list:
        n = len(self.batches())
        return list(self.layout) if isinstance(self.layout, tuple) else [self.layout] * n

    def size(self) -> int:
        """The batch size: ``batch_size``, else that of the first input or per-sample argument."""
        if self.batch_size:
            return self.batch_size
        return len(self.batches()[0]) if self.batches() else len(next(iter(self.per_sample.values())))

    def __str__(self) -> str:
        if self.id:
            return self.id
        parts = [f"{k}={getattr(v, 'name', v)}" for k, v in self.args.items()]
        parts += [f"per_sample={sorted(self.per_sample)}"] if self.per_sample else []
        return ",".join(parts) or "default"


def run_case(lib: str, name: str, case: Case, num_threads: int = 1, device: str = "cpu", args=None):
    """Operator ``name`` of ``lib`` on ``case`` in a pipeline (inputs moved to the GPU for
    ``device="gpu"``): the outputs of every iteration, each a (list of arrays, layout) pair."""
    fn, pipeline_def, _ = libs(lib)
    args = dict(case.args if args is None else args)
    if lib == "dali":
        args = {k: to_dali(v) for k, v in args.items()}
    batches, layouts = case.batches(), case.input_layouts()
    op = lookup(fn, name)

    @pipeline_def(batch_size=case.size(), num_threads=num_threads,
                  device_id=0 if device == "gpu" else None, seed=case.seed)
    def pipe():
        xs = [fn.external_source(source=batch_source(b), batch=True, layout=lay) for b, lay in zip(batches, layouts)]
        if device == "gpu":
            xs = [x.gpu() for x in xs]
        extra = {k: fn.external_source(source=batch_source(v), batch=True) for k, v in case.per_sample.items()}
        out = op(*xs, **args, **extra)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    p.build()
    outs = []
    for _ in range(case.iterations):
        outs += [(samples(o), o.layout()) for o in p.run()]
    return outs


def run_case_eager(name: str, case: Case, args=None):
    """Operator ``name`` on ``case`` through stoker.dynamic (eager mode), each iteration with the
    same arguments: outputs as :func:`run_case` gives them."""
    import stoker.dynamic as ndd

    args = dict(case.args if args is None else args)
    op = lookup(ndd, name)
    xs = [ndd.as_batch(b, layout=lay) for b, lay in zip(case.batches(), case.input_layouts())]
    extra = {k: [np.asarray(v) for v in vals] for k, vals in case.per_sample.items()}
    if not xs:
        args.setdefault("batch_size", case.size())
    outs = []
    for _ in range(case.iterations):
        res = op(*xs, **args, **extra)
        for b in res if isinstance(res, tuple) else (res,):
            outs.append(([np.array(t.cpu()) for t in b.tensors], b.layout or None))  # "" in a pipeline
    return outs


def _is_random(name: str) -> bool:
    from stoker.operators.schema import get_operator

    return bool(get_operator(name).schema.random)


def _check_dali(name: str, case: Case) -> None:
    """stoker's CPU operator (two threads) against DALI's (one) on the case, within ``tol``."""
    ours = run_case("stoker", name, case, num_threads=2)
    theirs = run_case("dali", name, case)
    assert_same(ours, theirs, case.tol, f"{name}[{case}]", layouts=case.layouts)


def _check_threads(name: str, case: Case) -> None:
    """stoker with 1 thread against 4: the same outputs, to the bit."""
    one = run_case("stoker", name, case, num_threads=1)
    four = run_case("stoker", name, case, num_threads=4)
    assert_same(four, one, 0, f"{name}[{case}] on 4 threads", other="1 thread")


def _check_eager(name: str, case: Case) -> None:
    """The operator in a pipeline against the same call in eager mode (stoker.dynamic): the
    same outputs, to the bit. A random operator gets an explicit ``seed`` (the only seed both
    modes share) unless the case gives one; iterations are compared one by one only for
    operators that are not random (eager calls don't advance a pipeline's iteration)."""
    args = dict(case.args)
    if _is_random(name):
        args.setdefault("seed", 1234)
        case = dataclasses.replace(case, iterations=1)
    graph = [(samples, layout or None) for samples, layout in run_case("stoker", name, case, 1, args=args)]
    eager = run_case_eager(name, case, args=args)
    assert_same(eager, graph, 0, f"{name}[{case}] eager", other="the pipeline")


def _check_gpu(name: str, case: Case) -> None:
    """The operator on the GPU against the CPU, within ``gpu_tol``; skipped without a GPU."""
    if not gpu_available():
        pytest.skip(f"{name}[{case}]: the GPU-vs-CPU check needs CUDA, CuPy and a GPU")
    gpu = run_case("stoker", name, case, num_threads=1, device="gpu")
    cpu = run_case("stoker", name, case, num_threads=1)
    assert_same(gpu, cpu, case.gpu_tol, f"{name}[{case}] on the GPU", other="the CPU")


CHECKS = {"dali": _check_dali, "threads": _check_threads, "eager": _check_eager, "gpu": _check_gpu}


def gpu_available() -> bool:
    """Whether stoker can run GPU operators here (CUDA, CuPy and a device)."""
    try:
        from stoker.backend.cuda import cuda_available

        return cuda_available()
    except Exception:  # noqa: BLE001 - any import/driver problem means no GPU here
        return False


def check_operator(name: str, cases, checks=CPU_CHECKS) -> None:
    """Check operator ``name`` (``fn.<name>``, dotted for nested ones) on every case of
    ``cases`` (a :class:`Case` or a list of them) with every check in ``checks`` that the case
    takes part in: "dali" (stoker's CPU operator against DALI's, within ``case.tol``), "threads"
    (1 thread against 4, to the bit), "eager" (pipeline against stoker.dynamic, to the bit),
    "gpu" (GPU against CPU within ``case.gpu_tol``; only where a GPU is present, otherwise the
    test is skipped saying so). A check that needs DALI skips the test where DALI is missing."""
    cases = [cases] if isinstance(cases, Case) else list(cases)
    unknown = set(checks) - set(CHECKS)
    assert not unknown, f"unknown checks {sorted(unknown)}; known: {sorted(CHECKS)}"
    ran = 0
    for case in cases:
        for check_name in checks:
            if check_name in case.checks:
                CHECKS[check_name](name, case)
                ran += 1
    if not ran:
        pytest.skip(f"{name}: none of the checks {list(checks)} applies to these cases")


def case_params(cases, checks=CPU_CHECKS, marks=()):
    """pytest parameters ``(case, check)``, one per case and check it takes part in, with ids
    "<case>-<check>": ``@pytest.mark.parametrize("case, check", case_params(CASES))`` then
    ``check_operator(name, case, [check])``."""
    return [pytest.param(case, c, id=f"{case}-{c}", marks=marks)
            for case in cases for c in checks if c in case.checks]
