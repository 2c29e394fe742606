"""What one tuning run learns about hopeless candidates, for the problems after it.

A candidate dropped as hopeless (`HarnessConfig.hopeless_abs_s`, `hopeless_factor`) by at least
`HarnessConfig.recall_factor` times the fastest run on one problem is, on the problems of the same
class tuned later in the same run, screened out before its first run. The class is everything
about a problem but its sizes: direction, the kind of grouping (dense, depthwise, grouped), kernel,
stride, dilation, data type, math, layout and determinism.

Why: on an H100 (2026-11-27, ConvNeXt-tiny fp32 training), one cuDNN engine setting took 0.7-3.7 s
per call on each of the four depthwise 7x7 weight gradients, against 0.23-0.50 ms for the fastest
candidate (thousands of times slower); its first runs alone cost 7.4 s of a 41.8 s tuning run.
Nothing that slow on one problem of a class has been seen to win another of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..problem import ConvProblem


def problem_class(problem: ConvProblem) -> str:
    """The problem's key without its sizes (batch, channels, spatial size, padding)."""
    p = problem
    grouping = "depthwise" if p.depthwise else "grouped" if p.groups > 1 else "dense"
    return " ".join((p.direction, grouping, "x".join(map(str, p.kernel)),
                     "s" + "x".join(map(str, p.stride)), "d" + "x".join(map(str, p.dilation)),
                     p.dtype, p.math, p.layout, "det" if p.deterministic else "nondet"))


@dataclass
class HopelessMemory:
    """Candidate keys found hopeless per problem class in this run: (class, key) -> why."""

    seen: dict[tuple[str, str], str] = field(default_factory=dict)

    def remember(self, problem: ConvProblem, key: str, ratio: float, factor: float) -> None:
        if ratio >= factor:
            self.seen.setdefault((problem_class(problem), key),
                                 f"{ratio:.0f}x the fastest on {problem.short()}")

    def recall(self, problem: ConvProblem, key: str) -> str | None:
        """Why `key` is hopeless on `problem`'s class, or None if it was never seen so."""
        return self.seen.get((problem_class(problem), key))
