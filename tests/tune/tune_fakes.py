"""Fakes for the tuner's tests: a simulated device with the measurement traps of real GPUs.

`SimWorld` keeps simulated time. Every run of a candidate takes its true time, multiplied by
log-normal noise with occasional outliers, a drift that grows with time (a GPU heating up), a
throttling episode (a window of time where everything runs slower and the clock reports a slowdown),
and a first-run penalty for some candidates (lazy loading: the first runs are several times slower).
"""

from __future__ import annotations

import math
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from convdoctor.problem import ConvProblem
from convdoctor.tune.backend import Candidate, CandidateUnsupported, ClockReading, Correctness

HERE = os.path.dirname(os.path.abspath(__file__))


def importable_in_workers(monkeypatch: Any) -> None:
    """Worker processes import this module by a spec such as "tune_fakes:make_crash_backend": put
    its folder first on their PYTHONPATH (`monkeypatch`: pytest's, so the test's end undoes it)."""
    pp = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", HERE + (os.pathsep + pp if pp else ""))


@dataclass
class SimCandidate:
    key: str
    true_s: float
    first_run_penalty: float = 1.0      # factor on the first `penalty_runs` runs
    penalty_runs: int = 3
    workspace: int = 0
    deterministic: bool = True
    pinned: bool = True                 # the key fixes the kernel (Candidate.pinned)
    wrong: bool = False                 # produces a wrong output
    wrong_err: float = 0.7              # its error (math.inf: NaN/Inf in the output)
    runs: int = 0


@dataclass
class SimWorld:
    seed: int
    candidates: list[SimCandidate]
    noise_sigma: float = 0.04
    outlier_p: float = 0.03
    drift_per_s: float = 0.0            # relative slowdown per simulated second
    throttle: tuple[float, float] | None = None   # [start, end) in simulated seconds
    throttle_factor: float = 1.5
    report_throttle: bool = True        # whether clock() shows the slowdown
    overhead_s: float = 2e-5
    t: float = 0.0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def throttled(self) -> bool:
        return self.throttle is not None and self.throttle[0] <= self.t < self.throttle[1]

    def run(self, c: SimCandidate) -> float:
        v = c.true_s
        if c.runs < c.penalty_runs:
            v *= c.first_run_penalty
        c.runs += 1
        v *= math.exp(self.rng.gauss(0.0, self.noise_sigma))
        if self.rng.random() < self.outlier_p:
            v *= 1.0 + self.rng.random()
        v *= 1.0 + self.drift_per_s * self.t
        if self.throttled():
            v *= self.throttle_factor
        self.t += v + self.overhead_s
        return v


class SimRunner:
    def __init__(self, world: SimWorld, sc: SimCandidate, cand: Candidate) -> None:
        self.world = world
        self.sc = sc
        self.candidate = cand

    def warmup(self) -> None:
        self.world.run(self.sc)

    def time(self, reps: int) -> list[float]:
        return [self.world.run(self.sc) for _ in range(reps)]

    def check(self) -> Correctness:
        self.world.run(self.sc)
        if self.sc.wrong:
            return Correctness(False, self.sc.wrong_err, 1e-4, "simulated wrong engine")
        return Correctness(True, 1e-6, 1e-4)

    def close(self) -> None:
        pass


class SimBackend:
    name = "sim"

    def __init__(self, world: SimWorld) -> None:
        self.world = world
        self.by_key = {c.key: c for c in world.candidates}

    def environment(self) -> dict[str, str]:
        return {"backend": "sim", "gpu_name": "Simulated GPU", "torch": "0"}

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return [Candidate(key=c.key, backend="sim", workspace_bytes=c.workspace,
                          deterministic=c.deterministic, pinned=c.pinned)
                for c in self.world.candidates]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> SimRunner:
        return SimRunner(self.world, self.by_key[candidate.key], candidate)

    def clock(self) -> ClockReading | None:
        slow = self.world.report_throttle and self.world.throttled()
        return ClockReading(sm_clock_mhz=1400.0 if slow else 1980.0, max_sm_clock_mhz=1980.0,
                            reasons=0x4 if slow else 0, slowdown=slow)


