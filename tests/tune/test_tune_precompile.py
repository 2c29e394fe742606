"""The precompiler: child processes taking compile tasks in order, waits per problem, failures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from tune_fakes import importable_in_workers

from convdoctor.problem import ConvProblem
from convdoctor.settings import Settings
from convdoctor.tune.precompile import Precompiler, Task, default_workers, triton_tasks

SPEC = "tune_fakes:fake_compile"


@pytest.fixture
def log(monkeypatch: Any, tmp_path: Path) -> Path:
    importable_in_workers(monkeypatch)
    path = tmp_path / "compiled.txt"
    monkeypatch.setenv("FAKE_COMPILE_LOG", str(path))
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_every_task_is_compiled_once_and_waits_return(log: Path) -> None:
    tasks = [Task(f"p{i}", f"k{j}") for i in range(4) for j in range(3)]
    pre = Precompiler(tasks, workers=3, spec=SPEC).start()
    assert all(pre.wait(f"p{i}", 30.0) for i in range(4))
    s = pre.close()
    assert (s.tasks, s.compiled, s.failed, s.unfinished, s.workers) == (12, 12, 0, 0, 3)
    assert 0 < s.finished_s <= s.seconds
    assert sorted(_lines(log)) == sorted(f"{t.problem}|{t.candidate}" for t in tasks)


def test_a_failing_task_counts_as_done_and_is_reported(log: Path) -> None:
    tasks = [Task("p0", "k-bad"), Task("p0", "k1"), Task("p1", "k2")]
    with Precompiler(tasks, workers=1, spec=SPEC) as pre:
        assert pre.wait("p0", 30.0) and pre.wait("p1", 30.0)
    s = pre.summary
    assert (s.compiled, s.failed) == (2, 1)
    assert "does not compile" in s.errors[0] and "k-bad" in s.errors[0]


def test_a_dying_child_fails_its_task_and_the_rest_go_on(log: Path) -> None:
    tasks = [Task("p0", "k-die"), Task("p0", "k1"), Task("p1", "k2"), Task("p1", "k3")]
    pre = Precompiler(tasks, workers=2, spec=SPEC).start()
    assert pre.wait("p0", 30.0) and pre.wait("p1", 30.0)
    s = pre.close()
    assert s.failed >= 1 and s.compiled + s.failed == 4
    assert "died" in " ".join(s.errors)


def test_when_every_child_dies_waits_do_not_hang(log: Path) -> None:
    tasks = [Task("p0", "k-die"), Task("p1", "k-die2"), Task("p2", "k3")]
    pre = Precompiler(tasks, workers=1, spec=SPEC).start()
    t0 = time.monotonic()
    assert pre.wait("p2", 30.0)
    assert time.monotonic() - t0 < 25.0
    s = pre.close()
    assert s.compiled == 0 and s.failed == 3


def test_wait_gives_up_at_its_deadline_and_close_ends_the_children(log: Path) -> None:
    tasks = [Task("p0", f"slow{i}") for i in range(20)]
    pre = Precompiler(tasks, workers=1, spec=SPEC).start()
    assert pre.wait("p0", 0.2) is False
    s = pre.close()
    assert s.unfinished > 0 and s.compiled < 20


def test_a_problem_without_tasks_needs_no_wait(log: Path) -> None:
    with Precompiler([], workers=4, spec=SPEC) as pre:
        assert pre.wait("anything", 0.0)
    assert pre.summary.workers == 0


def test_default_workers_leave_two_cores_and_fit_the_gpu_memory() -> None:
    assert default_workers(cpus=16) == 12
    assert default_workers(cpus=8) == 6
    assert default_workers(cpus=2) == 0
    assert default_workers(free_bytes=6 << 30, cpus=16) == 3


def test_triton_tasks_are_the_tuners_triton_candidates_in_problem_order(monkeypatch: Any) -> None:
    pytest.importorskip("triton", reason="Triton decides what its kernels offer")
    from convdoctor.kernels import depthwise as dw_kernel

    monkeypatch.setenv("TRITON_INTERPRET", "1")   # offered without a GPU, as under the interpreter
    dw_kernel.unavailable.cache_clear()           # (cached per process: another test may have asked)
    try:
        _check_triton_tasks()
    finally:
        dw_kernel.unavailable.cache_clear()       # the interpreter's answer stays with this test


def _check_triton_tasks() -> None:
    dw = ConvProblem.parse("fprop n=8 c=32 k=32 h=28 w=28 r=7 s=7 pad=3 groups=32 "
                           "dtype=float32 layout=nchw")
    dense = ConvProblem.parse("wgrad n=8 c=3 k=16 h=32 w=32 r=3 s=3 pad=1 dtype=float32 "
                              "layout=nchw")
    probs = [dw, dw.with_direction("dgrad"), dw.with_direction("wgrad"), dense, dw]
    on = triton_tasks(probs, Settings(), 132)
    order = [p.key() for p in probs[:4]]
    assert {t.problem for t in on} == set(order)
    assert [t.problem for t in on] == sorted((t.problem for t in on), key=order.index)
    assert len(set(on)) == len(on)                 # the repeated problem adds nothing
    assert all(t.candidate.startswith("triton:") for t in on)
    assert {t.candidate.split("_")[0] for t in on if t.problem == dw.key()} == {"triton:dw"}
    assert triton_tasks(probs, Settings(triton=False), 132) == []


@pytest.mark.gpu
@pytest.mark.parametrize("repointed", [False, True])
def test_on_a_gpu_the_tuners_build_finds_the_precompiled_kernel(tmp_path: Path, monkeypatch: Any,
                                                                repointed: bool) -> None:
    """Children compile a real depthwise problem's kernels into a fresh Triton cache; the tuner's
    own runner build of each candidate then takes a fraction of a compile. `repointed`: as after
    a `torch.compile` in this process, TRITON_PTXAS_PATH names PyTorch's ptxas while this
    process's Triton keeps the version it first used in its cache key."""
    import time as _t

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA torch (run on the device machine)")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    if repointed:
        from convdoctor.tune.precompile import compiler_env

        ptxas = Path(torch.__file__).parent / "bin" / "ptxas"
        if not ptxas.is_file():
            pytest.skip("this PyTorch ships no ptxas of its own")
        compiler_env()                         # this process's Triton settles its ptxas version
        monkeypatch.setenv("TRITON_PTXAS_PATH", str(ptxas))
    from convdoctor.engines.registry import engine_of
    from convdoctor.tune.cuda_backend import CudaBackend

    p = ConvProblem.parse("fprop n=16 c=64 k=64 h=28 w=28 r=7 s=7 pad=3 groups=64 "
                          "dtype=float32 layout=nhwc")
    be = CudaBackend(settings=Settings(), isolate_heuristic=False)
    tasks = triton_tasks([p], be.settings, int(be.environment()["sm_count"]))
    assert tasks
    with Precompiler(tasks, workers=min(4, len(tasks))) as pre:
        assert pre.wait(p.key(), 300.0)
    s = pre.summary
    assert (s.compiled, s.failed) == (len(tasks), 0), s.errors
    offered = {c.key: c for e in {engine_of(t.candidate) for t in tasks}
               for c in e.offers(p, be)}
    builds = []
    for t in tasks:
        t0 = _t.perf_counter()
        engine_of(t.candidate).runner(be, p, offered[t.candidate]).close()
        builds.append(_t.perf_counter() - t0)
    per_compile = s.compile_s / len(tasks)
    assert max(builds) < 0.5 * per_compile, (builds, per_compile)


