#!/usr/bin/env bash
# The H200 run behind bench/results/gpu_decode.json: the GPU tests, then bench/gpu_decode.py.
# Run from the repository root on a CUDA machine whose python3 has torch, with the HIP engine built
# elsewhere and given as $1 (default hipdnn/engines/libhipdnn_hip_engine.so) and, when pip cannot
# reach an index, the cffi and pycparser wheels in .whl/. Builds the execute core for that
# machine's Python in place. Writes logs and results to $OUT (default bench/results).
set -uo pipefail
plugin=${1:-hipdnn/engines/libhipdnn_hip_engine.so}
shift || true
source "$(dirname "$0")/gpu_run_env.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu_decode_device.txt" 2>&1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 420 python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu} > "$out/gpu_tests_decode.log" 2>&1
  tail -5 "$out/gpu_tests_decode.log"
fi
python3 bench/gpu_decode.py --out "$out" "$@" 2>&1 | tee "$out/gpu_decode.log" | tail -40
# NCU=1: the profiles behind bench/results/gpu_decode_ncu_*.txt (one small and one large serving shape).
if [ "${NCU:-0}" = 1 ]; then
  for c in 1,8,4096,1,128 1,8,65536,1,128; do
    ncu --clock-control none -k regex:sdpa_decode --launch-skip 2 --launch-count 2 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      python3 bench/gpu_decode.py --one "$c" > "$out/gpu_decode_ncu_${c//,/_}.txt" 2>&1
  done
fi
