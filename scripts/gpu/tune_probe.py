"""Summarize `convdoctor tune --json` output: per problem the winner against PyTorch's paths timed in
the same process, how many candidates ran, and why the others did not (failure reasons grouped).
Used for GPU diagnostics (a problem with no winner; how much faster the best engine is when the
enumeration is widened).

    python -m convdoctor tune --problem ... --no-db --json > t.json
    python scripts/gpu/tune_probe.py t.json
"""

from __future__ import annotations

import collections
import json
import sys


def summarize(payload: dict) -> list[str]:
    lines = []
    for r in payload.get("results", []):
        cands = r.get("candidates", [])
        med = {c["candidate"]["key"]: c.get("median_s") for c in cands
               if c.get("status") == "ok" and c.get("median_s")}
        status = collections.Counter(c.get("status") for c in cands)
        reasons = collections.Counter(
            (c.get("status"), (c.get("reason") or "")[:110]) for c in cands
            if c.get("status") not in ("ok", "screened-out"))
        w = r.get("winner") or {}
        wk = w.get("key") if isinstance(w, dict) else w
        wt = r.get("winner_time_s")
        h, b = med.get("torch:heuristic"), med.get("torch:benchmark")
        best_t = min(x for x in (h, b) if x) if (h or b) else None
        lines.append(f"== {r.get('problem_key')}")
        lines.append(f"   winner {wk} {wt and wt * 1e6:.1f} us | heuristic {h and h * 1e6} | "
                     f"benchmark {b and b * 1e6} | vs faster PyTorch "
                     f"{(best_t / wt) if (best_t and wt) else None} | tuning {r.get('tuning_s'):.1f} s"
                     if wt else f"   NO WINNER | notes {r.get('notes')} | tuning {r.get('tuning_s')}")
        lines.append(f"   candidates {len(cands)} {dict(status)}")
        top = sorted(med.items(), key=lambda kv: kv[1])[:6]
        lines.append("   fastest: " + ", ".join(f"{k} {v * 1e6:.1f}" for k, v in top))
        for (st, why), n in reasons.most_common(8):
            lines.append(f"   {n} x {st}: {why}")
    return lines


def main() -> int:
    for path in sys.argv[1:]:
        with open(path) as fh:
            print("\n".join(summarize(json.load(fh))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
