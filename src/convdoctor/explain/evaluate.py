"""Scoring `explain` on a labelled message corpus (tests/explain/corpus/*.jsonl): top-1/top-3 accuracy,
per group, the `unknown` rate on real failures, reliability and expected calibration error, and grouped
cross-validation of the calibration map by repository. Used by benchmarks/bench_explain_corpus.py and
the tests."""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path
from typing import Any

from . import explain
from .calibrate import CalibrationMap, ece, fit_isotonic, reliability

GROUPS = ("pytorch", "tensorflow", "jax", "other")
MIN_BLOCK = 15


def load(paths: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        for line in Path(p).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                row.setdefault("_file", Path(p).name)
                rows.append(row)
    return rows


def predict(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per message: the ranked ids, the top cause's evidence share and confidence."""
    out = []
    for r in rows:
        d = explain(r["text"])
        ids = d.ids()
        out.append({"id": r["id"], "repo": r["repo"], "group": r["group"], "cause": r["cause"],
                    "pred": ids[0], "ids": ids, "share": float(d.looked_at.get("evidence_share", 0.0)),
                    "kind": d.looked_at.get("evidence_kind", ""),
                    "confidence": d.causes[0].confidence if ids[0] != "unknown" else 0.0,
                    "alt_hit": r["cause"] in ids[1:4]})
    return out


def folds_by_repo(preds: list[dict[str, Any]], k: int) -> list[list[int]]:
    """Repositories assigned to k folds (largest first to the smallest fold; ties by a hash of the
    name, so the split is deterministic and independent of file order)."""
    by_repo: dict[str, list[int]] = collections.defaultdict(list)
    for i, p in enumerate(preds):
        by_repo[p["repo"].lower()].append(i)
    order = sorted(by_repo, key=lambda r: (-len(by_repo[r]), hashlib.sha256(r.encode()).hexdigest()))
    folds: list[list[int]] = [[] for _ in range(k)]
    for repo in order:
        min(folds, key=len).extend(by_repo[repo])
    return [f for f in folds if f]


def fit(preds: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> CalibrationMap:
    answered = [p for p in preds if p["pred"] != "unknown"]
    wrong = [p for p in answered if p["pred"] != p["cause"]]
    return fit_isotonic([p["share"] for p in answered], [p["pred"] == p["cause"] for p in answered],
                        [p["kind"] for p in answered], min_block=MIN_BLOCK, alt_hits=sum(p["alt_hit"] for p in wrong), alt_total=len(wrong),
                        meta=meta)


def cross_validate(preds: list[dict[str, Any]], k: int) -> None:
    """Replace each record's confidence by one from a map fitted on the other folds."""
    for fold in folds_by_repo(preds, k):
        held = set(fold)
        cmap = fit([p for i, p in enumerate(preds) if i not in held])
        for i in fold:
            if preds[i]["pred"] != "unknown":
                preds[i]["confidence"] = round(min(0.99, max(0.01, cmap(preds[i]["share"], preds[i]["kind"]))), 2)



def summary(preds: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures: accuracy overall and per group, unknown rate on real failures, ECE + reliability."""
    def acc(rows: list[dict[str, Any]], k: int = 1) -> float:
        return sum(r["cause"] in r["ids"][:k] for r in rows) / len(rows) if rows else float("nan")

    real = [p for p in preds if p["cause"] not in ("harmless-warning", "unknown")]
    conf = [p["confidence"] for p in preds]
    correct = [p["pred"] == p["cause"] for p in preds]
    return {
        "n": len(preds), "repos": len({p["repo"].lower() for p in preds}),
        "top1": acc(preds), "top3": acc(preds, 3),
        "unknown_on_real_failures": sum(p["pred"] == "unknown" for p in real) / len(real) if real else 0.0,
        "unknown_count": sum(p["pred"] == "unknown" for p in real), "real_failures": len(real),
        "groups": {g: {"n": len(rs), "top1": acc(rs), "top3": acc(rs, 3)}
                   for g in GROUPS if (rs := [p for p in preds if p["group"] == g])},
        "ece": ece(conf, correct), "reliability": reliability(conf, correct),
        "brier": sum((c - (1.0 if ok else 0.0)) ** 2 for c, ok in zip(conf, correct, strict=True)) / len(conf) if conf else 0.0,
    }
