"""stoker's CUDA kernels built for the host with g++, so tests on machines without a GPU run the
kernel source itself (not only a NumPy model of it).

:func:`prelude` stands in for what a kernel file takes from CUDA: ``threadIdx`` / ``blockIdx`` /
``blockDim``, the qualifiers, ``__syncthreads`` (a barrier), and a ``launch(gx, gy, threads,
kernel)`` template that runs each block of a 2-D grid with one host thread per CUDA thread (blocks
one after the other, so a block's ``__shared__`` memory is the next one's, as on a GPU). A test's
shim is the prelude, the intrinsics its kernel uses, ``#include "<kernel>.cu"`` and ``extern "C"``
wrappers that call ``launch``; :func:`build` compiles it."""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess

KERNELS = pathlib.Path(__file__).resolve().parents[1] / "stoker" / "kernels"


def prelude(index_type: str = "unsigned") -> str:
    """The CUDA stand-ins; ``index_type`` is the type of ``threadIdx.x`` and friends (CUDA's is
    unsigned; a kernel whose index arithmetic is meant in 64 bits may ask for ``long long``)."""
    return rf"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
struct Dim {{ {index_type} x = 0, y = 0, z = 0; }};
static thread_local Dim threadIdx, blockIdx;
static Dim blockDim;
static std::barrier<> *sync_point;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() sync_point->arrive_and_wait()

template <typename F> static void launch(long long gx, long long gy, unsigned threads, F kernel) {{
  std::barrier<> bar(threads);
  sync_point = &bar;
  blockDim.x = threads;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {{
      threadIdx.x = t;
      for (long long y = 0; y < gy; ++y)
        for (long long x = 0; x < gx; ++x) {{
          blockIdx.x = x;
          blockIdx.y = y;
          kernel();
          bar.arrive_and_wait();  // a block's shared memory is the next one's
        }}
    }});
  for (auto &th : pool) th.join();
}}
"""


def build(tmp_dir, shim: str, name: str, headers: dict[str, str] | None = None) -> ctypes.CDLL | None:
    """``shim`` (C++ source: :func:`prelude` and the test's own part) compiled into a shared library
    in ``tmp_dir``, with ``headers`` (file name -> text) beside it; None where g++ is missing.
    No floating-point contraction: a GPU kernel that rounds step by step is compared to the bit."""
    if shutil.which("g++") is None:
        return None
    d = pathlib.Path(tmp_dir)
    for file, text in (headers or {}).items():
        (d / file).write_text(text)
    (d / "shim.cpp").write_text(shim)
    lib = d / f"lib{name}.so"
    subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-pthread", f"-I{d}",
                    f"-I{KERNELS}", "-o", str(lib), str(d / "shim.cpp")], check=True)
    return ctypes.CDLL(str(lib))
