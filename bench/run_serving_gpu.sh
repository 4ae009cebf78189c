#!/usr/bin/env bash
# The H200 run of bench/serving.py --gpu, as bench/results/serving_gpu.json records it. Run from the
# repository root on a CUDA machine whose python3 has torch, with the HIP engine already built
# (hipdnn/engines/libhipdnn_hip_engine.so) and, when pip cannot reach an index, the cffi and
# pycparser wheels in .whl/. Builds the execute core for that machine's Python in place.
set -euo pipefail
plugin=hipdnn/engines/libhipdnn_hip_engine.so
source "$(dirname "$0")/gpu_run_env.sh"
python3 bench/serving.py --gpu "$@"
