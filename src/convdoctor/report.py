"""Findings and reports shared by every capability.

A `Finding` is one thing convdoctor found (a broken library, a convolution cuDNN will reject), with a
stable id, a severity, the evidence it used and the fix. A `Report` is a list of findings plus the
facts they were derived from; it knows its exit code (0 ok, 1 warnings, 2 errors) and renders as text
or JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from .textsafe import clean, one_line

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
_RANK = {"error": 0, "warning": 1, "info": 2}

EXIT_OK = 0
EXIT_WARNINGS = 1
EXIT_ERRORS = 2


@dataclass(frozen=True)
class Finding:
    """One diagnosis: what is wrong (or worth knowing), why we think so, and how to fix it."""

    id: str
    severity: Severity
    title: str
    message: str = ""
    fix: str = ""
    evidence: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    layer: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in _RANK:
            raise ValueError(f"bad severity {self.severity!r} for finding {self.id!r}")

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)


@dataclass
class Report:
    """Findings plus the facts behind them."""

    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    kind: str = "report"

    @property
    def ok(self) -> bool:
        """True when no finding is an error."""
        return not any(f.severity == "error" for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def ids(self) -> list[str]:
        return [f.id for f in self.findings]

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def extend(self, findings: Iterable[Finding]) -> None:
        self.findings.extend(findings)

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (_RANK[f.severity], f.id, f.layer or ""))

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "findings": [f.to_dict() for f in self.sorted_findings()],
            "facts": to_jsonable(self.facts),
        }

    def render(self, *, color: bool = False) -> str:
        return render_findings(self.sorted_findings(), color=color)


def exit_code_for(findings: Iterable[Finding]) -> int:
    sev = {f.severity for f in findings}
    if "error" in sev:
        return EXIT_ERRORS
    if "warning" in sev:
        return EXIT_WARNINGS
    return EXIT_OK


_MARK = {"error": "ERROR", "warning": "WARN ", "info": "info "}
_COLOR = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}


def render_findings(findings: Iterable[Finding], *, color: bool = False) -> str:
    """Human text for a list of findings: one block each, fix and source indented below. Every
    field is cleaned (`textsafe.clean`: layer names and messages come from models and logs)
    before the severity mark is coloured."""
    lines: list[str] = []
    for f in findings:
        mark = _MARK[f.severity]
        if color:
            mark = f"{_COLOR[f.severity]}{mark}\033[0m"
        where = f" [{one_line(f.layer)}]" if f.layer else ""
        lines.append(f"{mark} {one_line(f.id)}{where}: {one_line(f.title)}")
        if f.message and f.message != f.title:
            lines.extend(f"      {ln}" for ln in clean(f.message).splitlines())
        for ev in f.evidence:
            lines.append(f"      evidence: {one_line(ev)}")
        if f.fix:
            fix_lines = clean(f.fix).splitlines() or [""]
            lines.append(f"      fix: {fix_lines[0]}")
            lines.extend(f"           {ln}" for ln in fix_lines[1:])
        for src in f.sources:
            lines.append(f"      source: {one_line(src)}")
    return "\n".join(lines)


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, enums, paths, tuples and sets into plain JSON types."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in asdict(obj).items()}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    return repr(obj)


def dumps(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=False)
