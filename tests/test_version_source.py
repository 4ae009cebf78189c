"""The release version is written once, in pyproject.toml: the package metadata, hipdnn.__version__ and
the version the built engines report (HIPDNN_VERSION, passed by CMake) all read it from there."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import hipdnn

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _declared() -> str:
    m = re.search(r'^version = "([^"]+)"$', PYPROJECT.read_text(), re.M)
    assert m is not None
    return m.group(1)


def test_package_and_engines_report_the_pyproject_version() -> None:
    version = _declared()
    assert hipdnn.__version__ == metadata.version("hipdnn") == version
    h = hipdnn.Handle()
    try:
        (cpu,) = [p for p in h.loaded_plugins() if p.name == "hipdnn_cpu_engine"]
        assert cpu.version == version
    finally:
        h.close()


def test_version_written_once() -> None:
    """No source besides pyproject.toml spells the version out for the package or its engines."""
    root = PYPROJECT.parent
    version = _declared()
    sources = [root / "hipdnn" / "__init__.py", *sorted((root / "engines").rglob("*.c*")), root / "CMakeLists.txt"]
    sources += sorted((root / "engines").rglob("*.h*"))
    hits = [
        str(p.relative_to(root)) for p in sources if p.is_file() and f'"{version}"' in p.read_text(errors="replace")
    ]
    assert hits == []