def test_children_started_ahead_take_the_tasks_given_later(log: Path) -> None:
    pre = Precompiler([], workers=2, spec=SPEC, sealed=False).start()
    assert pre.summary.workers == 2
    pre.add([Task("p0", "k1"), Task("p1", "k2")])
    assert pre.wait("p0", 30.0) and pre.wait("p1", 30.0)
    s = pre.close()
    assert (s.tasks, s.compiled, s.failed) == (2, 2, 0)
    assert sorted(_lines(log)) == ["p0|k1", "p1|k2"]


def test_children_started_ahead_and_never_given_work_end_at_close(log: Path) -> None:
    pre = Precompiler([], workers=2, spec=SPEC, sealed=False).start()
    t0 = time.monotonic()
    s = pre.close()
    assert time.monotonic() - t0 < 10.0
    assert s.tasks == 0 and all(p.poll() is not None for p in pre._procs)


def test_tasks_added_after_every_child_died_fail_at_once(log: Path) -> None:
    pre = Precompiler([Task("p0", "k-die")], workers=1, spec=SPEC, sealed=False).start()
    assert pre.wait("p0", 30.0)
    pre._procs[0].wait(timeout=10)
    pre.add([Task("p1", "k1")])
    assert pre.wait("p1", 0.0)
    assert pre.close().failed == 2


