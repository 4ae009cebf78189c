"""The attack suite's settings: a CI budget by default, a long one on request.

    python -m pytest tests/adversarial                          # CI: a few minutes in all
    HIPDNN_ADVERSARIAL=long python -m pytest tests/adversarial  # every budget x100 (hours)

Tests size their loops and hypothesis runs with :func:`budget`, so one switch scales the suite;
``tools/fuzz/`` holds the long forms proper (a million cases, the sanitizer build).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import hipdnn

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "fuzz"
LONG = os.environ.get("HIPDNN_ADVERSARIAL", "ci").lower() == "long"
SCALE = 100 if LONG else 1


def budget(ci: int) -> int:
    """How many cases (or hypothesis examples) a test runs: ``ci`` in CI, a hundred times more in
    the long profile."""
    return ci * SCALE


def fuzz_settings(ci_examples: int) -> settings:
    """Hypothesis settings for the suite: no deadline (a case may build a plan), the example budget
    of the profile, and fixtures shared across examples (they hold handles, not state)."""
    return settings(
        max_examples=budget(ci_examples),
        deadline=None,
        derandomize=not LONG,  # CI runs the same examples every time; the long profile explores
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@pytest.fixture(scope="module")
def cpu_handle() -> Iterator[hipdnn.Handle]:
    """A handle whose CPU engine loaded (the suite's target)."""
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


def _sanitizers_link() -> str | None:
    """None when the C compiler links -fsanitize=address,undefined programs, else why not."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler"
    if shutil.which("cmake") is None:
        return "cmake not found"
    probe = subprocess.run(
        [cc, "-fsanitize=address,undefined", "-x", "c", "-", "-o", os.devnull],
        input="int main(void){return 0;}",
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"the compiler cannot link sanitized programs (libasan / libubsan missing?): {probe.stderr[-300:]}"
    return None


@pytest.fixture(scope="session")
def asan_harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tools/fuzz's harness (GraphReader.h and the CPU engine under ASan + UBSan), built at -O0 (it
    compiles in seconds) in a temporary directory, or in $HIPDNN_FUZZ_BUILD_DIR when set (reused)."""
    why = _sanitizers_link()
    if why is not None:
        pytest.skip(why)
    spec = importlib.util.spec_from_file_location("hipdnn_asan_fuzz", TOOLS / "asan_fuzz.py")
    assert spec is not None and spec.loader is not None
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    env_dir = os.environ.get("HIPDNN_FUZZ_BUILD_DIR")
    build_dir = Path(env_dir) if env_dir else tmp_path_factory.mktemp("asan_harness")
    exe: Path = driver.build(build_dir, "-O0")
    return exe
