"""What `optimize` chose and measured: one `OptimizeReport` per optimized model, a `LayerChoice`
per recorded call signature of a conv layer, a `DirectionChoice` per direction it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DirectionChoice:
    direction: str
    key: str
    source: str                      # "db" | "tuned" | "pytorch" (no tuned choice)
    problem: str = ""
    winner_ms: float | None = None
    baseline_ms: float | None = None  # PyTorch's own path for this problem, measured by the tuner
    baseline_key: str = ""
    chain: list[str] = field(default_factory=list)
    graph_key: str = ""              # the route under CUDA graphs when it differs (no host cost)
    graph_chain: list[str] = field(default_factory=list)
    graph_winner_ms: float | None = None


@dataclass
class LayerChoice:
    layer: str
    x_shape: tuple[int, ...]
    dtype: str
    memory_format: str
    directions: list[DirectionChoice] = field(default_factory=list)


@dataclass
class OptimizeReport:
    device: str
    train: bool
    channels_last: bool = False
    channels_last_reason: str = ""
    layout_ms: dict[str, float] = field(default_factory=dict)
    graphs: bool = False
    graphs_reason: str = ""
    graphs_routed: bool = False      # the graph kept was captured with the graph routes
    graphs_ms: dict[str, float] = field(default_factory=dict)
    routing: bool = True
    routing_reason: str = ""
    # the routing variant kept: "routed", "routed_nohost" (the graph routes, eagerly) or ""
    routing_variant: str = ""
    verify_ms: dict[str, float] = field(default_factory=dict)
    # the relative gain each decision needed to count as a win (`margin`, or the measurement's)
    margins: dict[str, float] = field(default_factory=dict)
    # how many extra rounds of samples each undecided decision took (`measure.steps.MAX_EXTENSIONS`)
    extensions: dict[str, int] = field(default_factory=dict)
    layers: list[LayerChoice] = field(default_factory=list)
    problems: int = 0
    from_db: int = 0
    tuned: int = 0
    untuned: int = 0
    # quick tuning: problems too small for any kernel to beat its launch, left on PyTorch's path
    # without tuning (`runtime.tuning.tiny`); not counted in `untuned`
    left_tiny: int = 0
    # quick tuning on a GPU: the least promising problems, past `runtime.tuning.MINOR_SHARE` of the
    # model's estimated saving, left on PyTorch's path without tuning; not counted in `untuned`
    left_minor: int = 0
    tuning_s: float = 0.0
    optimize_s: float = 0.0
    # seconds per step of `optimize` ("copy", "layout", "record", "tuning", "routes", "verify",
    # "graphs", "speedup"; "capture" for stored graphs decisions applied): where the time to the
    # first optimized step went
    phase_s: dict[str, float] = field(default_factory=dict)
    # the "routes" step by engine: {engine name: [executors built, seconds]} (fallbacks behind a
    # route's first executor are built on their first call, not counted here)
    route_builds: dict[str, list[float]] = field(default_factory=dict)
    # the decisions that took an error path (a step failed, a capture failed): a report with any
    # is not stored for reuse, since the failure may not recur
    failed_steps: list[str] = field(default_factory=list)
    # "measured" (layout, routing, graphs and speedup timed now), "reused" (applied as measured
    # before for this model and environment, `runtime.decisions`) or "" (verify=False)
    decisions: str = ""
    # the Triton kernels compiled ahead of tuning (`tune.precompile.Summary.to_dict`); empty when
    # none were
    precompile: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # End to end, the model as optimize leaves it against a copy of the model as given (made
    # before any change), timed interleaved in one session (`runtime.speedup`). None and empty
    # when nothing was changed, when `verify` is off, or when the changes were undone;
    # `speedup_source` says which.
    speedup: float | None = None        # as given / optimized: the median of the per-round ratios
    speedup_ci: list[float] = field(default_factory=list)  # [low, high] of that median
    speedup_level: float = 0.0          # the coverage of `speedup_ci` (at least 0.95 from 6 rounds)
    speedup_samples: list[float] = field(default_factory=list)  # per round: as given / optimized
    speedup_ms: dict[str, float] = field(default_factory=dict)  # median ms: as_given, optimized
    # the steps of that measurement, ms: "pytorch" (the model as given), "convdoctor"
    speedup_step_ms: dict[str, list[float]] = field(default_factory=dict)
    speedup_source: str = ""

    @property
    def changed(self) -> bool:
        """Does the model run anything but PyTorch's own path as given (a layout, routes or
        graphs)?"""
        return bool(self.channels_last or self.routing or self.graphs)
