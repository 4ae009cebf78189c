"""The committed FlatBuffers code must be exactly what flatc produces from schema/*.fbs today."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATED_DIRS = (
    Path("hipdnn") / "wire",
    Path("plugin_sdk") / "include" / "hipdnn_plugin_sdk" / "wire",
)


def _load_generator():
    path = REPO_ROOT / "tools" / "generate_schema.py"
    spec = importlib.util.spec_from_file_location("_hipdnn_generate_schema", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    if shutil.which("flatc") is None:
        pytest.skip("flatc is not on PATH")
    return _load_generator().generate(tmp_path_factory.mktemp("flatc_out"))


def _committed_files() -> set[Path]:
    found: set[Path] = set()
    for rel_dir in GENERATED_DIRS:
        for f in (REPO_ROOT / rel_dir).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                found.add(f.relative_to(REPO_ROOT))
    return found


def test_generator_produces_both_languages(generated: dict[Path, Path]) -> None:
    assert any(rel.suffix == ".py" for rel in generated)
    assert any(rel.suffix == ".h" for rel in generated)
    for rel in generated:
        assert not rel.is_absolute()
        assert rel.parent in GENERATED_DIRS, rel


def test_every_generated_file_matches_the_committed_one(generated: dict[Path, Path]) -> None:
    differing, missing = [], []
    for rel, produced in sorted(generated.items()):
        committed = REPO_ROOT / rel
        if not committed.is_file():
            missing.append(str(rel))
        elif committed.read_bytes() != produced.read_bytes():
            differing.append(str(rel))
    assert not missing, f"generated but not committed (run tools/generate_schema.py): {missing}"
    assert not differing, f"committed code differs from flatc output (rerun the generator): {differing}"


def test_no_committed_file_is_stale(generated: dict[Path, Path]) -> None:
    stale = sorted(str(p) for p in _committed_files() - set(generated))
    assert not stale, f"committed files flatc no longer generates: {stale}"


def test_root_tables_are_present(generated: dict[Path, Path]) -> None:
    names = {rel.name for rel in generated}
    for expected in ("Graph.py", "Node.py", "TensorAttributes.py", "SdpaAttributes.py", "graph_generated.h"):
        assert expected in names
