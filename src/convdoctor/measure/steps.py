"""End-to-end step timing: warm-up, many steps, median (device-synchronized on CUDA).

A training step is forward + a scalar loss (mean of every floating output) + backward; gradients
are dropped after each step (set to None) so they do not pile up. The optimizer step is the same
work with or without convdoctor, so `bench_optimize.py` adds it where it reports full steps.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch


def call_model(model: torch.nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def scalar_loss(out: Any) -> torch.Tensor:
    """Mean of every floating tensor in the output (nested tuples/lists/dicts), summed."""
    parts: list[torch.Tensor] = []

    def walk(o: Any) -> None:
        if isinstance(o, torch.Tensor):
            if o.is_floating_point() and o.requires_grad:
                parts.append(o.float().mean())
        elif isinstance(o, Mapping):
            for v in o.values():
                walk(v)
        elif isinstance(o, (tuple, list)):
            for v in o:
                walk(v)

    walk(out)
    if not parts:
        raise RuntimeError("the model's output has no floating tensor that requires grad")
    return torch.stack(parts).sum()


def make_step(model: torch.nn.Module, inputs: Any, train: bool, *,
              with_optimizer: bool = False) -> Callable[[], None]:
    """One step: training = forward, loss, backward (and an SGD-momentum step when asked)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-6, momentum=0.9) if with_optimizer and params else None

    def train_step() -> None:
        loss = scalar_loss(call_model(model, inputs))
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            for p in params:
                p.grad = None

    def infer_step() -> None:
        with torch.no_grad():
            call_model(model, inputs)

    return train_step if train else infer_step


def sync(device_type: str) -> None:
    if device_type == "cuda":
        torch.cuda.synchronize()


def time_steps(step: Callable[[], None], device_type: str, *, warmup: int = 3,
               steps: int = 10, host: list[float] | None = None) -> list[float]:
    """Milliseconds per step, one sample per step, after `warmup` untimed steps. `host`, when
    given, receives the CPU milliseconds this process spent issuing each step (before the device
    sync): close to the step's wall time means the step is host-bound."""
    for _ in range(max(0, warmup)):
        step()
    sync(device_type)
    out: list[float] = []
    for _ in range(max(1, steps)):
        c0 = time.process_time()
        t0 = time.perf_counter()
        step()
        c1 = time.process_time()
        sync(device_type)
        out.append((time.perf_counter() - t0) * 1e3)
        if host is not None:
            host.append((c1 - c0) * 1e3)
    return out


def time_interleaved(steps_by_name: Mapping[str, Callable[[], None]], device_type: str, *,
                     warmup: int = 3, steps: int = 10, rounds: int = 3,
                     host: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Alternate the variants in rounds so drift (clocks, other load) hits all of them alike.
    `host`, when given, receives each variant's host CPU ms per step (see `time_steps`)."""
    samples: dict[str, list[float]] = {k: [] for k in steps_by_name}
    if host is not None:
        for k in steps_by_name:
            host.setdefault(k, [])
    for name, step in steps_by_name.items():
        time_steps(step, device_type, warmup=warmup, steps=1)
        del name
    per = max(1, steps // max(1, rounds))
    for _ in range(max(1, rounds)):
        for name, step in steps_by_name.items():
            samples[name] += time_steps(step, device_type, warmup=1, steps=per,
                                        host=None if host is None else host[name])
    return samples


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


# The least relative gain that counts as "faster" when the margin comes from the measurement
# (`win_margin`): a tie of two identical steps measured 3.818 vs 3.821 ms.
MIN_MARGIN = 0.01
# Standard errors of the difference of two medians a gain must exceed.
MARGIN_Z = 3.0


def rel_se_of_median(xs: Sequence[float]) -> float:
    """Relative standard error of the median of `xs`, from their median absolute deviation
    (1.4826 x MAD estimates the standard deviation of normal samples; the median's standard error
    is 1.2533 x sd / sqrt(n)). inf for fewer than 3 samples."""
    if len(xs) < 3:
        return float("inf")
    m = statistics.median(xs)
    if m <= 0:
        return float("inf")
    mad = statistics.median(abs(x - m) for x in xs)
    return 1.2533 * 1.4826 * mad / m / len(xs) ** 0.5


def win_margin(a: Sequence[float], b: Sequence[float], *, floor: float = MIN_MARGIN,
               z: float = MARGIN_Z) -> float:
    """The relative gain one of two interleaved step-time samples must show over the other to
    count as a win: `z` standard errors of the difference of their medians, at least `floor`,
    at most 0.5 (samples too few or too noisy to tell ask for a 2x win)."""
    se = (rel_se_of_median(a) ** 2 + rel_se_of_median(b) ** 2) ** 0.5
    return min(0.5, max(floor, z * se))


# Adaptive sampling for the end-to-end decisions: a challenger that measures faster than the
# incumbent, but by less than the margin its samples' noise demands, is measured again (another
# `steps` interleaved samples each), at most this many times and for at most this long. Why: a
# ResNet-50 fp32 inference decision saw channels_last's graph replay 12% faster on 9 samples
# each and rejected it against a 12.7% margin; the same comparison measured 60 samples each at
# 5.87 vs 6.60 ms (lab/r50inf_probe.py).
MAX_EXTENSIONS = 3
EXTEND_CAP_S = 10.0
# At most 4x the samples halve a noise-derived margin (its standard error goes with 1/sqrt(n));
# a gain under a third of the current margin is left undecided rather than measured again.
UNDECIDED_MIN_SHARE = 1.0 / 3.0


def gain_undecided(fast: Sequence[float], slow: Sequence[float], margin: float,
                   floor: float = MIN_MARGIN) -> bool:
    """Can more samples still decide this? `fast`'s median is below `slow`'s but not by `margin`,
    that margin is above `floor` (more samples lower a noise-derived margin), and the gain is
    above `floor` and at least UNDECIDED_MIN_SHARE of the margin (a tie never becomes a win)."""
    if not fast or not slow:
        return False
    mf, ms = statistics.median(fast), statistics.median(slow)
    if ms <= 0 or not mf < ms:
        return False
    gain = 1.0 - mf / ms
    return gain < margin and margin > floor and gain > floor and \
        gain >= UNDECIDED_MIN_SHARE * margin


def extend_while_undecided(samples: dict[str, list[float]],
                           steps_by_name: Mapping[str, Callable[[], None]], device_type: str,
                           undecided: Callable[[dict[str, list[float]]], bool], *, steps: int,
                           host: dict[str, list[float]] | None = None,
                           max_extensions: int = MAX_EXTENSIONS,
                           cap_s: float = EXTEND_CAP_S) -> int:
    """Append more interleaved samples to `samples` (and `host`) while `undecided(samples)`, at
    most `max_extensions` times and while less than `cap_s` seconds were spent; returns how many
    extensions ran."""
    t0 = time.monotonic()
    n = 0
    while n < max_extensions and time.monotonic() - t0 < cap_s and undecided(samples):
        more = time_interleaved(steps_by_name, device_type, warmup=0, steps=steps, host=host)
        for k, v in more.items():
            samples.setdefault(k, []).extend(v)
        n += 1
    return n