# ---------------------------------------------------------------------- for the worker tests
class _CrashRunner:
    def __init__(self, candidate: Candidate, behaviour: str, true_s: float) -> None:
        self.candidate = candidate
        self.behaviour = behaviour
        self.true_s = true_s

    def _maybe_die(self) -> None:
        if self.behaviour == "abort":
            os.abort()
        if self.behaviour == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.behaviour == "hang":
            time.sleep(3600)
        if self.behaviour == "raise":
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED (simulated)")
        if self.behaviour == "unsupported":
            raise CandidateUnsupported("simulated: not for this problem")

    def warmup(self) -> None:
        self._maybe_die()

    def time(self, reps: int) -> list[float]:
        self._maybe_die()
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            end = t0 + self.true_s
            while time.perf_counter() < end:
                pass
            out.append(time.perf_counter() - t0)
        return out

    def check(self) -> Correctness:
        return Correctness(True, 0.0, 1e-4)

    def close(self) -> None:
        pass


class CrashBackend:
    """Candidates named for how they behave: ok-*, abort, segv, hang, raise, unsupported."""

    name = "crash"

    def environment(self) -> dict[str, str]:
        return {"backend": "crash", "pid_parent_check": "1"}

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        keys = ["fake:ok-slow", "fake:abort", "fake:hang", "fake:ok-fast", "fake:segv",
                "fake:raise", "fake:unsupported"]
        return [Candidate(key=k, backend="crash") for k in keys]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> _CrashRunner:
        name = candidate.key.split(":", 1)[1]
        if name == "unsupported":
            raise CandidateUnsupported("simulated: not for this problem")
        true_s = {"ok-slow": 0.004, "ok-fast": 0.001}.get(name, 0.002)
        return _CrashRunner(candidate, name if not name.startswith("ok") else "ok", true_s)

    def clock(self) -> ClockReading | None:
        return None


def make_crash_backend() -> CrashBackend:
    return CrashBackend()


class HangingListBackend(CrashBackend):
    """Its full candidate listing hangs (as a CUDA listing whose plan builds and quick times
    outlast the worker's wait); its short list answers: two good candidates."""

    name = "hanging-list"

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        time.sleep(3600)
        return []

    def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
        self.listed = "lean"
        return [Candidate(key=k, backend="crash") for k in ("fake:ok-slow", "fake:ok-fast")]

    def listing_info(self) -> dict[str, Any]:
        return {"lean": getattr(self, "listed", "") == "lean"}


def make_hanging_list_backend() -> HangingListBackend:
    return HangingListBackend()


class RecordingListBackend(CrashBackend):
    """Its listing leaves a record (as the CUDA backend's refinement seeds); `mode` "raises" or
    "unserializable" make the record itself fail."""

    name = "recording-list"

    def __init__(self, mode: str = "ok") -> None:
        super().__init__()
        self.mode = mode

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return [Candidate(key=k, backend="crash") for k in ("fake:ok-slow", "fake:ok-fast")]

    def listing_info(self) -> Any:
        if self.mode == "raises":
            raise RuntimeError("no record")
        if self.mode == "unserializable":
            return {"seeds": {1, 2}}
        return {"refinement": {"seeds": [["fake:ok-fast", 1.5]], "kept": []}}


def make_recording_list_backend() -> RecordingListBackend:
    return RecordingListBackend()


def make_raising_record_backend() -> RecordingListBackend:
    return RecordingListBackend("raises")


def make_unserializable_record_backend() -> RecordingListBackend:
    return RecordingListBackend("unserializable")


# ---------------------------------------------------------------------- buffer placements
class SlotRunner(SimRunner):
    """A runner that keeps several buffer placements (`slotted`): a run on placement i takes the
    candidate's true time times `factors[i % len(factors)]` (the same factor for every candidate:
    the addresses, not the engine, make it slower). Records the (slot, reps) of every call."""

    slotted = True

    def __init__(self, world: SimWorld, sc: SimCandidate, cand: Candidate,
                 factors: list[float], calls: list[tuple[str, int | None]]) -> None:
        super().__init__(world, sc, cand)
        self.factors = factors
        self.calls = calls

    def time(self, reps: int, slot: int | None = None) -> list[float]:  # type: ignore[override]
        self.calls.append((self.candidate.key, slot))
        f = self.factors[(slot or 0) % len(self.factors)]
        out = []
        for _ in range(reps):
            v = self.world.run(self.sc) * f
            self.world.t += v * (f - 1.0) / f if f > 1.0 else 0.0
            out.append(v)
        return out


class PlacementBackend(SimBackend):
    """Each candidate on placements. `slotted=False`: like a tuner that gives every candidate its
    own buffers: each gets ONE placement factor (drawn per candidate from `factors`)."""

    def __init__(self, world: SimWorld, factors: list[float], *, slotted: bool,
                 seed: int = 0) -> None:
        super().__init__(world)
        self.factors = factors
        self.slotted = slotted
        self.calls: list[tuple[str, int | None]] = []
        self._rng = random.Random(seed)

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> SimRunner:
        sc = self.by_key[candidate.key]
        if self.slotted:
            return SlotRunner(self.world, sc, candidate, self.factors, self.calls)
        own = self._rng.choice(self.factors)
        return _FixedPlacementRunner(self.world, sc, candidate, own)


