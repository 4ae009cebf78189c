"""The HIP engine builds for AMD GPUs: hipcc's clang compiles engines/hip with HIPDNN_GPU_PLATFORM=amd
(warnings as errors), links the plugin, and the plugin exports the plugin ABI.

Needs Debian's ``hipcc`` package (HIP 5.2; .ci/run installs it with apt) and skips naming it otherwise.
The plugin is built and symbol-checked, not run: loading it needs an AMD GPU and its runtime (ROCm),
which no machine of this project has; ``test_amd_plugin_loads`` runs only where /dev/kfd exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hipdnn
from hipdnn.plugins.loader import OPTIONAL_ENTRIES, REQUIRED_BASE_ENTRIES, REQUIRED_ENGINE_ENTRIES

pytestmark = pytest.mark.amd_build

ROOT = Path(__file__).resolve().parents[1]
HIPCC = shutil.which("hipcc")
CMAKE = shutil.which("cmake")
NINJA = shutil.which("ninja")
NM = shutil.which("nm")
READELF = shutil.which("readelf")

if HIPCC is None:
    pytest.skip(
        "hipcc is not installed (apt-get install hipcc; .ci/run does so where apt works): "
        "the AMD build of the HIP engine is not checked",
        allow_module_level=True,
    )
if CMAKE is None or NINJA is None or NM is None or READELF is None:
    pytest.skip("cmake, ninja, nm and readelf are needed to build and inspect the AMD plugin", allow_module_level=True)

PLUGIN = "libhipdnn_hip_engine.so"


class AmdBuild:
    def __init__(self, configure_log: str, plugin: Path) -> None:
        self.configure_log = configure_log
        self.plugin = plugin


@pytest.fixture(scope="module")
def amd_build(tmp_path_factory: pytest.TempPathFactory) -> AmdBuild:
    build = tmp_path_factory.mktemp("hip_amd")
    env = {k: v for k, v in os.environ.items() if k not in ("HIP_PLATFORM", "CUDA_PATH")}
    configure = subprocess.run(
        [CMAKE, "-S", str(ROOT / "engines" / "hip"), "-B", str(build), "-G", "Ninja",
         "-DHIPDNN_GPU_PLATFORM=amd", "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert configure.returncode == 0, f"configure failed:\n{configure.stdout}\n{configure.stderr}"
    compiled = subprocess.run(
        [CMAKE, "--build", str(build), "-j", str(min(4, os.cpu_count() or 1))],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert compiled.returncode == 0, f"AMD build failed:\n{compiled.stdout[-6000:]}\n{compiled.stderr[-3000:]}"
    plugin = build / PLUGIN
    assert plugin.is_file()
    return AmdBuild(configure.stdout, plugin)


def test_configure_chooses_amd_and_leaves_engine_202_out(amd_build: AmdBuild) -> None:
    log = amd_build.configure_log
    assert "hipdnn_hip_engine: building for amd with HIP" in log
    assert "engine 202 (Hopper tensor cores) is left out on AMD; engine 201 only" in log
    assert re.search(r"AMD architectures .*gfx90a", log)


def test_plugin_exports_the_plugin_abi(amd_build: AmdBuild) -> None:
    out = subprocess.run([NM, "-D", "--defined-only", str(amd_build.plugin)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    exported = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    entries = {s for s in exported if s.startswith("hipdnn")}
    required = set(REQUIRED_BASE_ENTRIES + REQUIRED_ENGINE_ENTRIES)
    assert required <= entries, f"missing entry points: {sorted(required - entries)}"
    # the HIP engine implements every optional entry (API version, logging, overrides)
    assert set(OPTIONAL_ENTRIES) <= entries, f"missing optional entries: {sorted(set(OPTIONAL_ENTRIES) - entries)}"
    assert entries <= required | set(OPTIONAL_ENTRIES), f"unknown hipdnn exports: {sorted(entries - required)}"
    # the SDK's static helpers and the kernels stay hidden
    assert not any("hipdnn_hip" in s or "sdpa" in s for s in exported), sorted(exported)


def test_plugin_links_the_hip_runtime_and_carries_gfx90a_code(amd_build: AmdBuild) -> None:
    dyn = subprocess.run([READELF, "-d", str(amd_build.plugin)], capture_output=True, text=True)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn.stdout)
    assert any(n.startswith("libamdhip64.so") for n in needed), needed
    assert not any("cuda" in n for n in needed), needed
    assert not any(n.startswith("libstdc++") for n in needed), needed  # linked statically, like on NVIDIA
    # the offload bundle names each target's code object
    assert b"amdgcn-amd-amdhsa--gfx90a" in amd_build.plugin.read_bytes()


def test_amd_plugin_loads(amd_build: AmdBuild) -> None:
    if not Path("/dev/kfd").exists():
        pytest.skip(
            "loading the AMD plugin needs an AMD GPU and the ROCm runtime (/dev/kfd); it is built and "
            "symbol-checked here, not run"
        )
    handle = hipdnn.Handle(plugin_paths=[amd_build.plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    (plugin,) = handle.loaded_plugins()
    assert 201 in plugin.engine_ids


# A probe of hip_portability.h's hipdnn_fmul_rn, compiled as the engine's kernels are (hipcc, -O3,
# HIP's default contraction): the product must stay a v_mul_f32 of its own, never folded into an
# FMA with the add or subtract that uses it. HIP's own __fmul_rn is a plain product there, which
# clang contracts (v_fmac_f32), and equal huge biases then gave unequal scores.
PROBE = """
#include "hip_portability.h"
__global__ void bias_add(float* s, const float* b, float inv) { s[threadIdx.x] += hipdnn_fmul_rn(b[threadIdx.x], inv); }
__global__ void rescale(float* a, const float* m, float c, float base) {
    a[threadIdx.x] = hipdnn_fmul_rn(m[threadIdx.x], c) - base;
}
"""


def test_rounded_products_are_not_contracted(tmp_path: Path) -> None:
    src = tmp_path / "probe.hip"
    src.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_PATH"} | {"HIP_PLATFORM": "amd"}
    run = subprocess.run(
        [HIPCC, "--offload-arch=gfx90a", "--cuda-device-only", "-O3", "-S", "-I", str(ROOT / "engines/hip/src"),
         str(src)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    (asm,) = tmp_path.glob("probe*gfx90a*.s")
    text = asm.read_text()
    for kernel in ("bias_add", "rescale"):
        body = re.search(rf"^_Z\d+{kernel}\w*:(.*?)s_endpgm", text, re.S | re.M)
        assert body is not None, f"{kernel} not found in the probe's ISA"
        ops = re.findall(r"^\s+(v_\w+)", body.group(1), re.M)
        assert "v_mul_f32_e32" in ops or "v_mul_f32_e64" in ops, (kernel, ops)
        assert not [op for op in ops if op.startswith(("v_fma", "v_mac", "v_mad"))], (kernel, ops)
