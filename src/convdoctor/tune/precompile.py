"""Compile convdoctor's Triton kernels for many problems at once, in child processes, while tuning runs.

convdoctor's Triton kernels are specialised on the problem (sizes, strides and geometry are
compile-time constants), so every problem and configuration compiles a kernel of its own: 0.5-3 s
of one CPU core each, about 8 s for the depthwise wgrad's column-blocked configurations. Tuning ConvNeXt-tiny's 23 training problems from an empty database on an
H100 spent 151 of its 204 s compiling 95 kernels, one after another (docs/results.md, "Where
tuning time goes").

`Precompiler` compiles the kernels of a list of problems in `workers` child processes
(`python -m convdoctor.tune.precompile`), in the order the problems will be tuned, each child
taking the next kernel as soon as it is free. A compiled kernel lands in Triton's on-disk cache,
where the tuner's own build of the same candidate then finds it. `wait(problem)` blocks until the
problem's kernels are done (compiled or failed) or a deadline passes; whatever a child could not
compile, the tuner compiles (or reports) itself, exactly as without a precompiler. A child that
dies or hangs costs only the kernels it held.

A child builds each candidate the way the tuner does (`engine.runner` on a `CudaBackend` in that
process, one buffer placement), so the kernel it compiles is the very specialisation the tuner
asks for, with the ptxas this process's Triton keys its cache with (`compiler_env`). The build
launches the kernel once: a compile-only build (Triton's
`JITFunction.run(..., warmup=True)`) did not leave a kernel the tuner's build found in the cache
(on Triton 3.6 each of the tuner's builds then took as long as a compile), so it is not used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..problem import ConvProblem
from ..settings import Settings

# GPU memory a child may take: its CUDA context and one placement of a problem's buffers
CHILD_BYTES = 1 << 30
# How long a problem's tuning waits for its Triton kernels from the precompiler; past that the
# tuner compiles what is missing itself.
PRECOMPILE_WAIT_S = 60.0
DEFAULT_SPEC = "convdoctor.tune.precompile:compile_task"


@dataclass(frozen=True)
class Task:
    problem: str      # ConvProblem.key()
    candidate: str    # a Triton candidate key of that problem


@dataclass
class Summary:
    """What a precompiler did: tasks, compiled, failed, unfinished, workers, seconds."""

    tasks: int = 0
    compiled: int = 0
    failed: int = 0
    workers: int = 0
    seconds: float = 0.0            # from the start to `close`
    finished_s: float = 0.0         # from the start to the last kernel done
    compile_s: float = 0.0          # the children's own seconds, summed
    errors: list[str] = field(default_factory=list)

    @property
    def unfinished(self) -> int:
        return self.tasks - self.compiled - self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "compiled": self.compiled, "failed": self.failed,
                "unfinished": self.unfinished, "workers": self.workers,
                "seconds": round(self.seconds, 3), "finished_s": round(self.finished_s, 3),
                "compile_s": round(self.compile_s, 3),
                "errors": self.errors[:5]}


class _OffersBackend:
    """What `TritonEngine.offers` reads of a backend: the settings and the SM count."""

    def __init__(self, settings: Settings, sm_count: int) -> None:
        self.settings = settings
        self._sm = sm_count

    def environment(self) -> dict[str, str]:
        return {"sm_count": str(self._sm)}


def triton_tasks(problems: Sequence[ConvProblem], settings: Settings, sm_count: int) -> list[Task]:
    """Every Triton candidate the tuner will list for `problems`, in problem order."""
    if not settings.triton:
        return []
    from ..engines.registry import ENGINES
    from ..engines.triton import TritonEngine

    be = _OffersBackend(settings, sm_count)
    out: list[Task] = []
    seen: set[Task] = set()
    for p in problems:
        for e in ENGINES:
            if not isinstance(e, TritonEngine) or p.direction not in e.directions:
                continue
            try:
                offers = e.offers(p, be)
            except Exception:  # noqa: BLE001 - an engine that cannot offer compiles nothing
                continue
            for c in offers:
                t = Task(p.key(), c.key)
                if t not in seen:
                    seen.add(t)
                    out.append(t)
    return out


def start_for(problems: Sequence[ConvProblem], settings: Settings, sm_count: int,
              workers: int) -> Precompiler | None:
    """A started `Precompiler` for the Triton kernels of `problems` in `workers` children (what
    `optimize` and `convdoctor tune` start); None when there is nothing to compile or no child."""
    tasks = triton_tasks(problems, settings, sm_count)
    if workers <= 0 or not tasks:
        return None
    return Precompiler(tasks, workers=workers, settings=settings).start()


def free_gpu_bytes() -> int | None:
    """The least free memory among the GPUs NVML sees, without a CUDA context (None: not known,
    or no GPU visible). The least: NVML numbers GPUs by PCI bus, CUDA by speed unless
    CUDA_DEVICE_ORDER says otherwise, so the card this process will use is not known here."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            free = [int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).free)
                    for i in range(int(pynvml.nvmlDeviceGetCount()))]
        finally:
            pynvml.nvmlShutdown()
        return min(free) if free else None
    except Exception:  # noqa: BLE001 - no NVML, no driver, a MIG instance NVML will not read
        return None


