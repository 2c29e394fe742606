#!/usr/bin/env python
"""Render the results of scripts/gpu/tune_core_validate.py (a results folder) as Markdown.

    python scripts/gpu/tune_core_summarize.py /work/gpu-results/tune > /tmp/section.md

Every figure comes from the JSON/text files in the folder; nothing is typed in by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def us(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e6:.1f}"


def x(v: float | None, pat: str = "{:.3f}") -> str:
    return "-" if v is None else pat.format(v)


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def main() -> int:
    d = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out: list[str] = []
    ti = d / "tune_issue.json"
    if ti.exists():
        try:
            doc = json.loads(ti.read_text())
            row, res = doc["rows"][0], doc["results"][0]
            env = doc["env"]
            out.append(f"Device: {env.get('gpu_name')}, driver {env.get('driver')}, CUDA "
                       f"{env.get('cuda_runtime')}, cuDNN {env.get('cudnn')}, frontend "
                       f"{env.get('cudnn_frontend')}, torch {env.get('torch')}.\n")
            st: dict[str, int] = {}
            for c in res["candidates"]:
                st[c["status"]] = st.get(c["status"], 0) + 1
            out.append(f"`convdoctor tune --problem \"{res['problem_key']}\"`: PyTorch heuristic "
                       f"{us(row['torch_heuristic_s'])} us, PyTorch benchmark "
                       f"{us(row['torch_benchmark_s'])} us, tuned {us(row['tuned_s'])} us "
                       f"(`{row['engine']}`), speedup over the faster PyTorch path "
                       f"{x(row['speedup'])}x, {x(row['roofline_percent'], '{:.0f}')}% of roofline "
                       f"({row['roofline_bound']}); candidates {st}; tuning {res['tuning_s']:.1f} s."
                       "\n")
        except Exception as exc:  # noqa: BLE001
            out.append(f"(tune_issue.json unreadable: {exc})\n")
    order = {"fprop": 0, "dgrad": 1, "wgrad": 2}
    benches = [f for f in d.glob("bench_*.json") if f.stem.rsplit("_", 1)[-1] in order]
    benches.sort(key=lambda f: (order[f.stem.rsplit("_", 1)[-1]], f.name))
    for f in benches:
        try:
            doc = json.loads(f.read_text())
        except Exception:  # noqa: BLE001
            out.append(f"({f.name}: no JSON, the step failed or timed out)\n")
            continue
        s = doc["summary"]
        out.append(f"### bench {doc['config']} {doc['direction']} ({s['problems']} problems, "
                   f"budget {doc['budget_s']} s, {doc['pytorch_runs']} PyTorch + "
                   f"{doc['tune_runs']} convdoctor processes + referee; wall {s['wall_s']:.0f} s)\n")
        out.append(f"- geomean speedup: {x(s['geomean_speedup_vs_benchmark'])}x vs benchmark=True, "
                   f"{x(s['geomean_speedup_vs_heuristic'])}x vs heuristics, "
                   f"{x(s['geomean_speedup_vs_best_pytorch'])}x vs the faster of the two")
        out.append(f"- problems >= 1.10x vs benchmark=True: "
                   f"{x(s['share_at_1_10x_vs_benchmark'], '{:.0%}')}; slower than the faster "
                   f"PyTorch path by > 2%: {s['slower_than_best_pytorch_by_2pct']} (worst ratio "
                   f"{x(s['worst_vs_best_pytorch'])})")
        out.append(f"- two fresh convdoctor runs within 3%: {x(s['stable_within_3pct'], '{:.0%}')}"
                   f"; two fresh benchmark=True runs differ by > 5%: "
                   f"{x(s['benchmark_runs_disagree_over_5pct'], '{:.0%}')}")
        out.append(f"- tuning cost: {x(s['tuning_s_per_problem'], '{:.1f}')} s per problem "
                   f"(median); benchmark=True search (build + first call) "
                   f"{x(s['pytorch_benchmark_cost_s_per_problem'], '{:.4f}')} s; degraded "
                   f"{s['degraded_problems']}\n")
        out.append("| layer | problem | heuristic us | benchmark us | convdoctor us | vs best "
                   "PyTorch | run-to-run | chosen (run 1 / run 2) |")
        out.append("|---|---|---|---|---|---|---|---|")
        for r in doc["rows"]:
            w = " / ".join(str(v) for v in r["winners"])
            out.append(f"| {r['group']} {r['name']} | {r['problem']} | {us(r['heuristic_s'])} | "
                       f"{us(r['benchmark_s'])} | {us(r['tuned_s'])} | "
                       f"{x(r['speedup_vs_best'])} | "
                       f"{pct(r['stability'])} | "
                       f"{w} |")
        out.append("")
    db = d / "bench_tune_db.txt"
    if db.exists():
        out.append("Database: " + db.read_text().strip() + "\n")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
