"""Where an `optimize` run's tuning time went, read back from the tuning database it wrote.

    python lab/tune_breakdown.py DB.sqlite3 [--json OUT.json]

Per stored result (one per tuned problem): the tuning seconds, the listing's seconds (the whole
tuning time less what the harness spent on candidates), and the candidates' host seconds
(`CandidateStats.cost_s`, with `prepare_s`: building the runner, where a Triton kernel compiles
and a cuDNN plan is built) summed per engine family (the key's prefix up to its first ':' or '_').
Prints one line per problem and the totals per family.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from collections import defaultdict


def family(key: str) -> str:
    m = re.match(r"(twin:)?([a-z0-9-]+:[a-z]+)", key)
    return m.group(0) if m else key.split(":")[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    con = sqlite3.connect(a.db)
    rows = con.execute("SELECT problem_key, tuning_s, result_json FROM results").fetchall()
    tot: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    out = []
    for key, tuning_s, rj in rows:
        r = json.loads(rj)
        fam: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        cand_s = 0.0
        for c in r.get("candidates", []):
            f = family(c["candidate"]["key"])
            fam[f]["n"] += 1
            fam[f]["cost_s"] += c.get("cost_s") or 0.0
            fam[f]["prepare_s"] += c.get("prepare_s") or 0.0
            fam[f]["first_run_s"] += c.get("first_run_s") or 0.0
            cand_s += c.get("cost_s") or 0.0
        rec = {"problem": key, "tuning_s": tuning_s, "candidates_s": round(cand_s, 2),
               "rest_s": round((tuning_s or 0) - cand_s, 2),
               "families": {f: {k: round(v, 3) for k, v in d.items()} for f, d in fam.items()}}
        out.append(rec)
        for f, d in fam.items():
            for k, v in d.items():
                tot[f][k] += v
        print(f"{tuning_s:7.2f} s  candidates {cand_s:6.2f}  rest {rec['rest_s']:6.2f}  {key}")
    print("per family (n, cost_s, prepare_s, first_run_s):")
    for f, d in sorted(tot.items(), key=lambda kv: -kv[1]["cost_s"]):
        print(f"  {f:28s} {int(d['n']):4d} {d['cost_s']:8.2f} {d['prepare_s']:8.2f} "
              f"{d['first_run_s']:8.2f}")
    print(f"total tuning {sum((r['tuning_s'] or 0) for r in out):.1f} s over {len(out)} problems")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"problems": out, "families": tot}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
