"""Score `convdoctor explain` on a labelled message corpus (tests/explain/corpus/*.jsonl format).

Each message is explained as `convdoctor explain - --json --no-live` would (in-process:
`convdoctor.explain(text)`); the answer is the first cause of the ranked list. Printed: top-1 and
top-3 accuracy overall and per group, the `unknown` rate on real failures (all labels but
harmless-warning), the confusion of the misses, the reliability table and the expected calibration
error (10 equal-width bins) of the top cause's confidence.

    python benchmarks/bench_explain_corpus.py FILE.jsonl [FILE.jsonl ...]
        scores with the shipped calibration (data/calibration.json): the figures a user gets.
    python benchmarks/bench_explain_corpus.py --cv 10 FILE.jsonl ...
        grouped cross-validation by repository: the messages are split into folds by `repo`; each
        fold's confidences come from a calibration map fitted on the other folds only, so no
        repository is used both to fit and to evaluate.
    python benchmarks/bench_explain_corpus.py --fit src/convdoctor/explain/data/calibration.json FILE.jsonl ...
        fits the shipped map on all the given messages and writes it, with how it was fitted.

Ranking uses no fitted parameter, so top-1/top-3 are the same with or without --cv; only the
confidences change.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from convdoctor.explain.calibrate import IDENTITY, shipped  # noqa: E402
from convdoctor.explain.evaluate import MIN_BLOCK, cross_validate, fit, load, predict, summary  # noqa: E402


def report(preds: list[dict[str, Any]], title: str) -> dict[str, Any]:
    res = summary(preds)
    res["title"] = title
    print(f"\n== {title}: {res['n']} messages from {res['repos']} repositories/sites")
    print(f"top-1 {res['top1']:.1%}   top-3 {res['top3']:.1%}   unknown on real failures "
          f"{res['unknown_on_real_failures']:.1%} ({res['unknown_count']}/{res['real_failures']})")
    for g, v in res["groups"].items():
        print(f"  {g:10s} n={v['n']:4d}  top-1 {v['top1']:.1%}  top-3 {v['top3']:.1%}")
    print(f"reliability (confidence of the first cause; ECE {res['ece']:.3f}, Brier {res['brier']:.3f}):")
    print("  bin        n   mean conf  accuracy")
    for r in res["reliability"]:
        if r["n"]:
            print(f"  {r['bin']}  {r['n']:4d}   {r['confidence']:.3f}     {r['accuracy']:.3f}")
    return res


def misses(preds: list[dict[str, Any]]) -> None:
    conf = collections.Counter((p["cause"], p["pred"]) for p in preds if p["cause"] != p["pred"])
    print("misses (label -> answer: count):")
    for (a, b), n in conf.most_common():
        print(f"  {a:26s} -> {b:26s} {n}")


def mix(rows: list[dict[str, Any]]) -> None:
    threads = {r["url"] for r in rows}
    repos = {r["repo"].lower() for r in rows}
    print(f"{len(rows)} messages, {len(threads)} threads, {len(repos)} repositories/sites")
    for key in ("group", "framework", "cause"):
        counts = collections.Counter(r[key] for r in rows)
        print(f"by {key}: " + ", ".join(f"{k} {n}" for k, n in counts.most_common()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--cv", type=int, default=0, metavar="K", help="grouped K-fold cross-validation by repo")
    ap.add_argument("--fit", metavar="OUT", help="fit the calibration map on all messages and write it")
    ap.add_argument("--misses", action="store_true", help="list every miss")
    ap.add_argument("--mix", action="store_true", help="print the corpus mix (groups, frameworks, causes, threads)")
    ap.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    rows = load(args.files)
    if args.mix:
        mix(rows)
    t0 = time.perf_counter()
    preds = predict(rows)
    secs = time.perf_counter() - t0
    if args.fit:
        meta = {"fitted_on": [{"file": Path(f).name, "sha256": hashlib.sha256(Path(f).read_bytes()).hexdigest()[:16]}
                              for f in args.files],
                "messages": len(preds), "method": f"isotonic (pool-adjacent-violators) per kind of evidence (decisive, specific, generic; "
                f"pooled for kinds with fewer than {2 * MIN_BLOCK} messages), blocks of >= {MIN_BLOCK}, add-one-half "
                "smoothing ((k + 0.5) / (n + 1)), linear between block means; x = the first cause's evidence "
                "share, y = whether it was the labelled cause",
                "command": "python benchmarks/bench_explain_corpus.py --fit " + " ".join(args.files),
                "date": datetime.date.today().isoformat()}
        cmap = fit(preds, meta)
        Path(args.fit).write_text(json.dumps(cmap.to_dict(), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.fit}: kinds {sorted(cmap.kinds)}, alt_coverage {cmap.alt_coverage:.3f}")
        return 0
    if args.cv:
        cross_validate(preds, args.cv)
        title = f"grouped {args.cv}-fold cross-validation by repository"
    else:
        title = "shipped calibration" if shipped() is not IDENTITY else "no calibration map shipped"
    res = report(preds, title)
    res["seconds"] = round(secs, 2)
    print(f"({secs:.1f} s for {len(preds)} messages)")
    if args.misses:
        misses(preds)
        for p in preds:
            if p["pred"] != p["cause"]:
                print(f"  MISS {p['id']:6s} {p['group']:10s} {p['cause']} -> {p['pred']}  {p['ids'][1:3]}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
