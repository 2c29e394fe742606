"""Run candidates in a worker subprocess, so a crash, a sticky CUDA error or a hang costs one candidate.

The parent holds a `WorkerBackend` (a `Backend`); it starts `python -m convdoctor.tune.worker SPEC`
and speaks JSON lines with it: one request, one reply, each with a timeout. When the worker dies
(abort, segfault, sticky CUDA error that we turn into an exit) or does not answer in time, the parent
kills it, marks the candidate in hand failed (with the signal and the tail of the worker's stderr),
and starts a fresh worker on the next request; runners prepared in the dead worker are prepared again.

SPEC is a backend name ("cpu", "cuda") or "module:callable" returning a Backend (used by tests).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ..engines.base import Candidate, CandidateUnsupported, StickyError
from ..engines.listing import listing_record
from ..errors import ConvdoctorError
from ..measure.clock import ClockReading
from ..measure.correctness import Correctness
from ..problem import ConvProblem
from ..settings import Settings
from .steps import ListingStep as ListingStep  # importable from here too
from .steps import StepFile, StepWatch


class WorkerDied(RuntimeError):
    """The worker crashed or hung while running a request."""


class WorkerHung(WorkerDied):
    """The worker did not answer in time (or its watchdog gave up on it) and was killed."""


class _WorkerProcess:
    def __init__(self, spec: str, extra_env: dict[str, str] | None = None) -> None:
        self.stderr_file = tempfile.TemporaryFile(mode="w+b")
        env = {**os.environ, **(extra_env or {})}
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "convdoctor.tune.worker", spec],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr_file, env=env,
            bufsize=0,
        )
        self._buf = b""

    def request(self, msg: dict[str, Any], timeout_s: float,
                watch: Callable[[], str | None] | None = None,
                grace: Callable[[], float] | None = None) -> dict[str, Any]:
        """Send `msg`, wait up to `timeout_s` for the reply; `watch`, polled every WATCH_POLL_S,
        returns why to give up early (the worker is then killed), or None; `grace`, asked once
        when the wait runs out, returns how many more seconds to wait (0: none)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death("the worker was gone before the request")) from None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 and grace is not None:
                extra, grace = grace(), None
                if extra > 0:
                    deadline += extra
                    continue
            if left <= 0:
                self.kill()
                raise WorkerHung(f"no answer within {timeout_s:.0f} s (hung); worker killed"
                                 + self._stderr_tail())
            ready, _, _ = select.select([fd], [], [], min(left, WATCH_POLL_S))
            if not ready:
                why = watch() if watch is not None else None
                if why:
                    self.kill()
                    raise WorkerHung(why + self._stderr_tail())
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerDied(self._death("the worker exited"))
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            raise WorkerDied(f"unreadable reply from the worker: {line[:200]!r}") from None
        return reply  # type: ignore[no-any-return]

    def _stderr_tail(self) -> str:
        try:
            self.stderr_file.seek(0)
            data = self.stderr_file.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        tail = " | ".join(data[-3:])
        return f"; stderr: {tail[-300:]}" if tail else ""

    def _death(self, what: str) -> str:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"signal {-rc}"
            how = f"killed by {sig}"
        else:
            how = f"exit code {rc}"
        return f"{what} ({how}){self._stderr_tail()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        self.stderr_file.close()


