"""Fit the class weights of `runtime.tuning.importance` from stored `convdoctor bench` files, and
(optionally) check the ranking on tuning databases the fit never saw.

    python lab/fit_importance.py --out src/convdoctor/runtime/data/importance.json \
        benchmarks/results/bench/cnn-layers_*.json.gz
    python lab/fit_importance.py --check DB.sqlite3|SAVED.jsonl.gz ... BENCH.json.gz ...
    python lab/fit_importance.py --extract SAVED.jsonl.gz DB.sqlite3 ...

A problem's class is depthwise or dense, and its direction. Per class, from the bench rows:
PyTorch's heuristic time over the problem's roofline estimate (median), times the mean share of
that time the best tuned choice saved. The weights are that product relative to dense fprop: how
much tuning a problem of that class is expected to save per unit of roofline time. `--check` ranks
each database's problems by the roofline estimate alone and by the weighted one, and prints the
share of the databases' whole measured saving (PyTorch's heuristic time less the best candidate's)
that the first 20 %, 30 % and 50 % of problems hold. `--extract` writes a databases' problems with
those two times (one JSON line each, with the database's name as `source`), which `--check` reads
as it reads the databases.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from convdoctor.problem import ConvProblem  # noqa: E402
from convdoctor.runtime.tuning import importance_class  # noqa: E402
from convdoctor.runtime.tuning import roofline_units as roof  # noqa: E402


def fit(bench_files: list[str]) -> dict[str, Any]:
    per: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for f in bench_files:
        opener = gzip.open if f.endswith(".gz") else open
        with opener(f, "rt") as fh:
            rows = json.load(fh)["rows"]
        for r in rows:
            h, t = r.get("heuristic_s"), r.get("tuned_s")
            if not h or not t:
                continue
            p = ConvProblem.parse(r["problem_key"])
            per[importance_class(p)].append((h / roof(p), (h - min(h, t)) / h))
    raw = {k: statistics.median(a for a, _ in v) * statistics.mean(g for _, g in v)
           for k, v in per.items()}
    base = raw["dense-fprop"]
    return {"weights": {k: round(v / base, 3) for k, v in sorted(raw.items())},
            "rows": {k: len(v) for k, v in sorted(per.items())},
            "fitted_on": [Path(f).name for f in bench_files]}


def _db_rows(path: str) -> list[tuple[ConvProblem, float, float]]:
    out = []
    con = sqlite3.connect(path)
    for key, rj in con.execute("SELECT problem_key, result_json FROM results"):
        r = json.loads(rj)
        t = {c["candidate"]["key"]: statistics.median(c["samples"])
             for c in r.get("candidates", []) if c.get("samples")}
        if "torch:heuristic" in t:
            out.append((ConvProblem.parse(key), t["torch:heuristic"], min(t.values())))
    return out


def _saved_rows(path: str) -> list[list[tuple[ConvProblem, float, float]]]:
    by: dict[str, list[tuple[ConvProblem, float, float]]] = defaultdict(list)
    with gzip.open(path, "rt") as fh:
        for line in fh:
            r = json.loads(line)
            by[r["source"]].append((ConvProblem.parse(r["problem_key"]), r["pytorch_s"],
                                    r["best_s"]))
    return list(by.values())


def check(dbs: list[str], weights: dict[str, float]) -> None:
    rows = [rs for d in dbs for rs in (_saved_rows(d) if d.endswith(".jsonl.gz")
                                       else [_db_rows(d)])]
    total = sum(pt - b for rs in rows for _, pt, b in rs)
    for frac in (0.2, 0.3, 0.5):
        got = {"roofline": 0.0, "weighted": 0.0}
        for rs in rows:
            k = int(len(rs) * frac)
            for name, key in (("roofline", roof),
                              ("weighted", lambda p: roof(p) * weights[importance_class(p)])):
                ranked = sorted(rs, key=lambda x: -key(x[0]))
                got[name] += sum(pt - b for _, pt, b in ranked[:k])
        print(f"first {frac:.0%} of problems: roofline {got['roofline'] / total:.2f}, "
              f"weighted {got['weighted'] / total:.2f} of {total * 1e3:.3f} ms saved")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="bench files (.json[.gz]) and, with --check, databases")
    ap.add_argument("--out", default="")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--extract", default="")
    a = ap.parse_args()
    if a.extract:
        with gzip.open(a.extract, "wt") as fh:
            for d in a.files:
                for p, pt, b in _db_rows(d):
                    fh.write(json.dumps({"source": Path(d).name, "problem_key": p.key(),
                                         "pytorch_s": pt, "best_s": b}) + "\n")
        return 0
    bench = [f for f in a.files if f.endswith((".json", ".json.gz"))]
    res = fit(bench)
    print(json.dumps(res["weights"]))
    if a.out:
        doc = {"about": "Class weights of runtime.tuning.importance: per class (depthwise or "
                        "dense, and direction), PyTorch's heuristic time over the roofline "
                        "estimate (median) times the mean share of it the best tuned choice "
                        "saved, relative to dense fprop. Written by lab/fit_importance.py.",
               **res}
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if a.check:
        check([f for f in a.files if f.endswith((".sqlite3", ".jsonl.gz"))], res["weights"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