class _FixedPlacementRunner(SimRunner):
    def __init__(self, world: SimWorld, sc: SimCandidate, cand: Candidate, factor: float) -> None:
        super().__init__(world, sc, cand)
        self.factor = factor

    def time(self, reps: int) -> list[float]:
        return [self.world.run(self.sc) * self.factor for _ in range(reps)]


class _EchoSlotRunner:
    """Worker test: returns the slot it was given (as milliseconds), or -1 ms for none."""

    slotted = True
    placements = 5

    def __init__(self, candidate: Candidate) -> None:
        self.candidate = candidate

    def warmup(self) -> None:
        pass

    def time(self, reps: int, slot: int | None = None) -> list[float]:
        return [1e-3 * (slot if slot is not None else -1) + self.offset] * reps

    offset = 0.0

    def settle(self) -> None:
        self.offset = 1.0   # after settling, every time reads 1 s more

    def check(self) -> Correctness:
        return Correctness(True, 0.0, 1e-4)

    def close(self) -> None:
        pass


class EchoSlotBackend:
    name = "echo-slot"

    def environment(self) -> dict[str, str]:
        return {"backend": "echo-slot"}

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return [Candidate(key="fake:echo", backend="echo-slot")]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> _EchoSlotRunner:
        return _EchoSlotRunner(candidate)

    def clock(self) -> ClockReading | None:
        return None


def make_echo_slot_backend() -> EchoSlotBackend:
    return EchoSlotBackend()


class _OwnSlotRunner(SlotRunner):
    """A SlotRunner whose placement factors are its candidate's own (a plan whose speed depends on
    where its workspace lies), and that says how many placements it cycles through."""

    def __init__(self, world: SimWorld, sc: SimCandidate, cand: Candidate,
                 factors: list[float], calls: list[tuple[str, int | None]],
                 placements: int) -> None:
        super().__init__(world, sc, cand, factors, calls)
        self.placements = placements


