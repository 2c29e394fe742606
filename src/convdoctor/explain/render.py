"""Human-readable rendering of a Diagnosis."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Diagnosis


def render(diag: Diagnosis, *, max_causes: int = 3) -> str:
    out: list[str] = []
    top = diag.causes[0]
    if top.id == "unknown":
        out.append("cause: unknown")
        for r in top.reasons:
            out.append(f"  {r}")
        out.append(f"  next: {top.fix}")
        return "\n".join(out)
    for rank, c in enumerate(diag.causes[:max_causes], 1):
        head = f"{rank}. {c.id}  (confidence {c.confidence:.2f})"
        out.append(head if rank > 1 else "cause " + head)
        out.append(f"   {c.title}")
        for e in c.evidence[:4]:
            out.append(f"   line {e.line}: {_clip(e.text)}")
        for r in c.reasons[:3]:
            out.append(f"   because: {r}")
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
    return "\n".join(out)


def _clip(text: str, n: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."
