"""Benchmark suites as data: `data/suites/<name>.json`, or any JSON file of the same shape.

A suite entry gives the forward sizes of one layer (`n= c= h= w= k= r= s= ...`); the bench applies
the direction, dtype, layout and math mode it is asked for (an entry may pin any of them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

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
    d = resources.files("convdoctor.tune").joinpath("data/suites")
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
        text = resources.files("convdoctor.tune").joinpath(f"data/suites/{spec}.json").read_bytes()
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