class _GuardedSlotRunner(_OwnSlotRunner):
    """An `_OwnSlotRunner` with a workspace guard: `settle()` gives its slow placements fresh
    workspaces, after which every placement runs at the candidate's true time (the slowness of
    Conv2d_4a_3x3's cuDNN plan followed the memory behind its workspace)."""

    def __init__(self, *args: Any, settled: list[str], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.settled = settled

    def settle(self) -> None:
        self.settled.append(self.candidate.key)
        self.factors = [1.0] * len(self.factors)


class AddressSensitiveBackend(SimBackend):
    """Candidates with their OWN factor per placement (`factors[key]`, default all 1.0): e.g. a
    split-K plan fast on 3 of 4 workspace addresses and 15% slower on the fourth.
    `report_placements=False`: runners do not say how many placements they have."""

    def __init__(self, world: SimWorld, factors: dict[str, list[float]], *, count: int = 4,
                 report_placements: bool = True) -> None:
        super().__init__(world)
        self.factors = factors
        self.count = count
        self.report_placements = report_placements
        self.calls: list[tuple[str, int | None]] = []

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> SimRunner:
        f = self.factors.get(candidate.key, [1.0] * self.count)
        return _OwnSlotRunner(self.world, self.by_key[candidate.key], candidate, f, self.calls,
                              self.count if self.report_placements else 1)


class GuardedBackend(AddressSensitiveBackend):
    """`AddressSensitiveBackend` whose runners have the workspace guard (`settle`); `settled`
    lists the keys whose runner the harness settled."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.settled: list[str] = []

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> SimRunner:
        f = list(self.factors.get(candidate.key, [1.0] * self.count))
        return _GuardedSlotRunner(self.world, self.by_key[candidate.key], candidate, f,
                                  self.calls, self.count, settled=self.settled)


# ---------------------------------------------------------------------- hung listing steps
class HangingStepBackend(CrashBackend):
    """Its listing reports steps (`listing_step`) as the CUDA backend's does, and one step per
    unit in `hang_units` never returns unless that unit is in `listing_exclude` (on an H100,
    a cuDNN engine's plan never returned from its quick time while listing 3D fp16 wgrad problems).
    `kind` is the hung step's kind ("time": the quick-time watchdog applies; "build": only the
    listing's whole wait). `stubborn`: it hangs even when told to leave the unit out."""

    name = "hanging-step"

    def __init__(self, hang_units: tuple[str, ...] = ("eng69",), kind: str = "time",
                 stubborn: bool = False, crash: bool = False) -> None:
        super().__init__()
        self.crash = crash  # the step kills the worker (SIGSEGV) at once instead of hanging
        self.setup_steps = 0
        self.hang_units = hang_units
        self.kind = kind
        self.stubborn = stubborn
        self.listing_exclude: set[str] = set()

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        from convdoctor.engines.listing import listing_step

        keys = ["fake:ok-slow"]
        for i in range(self.setup_steps):  # healthy work before the hang (builds, 0.3 s each)
            listing_step("build", f"eng{100 + i}", f"eng{100 + i}_k1=0")
            time.sleep(0.3)
        for unit in ("eng1",) + self.hang_units + ("eng2",):
            if unit in self.listing_exclude and not self.stubborn:
                continue
            listing_step(self.kind, unit, f"{unit}_k1=0")
            if unit in self.hang_units and problem.direction == "fprop":
                if self.crash:
                    os.kill(os.getpid(), signal.SIGSEGV)
                time.sleep(3600)
            listing_step("engine", "eng99")  # a step the quick-time watchdog does not watch
            keys.append("fake:ok-fast" if unit == "eng2" else "fake:ok-slow")
        return [Candidate(key=k, backend="crash") for k in dict.fromkeys(keys)]

    def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
        self.lean = True
        return [Candidate(key="fake:ok-slow", backend="crash")]

    def listing_info(self) -> dict[str, Any]:
        return {"excluded": sorted(self.listing_exclude), "lean": getattr(self, "lean", False)}


def make_hanging_step_backend() -> HangingStepBackend:
    return HangingStepBackend()


def make_two_hanging_steps_backend() -> HangingStepBackend:
    return HangingStepBackend(("eng69", "eng70"))


def make_hanging_build_backend() -> HangingStepBackend:
    return HangingStepBackend(kind="build")


def make_stubborn_hanging_step_backend() -> HangingStepBackend:
    return HangingStepBackend(stubborn=True)


def make_crashing_build_backend() -> HangingStepBackend:
    return HangingStepBackend(kind="build", crash=True)


def make_late_hanging_step_backend() -> HangingStepBackend:
    be = HangingStepBackend()
    be.setup_steps = 2
    return be


class SlowStepsBackend(HangingStepBackend):
    """A listing slow as a whole: a new quick step every 0.2 s, none of them stuck."""

    name = "slow-steps"

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        from convdoctor.engines.listing import listing_step

        for i in range(100000):
            listing_step("time", f"eng{i % 50}", f"eng{i % 50}_k1={i}")
            time.sleep(0.2)
        return []


def make_slow_steps_backend() -> SlowStepsBackend:
    return SlowStepsBackend()


def make_outside_tolerance_backend() -> SimBackend:
    """PyTorch's benchmark=True path misses the tolerance by a little (a bench's fp32 TF32
    wgrad row: 2.09e-3 against 2e-3); its heuristic path and a plan pass. Named after its own
    factory, so `bench` (which starts its later arms by the first worker's backend name) can run
    on it."""
    be = _outside_tolerance_sim()
    be.name = "tune_fakes:make_outside_tolerance_backend"
    return be


def _outside_tolerance_sim() -> SimBackend:
    return SimBackend(SimWorld(seed=3, noise_sigma=0.01, outlier_p=0.0, candidates=[
        SimCandidate("torch:heuristic", 2e-4, pinned=False),
        SimCandidate("torch:benchmark", 1e-4, wrong=True, wrong_err=2.09e-3, pinned=False),
        SimCandidate("eng:x", 1.5e-4),
        SimCandidate("eng:bad", 1.2e-4, wrong=True, wrong_err=2.09e-3),
        SimCandidate("eng:pick", 1.3e-4, wrong=True, wrong_err=2.2e-3)]))


# ---------------------------------------------------------------- precompile children's work
def fake_compile(problem_key: str, candidate_key: str) -> None:
    """A compile task: appends "problem|candidate" to $FAKE_COMPILE_LOG; a candidate key with
    "bad" fails, one with "die" ends the process, one with "slow" takes 0.3 s."""
    if "die" in candidate_key:
        os._exit(3)
    if "slow" in candidate_key:
        time.sleep(0.3)
    if "bad" in candidate_key:
        raise RuntimeError("does not compile")
    with open(os.environ["FAKE_COMPILE_LOG"], "a", encoding="utf-8") as fh:
        fh.write(f"{problem_key}|{candidate_key}\n")
