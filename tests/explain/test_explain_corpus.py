"""`explain` on the development corpus of real messages (tests/explain/corpus/dev*.jsonl).

Floors, not targets: they catch regressions. The figures themselves (top-1/top-3 per group, unknown
rate, reliability and ECE under grouped cross-validation by repository) are printed with -s and
by benchmarks/bench_explain_corpus.py.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from convdoctor.explain.calibrate import shipped
from convdoctor.explain.evaluate import cross_validate, folds_by_repo, load, predict, summary
from convdoctor.explain.kb import CAUSE_IDS

FILES = sorted(str(p) for p in (Path(__file__).parent / "corpus").glob("dev*.jsonl"))


@pytest.fixture(scope="module")
def preds() -> list[dict[str, Any]]:
    if not FILES:
        pytest.skip("no development corpus")
    return predict(load(FILES))


def test_every_answer_is_a_cause_id(preds: list[dict[str, Any]]) -> None:
    assert all(p["pred"] in CAUSE_IDS for p in preds)


def test_dev_corpus_floors(preds: list[dict[str, Any]]) -> None:
    res = summary(preds)
    print(f"\ndev corpus: {res['n']} messages, top-1 {res['top1']:.3f}, top-3 {res['top3']:.3f}, "
          f"unknown on real failures {res['unknown_on_real_failures']:.3f}")
    for g, v in res["groups"].items():
        print(f"  {g}: n={v['n']} top-1 {v['top1']:.3f} top-3 {v['top3']:.3f}")
    assert res["top1"] >= 0.85
    assert res["top3"] >= 0.90
    assert res["unknown_on_real_failures"] <= 0.05
    for g, v in res["groups"].items():
        assert v["top1"] >= 0.78, g


def test_grouped_cross_validation_never_mixes_repositories(preds: list[dict[str, Any]]) -> None:
    folds = folds_by_repo(preds, 10)
    assert sorted(i for f in folds for i in f) == list(range(len(preds)))
    seen: dict[str, int] = {}
    for k, fold in enumerate(folds):
        for i in fold:
            assert seen.setdefault(preds[i]["repo"].lower(), k) == k


def test_cross_validated_calibration(preds: list[dict[str, Any]]) -> None:
    cv = [dict(p) for p in preds]
    cross_validate(cv, 10)
    res = summary(cv)
    print(f"\ngrouped 10-fold CV: ECE {res['ece']:.3f}")
    for r in res["reliability"]:
        if r["n"]:
            print(f"  {r['bin']} n={r['n']} confidence {r['confidence']:.3f} accuracy {r['accuracy']:.3f}")
    assert res["ece"] <= 0.08


def test_shipped_calibration_says_how_it_was_fitted() -> None:
    raw = json.loads(resources.files("convdoctor.explain").joinpath("data", "calibration.json").read_text())
    assert raw["meta"]["method"] and raw["meta"]["command"] and raw["meta"]["messages"] >= 400
    cmap = shipped()
    assert cmap.fitted
    for curve in (cmap.pooled, *cmap.kinds.values()):
        assert list(curve.xs) == sorted(curve.xs) and list(curve.ys) == sorted(curve.ys)
        assert all(0 < y < 1 for y in curve.ys)
    assert 0 < cmap.alt_coverage < 1
