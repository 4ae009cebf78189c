#!/usr/bin/env bash
# Nsight Compute stall profiles of engine 202's forward kernel (sdpa_fwd_ws), as in
# bench/results/gpu_sdpa_stalls_persistent_d128_s{2048,16384}.txt: for each CONFIGS entry D,S,causal
# (default "128,2048,0 128,16384,0"), one launch of bench/gpu_sdpa.py --one under `ncu --set full`,
# then bench/ncu_stalls.py on its source page. Run from the repository root on a CUDA machine, the
# engine given as $1 as for bench/run_gpu_forward.sh; writes to $OUT (default bench/results).
set -uo pipefail
plugin=${1:-hipdnn/engines/libhipdnn_hip_engine.so}
source "$(dirname "$0")/gpu_run_env.sh"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for c in ${CONFIGS:-128,2048,0 128,16384,0}; do
  IFS=, read -r d s causal <<< "$c"
  tag=d${d}_s${s}$([ "$causal" = 1 ] && echo _causal)
  rep=$(mktemp -d)/p
  "$ncu" --clock-control none -k regex:sdpa_fwd_ws --launch-skip 1 --launch-count 1 --set full --import-source no \
    -o "$rep" python3 bench/gpu_sdpa.py --one "$c" > /dev/null 2>&1
  "$ncu" -i "$rep.ncu-rep" --page details > "$out/gpu_sdpa_ncu_$tag.txt" 2>&1
  "$ncu" -i "$rep.ncu-rep" --page source --print-source sass --csv > "$rep.csv" 2>&1
  python3 bench/ncu_stalls.py "$rep.csv" > "$out/gpu_sdpa_stalls_$tag.txt"
done
