"""The CPU backend: candidates, every direction against float64, layouts, contention as slowdown."""

from __future__ import annotations

import os
import subprocess
import sys

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


def test_cpu_contention_reads_as_a_slowdown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVDOCTOR_CPU_MIN_SHARE", "0.6")
    p = ConvProblem.parse("fprop n=4 c=32 h=28 w=28 k=32 r=3 s=3 pad=1")
    be = CpuBackend()
    r = be.prepare(p, be.candidates(p)[0])
    r.warmup()
    import statistics

    one = statistics.median(r.time(3))
    reps = max(5, int(0.1 / one))  # batches of ~0.1 s (>= 20 ms are judged), on any core count
    r.time(reps)                   # the share this runner gets with the machine to itself
    be.clock()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * (os.cpu_count() or 2))]
    try:
        import time

        time.sleep(0.3)
        be.clock()
        r.time(reps)
        reading = be.clock()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert reading is not None and reading.slowdown
    assert be.clock() is not None and not be.clock().slowdown   # nothing measured since: no flag
