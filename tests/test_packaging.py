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
GPU_COMPILERS = [c for c in ("nvcc", "hipcc") if shutil.which(c)]


def test_the_root_package_builds_cpu_only() -> None:
    """`pip install .` stays CPU-only and quick: the GPU engine comes from engines/hip's distribution."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'HIPDNN_BUILD_HIP_ENGINE = "OFF"' in pyproject
    hip = (ROOT / "engines" / "hip" / "pyproject.toml").read_text()
    assert 'name = "hipdnn-engine-hip"' in hip
    assert '[project.entry-points."hipdnn.engine_plugins"]\nhip = "hipdnn_engine_hip"' in hip


@pytest.fixture(scope="module")
def hip_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """engines/hip built as a wheel with this machine's GPU compiler (nvcc is preferred when both are
    present). About 1.5 min for a first build on 2 cores; engines/hip/build keeps it for the next run."""
    if not GPU_COMPILERS:
        pytest.skip("no GPU compiler (nvcc or hipcc) on PATH: the hipdnn-engine-hip distribution is not built here")
    out = tmp_path_factory.mktemp("hip_wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(out)]
    result = subprocess.run([*command, str(ROOT / "engines" / "hip")], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (wheel,) = out.glob("hipdnn_engine_hip-*.whl")
    return wheel


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
    through the engine's own refusal log) against the plugin of the built wheel."""
    with zipfile.ZipFile(hip_wheel) as z:
        z.extract("hipdnn_engine_hip/libhipdnn_hip_engine.so", tmp_path)
    plugin = tmp_path / "hipdnn_engine_hip" / "libhipdnn_hip_engine.so"
    plugin.chmod(0o755)
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
