"""The GPU smoke test: run children/smoke.py (conv fprop/dgrad/wgrad per GPU and precision against a
float64 CPU reference) and turn failures into findings that say which env check explains them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ..report import Finding
from .facts import Fact
from .rules import DATA, RuleData, make
from .system import System

SMOKE_TIMEOUT = 180.0


def run_smoke(system: System) -> Fact:
    fact = Fact("smoke", sources=["children/smoke.py: torch conv2d on each GPU vs float64 CPU"])
    res = system.child("smoke", timeout=SMOKE_TIMEOUT)
    if not isinstance(res.data, dict):
        fact.value = {"ran": False, "error": res.error or "no output", "stderr_tail": res.stderr_tail[-800:]}
        return fact
    fact.value = res.data
    return fact


def _explained_by(error: str) -> list[str]:
    table = json.loads((DATA / "cudnn_status.json").read_text())["statuses"]
    hits: list[str] = []
    for key, ids in table.items():
        if key in error:
            hits += [i for i in ids if i not in hits]
    return hits


def explain_failures(findings: list[Finding], data: RuleData) -> list[Finding]:
    """Add 'explained by: <ids>' to framework-conv-failed, from the error text and what else fired."""
    fired = [f.id for f in findings]
    out = []
    for f in findings:
        if f.id == "framework-conv-failed":
            hit = [i for i in _explained_by(" ".join(f.evidence)) if i in fired]
            if hit:
                f = replace(f, evidence=(*f.evidence, "explained by: " + ", ".join(hit)),
                            fix="Fix " + ", ".join(hit) + " (in this report) first: they explain this failure.")
        out.append(f)
    return out


def smoke_findings(fact: Fact, data: RuleData, fired: list[str]) -> list[Finding]:
    v: dict[str, Any] = fact.value
    if not v.get("ran"):
        err = str(v.get("error", "not run"))
        if err.startswith("killed by signal"):
            # the smoke child died (abort/segfault inside cuDNN): that IS a failed convolution
            tail = " | ".join(str(v.get("stderr_tail", "")).strip().splitlines()[-3:])
            v = {"ran": True, "cases": [{"device": 0, "case": "the first", "phase": "(process died)", "ok": False,
                                         "error": f"the smoke process was {err}: {tail}"[:1500]}]}
        else:
            return [make(data, "smoke-skipped", why=err, evidence=[str(v.get("stderr_tail", ""))[-300:]] if v.get("stderr_tail") else [])]
    out: list[Finding] = []
    for c in v.get("cases", []):
        if c.get("skipped") or c.get("ok"):
            continue
        if c.get("error"):
            explain = _explained_by(c["error"])
            hit = [i for i in explain if i in fired]
            ev = [c["error"][:400]]
            if hit:
                ev.append("explained by: " + ", ".join(hit))
            elif explain:
                ev.append("typical causes (none detected here): " + ", ".join(explain))
            fix = ("Fix " + ", ".join(hit) + " (above) first." if hit
                   else "Re-run with CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr and pass the log to: convdoctor explain")
            out.append(make(data, "smoke-conv-failed", layer="smoke", case=c["case"], phase=c.get("phase", "?"),
                            index=c["device"], error=c["error"].splitlines()[0][:160], fix_cmd=fix, evidence=ev))
        else:
            worst = max(c.get("rel_err", {}).items(), key=lambda kv: kv[1], default=("?", 0.0))
            out.append(make(data, "smoke-conv-wrong", layer="smoke", case=c["case"], phase=worst[0], index=c["device"],
                            err=worst[1], tol=c["tol"], evidence=[f"relative errors: {c.get('rel_err')}"]))
    return out
