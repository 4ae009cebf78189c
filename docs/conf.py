"""Sphinx configuration of hipdnn's API reference: ``sphinx-build -W --keep-going -b html docs docs/_build``
(``pip install -e ".[docs]"`` first; tests/test_docs.py runs the same build, warnings as errors).

The reference is read from the docstrings (autodoc) of hipdnn as this Python imports it; the guides are
the README, included as it is (MyST)."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer

ROOT = Path(__file__).resolve().parents[1]

project = "hipdnn"
author = "the hipdnn authors"
copyright = "the hipdnn authors, MIT license"
# the one version string, in pyproject.toml (read, not imported, so that it is the checkout's)
release = version = re.search(r'(?m)^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text()).group(1)

extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

html_theme = "alabaster"
html_title = f"hipdnn {release}"

# -- autodoc: the docstrings are plain prose with ``literals`` (no numpy or Google sections) ---------
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
autoclass_content = "both"  # the class docstring, then __init__'s
# hipdnn's own words only: AttentionFunction.forward would otherwise show torch.autograd.Function's
autodoc_inherit_docstrings = False

# -- MyST: the README's headings get anchors, as on a forge ------------------------------------------
myst_heading_anchors = 3


def _doc_comment(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """A constant re-exported from the module that defines it (``hipdnn.DYNAMIC_DIM`` comes from
    hipdnn.frontend.tensor) takes the ``#:`` comment written there, in place of the docstring of its
    type (int's, str's) that autodoc would show."""
    if what != "data" or not isinstance(obj, (int, float, str)):
        return
    attr = name.rpartition(".")[2]
    for module in sorted(m for m in sys.modules if m == "hipdnn" or m.startswith("hipdnn.")):
        if getattr(sys.modules[module], attr, None) is not obj:
            continue
        try:
            comment = ModuleAnalyzer.for_module(module).find_attr_docs().get(("", attr))
        except PycodeError:  # a compiled module: no source to read
            continue
        if comment:
            lines[:] = list(comment)
            return
    if "\n".join(lines).strip() == (inspect.getdoc(type(obj)) or "").strip():
        lines[:] = []  # documented nowhere: better nothing than int's docstring


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _doc_comment)
