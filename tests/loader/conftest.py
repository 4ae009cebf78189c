"""Fixtures of the loader suite: the zoo of misbehaving plugins, garbage files, logger hygiene."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_abi.fake_build import zoo_plugin_paths


@pytest.fixture(scope="session")
def zoo_paths(fake_plugin_paths: dict[str, Path]) -> dict[str, Path]:
    """name -> path of every misbehaving plugin (built with the fakes; see ZOO_VARIANTS)."""
    build_dir = next(iter(fake_plugin_paths.values())).parent.parent
    return zoo_plugin_paths(build_dir)


@pytest.fixture(scope="session")
def zoo_dir(zoo_paths: dict[str, Path]) -> Path:
    """The directory holding exactly the zoo."""
    (parent,) = {p.parent for p in zoo_paths.values()}
    return parent


#: garbage files the fixture derives from a real 64-bit plugin (truncated, e_type patched)
DERIVED = ("libtruncated.so", "libtruncated_tail.so", "libtruncated_no_sections.so", "librelocatable.so")
#: file name -> bytes of files that look like plugins by name but are not shared libraries
GARBAGE = {
    "libempty.so": b"",
    "libtext.so": b"this is not an ELF file\n",
    "librandom.so": bytes(range(256)) * 8,
    "libfake_elf.so": b"\x7fELF" + b"\x00" * 60,
}


@pytest.fixture
def garbage_dir(tmp_path: Path, fake_plugin_paths: dict[str, Path]) -> Path:
    """A directory of garbage files named like plugins, plus a truncated real plugin."""
    d = tmp_path / "garbage"
    d.mkdir()
    for name, data in GARBAGE.items():
        (d / name).write_bytes(data)
    real = fake_plugin_paths["fake_plain_v100"].read_bytes()
    # dlopen of a truncated library dies of SIGBUS unless the loader checks the ELF headers first
    (d / "libtruncated.so").write_bytes(real[:1024])
    (d / "libtruncated_tail.so").write_bytes(real[: len(real) - 200])
    half = real[: len(real) // 2]
    (d / "libtruncated_no_sections.so").write_bytes(half[:40] + bytes(8) + half[48:])  # e_shoff = 0
    (d / "librelocatable.so").write_bytes(real[:16] + b"\x01\x00" + real[18:])  # e_type ET_REL
    for p in d.iterdir():
        os.chmod(p, 0o644)
    return d


@pytest.fixture(autouse=True)
def _restore_hipdnn_logger_level() -> Iterator[None]:
    """Handle() with HIPDNN_LOG_LEVEL set changes the ``hipdnn`` logger's level; undo it."""
    logger = logging.getLogger("hipdnn")
    level = logger.level
    yield
    logger.setLevel(level)