class _ProxyRunner:
    def __init__(self, owner: WorkerBackend, problem: ConvProblem, candidate: Candidate) -> None:
        self.owner = owner
        self.problem = problem
        self.candidate = candidate
        self.rid: int | None = None
        self.generation = -1
        self.warm = False
        self.settled = False
        self.timing_mode = ""
        # buffer placements are the worker-side runner's business: pass the round through (and
        # learn how many it has when it is prepared)
        self.slotted = True
        self.placements = 1

    def _ensure(self) -> int:
        if self.rid is None or self.generation != self.owner.generation:
            rep = self.owner.call({"op": "prepare", "problem": self.problem.to_dict(),
                                   "candidate": self.candidate.to_dict()})
            self.rid = int(rep["id"])
            self.placements = max(1, int(rep.get("placements", 1) or 1))
            self.generation = self.owner.generation
            if self.warm:  # prepared again in a fresh worker: repeat the warm-up it had
                self.owner.call({"op": "warmup", "id": self.rid})
            if self.settled:  # ... and the settling
                self.owner.call({"op": "settle", "id": self.rid})
        return self.rid

    def warmup(self) -> None:
        self.owner.call({"op": "warmup", "id": self._ensure()})
        self.warm = True

    def settle(self) -> None:
        self.owner.call({"op": "settle", "id": self._ensure()})
        self.settled = True

    def time(self, reps: int, slot: int | None = None) -> list[float]:
        msg: dict[str, Any] = {"op": "time", "id": self._ensure(), "reps": int(reps)}
        if slot is not None:
            msg["slot"] = int(slot)
        rep = self.owner.call(msg)
        self.timing_mode = str(rep.get("timing", "") or "")
        return [float(v) for v in rep["samples"]]

    def check(self) -> Correctness:
        rep = self.owner.call({"op": "check", "id": self._ensure()})
        c = rep["correctness"]
        return Correctness(ok=bool(c["ok"]), max_rel_err=float(c["max_rel_err"]),
                           tolerance=float(c["tolerance"]), detail=str(c.get("detail", "")))

    def close(self) -> None:
        if self.rid is not None and self.generation == self.owner.generation:
            try:
                self.owner.call({"op": "close", "id": self.rid})
            except Exception:  # noqa: BLE001
                pass
        self.rid = None


# How long a candidate listing may take before the worker counts as hung: the CUDA backend's
# listing spends up to its enumeration (2 s) and refinement (6 s) budgets plus plan builds (cuDNN
# runtime-compiled engines take seconds each).
LIST_TIMEOUT_S = 60.0
# How long one step of a quick time inside a listing may take before the worker counts as hung. The
# quick timer (`engines.cudnn_refine.event_timer`) reports a step before its probe (a warm-up call
# and one timed call), before a second probe, and before its batches (about 8 calls of a plan
# under 0.5 s per call; a slower plan keeps its probe and runs no batches): so a plan running up
# to ~15 s per call (the slowest seen: 5.2 s) finishes each step in time. On an H100 one cuDNN plan
# never returned from its first run.
STEP_TIMEOUT_S = 30.0
# All retries of one listing together stop after this many seconds (each retry starts a fresh
# worker and lists again).
LIST_RETRY_TOTAL_S = 150.0
# How often a wait for the worker's reply polls `watch` (the listing's step file).
WATCH_POLL_S = 1.0
# How many hung steps one listing may leave out (each costs a fresh worker and a new listing)
# before it gives up and the harness falls back to the short list.
MAX_LIST_EXCLUSIONS = 3


def problem_kind(problem: ConvProblem) -> str:
    """What a plan that hung on `problem` is left out of for the rest of the process: problems of
    the same direction, dtype, math, layout and number of spatial dimensions."""
    return (f"{problem.direction} {problem.dtype} {problem.math} {problem.layout} "
            f"{len(problem.spatial)}d")


