"""Top-1 accuracy of `explain` on real messages from public issue threads (tests/explain/corpus.json).

Run with -s to see the confusion table. Live checks are off: the labels describe the reporter's
machine, not this one.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest

from convdoctor.explain import explain
from convdoctor.explain.kb import CAUSE_IDS

CORPUS = json.loads((Path(__file__).parent / "corpus.json").read_text(encoding="utf-8"))["entries"]


def _predict() -> list[tuple[dict, str]]:
    return [(e, explain(e["text"]).cause_id) for e in CORPUS]


@pytest.fixture(scope="module")
def predictions() -> list[tuple[dict, str]]:
    return _predict()


def test_corpus_shape() -> None:
    assert len(CORPUS) >= 60
    fw = collections.Counter(e["framework"] for e in CORPUS)
    assert fw["tensorflow"] + fw["keras"] >= 15
    assert fw["jax"] >= 8
    ids = [e["id"] for e in CORPUS]
    assert len(ids) == len(set(ids))
    for e in CORPUS:
        assert e["cause"] in CAUSE_IDS and e["cause"] != "unknown", e["id"]
        assert re.match(r"https://", e["source"]), e["id"]
        assert e["text"].strip(), e["id"]
    assert 12 <= sum(e["holdout"] for e in CORPUS) <= 25


def _table(rows: list[tuple[dict, str]]) -> str:
    conf = collections.Counter((e["cause"], p) for e, p in rows)
    labels = sorted({c for c, _ in conf} | {p for _, p in conf})
    lines = ["confusion (rows: thread's cause, cols: predicted; only non-zero cells)"]
    for true in labels:
        cells = [f"{p}={n}" for (t, p), n in sorted(conf.items()) if t == true]
        if cells:
            lines.append(f"  {true:28s} " + "  ".join(cells))
    return "\n".join(lines)


def _acc(rows: list[tuple[dict, str]]) -> float:
    return sum(e["cause"] == p for e, p in rows) / len(rows)


def test_top1_accuracy(predictions: list[tuple[dict, str]]) -> None:
    dev = [r for r in predictions if not r[0]["holdout"]]
    hold = [r for r in predictions if r[0]["holdout"]]
    print()
    print(_table(predictions))
    print(f"top-1 accuracy: all {_acc(predictions):.3f} ({len(predictions)}), "
          f"development {_acc(dev):.3f} ({len(dev)}), held out {_acc(hold):.3f} ({len(hold)})")
    for e, p in predictions:
        if e["cause"] != p:
            print(f"  MISS {e['id']} {e['cause']} -> {p}  {e['source']}")
    assert _acc(predictions) >= 0.95


def test_each_framework_is_explained(predictions: list[tuple[dict, str]]) -> None:
    by_fw: dict[str, list[tuple[dict, str]]] = collections.defaultdict(list)
    for e, p in predictions:
        by_fw[e["framework"]].append((e, p))
    for fw, rows in by_fw.items():
        assert _acc(rows) >= 0.85, fw
