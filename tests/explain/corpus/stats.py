"""Print the counts of the message corpus: per file, group, framework and cause, and threads.

Usage: python tests/explain/corpus/stats.py  (the README's tables are this script's output)
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import split  # noqa: E402

HERE = Path(__file__).parent
GROUPS = ("pytorch", "tensorflow", "jax", "other")


def rows(path: Path) -> list[dict]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def table(title: str, counts: dict[str, Counter], keys: list[str]) -> list[str]:
    names = list(counts)
    out = [f"{title:<28}" + "".join(f"{n:>20}" for n in names)]
    for k in keys:
        out.append(f"{k:<28}" + "".join(f"{counts[n][k]:>20}" for n in names))
    return out


def main() -> None:
    files = {p.name: rows(p) for p in sorted(HERE.glob("*.jsonl"))}
    files["all"] = [r for rs in list(files.values()) for r in rs]
    lines = []
    lines.append(f"{'file':<28}{'messages':>10}{'threads':>10}{'repos or sites':>16}")
    for name, rs in files.items():
        threads = {split.thread_of(r["url"]) for r in rs}
        repos = {r["repo"].lower() for r in rs}
        lines.append(f"{name:<28}{len(rs):>10}{len(threads):>10}{len(repos):>16}")
    lines.append("")
    group = {n: Counter(r["group"] for r in rs) for n, rs in files.items()}
    lines += table("group", group, list(GROUPS))
    share = files.get("dev.jsonl", [])
    if share:
        c = group["dev.jsonl"]
        lines.append(
            "dev.jsonl shares: " + ", ".join(f"{g} {100 * c[g] / len(share):.1f}%" for g in GROUPS)
        )
    lines.append("")
    fw = {n: Counter(r["framework"] for r in rs) for n, rs in files.items()}
    lines += table("framework", fw, [k for k, _ in fw["all"].most_common()])
    lines.append("")
    cause = {n: Counter(r["cause"] for r in rs) for n, rs in files.items()}
    lines += table("cause", cause, [k for k, _ in cause["all"].most_common()])
    print("\n".join(lines))


if __name__ == "__main__":
    main()
