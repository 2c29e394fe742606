"""Text from outside (logs, imported database keys, model and file names, environment variables)
made safe to print on a terminal.

A terminal obeys control characters: an escape sequence in a model's layer name or an imported
engine key can move the cursor, rewrite what was printed above, set the window title or hide text.
`clean` shows every control character as a visible escape (`\\x1b`, `\\r`, `\\u202e`) and keeps
only newlines and tabs; with `keep_color` it also keeps the plain colour sequences convdoctor itself
writes (`COLOR_CODES`), so text cleaned piece by piece can be coloured and then cleaned as a whole.
"""

from __future__ import annotations

import os
import re
from typing import Any, TextIO

# C0 controls except tab and newline, DEL, C1 controls, and the Unicode format characters that
# reorder or hide text (bidirectional overrides and isolates, line and paragraph separators).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# SGR colour sequences convdoctor writes itself: reset, bold, and the eight foreground colours
COLOR_CODES = ("0", "1", "22", "31", "32", "33", "34", "35", "36", "39")
_SGR = re.compile("\x1b\\[(" + "|".join(COLOR_CODES) + ")m")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: Any, *, keep_color: bool = False) -> str:
    """`text` (any object, str() of it) with every control character shown as a visible escape;
    newlines and tabs kept, and convdoctor's own colour sequences when `keep_color`."""
    s = text if isinstance(text, str) else str(text)
    if not keep_color:
        return _UNSAFE.sub(_escape, s)
    parts = _SGR.split(s)
    # split keeps the captured code at odd positions: rebuild those as colour sequences
    return "".join(f"\x1b[{p}m" if i % 2 else _UNSAFE.sub(_escape, p) for i, p in enumerate(parts))


def one_line(text: Any) -> str:
    """`clean(text)` with newlines and tabs escaped too (for a table cell or a one-line message)."""
    s = clean(text)
    return s.replace("\n", "\\n").replace("\t", "\\t")


def use_color(stream: TextIO | None) -> bool:
    """Colour only for a terminal, never when NO_COLOR is set (https://no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR", "") != "" or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
