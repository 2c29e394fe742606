"""The CUDA backend (`convdoctor.tune.cuda_backend`): what it imports, its heuristic child, and on a
real GPU (`gpu`, skipped without one) its listing, PyTorch paths, clock, placements shared by a
problem's runners, twins, and tuning problem after problem."""

from __future__ import annotations

import pytest
from cuda_helpers import cuda_backend, torch_candidates

from convdoctor.problem import ConvProblem
from convdoctor.settings import Settings


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


@pytest.fixture(scope="module")
def backend():
    return cuda_backend()


def test_package_imports_no_torch_or_cudnn() -> None:
    import subprocess
    import sys

    code = ("import sys, convdoctor.engines.registry, convdoctor.tune.cuda_backend, "
            "convdoctor.measure.timing, convdoctor.measure.placement; "
            "print('torch' in sys.modules, 'cudnn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_heuristic_child_worker_spec_resolves() -> None:
    """The child worker spec names a real callable; without a GPU it fails with a clear message."""
    import importlib

    import torch

    from convdoctor.errors import ConvdoctorError
    from convdoctor.tune.worker import WorkerBackend

    mod, _, attr = "convdoctor.tune.cuda_backend:in_process_backend".partition(":")
    assert callable(getattr(importlib.import_module(mod), attr))
    if torch.cuda.is_available():
        pytest.skip("GPU present: covered by the gpu tests")
    with pytest.raises(ConvdoctorError, match="did not start.*CUDA"):
        WorkerBackend("convdoctor.tune.cuda_backend:in_process_backend", startup_timeout_s=60)


# ---------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_candidates_and_strict_filter(backend) -> None:
    p = P("fprop n=8 c=64 h=14 w=14 k=64 r=3 s=3 pad=1 dtype=float32 math=strict")
    cands = backend.candidates(p)
    keys = [c.key for c in cands]
    assert {"torch:benchmark", "torch:heuristic", "torch:cudnn-off"} <= set(keys)
    cud = [c for c in cands if c.key.startswith("cudnn:")]
    assert cud, backend.cudnn_error
    assert len(keys) == len(set(keys))
    assert not any("tensor_core" in c.notes for c in cud)
    # PyTorch picks the engine of its cuDNN paths per process: those are not pinned (tie-break)
    per_process = {c.key for c in cands if not c.pinned}
    assert {"torch:benchmark", "torch:heuristic"} <= per_process
    assert all(c.pinned for c in cud) and "torch:cudnn-off" not in per_process
    for c in cud[:3]:
        r = backend.prepare(p, c)
        r.warmup()
        assert r.check().ok
        r.close()


@pytest.mark.gpu
def test_torch_paths_benchmark_here_heuristic_in_child(backend) -> None:
    from convdoctor.tune.backend import CandidateUnsupported
    from convdoctor.tune.cuda_backend import CudaBackend

    p = P("wgrad n=4 c=16 h=12 w=12 k=16 r=3 s=3 pad=1 dtype=float16 layout=nhwc")
    by = {c.key: c for c in torch_candidates(backend, p)}
    for key in ("torch:benchmark", "torch:heuristic", "torch:cudnn-off"):
        r = backend.prepare(p, by[key])
        r.warmup()
        c = r.check()
        assert c.ok, (key, c.detail)
        assert all(t > 0 for t in r.time(3))
        r.close()
    # in one process, the second torch cuDNN mode would reuse the first one's cached choice
    solo = CudaBackend(settings=Settings().replace(cudnn_enum=False), isolate_heuristic=False)
    with pytest.raises(CandidateUnsupported, match="fresh worker"):
        solo.prepare(p, by["torch:heuristic"])


@pytest.mark.gpu
def test_nvml_reads_the_clock(backend) -> None:
    r = backend.clock()
    assert r is not None and r.sm_clock_mhz and r.max_sm_clock_mhz
    env = backend.environment()
    assert env["gpu_name"] and env["driver"] != "unknown" and env["cudnn_frontend"] != "absent"


@pytest.mark.gpu
def test_tuning_problem_after_problem_keeps_no_memory(backend) -> None:
    """A worker tunes many problems in a row: cached plans must not pin their workspaces (before
    the fix the H100 ran out of memory after a few problems and later ones got no winner)."""
    import torch

    from convdoctor.engines import cudnn_enum as cudnn_plan
    from convdoctor.engines import cudnn_policy as policy
    from convdoctor.tune.harness import tune_problem

    probs = [P("fprop n=16 c=64 h=56 w=56 k=64 r=3 s=3 pad=1"),
             P("dgrad n=16 c=64 h=56 w=56 k=64 r=3 s=3 pad=1"),
             P("wgrad n=16 c=64 h=56 w=56 k=64 r=3 s=3 pad=1"),
             P("fprop n=8 c=1 w=16000 k=64 s=10 stride=5")]
    tune_problem(probs[0], backend=backend, db=None, budget_s=0.1, reuse=False)
    backend.release()
    base = torch.cuda.memory_allocated()
    for p in probs:
        r = tune_problem(p, backend=backend, db=None, budget_s=0.1, reuse=False)
        assert r.winner is not None, r.notes
        # this problem's plans, and those of its dual problem (`cudnn-dual:` candidates)
        dual = policy.dual_problem(p)
        assert {k[1] for k in cudnn_plan._PLANS} <= {p.key()} | ({dual.key()} if dual else set())
        # the listing's record is this problem's: enumeration counts, the walk's seeds
        assert r.listing["lean"] is False and r.listing["enumeration"]["built"] > 0, r.listing
        if backend.settings.cudnn_refine and backend.settings.cudnn_refine_budget_s > 0:
            assert r.listing.get("refinement", {}).get("seeds"), r.listing
            if backend.settings.cudnn_max_plans == 0:  # a cap may leave a seed out of the candidates
                listed = {c.candidate.key for c in r.candidates}
                assert {k for k, _us in r.listing["refinement"]["seeds"]} <= listed
    backend.release()
    assert not cudnn_plan._PLANS
    assert torch.cuda.memory_allocated() <= base + (64 << 20)


@pytest.mark.gpu
@pytest.mark.parametrize("text", [
    "fprop n=8 c=64 h=14 w=14 k=64 r=1 s=1 dtype=float16 layout=nhwc",
    "dgrad n=4 c=32 h=16 w=16 k=64 r=3 s=3 stride=2 pad=1 dtype=float32",
    "wgrad n=4 c=16 h=12 w=12 k=32 r=3 s=3 pad=1 dtype=bfloat16 layout=nhwc",
])
def test_runners_of_a_problem_share_rotating_placements(backend, text: str) -> None:
    from convdoctor.measure.placement import DEFAULT_COUNT

    p = P(text)
    cands = backend.candidates(p)
    by = {c.key: c for c in cands}
    plan_key = next(c.key for c in cands if c.key.startswith("cudnn:"))
    r1 = backend.prepare(p, by[plan_key])
    r2 = backend.prepare(p, by["torch:cudnn-off"])
    assert r1._sets is r2._sets and r1.placements == DEFAULT_COUNT
    ptrs = {s[r1.roles[0]].data_ptr() for s in r1._sets}
    assert len(ptrs) == DEFAULT_COUNT                       # distinct buffers per placement
    for r in (r1, r2):
        r.warmup()
        for slot in range(2 * DEFAULT_COUNT):
            ts = r.time(2, slot=slot)
            assert len(ts) == 2 and all(t > 0 for t in ts)
        assert r.timing_mode.endswith(f"placement {DEFAULT_COUNT}/{DEFAULT_COUNT}")
        assert len(r._timers) == DEFAULT_COUNT
        c = r.check()                                   # still right after timing elsewhere
        assert c.ok, c.detail
    r1.close()
    assert r2.placements == DEFAULT_COUNT                  # closing one keeps the others' buffers
    r2.close()


@pytest.mark.gpu
def test_twin_runs_a_candidate_in_the_heuristic_process(backend) -> None:
    from convdoctor.tune.backend import Candidate, CandidateUnsupported

    p = P("fprop n=8 c=64 h=14 w=14 k=64 r=1 s=1 dtype=float16 layout=nhwc")
    cands = backend.candidates(p)
    plan = next(c for c in cands if c.key.startswith("cudnn:"))
    r = backend.prepare(p, Candidate("twin:" + plan.key, "cuda", plan.workspace_bytes))
    assert type(r).__name__ == "_ProxyRunner" and r.candidate.key == plan.key
    r.warmup()
    assert r.check().ok
    assert all(t > 0 for t in r.time(3, slot=1))
    r.close()
    with pytest.raises(CandidateUnsupported):
        backend.prepare(p, Candidate("twin:torch:benchmark", "cuda"))
