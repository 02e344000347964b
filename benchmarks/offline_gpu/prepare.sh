#!/usr/bin/env bash
# On a machine with PyPI access: the packages a GPU host without network needs for stoker's GPU tests
# and the side-by-side benchmarks, for Python 3.12 on manylinux x86-64 (see README.md here).
#   bash benchmarks/offline_gpu/prepare.sh        (from the repository root; writes .whl/ and .dali0-2/)
set -euo pipefail
PLATFORMS=""
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64 any; do
  PLATFORMS="$PLATFORMS --platform $p"
done
GET="python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS"
mkdir -p .whl/extra
# stoker's GPU decoding, the CPU crop decoders, and DALI's own Python needs
$GET -d .whl nvidia-nvimgcodec-cu13 nvidia-nvjpeg turbojpeg astunparse gast makefun optree nvtx dm-tree
# the audio tests and benchmarks (soundfile and its cffi)
$GET -d .whl/extra soundfile cffi pycparser
# DALI itself, the benchmarks' reference: its CPython 3.12 files only, xz-compressed, in three parts
tmp=$(mktemp -d)
$GET -d "$tmp" nvidia-dali-cuda130==2.4.0
(cd "$tmp" && mkdir u && cd u && unzip -q ../nvidia_dali*.whl && find . -name '*cpython-3*' ! -name '*cpython-312*' -delete \
  && tar c . | xz -6 -T2 > ../dali.tar.xz && split -n 3 -d ../dali.tar.xz ../dpart)
for k in 0 1 2; do mkdir -p .dali$k && rm -f .dali$k/* && mv "$tmp/dpart0$k" .dali$k/; done
rm -rf "$tmp"
du -sh .whl .dali0 .dali1 .dali2
