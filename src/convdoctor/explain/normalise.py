"""Normalisation before matching: from raw log lines to logical lines that carry their log level and
origin as facts.

What is undone, in this order, on each line:
- terminal control: ANSI/VT escape sequences (CSI, OSC, two-byte ESC), their copy-pasted remains
  (`^[[31m`, `←[0m`, a bare `[1;31m`), other C0/C1 control characters;
- HTML escaping (`&lt;`, `&#39;`, ... as in scraped or exported notebook output);
- rich / IPython / Jupyter decoration: box-drawing borders and rules (`│ ... │`, `╭──╮`), rich's
  `❱ 12 │` gutter, IPython's `----> 5` arrows and numbered context lines;
- log prefixes: timestamps, absl/glog (`E0514 15:42:22.522887 3766360 cuda_dnn.cc:532]`,
  `2024-07-19 15:49:01.341533: E external/xla/...cc:439]`, `W tensorflow/...cc:44]`), ONNX Runtime
  (`[E:onnxruntime:Default, file.cc:12 Fn]`), Python logging (`ERROR:root:`, `- WARNING -`) and
  `warnings` (`file.py:12: UserWarning:`): removed from the text, kept as `level` and `origin`;
- Windows paths: backslashes become `/` inside paths (`d:\\Code\\x.py` -> `d:/Code/x.py`).
Then lines cut at a fixed terminal width are joined back (see `normalise`).
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class LogicalLine:
    line: int                  # 1-based number of its first physical line
    text: str                  # normalised text, what patterns match
    level: str | None = None   # I W E F (info, warning, error, fatal), from its prefix
    origin: str | None = None  # source file (and line) the prefix names, e.g. "cuda_dnn.cc:532"
    span: int = 1              # physical lines joined into this one


# -- terminal control ---------------------------------------------------------------------------
_ESC_SEQ = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"      # OSC ... BEL / ST (window titles, hyperlinks)
    r"|\x1b\[[0-?]*[ -/]*[@-~]"                # CSI (colours, cursor, erase)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"          # DCS / SOS / PM / APC strings
    r"|\x1b[@-Z\\-_]|\x1b[ -/][@-~]?"           # two-byte escapes, charset selection
    r"|\x9b[0-?]*[ -/]*[@-~]"                  # 8-bit CSI
)
# escapes that lost their ESC byte in copy-paste: "^[[31m", "←[0m", "[1;31m"
_ESC_REMAINS = re.compile(r"(?:\^\[|\u2190)?\[\d{1,3}(?:;\d{1,3})*m|(?:\^\[|\u2190)\[[0-9;]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_control(text: str) -> str:
    """Remove terminal escape sequences and control characters (tabs kept)."""
    if "\x1b" in text or "\x9b" in text:
        text = _ESC_SEQ.sub("", text)
    if "[" in text:
        text = _ESC_REMAINS.sub("", text)
    return _CONTROL.sub("", text)


# -- decoration ---------------------------------------------------------------------------------
_BOX = re.compile(r"[\u2500-\u257f\u2580-\u259f]")          # box drawing, block elements
_BOX_EDGES = re.compile(r"^\s*[\u2502\u2503\u2551]\s?|\s?[\u2502\u2503\u2551]\s*$")  # "│ ... │"
_RICH_GUTTER = re.compile(r"^\s*\u2771?\s*\d+\s*\u2502")          # "❱ 456 │" / "  457 │"
_IPY_ARROW = re.compile(r"^\s*-*>\s*\d+\s")                    # "----> 5 ", "--> 1193 "
_IPY_CONTEXT = re.compile(r"^ {4,}\d+ {2,}(?=\S)")            # "      6     y = f(x)"


def strip_decoration(text: str) -> str:
    if _BOX.search(text):
        text = _RICH_GUTTER.sub(" ", _BOX_EDGES.sub("", text))
        text = _BOX.sub(" ", text)
        text = text.replace("\u2771", " ")
    elif "->" in text[:12] or text.startswith("    "):
        text = _IPY_ARROW.sub("", text) if "->" in text[:12] else _IPY_CONTEXT.sub("", text)
    return text


# -- log prefixes -------------------------------------------------------------------------------
_TS = r"(?:\[?\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?:?\s*)"
_PREFIXES: tuple[re.Pattern[str], ...] = (
    # absl/glog, with or without a leading timestamp:
    #   "2024-07-19 15:49:01.341533: E external/xla/xla/service/gpu/cuda_dnn.cc:439] msg"
    #   "E0514 15:42:22.522887 3766360 cuda_dnn.cc:532] msg", "W tensorflow/core/x.cc:44] msg"
    re.compile(_TS + r"?(?P<level>[IWEF])(?:\d{4} [\d:.]+\s+\d+\s+|\s*)"
               r"(?P<origin>[\w./\-]+\.(?:cc|cpp|cu|h|c|py):\d+)\]\s?"),
    # ONNX Runtime: "2023-05-01 10:00:00.123 [E:onnxruntime:Default, provider_bridge_ort.cc:1351 Fn] "
    re.compile(_TS + r"?\[(?P<level>[VIWEF]):onnxruntime:[^,\]]*,\s*(?P<origin>[\w.\-]+:\d+)[^\]]*\]\s?"),
    # Python warnings: "/path/conv.py:456: UserWarning: msg"
    re.compile(r"(?P<origin>\S+\.py:\d+): (?P<level>\w*Warning):\s?"),
    # Python logging: "ERROR:root:msg", "WARNING:tensorflow:msg"
    re.compile(r"(?P<level>CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG):(?P<origin>[\w.]+):"),
    # "2024-05-01 12:00:00,123 - name - ERROR - msg", "[2024-05-01 12:00:00] ERROR msg", "[ERROR] msg"
    re.compile(_TS + r"?(?:-\s*(?P<origin>[\w.]+)\s*-\s*)?\[?(?P<level>CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\]?"
               r"(?:\s*[-:|]\s*|\s+)"),
    re.compile(_TS),
)
_LEVELS = {"V": "I", "D": "I", "I": "I", "W": "W", "E": "E", "F": "F", "CRITICAL": "F", "FATAL": "F",
           "ERROR": "E", "WARNING": "W", "WARN": "W", "INFO": "I", "DEBUG": "I"}


# all prefix forms in one expression (tried in the order above, in one call): group names get the
# index of their form, level<i> / origin<i>
_PREFIX_ANY = re.compile("|".join(
    "(?:" + rx.pattern.replace("?P<level>", f"?P<level{i}>").replace("?P<origin>", f"?P<origin{i}>") + ")"
    for i, rx in enumerate(_PREFIXES)))

_BRANCH_OF_GROUP = {idx: int(re.sub(r"\D", "", name)) for name, idx in _PREFIX_ANY.groupindex.items()}


def split_prefix(text: str) -> tuple[str, str | None, str | None]:
    """(message, level, origin): the log prefix removed and read."""
    s = text.lstrip()
    if not s:
        return text, None, None
    m = _PREFIX_ANY.match(s)
    if m is None:
        return text, None, None
    branch = _BRANCH_OF_GROUP.get(m.lastindex or 0)
    lvl = m.group(f"level{branch}") if f"level{branch}" in _PREFIX_ANY.groupindex else None
    origin = m.group(f"origin{branch}") if f"origin{branch}" in _PREFIX_ANY.groupindex else None
    level = None
    if lvl:
        level = "W" if lvl.endswith("Warning") else _LEVELS.get(lvl.upper(), None)
    rest = s[m.end():]
    if not rest.strip() and level is None:
        return text, None, None
    if origin is None and not (s[:1].isdigit() or (s[:1] == "[" and s[1:2].isdigit())):
        return s, level, None   # a bare "ERROR:" / "[WARNING]" is part of the message: kept
    return rest, level, origin


# -- Windows paths ------------------------------------------------------------------------------
_WIN_PATH = re.compile(r"(?<![\w\\])(?:[A-Za-z]:|\\\\[\w.$-]+)\\{1,2}[^\s\"'<>|*?]*")


def unwindows(text: str) -> str:
    if "\\" not in text:
        return text
    return _WIN_PATH.sub(lambda m: re.sub(r"\\{1,2}", "/", m.group(0)), text)


# -- one line -----------------------------------------------------------------------------------
_NEEDS_HTML = re.compile(r"&(?:[a-zA-Z]{2,6}|#\d{2,5}|#x[0-9a-fA-F]{2,4});")


def normalise_line(text: str) -> tuple[str, str | None, str | None]:
    """(message, level, origin) of one physical line."""
    return _clean(strip_control(text))


def _clean(text: str) -> tuple[str, str | None, str | None]:
    if "&" in text and _NEEDS_HTML.search(text):
        text = html.unescape(text)
    text = strip_decoration(text)
    msg, level, origin = split_prefix(text)
    if level is None and origin is None:
        msg = text
    return unwindows(msg).rstrip("\r\n"), level, origin


def _continuation(text: str) -> str:
    """A wrapped line's continuation: cleaned like a line, but it has no log prefix of its own."""
    if "&" in text and _NEEDS_HTML.search(text):
        text = html.unescape(text)
    return unwindows(strip_decoration(text)).rstrip()


