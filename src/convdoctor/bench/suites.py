"""Benchmark suites as data: `data/suites/<name>.json`, or any JSON file of the same shape.

A suite entry gives the forward sizes of one layer (`n= c= h= w= k= r= s= ...`); the bench applies
the direction, dtype, layout and math mode it is asked for (an entry may pin any of them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..problem import ConvProblem


@dataclass(frozen=True)
class SuiteEntry:
    group: str
    name: str
    text: str

    def problem(self, *, direction: str = "fprop", dtype: str = "float32", layout: str = "nchw",
                math: str = "tf32", batch: int | None = None) -> ConvProblem:
        defaults = {"dtype": dtype, "layout": layout, "math": math}
        words = self.text.split()
        given = {w.split("=", 1)[0] for w in words if "=" in w}
        extra = [f"{k}={v}" for k, v in defaults.items() if k not in given]
        p = ConvProblem.parse(" ".join([direction, *words, *extra]))
        return replace(p, n=batch) if batch else p


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    entries: tuple[SuiteEntry, ...]
    sources: tuple[str, ...] = ()

    def spread(self, limit: int | None) -> list[SuiteEntry]:
        """`limit` entries spread evenly over the suite (so every group is represented)."""
        if not limit or limit >= len(self.entries):
            return list(self.entries)
        step = len(self.entries) / limit
        return [self.entries[int(i * step)] for i in range(limit)]


def builtin_suites() -> list[str]:
    d = resources.files("convdoctor.bench").joinpath("data/suites")
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))


def load_suite(spec: str) -> Suite:
    """A built-in suite name (see `builtin_suites()`) or a path to a suite JSON file."""
    from ..jsonfile import parse, read_bytes

    path = Path(spec)
    try:
        is_file = spec.endswith(".json") or path.exists()
    except OSError as exc:   # a name too long for a path
        raise UsageError(f"unknown suite {spec[:60]!r} ({exc.strerror})") from None
    if is_file:
        text = read_bytes(path, what="suite file", max_bytes=16 << 20)
    else:
        names = builtin_suites()
        if spec not in names:
            raise UsageError(f"unknown suite {spec!r}; built-in suites: {', '.join(names)} "
                             "(or pass a path to a suite JSON file)")
        text = resources.files("convdoctor.bench").joinpath(f"data/suites/{spec}.json").read_bytes()
    doc = parse(text, what=f"suite {spec}")
    try:
        entries = tuple(SuiteEntry(str(e.get("group", "")), str(e.get("name", "")),
                                   str(e["problem"])) for e in doc["problems"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"suite {spec} is not a valid suite file ({type(exc).__name__}: {exc}); "
                         'expected {"name": ..., "problems": [{"name": ..., "problem": '
                         '"n=.. c=.. h=.. w=.. k=.. r=.. s=.."}]}') from None
    if not entries:
        raise UsageError(f"suite {spec} has no problems")
    for e in entries:  # fail early, naming the bad entry
        try:
            e.problem()
        except UsageError as exc:
            raise UsageError(f"suite {spec}, entry {e.name!r}: {exc}") from None
    return Suite(name=str(doc.get("name", path.stem)), description=str(doc.get("description", "")),
                 entries=entries, sources=tuple(doc.get("sources", ())))


# --config: the dtype, layout and math mode applied to a suite's entries
CONFIGS = {
    "fp32-nchw": ("float32", "nchw", "tf32"),
    "fp32-nchw-strict": ("float32", "nchw", "strict"),
    "fp32-nhwc": ("float32", "nhwc", "tf32"),
    "fp16-nhwc": ("float16", "nhwc", "tf32"),
    "fp16-nchw": ("float16", "nchw", "tf32"),
    "bf16-nhwc": ("bfloat16", "nhwc", "tf32"),
}


def matching(entries: list[SuiteEntry], pattern: str, direction: str, dtype: str, layout: str,
             math_mode: str) -> list[SuiteEntry]:
    """The entries whose "group name key" matches `pattern` (--match, Python re.search)."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--match {pattern!r} is not a valid regular expression: {exc}") from None
    out = [e for e in entries if rx.search(" ".join((e.group, e.name, e.problem(
        direction=direction, dtype=dtype, layout=layout, math=math_mode).key())))]
    if not out:
        raise UsageError(f"--match {pattern!r} selects no problem of the suite")
    return out


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard must look like K/N (e.g. 2/4), not {text!r}") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"--shard {text}: need 1 <= K <= N")
    return k, n


def shard_of(items: list[Any], shard: tuple[int, int] | None) -> list[Any]:
    """The K-th of N contiguous, nearly equal parts (every item is in exactly one part)."""
    if shard is None:
        return items
    k, n = shard
    lo = (k - 1) * len(items) // n
    hi = k * len(items) // n
    return items[lo:hi]
