"""Packaging: what a user's type checker and logging see, the GPU engine as its own distribution
(hipdnn-engine-hip in engines/hip), and wheels that install into a fresh environment."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