# -- wrapped lines ------------------------------------------------------------------------------
WRAP_MIN_WIDTH = 60   # terminal widths below this are not treated as wrap points
WRAP_MIN_COUNT = 3    # a width must cut at least this many lines to count as the wrap width
WRAP_MAX_SPAN = 40    # physical lines joined into one logical line at most


def wrap_width(lengths: Iterable[int]) -> int | None:
    """The fixed width a log was cut at: a length >= WRAP_MIN_WIDTH shared by at least WRAP_MIN_COUNT
    lines and never exceeded by another line (a terminal or a copy that hard-wraps cuts every longer
    line at that width, so none is longer)."""
    counts = Counter(n for n in lengths if n >= WRAP_MIN_WIDTH)
    if not counts:
        return None
    longest = max(counts)
    return longest if counts[longest] >= WRAP_MIN_COUNT else None


# Python's own message layouts: an exception's header line ("RuntimeError: ..."), and the lines
# that start a new part of a traceback or a new message
_EXC_HEAD = re.compile(r"(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception)(?:\[[^\]]*\])?: \S")
_STRUCTURE = re.compile(r"\s*(?:Traceback \(|During handling|The above exception|File \"|"
                        r"terminate called|what\(\):|"
                        r"(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Warning)\b)")
_PY_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")   # `warnings`' own header, not absl's "x.py:N]"
# PyTorch's capability warning spans lines (its source writes the message with newlines): the
# range it names belongs to the line that names the GPU
_CAPABILITY_HEAD = re.compile(r"Found GPU\d+ .* which is of cuda capability \d+\.\d+\.?\s*$")
_CAPABILITY_TAIL = re.compile(r"\s*(?:Minimum and Maximum cuda capability|\(\d+\.\d+\) - \(\d+\.\d+\))")
WARN_SPAN = 6         # lines a Python warning's message may take before its source line
WORD_WRAP_SPAN = 5    # lines an exception message wrapped at word boundaries may take


