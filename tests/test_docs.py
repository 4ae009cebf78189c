"""The API reference in docs/ builds from the docstrings with no warning (``sphinx-build -W``), includes
the README's guides, and documents every public name of hipdnn, hipdnn.torch and hipdnn.device."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason='sphinx is not installed (pip install -e ".[docs]")')

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = ("hipdnn", "hipdnn.torch", "hipdnn.device")


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/ built as HTML into a fresh directory, warnings as errors (kept going, to list them all)."""
    out = tmp_path_factory.mktemp("docs_html")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    log = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"sphinx-build -W failed (fix the docstring, do not silence the warning):\n{log}"
    # -W turns warnings into a failing status; anything still printed is a warning too
    assert "WARNING" not in log and "ERROR" not in log, log
    return out


def test_the_readme_is_the_front_page(html: Path) -> None:
    page = (html / "index.html").read_text()
    for heading in ("Quickstart", "Using it", "Plugins", "PyTorch"):
        assert f">{heading}" in page, heading
    assert 'href="api/hipdnn.html"' in page and 'href="api/torch.html"' in page and 'href="api/device.html"' in page


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_is_documented(html: Path, module: str) -> None:
    """Each name of the module's ``__all__`` has an entry (an anchor ``id="module.name"``) in its page."""
    names = importlib.import_module(module).__all__
    page = (html / "api" / f"{module.rpartition('.')[2]}.html").read_text()
    missing = [name for name in names if f'id="{module}.{name}"' not in page]
    assert not missing, f"{module}: not in docs/api (add a directive for each): {missing}"
