#!/usr/bin/env bash
# The H200 run of bench/serving.py --gpu, as bench/results/serving_gpu.json records it. Run from the
# repository root on a CUDA machine whose python3 has torch, with the HIP engine already built
# (hipdnn/engines/libhipdnn_hip_engine.so) and, when pip cannot reach an index, the cffi and
# pycparser wheels in .whl/. Builds the execute core for that machine's Python in place.
set -euo pipefail
python3 -m pip install -q --no-index --find-links .whl cffi pycparser 2>/dev/null || python3 -m pip install -q cffi
inc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -I"$inc" -Iplugin_sdk/include \
  hipdnn/backend/native/execute_core.cpp -o "hipdnn/backend/_execute_core$suffix"
export PYTHONPATH=$PWD
python3 bench/serving.py --gpu "$@"
