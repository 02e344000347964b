# On the GPU host, sourced from the repository root: `source benchmarks/offline_gpu/setup.sh`.
# Installs the carried wheels once (into /tmp/site, soundfile into /tmp/site_x), assembles DALI
# once its three parts are in /tmp/parts (copied there by earlier steps when each part travels
# alone), sets PYTHONPATH, and writes the 6,000-JPEG benchmark set to /tmp/data when
# make_imagenet_like.py was carried into .bench/ (it lives beside the repository, in shared/bench).
if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site_x .whl/extra/*.whl
fi
export PYTHONPATH=/tmp/site:/tmp/site_dali:/tmp/site_x:$PWD
if [ -d /tmp/parts ] && [ "$(ls /tmp/parts | wc -l)" -ge 3 ] && [ ! -d /tmp/site_dali/nvidia/dali ]; then
  cat /tmp/parts/* > /tmp/dali.tar.xz
  python3 -c "import lzma, tarfile; tarfile.open(fileobj=lzma.open('/tmp/dali.tar.xz')).extractall('/tmp/site_dali')"
  rm -f /tmp/dali.tar.xz
fi
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>/dev/null || echo "DALI: not assembled"
if [ ! -d /tmp/data ] && [ -f .bench/make_imagenet_like.py ]; then
  python3 .bench/make_imagenet_like.py /tmp/data 6000
fi
