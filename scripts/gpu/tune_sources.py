"""Summarise `convdoctor tune --json` output by candidate source: per problem the winner, the
tuning time, and the fastest measured candidate of each source (heuristic modes A/B/FALLBACK,
enumeration, knob refinement, PyTorch's paths).

    python scripts/gpu/tune_sources.py TUNE.json
"""

from __future__ import annotations

import json
import sys


def source(cand: dict) -> str:
    for n in cand["candidate"]["notes"]:
        if n.startswith("source="):
            return n[len("source="):]
    return cand["candidate"]["key"]


def main() -> int:
    d = json.load(open(sys.argv[1]))
    for r in d["results"]:
        best: dict[str, tuple[float, str]] = {}
        for c in r["candidates"]:
            t = c.get("median_s")
            if c.get("status") != "ok" or not t:
                continue
            s = source(c)
            if s not in best or t < best[s][0]:
                best[s] = (t, c["candidate"]["key"])
        print(f"{r['problem_key'][:60]}: winner {r['winner']} {(r['winner_time_s'] or 0) * 1e6:.1f} us,"
              f" tuning {r['tuning_s']:.1f} s")
        for s, (t, k) in sorted(best.items(), key=lambda kv: kv[1][0]):
            print(f"    {s:22s} {t * 1e6:8.1f} us  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
