#!/usr/bin/env bash
# The H200 run behind bench/results/gpu_sdpa.json: the GPU tests, then the forward rows of
# bench/gpu_sdpa.py (every S, beside PyTorch flash and cuDNN, with the card's dense bf16 GEMM rate
# as the roofline). Run from the repository root on a CUDA machine whose python3 has torch, with
# the HIP engine built elsewhere and given as $1 (default hipdnn/engines/libhipdnn_hip_engine.so)
# and, when pip cannot reach an index, the cffi and pycparser wheels in .whl/. Writes logs and
# results to $OUT (default bench/results). SKIP_TESTS=1 leaves the tests out; VARIANTS=ws_2wg,ws_cp
# (HIPDNN_HIP_202_KERNEL values) also times those kernels; PROFILE=1 adds Nsight Compute reports of
# the default kernel at D = 128, S = 2048 and D = 64, S = 512 causal (gpu_sdpa_ncu_*.txt).
set -uo pipefail
plugin=${1:-hipdnn/engines/libhipdnn_hip_engine.so}
source "$(dirname "$0")/gpu_run_env.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu_device.txt" 2>&1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 480 python3 -m pytest -q -p no:cacheprovider tests/gpu > "$out/gpu_tests.log" 2>&1
  tail -3 "$out/gpu_tests.log"
fi
python3 bench/gpu_sdpa.py --forward-only --variants "${VARIANTS:-}" --out "$out" 2>&1 | tail -30
if [ "${PROFILE:-0}" = 1 ]; then
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for cfg in 128,2048,0 64,512,1; do
    tag=d${cfg%%,*}_s$(echo "$cfg" | cut -d, -f2)$([ "${cfg##*,}" = 1 ] && echo _causal)
    "$ncu" --clock-control none -k regex:sdpa_fwd_ws --launch-skip 1 --launch-count 1 --set full \
      python3 bench/gpu_sdpa.py --one "$cfg" > "$out/gpu_sdpa_ncu_$tag.txt" 2>&1
  done
fi