def default_workers(free_bytes: int | None = None, cpus: int | None = None) -> int:
    """Children to start: all CPU cores but two (the tuner's worker and its heuristic child keep
    one each), at most 12, and no more than the free GPU memory holds at `CHILD_BYTES` each."""
    if cpus is None:
        cpus = os.cpu_count() or 1
    n = min(12, cpus - 2)
    if free_bytes is not None:
        n = min(n, int(free_bytes // (2 * CHILD_BYTES)))
    return max(0, n)


def compiler_env(arch: int | None = None) -> dict[str, str]:
    """Environment variables that give a child this process's Triton compiler identity.

    Triton keys its on-disk cache with the version of the ptxas it first used in a process (a
    cached `get_ptxas_version`), while each compile reads `TRITON_PTXAS_PATH` anew. PyTorch's
    Inductor points that variable at PyTorch's own ptxas once it compiles: a child started after
    a `torch.compile` then used another ptxas than the parent's cache key names, and every kernel
    it compiled was missed (an H100 with Triton 3.6: each of the tuner's builds took as long as
    a compile). So each ptxas tool variable is set to the path whose version the parent's key
    holds. {} where Triton, its NVIDIA backend or a GPU is missing."""
    try:
        from triton import knobs
        from triton.backends.nvidia import compiler as nv

        if arch is None:
            import torch

            major, minor = torch.cuda.get_device_capability()
            arch = major * 10 + minor
        try:
            want = nv.get_ptxas_version(arch)
        except TypeError:                     # older Triton: no arch argument
            want = nv.get_ptxas_version()
        env: dict[str, str] = {}
        for name in ("ptxas", "ptxas_blackwell"):
            desc = type(knobs.nvidia).__dict__.get(name)
            if desc is None or not getattr(desc, "key", ""):
                continue
            for path in dict.fromkeys((getattr(knobs.nvidia, name).path, desc.default_path)):
                out = subprocess.run([path, "--version"], capture_output=True, timeout=30)
                if out.returncode == 0 and out.stdout.decode("utf-8") == want:
                    env[desc.key] = path
                    break
        return env
    except Exception:  # noqa: BLE001 - without it the children compile as they would anyway
        return {}


class Precompiler:
    """Child processes compiling `tasks` in order; see the module docstring."""

    def __init__(self, tasks: Sequence[Task], *, workers: int, settings: Settings | None = None,
                 spec: str = DEFAULT_SPEC, sealed: bool = True) -> None:
        """`sealed=False`: the children start now and wait for tasks (`add`): their start-up
        (Python, PyTorch, the CUDA context) overlaps whatever the caller does meanwhile."""
        self._queue: deque[Task] = deque()
        self._left: dict[str, int] = {}
        self._sealed = False
        self._cond = threading.Condition()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._threads: list[threading.Thread] = []
        self._settings = settings
        self._spec = spec
        self._t0 = time.monotonic()
        self._closed = False
        self._started = False
        self.summary = Summary(workers=workers if not sealed else min(workers, len(tasks)))
        self.add(tasks, seal=sealed)

    # ---------------------------------------------------------------- parent side
    def start(self) -> Precompiler:
        self._started = True
        env = {**os.environ, **(self._settings.to_env() if self._settings else {}),
               **compiler_env()}
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        for _ in range(self.summary.workers):
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "convdoctor.tune.precompile", self._spec],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    env=env, bufsize=0)
            except OSError as exc:
                self.summary.errors.append(f"could not start a compile process: {exc}")
                break
            self._procs.append(proc)
            th = threading.Thread(target=self._feed, args=(proc,), daemon=True,
                                  name="convdoctor-precompile")
            self._threads.append(th)
            th.start()
        if not self._procs:                # none started: nothing will ever compile the queue
            self._drain_failed()
        return self

    def _drain_failed(self) -> None:
        with self._cond:
            while self._queue:
                t = self._queue.popleft()
                self.summary.failed += 1
                self._left[t.problem] -= 1
            self._cond.notify_all()

    def add(self, tasks: Sequence[Task], *, seal: bool = True) -> None:
        """Queue `tasks` (after those queued before); `seal`: no more will come, so the children
        end once the queue is empty."""
        with self._cond:
            dead = self._started and all(p.poll() is not None for p in self._procs)
            for t in tasks:
                self._left[t.problem] = self._left.get(t.problem, 0) + 1
                if dead:       # every child has gone: nothing will compile it
                    self._left[t.problem] -= 1
                    self.summary.failed += 1
                else:
                    self._queue.append(t)
            self.summary.tasks += len(tasks)
            self._sealed = self._sealed or seal
            self._cond.notify_all()

    def _next(self) -> Task | None:
        """The next task; waits while the queue is empty and more may come."""
        with self._cond:
            while not self._queue and not self._sealed and not self._closed:
                self._cond.wait()
            return self._queue.popleft() if self._queue and not self._closed else None

    def _done(self, task: Task, ok: bool, seconds: float, error: str = "") -> None:
        with self._cond:
            if ok:
                self.summary.compiled += 1
            else:
                self.summary.failed += 1
                if error:
                    self.summary.errors.append(f"{task.candidate}: {error}"[:300])
            self.summary.compile_s += seconds
            self.summary.finished_s = time.monotonic() - self._t0
            self._left[task.problem] -= 1
            self._cond.notify_all()

    def _abandon(self, proc: subprocess.Popen[bytes], task: Task | None) -> None:
        """A child died: its task and, when no child is left, the whole queue count as failed.
        A child ended by `close` fails nothing: what it held stays unfinished."""
        if self._closed:
            return
        if task is not None:
            self._done(task, False, 0.0, "the compile process died")
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not any(p.poll() is None for p in self._procs):
            self._drain_failed()
        else:
            with self._cond:
                self._cond.notify_all()

    def _feed(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        task: Task | None = None
        try:
            while True:
                task = self._next()
                if task is None:
                    break
                proc.stdin.write((json.dumps({"problem": task.problem,
                                              "candidate": task.candidate}) + "\n").encode())
                proc.stdin.flush()
                line = proc.stdout.readline()
                if not line:
                    raise OSError("the compile process ended")
                reply = json.loads(line)
                self._done(task, bool(reply.get("ok")), float(reply.get("s") or 0.0),
                           str(reply.get("error") or ""))
                task = None
        except (OSError, ValueError):
            self._abandon(proc, task)
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def wait(self, problem: str, timeout_s: float) -> bool:
        """Block until every kernel of `problem` is done or `timeout_s` passed; True when done."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while self._left.get(problem, 0) > 0:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 1.0))
        return True

    def close(self) -> Summary:
        """Stop handing out kernels, end the children (killing any still compiling), and return
        the summary."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        end = time.monotonic() + 0.5          # one grace period for all children, then kill
        for p in self._procs:
            try:
                p.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        for p in self._procs:
            p.wait()
        for th in self._threads:
            th.join(timeout=5.0)
        for p in self._procs:
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass
        self.summary.seconds = time.monotonic() - self._t0
        return self.summary

    def __enter__(self) -> Precompiler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# -------------------------------------------------------------------- child side
_BACKEND: Any = None


def prepare() -> None:
    """What every task needs, made once before the first arrives: PyTorch, Triton and the
    kernels imported, the CUDA context and the backend."""
    global _BACKEND
    from .cuda_backend import CudaBackend

    if _BACKEND is None:
        from ..measure.placement import allocate
        from ..settings import current

        class _OnePlacement(CudaBackend):
            def placements_for(self, problem: ConvProblem) -> Any:
                cur = self._placements
                if cur is None or cur.key != problem.key():
                    self.release(problem)
                    cur = self._placements = allocate(problem, self.device, wanted=1)
                return cur

        _BACKEND = _OnePlacement(settings=current(), isolate_heuristic=False)
        import torch
        import triton  # noqa: F401

        from ..engines import registry  # noqa: F401 - imports the kernel modules

        torch.cuda.init()


def compile_task(problem_key: str, candidate_key: str) -> None:
    """Build the candidate's runner as the tuner does (compiling its kernel), then free it."""
    from ..engines.base import Candidate
    from ..engines.registry import engine_of

    prepare()
    problem = ConvProblem.parse(problem_key)
    engine = engine_of(candidate_key)
    if engine is None:
        raise ValueError(f"no engine owns {candidate_key!r}")
    offered = {c.key: c for c in engine.offers(problem, _BACKEND)}
    cand = offered.get(candidate_key) or Candidate(candidate_key, "cuda")
    engine.runner(_BACKEND, problem, cand).close()


def serve(spec: str) -> int:
    """Compile one task per input line, answering one JSON line each, until the input ends."""
    import importlib

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    mod, _, fn = spec.partition(":")
    module = importlib.import_module(mod)
    work = getattr(module, fn)
    ready = getattr(module, "prepare", None)
    if callable(ready):
        try:
            ready()
        except Exception:  # noqa: BLE001 - the first task reports what is wrong
            pass
    for line in sys.stdin:
        if not line.strip():
            continue
        t0 = time.monotonic()
        try:
            msg = json.loads(line)
            work(msg["problem"], msg["candidate"])
            reply: dict[str, Any] = {"ok": True}
        except Exception as exc:  # noqa: BLE001 - a kernel that does not compile is the tuner's to report
            reply = {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]}
        reply["s"] = round(time.monotonic() - t0, 4)
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SPEC))