def _next(raw: list[tuple[int, str]], j: int) -> bool:
    """raw[j] exists and follows raw[j - 1] directly."""
    return j < len(raw) and raw[j][0] == raw[j - 1][0] + 1


def _warning_tail(raw: list[tuple[int, str]], i: int) -> int:
    """How many lines after raw[i], a Python warning's header (`file.py:N: XWarning: msg`), belong
    to that warning: Python prints the message, then the warned line's source indented, so the
    unindented lines before that source line (within WARN_SPAN) are the message, wrapped by a
    console or written over several lines, and the source line ends the warning (it is part of
    the warning, not a line of the program's own output). 0 when no source line follows."""
    if not _PY_WARNING.search(raw[i][1]):
        return 0
    j = i + 1
    while _next(raw, j) and j - i <= WARN_SPAN:
        t = raw[j][1]
        if not t.strip():
            return 0
        if t[:1].isspace():
            return 0 if _STRUCTURE.match(t) else j - i
        if _STRUCTURE.match(t) or split_prefix(t)[1] is not None:
            return 0
        j += 1
    return 0


def _capability_continues(msg: str, raw: list[tuple[int, str]], i: int) -> bool:
    """raw[i + 1] continues PyTorch's capability warning that `msg` (ending at raw[i]) holds."""
    open_end = _CAPABILITY_HEAD.search(msg) is not None or msg.rstrip().endswith(
        "supported by this version of PyTorch is")
    return open_end and _next(raw, i + 1) and _CAPABILITY_TAIL.match(raw[i + 1][1]) is not None


