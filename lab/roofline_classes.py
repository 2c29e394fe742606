"""The layer classes far from the roofline in bench result files written before the bench recorded
its device's peaks: `bench.roofline` applied to their rows with peaks given on the command line.

    python lab/roofline_classes.py --bandwidth 3.01e12 --flops float16=7.98e14 FILE.json.gz ...

A row's best time is the fastest of its heuristic, benchmark and tuned times (the referee's).
Rows whose dtype/math has no peak given are left out. Prints each file's median share of the
roofline, rows below 30%, and the classes whose every row is below 30%; --json writes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from convdoctor.bench.merge import read_result  # noqa: E402
from convdoctor.bench.roofline import FAR, add_roofline, far_classes  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--bandwidth", type=float, required=True, help="bytes/s")
    ap.add_argument("--flops", action="append", default=[], metavar="KEY=FLOP/S",
                    help="a peak per math key (float16, bfloat16, float32/tf32, float32/strict)")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    peaks = {"bandwidth": a.bandwidth, "flops": {}}
    for kv in a.flops:
        k, _, v = kv.partition("=")
        peaks["flops"][k] = float(v)
    rows_all = []
    out = {"peaks": peaks, "files": {}}
    for f in a.files:
        rows = read_result(f)["rows"]
        add_roofline(rows, peaks)
        kept = [r for r in rows if r.get("roofline")]
        pcts = [r["roofline"]["percent"] for r in kept]
        rec = {"rows": len(kept), "median_percent": statistics.median(pcts) if pcts else None,
               "below_30pct": sum(1 for x in pcts if x < FAR)}
        out["files"][Path(f).name] = rec
        print(f"{Path(f).name}: {rec['rows']} rows, median {rec['median_percent']:.1f}% of the "
              f"roofline, {rec['below_30pct']} below {FAR:.0f}%")
        rows_all += kept
    far = far_classes(rows_all)
    out["far_classes"] = far
    print(f"classes whose every row is below {FAR:.0f}% ({len(far)}):")
    for c in far:
        print(f"  {c['class']:32s} rows {c['rows']:3d}  max {c['max_percent']:5.1f}%  "
              f"median {c['median_percent']:5.1f}%  {c['bound']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
