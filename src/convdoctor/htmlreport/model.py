"""What a report page is made of: the inputs, read and checked, as plain frozen values.

The loaders (`inputs.py`) turn each file a user names into these values once; the sections only
read them. A tuned problem looks the same whether it came from the tuning database, a `db export`
file, `convdoctor tune --json` or the rows of a bench result, so one plot serves them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# the reference paths a tuning result may hold (exact keys, defined by the torch engine)
from ..engines.torch_paths import BENCHMARK, HEURISTIC

BENCHMARK_KEY = BENCHMARK
HEURISTIC_KEY = HEURISTIC


@dataclass(frozen=True)
class Cand:
    """One candidate of one tuned problem."""

    key: str
    status: str                      # ok, screened-out, disqualified, failed, unsupported, ...
    reason: str = ""
    samples: tuple[float, ...] = ()  # seconds: the timed samples (screen samples when screened out)
    median_s: float | None = None
    ci: tuple[float, float] | None = None   # 95% CI of the median, where the source has one
    discarded: int = 0               # samples thrown away because the clock showed a slowdown
    clock_mhz: float | None = None
    referee: tuple[float, ...] = ()  # seconds: bench referee processes' times of this key


@dataclass(frozen=True)
class TunedProblem:
    """One problem's tuning: every candidate, the choice and PyTorch's two paths."""

    label: str                       # short problem text (and the layer, where known)
    key: str                         # the problem's canonical key
    direction: str
    dtype: str
    math: str
    flops: float | None
    min_bytes: float | None
    device: str                      # GPU name, or the CPU model
    backend: str
    source: str                      # where it was read from (for the page's caption)
    sample_kind: str                 # "samples": timed samples; "run medians": one per tuning run
    candidates: tuple[Cand, ...]
    chosen: tuple[str, ...] = ()     # the winner's key (one per tuning run where runs disagree)
    chosen_s: float | None = None
    baselines: tuple[tuple[str, float], ...] = ()   # (PyTorch path key, seconds)
    benchmark_picks: tuple[str, ...] = ()
    tuning_s: float | None = None
    noise_band: float | None = None
    notes: tuple[str, ...] = ()
    degraded: bool = False
    imported: bool = False

    def baseline(self, key: str) -> float | None:
        return dict(self.baselines).get(key)

    @property
    def heuristic(self) -> tuple[str, float] | None:
        """PyTorch's default path: the cuDNN heuristic (GPU) or the CPU default."""
        for k, v in self.baselines:
            if k != BENCHMARK_KEY:
                return k, v
        return None

    @property
    def benchmark_s(self) -> float | None:
        return self.baseline(BENCHMARK_KEY)

    def speedup_over(self, seconds: float | None) -> float | None:
        if seconds is None or not self.chosen_s:
            return None
        return seconds / self.chosen_s


@dataclass(frozen=True)
class DevicePeaks:
    """A device's roofline: peak FLOP/s per math mode and peak bandwidth."""

    device: str                      # GPU name or CPU model
    flops: dict[str, float]          # "float32/tf32", "float32/strict", "float16", "bfloat16"
    bandwidth: float                 # bytes/s
    source: str                      # "measured (...)" or "datasheet (...)"
    measured: bool


@dataclass(frozen=True)
class EnvDoc:
    """One `convdoctor env --json` report (a machine)."""

    name: str
    doc: dict[str, Any]


@dataclass(frozen=True)
class BenchDoc:
    """One `convdoctor bench --json` result: a suite's rows for one configuration and direction."""

    name: str
    config: str
    direction: str
    backend: str
    env: dict[str, str]
    summary: dict[str, Any]
    rows: tuple[dict[str, Any], ...]

    @property
    def device(self) -> str:
        return str(self.env.get("gpu_name") or self.env.get("cpu") or self.backend or "?")


@dataclass(frozen=True)
class Timing:
    """End-to-end step times of one variant (ms): the samples, per-process medians, the median."""

    ms: float | None
    samples: tuple[float, ...] = ()
    runs: tuple[float, ...] = ()


@dataclass(frozen=True)
class Decision:
    """One of optimize's end-to-end decisions: the measured options and the margin a win needed."""

    name: str                        # layout, routing, graphs
    chosen: str
    options: tuple[tuple[str, float], ...]   # (option, ms)
    baseline: str                    # the option a challenger had to beat
    margin: float | None
    reason: str


@dataclass(frozen=True)
class LayerDir:
    layer: str
    direction: str
    key: str
    source: str                      # db, tuned, pytorch
    chosen_ms: float | None
    pytorch_ms: float | None
    pytorch_key: str = ""
    problem: str = ""                # the problem's short text (`ConvProblem.short()`)


@dataclass(frozen=True)
class OptimizeRun:
    """One model optimized: its decisions, per-layer choices and end-to-end figures."""

    name: str
    device: str
    train: bool
    source: str
    variants: dict[str, Timing] = field(default_factory=dict)   # "pytorch", "convdoctor", ...
    speedups: tuple[tuple[str, float, tuple[float, ...]], ...] = ()  # (label, value, per run)
    decisions: tuple[Decision, ...] = ()
    layers: tuple[LayerDir, ...] = ()
    problems: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Inputs:
    """Everything one page shows."""

    envs: tuple[EnvDoc, ...] = ()
    tuned: tuple[TunedProblem, ...] = ()
    peaks: tuple[DevicePeaks, ...] = ()
    benches: tuple[BenchDoc, ...] = ()
    runs: tuple[OptimizeRun, ...] = ()
    notes: tuple[str, ...] = ()      # what the page could not show, and why
    sources: tuple[str, ...] = ()    # the files it was made from
    title: str = "convdoctor report"


@dataclass(frozen=True)
class Section:
    """One part of the page: `render(inputs)` returns its HTML, or None when the inputs hold
    nothing for it (the section is then left out)."""

    id: str
    title: str
    render: Callable[[Inputs], str | None]
