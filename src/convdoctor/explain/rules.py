"""Weigh the facts of a whole log for or against each cause, by the rules in data/rules.json.

A rule is data: conditions on facts (or on which messages fired), the votes it adds and the reason
shown to the user. Negative votes only lower causes the log's messages already support, so a fact
never invents a cause on its own unless the rule votes for it positively. cuDNN statuses parsed
from numbers or long names vote by data/cudnn_status.json.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .kb import status_table


@dataclass(frozen=True)
class Rule:
    id: str
    conditions: tuple[dict[str, Any], ...]
    votes: dict[str, float]
    reason: str = ""
    decisive: bool = False


@dataclass
class Context:
    """What rules can look at: the flat facts, the patterns that fired, the causes already voted for."""
    facts: dict[str, Any]
    fired: frozenset[str]
    candidates: frozenset[str]
    generic: bool = False


@dataclass
class Outcome:
    votes: list[tuple[str, float, str]] = field(default_factory=list)   # (cause, weight, reason)
    decisive: set[str] = field(default_factory=set)
    applied: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=1)
def rules() -> tuple[Rule, ...]:
    text = resources.files("convdoctor.explain").joinpath("data", "rules.json").read_text(encoding="utf-8")
    out = []
    for r in json.loads(text)["rules"]:
        out.append(Rule(id=r["id"], conditions=tuple(r["if"]), votes={k: float(v) for k, v in r["votes"].items()},
                        reason=r.get("reason", ""), decisive=bool(r.get("decisive", False))))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _reclassify() -> tuple[dict[str, Any], ...]:
    text = resources.files("convdoctor.explain").joinpath("data", "rules.json").read_text(encoding="utf-8")
    return tuple(json.loads(text).get("reclassify", ()))


def reclassified(captures: dict[str, str]) -> bool:
    """Whether a match's captured values make it harmless noise (data/rules.json "reclassify")."""
    for r in _reclassify():
        v = captures.get(r["capture"])
        if v is not None and v.strip().lower() in r["in"]:
            return True
    return False


def _lt(a: Any, b: Any) -> bool:
    return isinstance(a, (int, float)) and a < b


def _gt(a: Any, b: Any) -> bool:
    return isinstance(a, (int, float)) and a > b


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "is": lambda a, _: bool(a),
    "not": lambda a, _: not a,
    "lt": _lt,
    "gt": _gt,
    "eq": lambda a, b: a == b,
    "in": lambda a, b: a in b,
    "has": lambda a, b: isinstance(a, (list, tuple, set)) and b in a,
}


def holds(cond: dict[str, Any], ctx: Context) -> bool:
    if "fired" in cond:
        return cond["fired"] in ctx.fired
    if "candidate" in cond:
        return cond["candidate"] in ctx.candidates
    if "not_candidate" in cond:
        return cond["not_candidate"] not in ctx.candidates
    if "generic" in cond:
        return ctx.generic == bool(cond["generic"])
    return _OPS[cond["op"]](ctx.facts.get(cond["fact"]), cond.get("value"))


class _Fmt(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> str:
        return "?"


def _reason(rule: Rule, facts: dict[str, Any]) -> str:
    if not rule.reason:
        return ""
    try:
        return rule.reason.format_map(_Fmt({k: v for k, v in facts.items() if v is not None}))
    except (ValueError, TypeError, KeyError, IndexError):
        return rule.reason


def evaluate(ctx: Context, table: Iterable[Rule] | None = None) -> Outcome:
    out = Outcome()
    for s in ctx.facts.get("statuses") or []:
        for cause, w in status_table()["status_causes"].get(s, {}).items():
            out.votes.append((cause, float(w), f"cuDNN status {s}"))
    for rule in (rules() if table is None else table):
        if not all(holds(c, ctx) for c in rule.conditions):
            continue
        out.applied.append(rule.id)
        reason = _reason(rule, ctx.facts)
        for cause, w in rule.votes.items():
            if w < 0 and cause not in ctx.candidates:
                continue
            out.votes.append((cause, w, reason))
            if rule.decisive and w > 0:
                out.decisive.add(cause)
    return out