def _word_wrapped(raw: list[tuple[int, str]], i: int) -> int:
    """How many lines after raw[i] continue an exception message that a console wrapped at word
    boundaries (rich and IPython consoles do, leaving one space at the end of each cut line): the
    cut lines are long (at least WRAP_MIN_WIDTH - 10 characters) and of about one width."""
    n = 0
    first = len(raw[i][1])
    while (_next(raw, i + n + 1) and n < WORD_WRAP_SPAN and re.search(r"\S $", raw[i + n][1])
           and len(raw[i + n][1]) >= WRAP_MIN_WIDTH - 10 and abs(len(raw[i + n][1]) - first) <= 20
           and raw[i + n + 1][1][:1] not in ("", " ", "\t") and not _STRUCTURE.match(raw[i + n + 1][1])
           and split_prefix(raw[i + n + 1][1])[1] is None):
        n += 1
    return n


def normalise(lines: Iterable[tuple[int, str]], *, rejoin: bool = True) -> list[LogicalLine]:
    """Logical lines from (line number, raw text) pairs.

    A physical line exactly as long as the log's wrap width (see `wrap_width`, measured on the text
    without control sequences) continues on the next line; the pieces are concatenated as they are
    (a terminal cuts mid-word, with no separator). A Python warning's message continues up to the
    source line Python prints after it (`_warning_tail`), and an exception message wrapped at word
    boundaries up to its last piece (`_word_wrapped`); those pieces are joined with a space.
    """
    raw = [(no, strip_control(t)) for no, t in lines]
    width = wrap_width(len(t.rstrip()) for _, t in raw) if rejoin else None
    out: list[LogicalLine] = []
    i = 0
    while i < len(raw):
        no, text = raw[i]
        msg, level, origin = _clean(text)
        span = 1
        while (width and len(raw[i][1].rstrip()) == width and i + 1 < len(raw) and raw[i + 1][0] == raw[i][0] + 1
               and span < WRAP_MAX_SPAN and not _EXC_HEAD.match(raw[i + 1][1])):
            i += 1
            span += 1
            # a console that wraps at word boundaries leaves the cut line's space at its end
            msg += _continuation(raw[i][1]) + (" " if raw[i][1].endswith(" ") else "")
        more = 0
        if rejoin and level == "W" and origin and origin.endswith(tuple("0123456789")) \
                and ".py:" in origin:
            more = _warning_tail(raw, i)
        elif rejoin and _EXC_HEAD.match(msg):
            more = _word_wrapped(raw, i)
        for _ in range(more):
            i += 1
            span += 1
            msg = msg.rstrip() + " " + _continuation(raw[i][1]).strip()
        while rejoin and _capability_continues(msg, raw, i):
            i += 1
            span += 1
            msg = msg.rstrip() + " " + raw[i][1].strip()
        out.append(LogicalLine(no, msg, level, origin, span))
        i += 1
    return out