class WorkerBackend:
    """A Backend whose candidates run in a subprocess; see the module docstring."""

    def __init__(self, spec: str = "auto", *, timeout_s: float = 60.0,
                 startup_timeout_s: float = 120.0, env: dict[str, str] | None = None,
                 settings: Settings | None = None) -> None:
        """`settings`: the worker's settings (default: this process's environment's); `env`: extra
        environment variables for the worker process (and its restarts)."""
        from ..settings import current, declared

        self.spec = spec
        self.settings = settings if settings is not None else current()
        # the worker reads its settings from its environment: exactly these, whatever ours say
        self.extra_env = {d["env"]: "" for d in declared()}
        self.extra_env.update(self.settings.to_env())
        self.extra_env.update(env or {})
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.generation = 0
        self.restarts = 0
        self._proc: _WorkerProcess | None = None
        self._env: dict[str, str] | None = None
        self.last_listing: dict[str, Any] = {}
        # problem kind -> unit -> why: what hung in a listing, left out of that kind's listings
        self.hung: dict[str, dict[str, str]] = {}
        hello = self._start()
        self.name = str(hello.get("name", spec))
        self._env = {str(k): str(v) for k, v in hello.get("environment", {}).items()}

    def _start(self) -> dict[str, Any]:
        self._proc = _WorkerProcess(self.spec, self.extra_env)
        try:
            rep = self._proc.request({"op": "hello"}, self.startup_timeout_s)
        except WorkerDied as exc:
            self._proc.kill()
            raise ConvdoctorError(f"the tuning worker for backend {self.spec!r} did not start: {exc}"
                                  ) from None
        if rep.get("error"):
            self._proc.close()
            raise ConvdoctorError(f"the tuning worker for backend {self.spec!r} did not start: "
                                  f"{rep['error']}")
        self.generation += 1
        return rep

    def call(self, msg: dict[str, Any], watch: Callable[[], str | None] | None = None,
             grace: Callable[[], float] | None = None) -> dict[str, Any]:
        if self._proc is None or self._proc.proc.poll() is not None:
            if self._proc is not None:
                self._proc.close()
            self.restarts += 1
            self._start()
        assert self._proc is not None
        try:
            rep = self._proc.request(msg, self.timeout_s, watch, grace)
        except WorkerDied:
            self._proc.kill()
            raise
        if rep.get("unsupported") is not None:
            raise CandidateUnsupported(str(rep["unsupported"]))
        if rep.get("error") is not None:
            raise RuntimeError(str(rep["error"]))
        return rep

    # Backend protocol
    def environment(self) -> dict[str, str]:
        return dict(self._env or {})

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return self._listing(problem, {"op": "candidates", "problem": problem.to_dict()})

    def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
        """The backend's short list (its `lean_candidates`: on CUDA no engine enumeration and no
        knob refinement), for when the full listing died; RuntimeError where it has none. It
        builds no more than the heuristic plans, so it gets one candidate's wait."""
        self.last_listing = {}
        known = self.hung.get(problem_kind(problem), {})
        rep = self.call({"op": "candidates", "problem": problem.to_dict(), "lean": True,
                         "exclude": sorted(known), "exclude_why": dict(known)})
        self.last_listing = dict(rep.get("listing") or {})
        if known:
            self.last_listing["left_out_notes"] = [f"{u} left out: {w}" for u, w in known.items()]
        return [Candidate.from_dict(c) for c in rep["candidates"]]

    def listing_info(self) -> dict[str, Any]:
        """The worker backend's record of the last listing (`Backend`'s optional `listing_info`)."""
        return dict(self.last_listing)

    def _listing(self, problem: ConvProblem, msg: dict[str, Any]) -> list[Candidate]:
        """The full listing builds and quick-times plans (enumeration and refinement budgets, plan
        builds): it may take longer than one candidate's request, so it waits at least
        LIST_TIMEOUT_S, and a quick time of one plan STEP_TIMEOUT_S. The worker writes each step
        to a file (`engines.listing.listing_step`); when the worker dies or hangs inside a step, that
        step's unit (a cuDNN engine) is left out of this listing, which runs again in a fresh
        worker (MAX_LIST_EXCLUSIONS times at most), and out of later listings of problems of the
        same kind (`problem_kind`) in this process. When the wait runs out inside a quick time, it
        is extended until that step would count as hung (`StepWatch.grace`). Without a step to
        blame (none reported, a step without a unit, or on a hang the last step began less than
        STEP_TIMEOUT_S before), or after LIST_RETRY_TOTAL_S of retries, WorkerDied."""
        old = self.timeout_s
        self.timeout_s = max(old, LIST_TIMEOUT_S)
        self.last_listing = {}
        known = self.hung.setdefault(problem_kind(problem), {})
        new_here = 0
        t0 = time.monotonic()
        try:
            while True:
                fd, path = tempfile.mkstemp(prefix="convdoctor-listing-", suffix=".steps")
                os.close(fd)
                watch = StepWatch(path, STEP_TIMEOUT_S)
                try:
                    rep = self.call({**msg, "progress": path, "exclude": sorted(known),
                                     "exclude_why": dict(known)},
                                    watch=watch.poll, grace=watch.grace)
                    break
                except WorkerDied as exc:
                    step = watch.last()
                    where = f" during {step.describe()}" if step is not None else ""
                    # a crash blames the step in flight; a hang only a step that lasted: a
                    # listing slow as a whole (its last step began moments before the wait ran
                    # out) has no step to blame
                    # a step without a unit (setup work, a plan name that names no engine) cannot
                    # be left out
                    if (step is None or not step.unit or step.unit in known
                            or new_here >= MAX_LIST_EXCLUSIONS
                            or time.monotonic() - t0 > LIST_RETRY_TOTAL_S
                            or (isinstance(exc, WorkerHung) and watch.age() < STEP_TIMEOUT_S)):
                        raise type(exc)(f"{exc}{where}") from None
                    how = "never returned" if isinstance(exc, WorkerHung) else "killed the worker"
                    known[step.unit] = (f"{step.describe()} {how} while listing "
                                        f"{problem.key()} ({' '.join(str(exc).split())[:160]})")
                    new_here += 1
                finally:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
        finally:
            self.timeout_s = old
        self.last_listing = dict(rep.get("listing") or {})
        if known:
            self.last_listing["left_out_notes"] = [f"{u} left out: {w}" for u, w in known.items()]
        return [Candidate.from_dict(c) for c in rep["candidates"]]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> _ProxyRunner:
        runner = _ProxyRunner(self, problem, candidate)
        runner._ensure()
        return runner

    def clock(self) -> ClockReading | None:
        try:
            rep = self.call({"op": "clock"})
        except (WorkerDied, RuntimeError):
            return None
        c = rep.get("clock")
        if not c:
            return None
        return ClockReading(sm_clock_mhz=c.get("sm_clock_mhz"),
                            max_sm_clock_mhz=c.get("max_sm_clock_mhz"),
                            reasons=int(c.get("reasons", 0)), slowdown=bool(c.get("slowdown")))

    def peaks(self) -> dict[str, Any] | None:
        """Measured device peaks (see `backend_peaks`), or None when they cannot be had."""
        old = self.timeout_s
        self.timeout_s = max(old, 120.0)
        try:
            return self.call({"op": "peaks"}).get("peaks")  # type: ignore[no-any-return]
        except (WorkerDied, RuntimeError):
            return None
        finally:
            self.timeout_s = old

    def shutdown(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None

    def __enter__(self) -> WorkerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# ---------------------------------------------------------------------- the worker side
def _load_backend(spec: str) -> Any:
    from .backend import load

    return load(spec)


def backend_peaks(backend: Any) -> dict[str, Any] | None:
    """The device's measured peaks ({"device", "flops": {math key: FLOP/s}, "bandwidth"}), or None."""
    fn = getattr(backend, "peaks", None)
    if callable(fn):
        return fn()  # type: ignore[no-any-return]
    if getattr(backend, "name", "") == "cuda":
        from dataclasses import asdict

        from ..measure.roofline import peaks

        return asdict(peaks())
    return None


def _finite(v: float) -> float:
    return v if v == v and v not in (float("inf"), float("-inf")) else 1e300


class _Server:
    """The worker side of the protocol: one backend, its prepared runners, and one handler per
    request `op` (`_OPS`), each returning the reply."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.backend: Any = None
        self.runners: dict[int, Any] = {}
        self.next_id = 0

    def hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.backend = _load_backend(self.spec)
        prestart = getattr(self.backend, "prestart", None)
        if callable(prestart):
            prestart()   # helper processes start while the parent sends the first problem
        return {"name": self.backend.name, "environment": self.backend.environment()}

    def candidates(self, msg: dict[str, Any]) -> dict[str, Any]:
        backend = self.backend
        lister = backend.candidates
        if msg.get("lean"):
            lister = getattr(backend, "lean_candidates", None)
            if lister is None:
                raise RuntimeError(f"backend {backend.name!r} has no short candidate list")
        if hasattr(backend, "listing_exclude"):
            backend.listing_exclude = {str(u) for u in msg.get("exclude") or ()}
        if hasattr(backend, "listing_exclude_why"):
            backend.listing_exclude_why = {str(u): str(w) for u, w in
                                           (msg.get("exclude_why") or {}).items()}
        with StepFile(msg.get("progress")):
            cands = lister(ConvProblem.from_dict(msg["problem"]))
        return {"candidates": [c.to_dict() for c in cands], "listing": listing_record(backend)}

    def prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        r = self.backend.prepare(ConvProblem.from_dict(msg["problem"]),
                                 Candidate.from_dict(msg["candidate"]))
        self.next_id += 1
        self.runners[self.next_id] = r
        return {"id": self.next_id, "placements": int(getattr(r, "placements", 1) or 1)}

    def warmup(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.runners[msg["id"]].warmup()
        return {}

    def settle(self, msg: dict[str, Any]) -> dict[str, Any]:
        settle = getattr(self.runners[msg["id"]], "settle", None)
        if callable(settle):
            settle()
        return {}

    def time(self, msg: dict[str, Any]) -> dict[str, Any]:
        r = self.runners[msg["id"]]
        slot = msg.get("slot")
        samples = (r.time(int(msg["reps"]), slot=int(slot))
                   if slot is not None and getattr(r, "slotted", False)
                   else r.time(int(msg["reps"])))
        return {"samples": samples, "timing": str(getattr(r, "timing_mode", "") or "")}

    def check(self, msg: dict[str, Any]) -> dict[str, Any]:
        c = self.runners[msg["id"]].check()
        return {"correctness": {"ok": c.ok, "max_rel_err": _finite(c.max_rel_err),
                                "tolerance": c.tolerance, "detail": c.detail}}

    def close(self, msg: dict[str, Any]) -> dict[str, Any]:
        r = self.runners.pop(msg["id"], None)
        if r is not None:
            r.close()
        return {}

    def peaks(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"peaks": backend_peaks(self.backend)}

    def clock(self, msg: dict[str, Any]) -> dict[str, Any]:
        c = self.backend.clock()
        return {"clock": None if c is None else {
            "sm_clock_mhz": c.sm_clock_mhz, "max_sm_clock_mhz": c.max_sm_clock_mhz,
            "reasons": c.reasons, "slowdown": c.slowdown}}

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request; a sticky error ends the process (the parent restarts it)."""
        op = msg.get("op")
        try:
            handler = _OPS.get(op) if isinstance(op, str) else None
            if handler is None:
                return {"error": f"unknown op {op!r}"}
            return handler(self, msg)
        except CandidateUnsupported as exc:
            return {"unsupported": str(exc) or "unsupported"}
        except StickyError as exc:
            print(f"sticky error, worker exits: {exc}", file=sys.stderr, flush=True)
            os._exit(3)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
            return {"error": f"{type(exc).__name__}: {exc}"}

    def shutdown(self) -> None:
        for r in self.runners.values():
            try:
                r.close()
            except Exception:  # noqa: BLE001
                pass
        shutdown = getattr(self.backend, "shutdown", None)
        if callable(shutdown):
            shutdown()


_OPS: dict[str, Callable[[_Server, dict[str, Any]], dict[str, Any]]] = {
    "hello": _Server.hello, "candidates": _Server.candidates, "prepare": _Server.prepare,
    "warmup": _Server.warmup, "settle": _Server.settle, "time": _Server.time,
    "check": _Server.check, "close": _Server.close, "peaks": _Server.peaks,
    "clock": _Server.clock,
}


def serve(spec: str) -> int:
    """Answer the parent's requests, one JSON line each, until "exit" or the end of input."""
    # Keep the protocol channel private: anything the backend prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    server = _Server(spec)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        if msg.get("op") == "exit":
            break
        proto.write(json.dumps(server.handle(msg)) + "\n")
        proto.flush()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1] if len(sys.argv) > 1 else "auto"))
