"""The result types of `explain`: a `Diagnosis` is a ranked list of `Cause`s, each with the log lines
(`Evidence`) and reasons that support it and, when live checks ran, a `Confirmation`.

`Diagnosis.to_dict()` is the `--json` payload; `str(diagnosis)` is the human text (render.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .render import render

NON_FAILURE = ("harmless-warning", "unknown")


@dataclass
class Evidence:
    line: int
    text: str
    pattern: str
    level: str | None = None   # I W E F from the line's log prefix, when it has one

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"line": self.line, "text": self.text, "pattern": self.pattern}
        if self.level:
            d["level"] = self.level
        return d


@dataclass
class Confirmation:
    status: str   # confirmed | refuted | not checkable
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail}


@dataclass
class Cause:
    id: str
    confidence: float          # calibrated probability that this is the root cause
    score: float               # the evidence score it was ranked by
    title: str
    fix: str
    evidence: list[Evidence] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    confirmation: Confirmation | None = None
    decisive: bool = False     # the log states this cause outright (e.g. both cuDNN versions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "confidence": self.confidence, "score": round(self.score, 2),
            "title": self.title, "fix": self.fix,
            "evidence": [e.to_dict() for e in self.evidence], "reasons": self.reasons,
            "sources": self.sources,
            "confirmation": self.confirmation.to_dict() if self.confirmation else None,
            "decisive": self.decisive,
        }


@dataclass
class Diagnosis:
    causes: list[Cause]
    facts: dict[str, Any]
    looked_at: dict[str, Any]
    decide: str = ""
    noise: list[Evidence] = field(default_factory=list)

    @property
    def top(self) -> Cause:
        return self.causes[0]

    @property
    def cause_id(self) -> str:
        return self.causes[0].id

    def ids(self) -> list[str]:
        return [c.id for c in self.causes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "explain", "cause": self.cause_id,
            "causes": [c.to_dict() for c in self.causes], "decide": self.decide,
            "facts": self.facts, "noise": [e.to_dict() for e in self.noise[:5]],
            "looked_at": self.looked_at,
        }

    def render(self, *, max_causes: int = 3) -> str:
        return render(self, max_causes=max_causes)

    def __str__(self) -> str:
        return render(self)
