"""`OptimizeOptions`: the parameters of `optimize` (all but the model and its inputs) and the
`Settings` of the process, as one checked, frozen value handed to each step."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..settings import Settings

if TYPE_CHECKING:
    import torch

_AUTO_OR_BOOL = ("auto", True, False)

# Quick tuning's default time limit: no new problem starts tuning once this many seconds have
# passed since `optimize` began (the layout decision included), and never less than
# `QUICK_MIN_TUNE_S` of tuning; the rest run PyTorch's path and are tuned by the next `optimize`
# call. Problems are tuned in order of the saving tuning is expected to bring
# (`runtime.tuning.importance`), so those left are the least promising. Measured on an H200 (ConvNeXt-
# tiny, EfficientNet-B0, batch 64, fp32 and bf16): the layout decision took 9-14 s before tuning,
# the last problem started ran on 1-2 s past the limit, and routing, graphs and the speedup
# measurement took 8-12 s after it; 40 s leaves the first step within a minute.
QUICK_TUNE_LIMIT_S = 40.0
QUICK_MIN_TUNE_S = 15.0


@dataclass(frozen=True)
class OptimizeOptions:
    """What `optimize` was asked for (its keyword parameters, same names and defaults).

    Raises UsageError on construction when a value is out of its range, so each step may trust
    what it reads here.
    """

    train: bool = True
    db: Any = None                       # a TuningDB, a path, None (default database), False (none)
    tune_missing: bool = True
    input_shape: Any = None
    dtype: torch.dtype | None = None     # of the inputs made from `input_shape`
    channels_last: bool | str = "auto"
    tune_on_first_sight: bool = False
    backend: str = "auto"
    verify: bool = True
    budget_s: float = 2.0
    steps: int = 10
    margin: float | None = None
    progress: Any = None                 # None (as the terminal allows), True, False, an object
    isolate: bool = True
    tune_time_limit_s: float | None = None   # None: the tuning mode's (`tune_limit`)
    graphs: bool | str = "auto"
    tuning: str = "quick"                # "quick" or "thorough" (`settings.for_tuning`)
    remeasure: bool = False              # measure the decisions again (`runtime.decisions`)
    settings: Settings = field(default_factory=Settings)      # for tuning: `tuning` applied
    # the settings as the user gave them: a result tuned under them is served to a quick run too
    base_settings: Settings = field(default_factory=Settings)

    def __post_init__(self) -> None:
        from ..settings import TUNING_MODES

        if self.tuning not in TUNING_MODES:
            raise UsageError(f"tuning must be one of {', '.join(TUNING_MODES)}, "
                             f"not {self.tuning!r}")
        m = self.margin
        if m is not None and not (_real(m) and 0 <= m < 1):
            raise UsageError(f"margin must be a number in [0, 1) or None, not {m!r}")
        if self.graphs not in _AUTO_OR_BOOL:
            raise UsageError(f"graphs must be 'auto', True or False, not {self.graphs!r}")
        if self.channels_last not in _AUTO_OR_BOOL:
            raise UsageError(f"channels_last must be 'auto', True or False, "
                             f"not {self.channels_last!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, numbers.Integral) \
                or self.steps < 1:
            raise UsageError(f"steps must be a whole number >= 1, not {self.steps!r}")
        if not (_real(self.budget_s) and self.budget_s > 0):
            raise UsageError(f"budget_s must be a number of seconds > 0, not {self.budget_s!r}")
        p = self.progress
        if not (p is None or isinstance(p, bool) or callable(getattr(p, "update", None))):
            raise UsageError(f"progress must be None, True, False or an object with "
                             f"update(n, note), not {type(p).__name__}")
        t = self.tune_time_limit_s
        if t is not None and not ((_real(t) or t == math.inf) and t >= 0):
            raise UsageError(f"tune_time_limit_s must be a number of seconds >= 0, "
                             f"float('inf') or None, not {t!r}")

    def tune_limit(self, spent_s: float = 0.0) -> float | None:
        """Seconds of tuning after which no new problem starts (None: no limit): the value
        given, else the tuning mode's default: for "quick" what is left of `QUICK_TUNE_LIMIT_S`
        after the `spent_s` seconds `optimize` spent before tuning (at least
        `QUICK_MIN_TUNE_S`), for "thorough" none; float('inf') is no limit."""
        t = self.tune_time_limit_s
        if t is None:
            if self.tuning != "quick":
                return None
            return max(QUICK_MIN_TUNE_S, QUICK_TUNE_LIMIT_S - max(0.0, spent_s))
        return None if t == math.inf else float(t)

    def graphs_possible(self, device_type: str) -> bool:
        """Whole-model CUDA graphs may be tried: asked for or "auto", on a CUDA device."""
        return self.graphs is not False and device_type == "cuda"

    def graph_routes(self, device_type: str) -> bool:
        """Routes ranked without host cost per plan call are built: on CUDA, when `verify`
        times them end to end."""
        return device_type == "cuda" and self.verify


def _real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))
