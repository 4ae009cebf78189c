"""Strings that come from plugins (or from file names) on their way to logs, errors and terminals.

A plugin's strings are bytes of unbounded length that it wrote; the host reads at most a fixed number
of them and shows every character that is not printable as an escape, so a plugin cannot flood a log
or move a terminal's cursor, clear its screen or forge a second log line (rfcs/0008).
"""

from __future__ import annotations

#: Longest plugin name, version or API version accepted, in bytes; a longer one refuses the plugin.
MAX_IDENTITY_BYTES = 256
#: Longest last-error string or log message kept, in bytes; the rest is cut and marked.
MAX_MESSAGE_BYTES = 4096

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with each character that is not printable (C0 and C1 controls, DEL, line and
    paragraph separators, bidirectional overrides and other format characters) written as a Python
    escape: ``\\n``, ``\\x1b``, ``\\u202e``. Printable text, non-ASCII letters included, is unchanged."""
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def message_text(raw: bytes, truncated: bool) -> str:
    """A plugin's message (at most MAX_MESSAGE_BYTES of it, ``truncated`` when there was more) as
    printable text. Invalid UTF-8 shows as ``\\xNN`` escapes rather than being dropped."""
    text = printable(raw.decode("utf-8", "backslashreplace"))
    return f"{text}... [truncated at {MAX_MESSAGE_BYTES} bytes]" if truncated else text


def quoted(text: str) -> str:
    """``text`` in single quotes, escaped by :func:`printable` (``repr`` would double its backslashes)."""
    return f"'{printable(text)}'"
