# Sourced by bench/run_gpu_*.sh: readies a CUDA machine to run the GPU tests and benchmarks from this
# checkout. Installs cffi (from the wheels in .whl/ when pip cannot reach an index), builds the execute
# core for this machine's Python in place, and exports PYTHONPATH and HIPDNN_HIP_ENGINE (the plugin at
# $plugin, relative to the repository root). Sets $out (default bench/results).
# tests/gpu find the plugin through HIPDNN_HIP_ENGINE; tests/torch/test_cuda.py (a plain
# Handle(device="cuda")) through the plugin directories instead: copy the plugin alone into a
# directory and run it with HIPDNN_PLUGIN_DIR=that directory.
out=${OUT:-bench/results}
python3 -m pip install -q --no-index --find-links .whl cffi pycparser 2>/dev/null || python3 -m pip install -q cffi
inc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
# The execute core's sources, one per step of a call (hipdnn/backend/native/CMakeLists.txt lists them),
# compiled in parallel, then linked.
objs=$(mktemp -d)
for src in hipdnn/backend/native/*.cpp; do
  g++ -O2 -std=c++17 -fPIC -fvisibility=hidden -Wall -Wextra -Werror -I"$inc" -Iplugin_sdk/include \
    -c "$src" -o "$objs/$(basename "$src" .cpp).o" &
done
for job in $(jobs -p); do wait "$job" || exit 1; done
g++ -shared "$objs"/*.o -o "hipdnn/backend/_execute_core$suffix" || exit 1
export PYTHONPATH=$PWD HIPDNN_HIP_ENGINE=$PWD/$plugin
