#!/usr/bin/env bash
# The H200 run behind bench/results/gpu_sdpa_backward.json: the GPU tests, then the backward rows of
# bench/gpu_sdpa.py (and, with FORWARD=1, its forward rows at --quick, to check they did not move).
# Run from the repository root on a CUDA machine whose python3 has torch, with the HIP engine built
# elsewhere and given as $1 (default hipdnn/engines/libhipdnn_hip_engine.so) and, when pip cannot
# reach an index, the cffi and pycparser wheels in .whl/. Builds the execute core for that machine's
# Python in place. Writes logs and results to $OUT (default bench/results). SKIP_TESTS=1 or
# SKIP_BENCH=1 leave a part out; TESTS names the test files (default tests/gpu).
set -uo pipefail
plugin=${1:-hipdnn/engines/libhipdnn_hip_engine.so}
shift || true
source "$(dirname "$0")/gpu_run_env.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu_backward_device.txt" 2>&1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 480 python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu} > "$out/gpu_tests_backward.log" 2>&1
  tail -5 "$out/gpu_tests_backward.log"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 bench/gpu_sdpa.py --backward-only --out "$out" "$@" 2>&1 | tee "$out/gpu_sdpa_backward.log" | tail -40
  if [ "${FORWARD:-0}" = 1 ]; then
    python3 bench/gpu_sdpa.py --quick --tag gpu_sdpa_after_backward --out "$out" 2>&1 | tail -30
  fi
fi
