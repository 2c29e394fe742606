"""The CPU backend: candidates, every direction against float64, layouts, contention (through
faked host clocks) as slowdown."""

from __future__ import annotations

import pytest

from convdoctor.problem import ConvProblem
from convdoctor.tune.backend import Candidate, CandidateUnsupported

torch = pytest.importorskip("torch")

from convdoctor.tune.cpu_backend import CpuBackend  # noqa: E402


@pytest.mark.parametrize("text", [
    "fprop n=2 c=8 h=12 w=12 k=16 r=3 s=3 pad=1",
    "dgrad n=2 c=8 h=12 w=12 k=16 r=3 s=3 pad=1 stride=2",
    "wgrad n=2 c=8 h=12 w=12 k=16 r=3 s=3 pad=1 layout=nhwc",
    "fprop n=2 c=8 h=13 w=13 k=8 r=3 s=3 stride=2 pad_pre=0 pad_post=1 groups=8",
    "dgrad n=1 c=4 d=6 h=6 w=6 k=4 t=3 r=3 s=3 pad=1 layout=ndhwc",
    "wgrad n=2 c=4 w=50 k=6 s=5 stride=2 dil=2",
    "fprop n=2 c=8 h=12 w=12 k=16 r=3 s=3 pad=1 dtype=bfloat16",
    "fprop n=2 c=8 h=12 w=12 k=16 r=3 s=3 pad=1 math=strict",
])
def test_every_candidate_is_correct_against_float64(text: str) -> None:
    p = ConvProblem.parse(text)
    be = CpuBackend()
    cands = be.candidates(p)
    assert cands[0].key == "cpu:mkldnn-on"
    ran = 0
    for c in cands:
        try:
            r = be.prepare(p, c)
        except CandidateUnsupported:
            continue
        corr = r.check()
        assert corr.ok, (c.key, corr)
        assert corr.max_rel_err < corr.tolerance
        r.warmup()
        times = r.time(3)
        assert len(times) == 3 and all(t > 0 for t in times)
        r.close()
        ran += 1
    assert ran >= 2


def test_layout_candidates_only_where_a_layout_exists() -> None:
    be = CpuBackend()
    one_d = ConvProblem.parse("fprop n=1 c=2 w=40 k=2 s=3")
    assert all("+" not in c.key for c in be.candidates(one_d))
    two_d = ConvProblem.parse("fprop n=1 c=2 h=8 w=8 k=2 r=3 s=3 layout=nhwc")
    assert "cpu:mkldnn-on+nchw" in {c.key for c in be.candidates(two_d)}
    with pytest.raises(CandidateUnsupported):
        be.prepare(two_d, Candidate("cpu:quantum", "cpu"))


def test_a_wrong_output_is_caught() -> None:
    from convdoctor.measure.correctness import compare_max as compare

    ref = torch.randn(4, 4, dtype=torch.float64)
    assert compare(ref.float(), ref, 1e-4).ok
    bad = ref.clone()
    bad[0, 0] += 10
    assert not compare(bad, ref, 1e-4).ok
    nan = ref.clone()
    nan[1, 1] = float("nan")
    res = compare(nan, ref, 1e-4)
    assert not res.ok and "NaN" in res.detail


class _SharedClock:
    """The host clocks of `engines.cpu` on a machine shared with other processes: every wall-clock
    reading advances 10 ms, and the process's CPU time by `share` of that on each of its threads."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.share = 1.0
        self.wall = self.cpu = 0.0

    def perf_counter(self) -> float:
        self.wall += 0.01
        self.cpu += 0.01 * self.share * self.threads
        return self.wall

    def process_time(self) -> float:
        return self.cpu


def test_cpu_contention_reads_as_a_slowdown(monkeypatch: pytest.MonkeyPatch) -> None:
    # Contention is faked through the clocks, so other jobs on this machine change nothing here.
    import statistics

    from convdoctor.engines import cpu as cpu_engine

    clock = _SharedClock(torch.get_num_threads())
    monkeypatch.setattr(cpu_engine, "time", clock)
    monkeypatch.setenv("CONVDOCTOR_CPU_MIN_SHARE", "0.6")
    p = ConvProblem.parse("fprop n=4 c=32 h=28 w=28 k=32 r=3 s=3 pad=1")
    be = CpuBackend()
    r = be.prepare(p, be.candidates(p)[0])
    r.warmup()
    one = statistics.median(r.time(3))
    reps = max(5, int(0.1 / one))  # batches of ~0.1 s (>= 20 ms are judged), on any core count
    r.time(reps)                   # the share this runner gets with the machine to itself
    be.clock()
    clock.share = 0.3              # other processes take 70% of its threads' time
    r.time(reps)
    reading = be.clock()
    assert reading is not None and reading.slowdown
    assert be.clock() is not None and not be.clock().slowdown   # nothing measured since: no flag
    clock.share = 0.7              # 70% of the best share it got: above 0.6, no slowdown
    r.time(reps)
    assert not be.clock().slowdown
    monkeypatch.setenv("CONVDOCTOR_CPU_MIN_SHARE", "0")   # 0: never judged
    off = CpuBackend()
    r = off.prepare(p, off.candidates(p)[0])
    r.time(reps)
    clock.share = 0.1
    r.time(reps)
    assert not off.clock().slowdown
