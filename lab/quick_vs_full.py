"""Quick tuning's choices against the full tune's, timed side by side by the bench's referees.

    python lab/quick_vs_full.py build FULL.json.gz QUICK.sqlite3 CMP.json [--also OTHER.sqlite3]
    convdoctor bench --referee-only CMP.json --referees 2 --json --out CMP_OUT.json
    python lab/quick_vs_full.py read CMP_OUT.json... [--db QUICK.sqlite3]... [--json OUT.json]

`build` takes a 101-layer pass (`convdoctor bench` result) and the database that `convdoctor tune
--tuning quick` wrote for the same problems, and writes a bench file whose rows' winners are
[quick winner, the full tune's winners...]: the referees then time both choices in the same
processes, beside PyTorch's heuristic and benchmark=True's picks (`--also`: another database's
winner after them, e.g. an earlier quick setting's). `read` prints the geomean over the rows of
(full winner's time / quick winner's time), each row's ratio the median over the referee
processes (and the geomean per process), the geomean vs benchmark=True of each, and, given the
quick database (one per file, in order), its tuning seconds per problem. A database must hold one
result per problem (one device, one set of settings).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sqlite3
import statistics
from typing import Any


def _load(path: str) -> Any:
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def quick_results(db: str) -> dict[str, tuple[str | None, float | None]]:
    """problem key -> (winner key, tuning seconds) of a tuning database."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT problem_key, winner, tuning_s FROM results").fetchall()
    out = {k: (w, t) for k, w, t in rows}
    if len(out) != len(rows):
        raise SystemExit(f"{db}: several results for one problem (other devices or settings); "
                         "give a database of one tuning run")
    return out


def build(full: str, db: str, out: str, also: str | None = None) -> None:
    doc = _load(full)
    quick = quick_results(db)
    other = quick_results(also) if also else {}
    missing = 0
    for r in doc["rows"]:
        w = quick.get(r["problem_key"], (None, None))[0]
        missing += w is None
        r["full_winners"] = list(r["winners"])
        r["winners"] = [w] + list(r["winners"])
        # the tuning runs' notes stay beside their own winners
        notes = list(r.get("tune_notes") or [[] for _ in r["full_winners"]])
        r["tune_notes"] = [[]] + notes
        if also:
            r["other_winner"] = other.get(r["problem_key"], (None, None))[0]
            r["winners"].append(r["other_winner"])
            r["tune_notes"].append([])
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    print(f"{out}: {len(doc['rows'])} rows, {missing} without a quick winner")


def _geo(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def read(cmp_path: str, db: str | None) -> dict[str, Any]:
    doc = _load(cmp_path)
    rows = doc["rows"]
    nref = max(len(r.get("referee_runs_s") or []) for r in rows)
    per_ref: list[list[float]] = [[] for _ in range(nref)]
    q_vs_b, f_vs_b, row_ratio, worst, other = [], [], [], [], []
    for r in rows:
        wq, wf, wo = r["winners"][0], r["full_winners"][0], r.get("other_winner")
        oth = [ref[wf] / ref[wo] for ref in r.get("referee_runs_s") or []
               if wo and wo in ref and wf in ref]
        if oth:
            other.append(statistics.median(oth))
        ratios, qb, fb = [], [], []
        for i, ref in enumerate(r.get("referee_runs_s") or []):
            picks = [ref[p] for p in r["benchmark_picks"] if p and p in ref]
            if wq in ref and wf in ref:
                ratios.append(ref[wf] / ref[wq])
                per_ref[i].append(ratios[-1])
            if picks and wq in ref and wf in ref:
                b = statistics.median(picks)
                qb.append(b / ref[wq])
                fb.append(b / ref[wf])
        if ratios:
            row_ratio.append(statistics.median(ratios))
            worst.append((row_ratio[-1], r["problem"], wq, wf))
        if qb:
            q_vs_b.append(statistics.median(qb))
            f_vs_b.append(statistics.median(fb))
    same = sum(r["winners"][0] == r["full_winners"][0] for r in rows)
    worst.sort()
    res: dict[str, Any] = {
        "file": cmp_path, "direction": doc.get("direction"), "rows": len(rows),
        "gpu": (doc.get("env") or {}).get("gpu_name"), "referees": nref,
        "same_choice": same,
        "full_over_quick_geomean": _geo(row_ratio),
        "full_over_quick_per_referee": [_geo(x) for x in per_ref],
        "quick_vs_benchmark_geomean": _geo(q_vs_b), "full_vs_benchmark_geomean": _geo(f_vs_b),
        "rows_quick_over_2pct_slower": sum(x < 0.98 for x in row_ratio),
        "rows_quick_over_2pct_faster": sum(x > 1.02 for x in row_ratio),
        "full_over_other_geomean": _geo(other),
        "worst": [{"ratio": x, "problem": p, "quick": q, "full": f} for x, p, q, f in worst[:5]],
    }
    if db:
        ts = sorted(t for _, t in quick_results(db).values() if t is not None)
        if ts:
            res["quick_tuning_s"] = {"problems": len(ts), "mean": sum(ts) / len(ts),
                                     "median": statistics.median(ts), "max": ts[-1],
                                     "total": sum(ts)}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("full")
    b.add_argument("db")
    b.add_argument("out")
    b.add_argument("--also", default=None)
    r = sub.add_parser("read")
    r.add_argument("cmp", nargs="+", help="referee-only results (one per direction)")
    r.add_argument("--db", action="append", default=[], help="the quick databases, in order")
    r.add_argument("--json", default="")
    a = ap.parse_args()
    if a.cmd == "build":
        build(a.full, a.db, a.out, a.also)
        return 0
    out = [read(c, a.db[i] if i < len(a.db) else None) for i, c in enumerate(a.cmp)]
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.4f}"

    for x in out:
        t = x.get("quick_tuning_s") or {}
        print(f"{x['direction']}: {x['rows']} rows on {x['gpu']}, {x['referees']} referees; "
              f"same choice {x['same_choice']}; full/quick geomean "
              f"{f(x['full_over_quick_geomean'])} (per referee "
              f"{', '.join(f(v) for v in x['full_over_quick_per_referee'])}); vs "
              f"benchmark=True quick {f(x['quick_vs_benchmark_geomean'])}, full "
              f"{f(x['full_vs_benchmark_geomean'])}; rows quick >2% slower "
              f"{x['rows_quick_over_2pct_slower']}, faster {x['rows_quick_over_2pct_faster']}"
              + (f"; full/other geomean {f(x['full_over_other_geomean'])}"
                 if x["full_over_other_geomean"] else "")
              + (f"; quick tuning {t['mean']:.2f} s/problem (median {t['median']:.2f}, max "
                 f"{t['max']:.1f})" if t else ""))
        for w in x["worst"][:3]:
            print(f"   {w['ratio']:.3f} {w['problem']}: quick {w['quick']} full {w['full']}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
