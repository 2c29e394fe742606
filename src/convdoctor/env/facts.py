"""Facts: what a probe found, where it found it, and what it could not check.

A `Fact` is a JSON-able dict `value` plus `sources` (the files, libraries or commands it read) and
`problems` (things it tried and could not check, with why). Probes return one each; rules read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Problem:
    what: str
    why: str


@dataclass
class Fact:
    name: str
    value: dict[str, Any] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def problem(self, what: str, why: str) -> None:
        self.problems.append(Problem(what, why))

    def get(self, key: str, default: Any = None) -> Any:
        return self.value.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "sources": self.sources,
                "problems": [{"what": p.what, "why": p.why} for p in self.problems]}


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'580.65.06' -> (580, 65, 6); '9.19.0' -> (9, 19, 0); None or junk -> None."""
    if not text:
        return None
    parts: list[int] = []
    for piece in str(text).strip().split("."):
        digits = ""
        for ch in piece:
            if ch.isdigit():
                digits += ch
            else:
                break
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def cudnn_int_to_str(v: int | None) -> str | None:
    """cudnnGetVersion(): cuDNN 9 = M*10000+m*100+p (91900), cuDNN <= 8 = M*1000+m*100+p (8902)."""
    if not v:
        return None
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def cuda_int_to_str(v: int | None) -> str | None:
    """CUDA version ints (cudaRuntimeGetVersion, cuDriverGetVersion): 12040 -> '12.4'."""
    if not v:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"
