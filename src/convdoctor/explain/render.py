"""Human-readable rendering of a Diagnosis.

Everything printed passes through `safe()`: text copied from a log (evidence lines, library names,
file names) must never drive the terminal, so escape sequences are removed and any other control
character (C0 except newline and tab, DEL, C1, bidirectional overrides) is shown as `\\xNN`/`\\uNNNN`.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any, Protocol

_ESC_SEQ = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def safe(text: str) -> str:
    """`text` with escape sequences removed and other control characters made visible."""
    text = _ESC_SEQ.sub("", text)
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", text)


class _Evidence(Protocol):
    line: int
    text: str


class _Confirmation(Protocol):
    status: str
    detail: str


class _Cause(Protocol):
    id: str
    confidence: float
    title: str
    fix: str
    reasons: list[str]
    sources: list[str]

    @property
    def evidence(self) -> Sequence[_Evidence]: ...

    @property
    def confirmation(self) -> _Confirmation | None: ...


class _Diagnosis(Protocol):
    decide: str
    looked_at: dict[str, Any]

    @property
    def causes(self) -> Sequence[_Cause]: ...

    @property
    def noise(self) -> Sequence[_Evidence]: ...


def render(diag: _Diagnosis, *, max_causes: int = 3) -> str:
    return safe("\n".join(_lines(diag, max_causes)))


def _lines(diag: _Diagnosis, max_causes: int) -> list[str]:
    out: list[str] = []
    top = diag.causes[0]
    if top.id == "unknown":
        out.append("cause: unknown")
        out.extend(f"  {r}" for r in top.reasons)
        out.append(f"  next: {top.fix}")
        if diag.decide:
            out.extend(textwrap.wrap("what would decide: " + diag.decide, 100))
        return out
    for rank, c in enumerate(diag.causes[:max_causes], 1):
        head = f"{rank}. {c.id}  (confidence {c.confidence:.2f})"
        out.append(head if rank > 1 else "cause " + head)
        out.append(f"   {c.title}")
        for e in c.evidence[:4]:
            out.append(f"   line {e.line}: {_clip(e.text)}")
        for r in c.reasons[:3]:
            out.append(f"   because: {_clip(r, 200)}")
        if c.confirmation:
            out.append(f"   live check: {c.confirmation.status} - {_clip(c.confirmation.detail, 160)}")
        fix = textwrap.wrap(c.fix, 96)
        if fix:
            out.append(f"   fix: {fix[0]}")
            out.extend(f"        {ln}" for ln in fix[1:])
        if c.sources:
            out.append(f"   see: {c.sources[0]}")
    if diag.decide:
        out.append("")
        out.extend(textwrap.wrap("what would decide: " + diag.decide, 100))
    if diag.noise and top.id != "harmless-warning":
        out.append(f"(ignored {len(diag.noise)} harmless log line(s), e.g. line {diag.noise[0].line}: "
                   f"{_clip(diag.noise[0].text, 80)})")
    la = diag.looked_at
    if la.get("total_lines") is not None:
        out.append(f"(looked at {la.get('total_lines')} lines, {la.get('bytes', 0)} bytes; "
                   f"{la.get('candidate_lines', 0)} candidate lines)")
    return out


def _clip(text: str, n: int = 140) -> str:
    text = " ".join(safe(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."
