"""What a package index and a user's tooling read about the project (issue #31): the license file the
metadata promises, classifiers and project URLs, a changelog for the declared version."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        tomllib = pytest.importorskip("tomli")
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def test_the_license_file_is_the_license_the_metadata_names() -> None:
    project = _project()
    assert project["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Permission is hereby granted, free of charge" in text
    assert "License :: OSI Approved :: MIT License" in project["classifiers"]


def test_classifiers_agree_with_the_project() -> None:
    project = _project()
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers and (ROOT / "hipdnn" / "py.typed").is_file()
    lowest = re.fullmatch(r">=3\.(\d+)", project["requires-python"])
    assert lowest is not None
    versions = sorted(
        int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert versions and versions[0] == int(lowest.group(1)), versions
    assert any(c.startswith("Development Status ::") for c in classifiers)
    assert "Operating System :: POSIX :: Linux" in classifiers  # the engines are ELF shared libraries


def test_project_urls_are_links() -> None:
    urls = _project()["urls"]
    assert urls and all(u.startswith("https://") for u in urls.values())
    assert all(len(label) <= 32 for label in urls)  # core metadata's limit on a Project-URL label


def test_the_changelog_covers_the_declared_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog\n")
    assert re.search(rf"^## {re.escape(_project()['version'])}\b", changelog, re.M)
