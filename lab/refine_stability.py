"""Do two tuning runs find the same knob-refined plans? (GPU machine, standalone probe)

Two tuning runs can keep different knob-refined plans (`engines/cudnn_refine.py`) when one run's walk
reaches a plan the other never times. Refinement walks one
knob at a time from a few seeds picked by a quick, noisy timing, so which neighbourhoods it walks
can differ between processes. This probe runs `convdoctor tune --problem KEY` (no database, the
bench's budget and timeout) in fresh processes under refinement VARIANTS (declared settings,
docs/configuration.md: e.g. a longer refinement budget, or none) and prints one JSON line per run: the variant, the winner and
its median, every refined plan that reached the harness (status, median, the seed it came from),
the best listed cuDNN plan's median, and every screened-out candidate with the screen's reason.

    PYTHONPATH=src python lab/refine_stability.py KEYS_FILE RUNS VARIANT [VARIANT ...]

VARIANT is NAME or NAME:VAR=VALUE,VAR=VALUE (e.g. `long:CONVDOCTOR_CUDNN_REFINE_BUDGET_S=12`,
`off:CONVDOCTOR_CUDNN_REFINE=0`). Runs
are interleaved (run 1 of every problem and variant, then run 2, ...), so a deadline cuts all
variants alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(":")
    env = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return name, env


def one_run(key: str, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "convdoctor", "tune", "--problem", key, "--no-db",
           "--budget", "0.5", "--timeout", "30", "--json"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env},
                           timeout=300, check=False)
    except subprocess.TimeoutExpired:
        return {"wall_s": round(time.monotonic() - t0, 1), "error": "timed out after 300 s"}
    out: dict[str, Any] = {"wall_s": round(time.monotonic() - t0, 1), "rc": p.returncode}
    try:
        r = json.loads(p.stdout)["results"][0]
    except (ValueError, KeyError, IndexError):
        out["error"] = (p.stderr or p.stdout)[-400:]
        return out
    ok = [c for c in r["candidates"] if c["status"] == "ok" and c["median_s"]]
    out["winner"] = r["winner"]["key"] if r.get("winner") else None
    out["winner_us"] = round(r["winner_time_s"] * 1e6, 2) if r.get("winner_time_s") else None
    out["tuning_s"] = round(r["tuning_s"], 2)
    out["refined"] = [[c["candidate"]["key"], c["status"],
                       round(c["median_s"] * 1e6, 2) if c.get("median_s") else None,
                       next((n for n in c["candidate"]["notes"] if n.startswith("one knob")), "")]
                      for c in r["candidates"] if "source=refine" in c["candidate"]["notes"]]
    out["best_listed_us"] = min((round(c["median_s"] * 1e6, 2) for c in ok
                                 if c["candidate"]["key"].startswith("cudnn:")
                                 and "source=refine" not in c["candidate"]["notes"]), default=None)
    out["screened_out"] = [[c["candidate"]["key"], c.get("reason", "")[:80]]
                           for c in r["candidates"] if c["status"] == "screened-out"]
    # the walk's own record (`TuneResult.listing`): where it started, and its notes
    walk = (r.get("listing") or {}).get("refinement") or {}
    out["seeds"] = walk.get("seeds")
    out["walk"] = {k: walk.get(k) for k in ("timed", "tried", "built", "seconds", "notes")}
    return out


def main() -> None:
    keys = [ln.strip() for ln in open(sys.argv[1]) if ln.strip()]
    runs = int(sys.argv[2])
    variants = [parse_variant(v) for v in sys.argv[3:]] or [("default", {})]
    for i in range(runs):
        for key in keys:
            for name, env in variants:
                row = {"run": i, "variant": name, "problem": key, **one_run(key, env)}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
