"""cffi declarations, read from the plugin SDK headers so the ABI is written once.

Each SDK header marks its declarations with ``/* CFFI:BEGIN */`` ...
``/* CFFI:END */``. Inside the markers the code is plain C except for
preprocessor lines and the two export macros, which are removed here.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

SDK_HEADERS = ("PluginApiDataTypes.h", "PluginApi.h", "EnginePluginApi.h")

_BLOCK = re.compile(r"/\*\s*CFFI:BEGIN(?:\s+\w+)?\s*\*/(.*?)/\*\s*CFFI:END(?:\s+\w+)?\s*\*/", re.S)
_MACROS = re.compile(r"\bHIPDNN_PLUGIN_(?:EXPORT|NODISCARD)\b")
_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def sdk_include_dir() -> Path:
    """The directory holding ``hipdnn_plugin_sdk/``: in the package when installed, else the repo."""
    here = Path(__file__).resolve()
    for candidate in (here.parent.parent / "include", here.parent.parent.parent / "plugin_sdk" / "include"):
        if (candidate / "hipdnn_plugin_sdk" / "EnginePluginApi.h").is_file():
            return candidate
    raise FileNotFoundError("hipdnn plugin SDK headers not found next to the package or in the source tree")


def declarations_from_header(text: str) -> str:
    """The cffi-ready declarations of one header's marked blocks."""
    out = []
    for block in _BLOCK.findall(text):
        block = _COMMENT.sub("", block)
        lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith("#")]
        out.append(_MACROS.sub("", "\n".join(lines)))
    return "\n".join(out)


@cache
def sdk_cdef() -> str:
    """Declarations of every SDK header, in dependency order."""
    root = sdk_include_dir() / "hipdnn_plugin_sdk"
    return "\n".join(declarations_from_header((root / name).read_text()) for name in SDK_HEADERS)
