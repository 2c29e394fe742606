"""How far from float64 is each candidate, and what would a looser tolerance buy? (GPU machine)

A tolerance decides which candidates are timed at all. On fp32 NCHW TF32 wgrad rows a 2e-3
norm-wise TF32 tolerance rejected candidates erring 2.09e-3 to 2.50e-3, while wrong engines err
0.1 and more (the TF32 tolerance in `tolerances.json` is 5e-3 for this reason; docs/tune.md,
Correctness). Whether such near-misses are honest TF32 rounding worth admitting depends on their speed, which a
disqualified candidate never gets timed for. This probe tunes each problem with every candidate
timed despite a finite check error (`HarnessConfig.time_outside_tolerance`; NaN/Inf still
disqualifies; such a candidate is never chosen) and prints one JSON line per problem: the winner
and, per candidate, status, norm-wise error, tolerance and median.

    PYTHONPATH=src python lab/tolerance_probe.py KEYS_FILE [--budget 0.5] [--timeout 30] [--out FILE]

KEYS_FILE holds one problem (a `convdoctor tune --problem` string or a problem key) per line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any


class _Every(tuple):  # type: ignore[type-arg]
    """`time_outside_tolerance` holding every key."""

    def __contains__(self, key: object) -> bool:
        return True


def probe(key: str, backend: Any, budget: float) -> dict[str, Any]:
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.harness import HarnessConfig, tune_problem

    t0 = time.monotonic()
    p = ConvProblem.parse(key)
    r = tune_problem(p, backend=backend, db=None, budget_s=budget, reuse=False,
                     config=HarnessConfig(time_outside_tolerance=_Every()))
    winner_s = r.winner_time_s
    rows = []
    for s in r.candidates:
        c = s.correctness
        err = None if c is None or not math.isfinite(c.max_rel_err) else c.max_rel_err
        rows.append({"key": s.candidate.key, "status": s.status,
                     "err": err, "tol": None if c is None else c.tolerance,
                     "outside": c is not None and not c.ok,
                     # sampled: a finalist's median; otherwise its screen's (fewer samples)
                     "sampled": bool(s.samples),
                     "median_us": round(s.median_s * 1e6, 3) if s.median_s else None,
                     "vs_winner": (round(winner_s / s.median_s, 4)
                                   if s.median_s and winner_s and s.samples else None)})
    rows.sort(key=lambda x: (x["median_us"] is None, x["median_us"] or 0.0))
    outside = [x for x in rows if x["outside"] and x["median_us"]]
    return {"problem": p.key(), "winner": r.winner.key if r.winner else None,
            "winner_us": round(winner_s * 1e6, 3) if winner_s else None,
            "fastest_outside": outside[0] if outside else None,
            "candidates": rows, "tuning_s": round(r.tuning_s, 2),
            "wall_s": round(time.monotonic() - t0, 2), "notes": list(r.notes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tolerance_probe.py")
    ap.add_argument("keys_file")
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    from convdoctor.tune.worker import WorkerBackend

    with open(a.keys_file, encoding="utf-8") as fh:
        keys = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    sink = open(a.out, "a", encoding="utf-8") if a.out else None  # noqa: SIM115
    try:
        with WorkerBackend(a.backend, timeout_s=a.timeout) as be:
            for k in keys:
                try:
                    rec = probe(k, be, a.budget)
                except Exception as exc:  # noqa: BLE001 - one bad problem costs only its line
                    rec = {"problem": k, "error": f"{type(exc).__name__}: {exc}"}
                line = json.dumps(rec)
                print(line, flush=True)
                if sink is not None:
                    sink.write(line + "\n")
                    sink.flush()
    finally:
        if sink is not None:
            sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