def test_when_no_child_can_start_every_wait_returns_at_once(log: Path, monkeypatch: Any) -> None:
    import subprocess

    def no_process(*a: Any, **k: Any) -> Any:
        raise OSError("cannot fork")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    pre = Precompiler([Task("p0", "k1")], workers=2, spec=SPEC).start()
    t0 = time.monotonic()
    assert pre.wait("p0", 30.0)
    pre.add([Task("p1", "k2")])
    assert pre.wait("p1", 30.0) and time.monotonic() - t0 < 5.0
    s = pre.close()
    assert (s.failed, s.compiled) == (2, 0) and "cannot fork" in s.errors[0]


def test_what_close_interrupts_stays_unfinished_not_failed(log: Path) -> None:
    tasks = [Task("p0", f"slow{i}") for i in range(8)]
    pre = Precompiler(tasks, workers=2, spec=SPEC).start()
    time.sleep(0.5)
    t0 = time.monotonic()
    s = pre.close()
    assert time.monotonic() - t0 < 5.0
    assert s.failed == 0 and s.unfinished == 8 - s.compiled > 0



def test_children_get_the_ptxas_the_parents_cache_key_names(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    """Triton keys its cache with the version of the ptxas a process first used; PyTorch's
    Inductor repoints TRITON_PTXAS_PATH later. The children must compile with the parent's."""
    pytest.importorskip("triton")
    from triton import knobs
    from triton.backends.nvidia import compiler as nv

    from convdoctor.tune.precompile import compiler_env

    def line(version: str) -> str:
        return f"Cuda compilation tools, release {version[1:5]}, {version}\n"

    def tool(name: str, version: str) -> str:
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\necho '{line(version).strip()}'\n")
        path.chmod(0o755)
        return str(path)

    bundled, pytorchs = tool("bundled", "V12.8.1"), tool("pytorchs", "V13.0.2")
    desc = type(knobs.nvidia).__dict__["ptxas"]
    monkeypatch.setattr(desc, "default_path", bundled)
    monkeypatch.setattr(nv, "get_ptxas_version", lambda arch=80: line("V12.8.1"))
    monkeypatch.setenv(desc.key, pytorchs)                # what Inductor set after the first use
    env = compiler_env(arch=80)
    assert env.get(desc.key) == bundled, env
    # the parent's key names the tool the variable points at: that path, unchanged
    monkeypatch.setattr(nv, "get_ptxas_version", lambda arch=80: line("V13.0.2"))
    assert compiler_env(arch=80).get(desc.key) == pytorchs
    # no tool of the parent's version: nothing pinned, the children compile as before
    monkeypatch.setattr(nv, "get_ptxas_version", lambda arch=80: line("V9.99.1"))
    assert desc.key not in compiler_env(arch=80)
