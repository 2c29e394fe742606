"""Turn message templates read in framework sources into regex + example data.

A template is written once, as its format string appears in the source
(printf ``%s``/``%d``, Python/absl ``{}``/``{name}``, absl Substitute ``$0``; for
StrCat, stream and TORCH_CHECK argument lists each argument is written ``{name}``).
From that one string this module derives:

* ``regex``: case-insensitive; literal text escaped with whitespace runs as
  ``\\s+``; each placeholder a bounded sub-pattern of its kind, named where a
  fact is worth capturing; placeholders before the first literal are dropped (or, with `lead`,
  replaced by a pattern that starts on a literal) so every regex is cheap to reject on long lines;
* ``example``: the template formatted with plausible values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parents[2] / "src/convdoctor/explain/data/templates"

CAUSE_IDS = frozenset(
    "driver-too-old driver-library-mismatch no-driver forward-compat-unsupported cudnn-not-found "
    "cudnn-version-mismatch arch-unsupported cpu-only-build missing-dependency-lib gpu-out-of-memory "
    "input-too-small unsupported-dtype dtype-mismatch device-mismatch channel-mismatch tensor-too-large "
    "non-contiguous-input empty-tensor unsupported-config illegal-memory-access hardware-fault "
    "harmless-warning unknown".split()
)
ROLES = frozenset({"failure", "context", "noise"})

# One placeholder: printf spec, %(name)s, {...} (not {{), or $N.
_PH = re.compile(
    r"%%|\{\{|\}\}"
    r"|%\((?P<pyname>\w+)\)[-+ #0]*\d*(?:\.\d+)?[sdifgxr]"
    r"|%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L|I64)?(?P<conv>[diouxXeEfgGcspavwq])"
    r"|\{(?P<brace>[^{}]*)\}"
    r"|\$(?P<dollar>\d)"
)

KINDS: dict[str, str] = {
    "int": r"-?\d+",
    "num": r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?",
    "ver": r"\d+(?:\.\d+){0,3}",
    "hex": r"(?:0x)?[0-9a-f]+",
    "word": r"[\w.:+-]+",
    "name": r"[\w.:<>+-]+",
    "path": r"[^\s'\"]+",
    "shape": r"[\[({][^\n\[\](){}]{0,200}[\])}]",
    "any": r"[^\n]{0,300}?",
    "rest": r"[^\n]{0,300}",
    "char": r".",
}
_DEFAULT_KIND = {"d": "int", "i": "int", "u": "int", "o": "int", "x": "hex", "X": "hex", "p": "hex",
                 "e": "num", "E": "num", "f": "num", "g": "num", "G": "num", "a": "num", "c": "char"}


@dataclass(frozen=True)
class Source:
    framework: str
    repo: str
    version: str
    url: str
    note: str = ""


@dataclass
class Template:
    id: str
    text: str
    vals: list[str]
    file: str
    cond: str
    causes: dict[str, float]
    why: str
    role: str = "failure"
    line: int | None = None
    kinds: dict[int, str] = field(default_factory=dict)
    groups: dict[int, str] = field(default_factory=dict)
    start: str | None = None
    upto: str | None = None
    version: str | None = None
    repo: str | None = None
    framework: str | None = None
    lead: str | None = None


def _pieces(text: str) -> list[tuple[str, str | None]]:
    """Split into (literal, None) and (spec, default_kind) pieces."""
    out: list[tuple[str, str | None]] = []
    pos = 0
    for m in _PH.finditer(text):
        if m.start() > pos:
            out.append((text[pos:m.start()], None))
        tok = m.group(0)
        if tok in ("%%", "{{", "}}"):
            out.append((tok[0], None))
        elif m.group("conv"):
            out.append((tok, _DEFAULT_KIND.get(m.group("conv"), "any")))
        else:
            out.append((tok, "any"))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], None))
    return out


def _lit(s: str) -> str:
    parts = re.split(r"(\s+)", s)
    return "".join(r"\s+" if p and p.isspace() else re.escape(p) for p in parts)


def build_regex(t: Template) -> str:
    pieces = _pieces(t.text)
    span_start, span_end = 0, len(pieces)
    if t.start is not None or t.upto is not None:
        span_start, span_end = _span(pieces, t.start, t.upto, t.id)
    idx = [i for i in range(len(pieces)) if pieces[i][1] is not None]
    ph_no = {i: n for n, i in enumerate(idx)}
    sel = list(range(span_start, span_end))
    lead_group = ""
    if t.lead and sel and pieces[sel[0]][1] is not None:
        name = t.groups.get(ph_no[sel[0]])
        lead_group = f"(?P<{name}>{t.lead})" if name else f"(?:{t.lead})"
        sel.pop(0)
    while sel and pieces[sel[0]][1] is not None:
        sel.pop(0)
    while sel and pieces[sel[-1]][1] is None and not pieces[sel[-1]][0].strip():
        sel.pop()
    used: set[str] = set(t.groups.get(ph_no[i]) for i in idx[:1] if lead_group) - {None}
    out = ["(?i)", lead_group]
    for k, i in enumerate(sel):
        tok, kind = pieces[i]
        if kind is None:
            lit = tok
            if k == 0 and not lead_group:
                lit = lit.lstrip()
            if k == len(sel) - 1:
                lit = lit.rstrip()
            out.append(_lit(lit))
            continue
        n = ph_no[i]
        kind = t.kinds.get(n, kind)
        if kind == "any" and k == len(sel) - 1:
            kind = "rest"
        pat = KINDS[kind]
        name = t.groups.get(n)
        if name and name not in used:
            used.add(name)
            out.append(f"(?P<{name}>{pat})")
        else:
            out.append(f"(?:{pat})")
    return "".join(out)


def _span(pieces: list[tuple[str, str | None]], start: str | None, upto: str | None, tid: str) -> tuple[int, int]:
    """Pieces covering the literal `start` .. the literal `upto` (a literal may be cut)."""
    s, e = 0, len(pieces)
    if start is not None:
        for i, (tok, kind) in enumerate(pieces):
            if kind is None and start in tok:
                cut = tok.index(start)
                pieces[i] = (tok[cut:], None)
                s = i
                break
        else:
            raise ValueError(f"{tid}: start {start!r} not in a literal")
    if upto is not None:
        for i in range(s, len(pieces)):
            tok, kind = pieces[i]
            if kind is None and upto in tok:
                pieces[i] = (tok[: tok.index(upto) + len(upto)], None)
                e = i + 1
                break
        else:
            raise ValueError(f"{tid}: upto {upto!r} not in a literal")
    return s, e


def example(t: Template) -> str:
    vals = iter(t.vals)
    out = []
    n_ph = 0
    for tok, kind in _pieces(t.text):
        if kind is None:
            out.append(tok)
        else:
            n_ph += 1
            try:
                out.append(next(vals))
            except StopIteration:
                raise ValueError(f"{t.id}: {n_ph} placeholders but {len(t.vals)} values") from None
    if len(t.vals) != n_ph:
        raise ValueError(f"{t.id}: {n_ph} placeholders but {len(t.vals)} values")
    return "".join(out)


def render(t: Template, src: Source) -> dict[str, Any]:
    bad = set(t.causes) - CAUSE_IDS
    if bad or t.role not in ROLES:
        raise ValueError(f"{t.id}: bad causes {bad} or role {t.role}")
    regex = build_regex(t)
    ex = example(t)
    if not re.search(regex, ex):
        raise ValueError(f"{t.id}: regex {regex!r} does not match example {ex!r}")
    row: dict[str, Any] = {"id": t.id, "framework": t.framework or src.framework, "text": t.text,
                           "regex": regex, "example": ex}
    if t.repo:
        row["repo"] = t.repo
    row["file"] = t.file
    if t.version:
        row["version"] = t.version
    if t.line is not None:
        row["line"] = t.line
    row.update({"condition": t.cond, "role": t.role, "causes": t.causes, "rationale": t.why})
    return row


def rendered(src: Source, templates: list[Template]) -> str:
    """The text of a templates/<framework>.json file for `templates` read in `src`."""
    ids = [t.id for t in templates]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate ids {dup}")
    data = {"source": {"framework": src.framework, "repo": src.repo, "version": src.version, "url": src.url},
            "templates": [render(t, src) for t in templates]}
    if src.note:
        data["source"]["note"] = src.note
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def write(name: str, src: Source, templates: list[Template]) -> int:
    (OUT_DIR / f"{name}.json").write_text(rendered(src, templates))
    return len(templates)
