"""The timer (`convdoctor.measure.timing`): the spin that covers the host's launches and when it
grows or shrinks, the batch size for short kernels, and on a real GPU (`gpu`) batched timing and
retaken samples."""

from __future__ import annotations

import pytest

from convdoctor.measure import timing
from convdoctor.measure.timing import cover_for, longer_cover


def test_cover_for_spin_margin() -> None:
    assert timing.cover_for(0.0) == pytest.approx(30e-6)
    assert timing.cover_for(100e-6) == pytest.approx(180e-6)
    assert timing.cover_for(1.0) == 0.05


def test_choose_batch() -> None:
    assert timing.choose_batch(1e-3) == 1
    assert timing.choose_batch(50e-6) == 1
    assert timing.choose_batch(10e-6) == 20
    assert timing.choose_batch(1e-6) == 64
    assert timing.choose_batch(float("nan")) == 1 and timing.choose_batch(0) == 1


def test_cover_grows_only_when_the_host_outran_the_spin() -> None:
    assert longer_cover(40e-6, 90e-6) is None              # covered: keep the sample
    longer = longer_cover(200e-6, 90e-6)
    assert longer is not None and longer >= cover_for(200e-6) > 200e-6
    assert longer_cover(1e-3, 0.6e-3) == max(cover_for(1e-3), 1.2e-3)
    assert longer_cover(1.0, 0.04) == 0.05                  # capped: a stall cannot stall us long


def test_a_spin_grown_by_one_host_stall_shrinks_back() -> None:
    # On an H100, a spin that only grows kept wav2vec2 pos_conv's spin at 6-7 ms for the rest of
    # its tuning after one host stall (0.5 ms kernels). Host times: steady 40 us, one 4 ms stall
    # at sample 10.
    from convdoctor.measure.timing import SpinCover

    base = cover_for(40e-6)
    c = SpinCover(base, window=4)
    spins = []
    for i in range(40):
        host = 4e-3 if i == 10 else 40e-6
        for attempt in range(4):
            spins.append(c.cover_s)
            if not c.retake(host, last_try=attempt == 3):
                break
            host = 40e-6          # the retake is quick again
    assert c.retakes == 1 and c.uncovered == 0
    assert c.max_cover_s >= cover_for(4e-3)            # grew enough to cover the stall
    assert c.cover_s == base and c.shrinks >= 1          # ... and shrank back to the base
    grown = [s for s in spins if s > base]
    assert len(grown) <= 5, f"{len(grown)} samples after the stall kept a grown spin"


def test_a_spin_never_shrinks_below_what_recent_samples_needed() -> None:
    from convdoctor.measure.timing import SpinCover, shrunk_cover

    # the host got slower for good (300 us): the spin stays where it covers that
    c = SpinCover(cover_for(40e-6), window=4)
    for _ in range(20):
        while c.retake(300e-6):
            pass
    assert c.cover_s >= cover_for(300e-6) > 300e-6
    assert c.uncovered == 0
    # pure rule: unchanged until `window` covered samples are known; never above the current spin
    assert shrunk_cover(1e-3, 1e-4, [5e-5] * 3, window=4) == 1e-3
    assert shrunk_cover(1e-3, 1e-4, [5e-5] * 4, window=4) == cover_for(5e-5)
    assert shrunk_cover(1e-3, 2e-4, [5e-5] * 4, window=4) == 2e-4     # never below the base
    assert shrunk_cover(2e-4, 1e-4, [5e-4] * 4, window=4) == 2e-4
    # disabled (no spin kernel): never a retake
    off = SpinCover(0.0, enabled=False)
    assert off.retake(1.0) is False and off.retakes == 0


# ---------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_timer_batches_microsecond_kernels_and_hides_launch_latency() -> None:
    import torch

    from convdoctor.measure.timing import LaunchTimer

    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    t = LaunchTimer(lambda: torch.nn.functional.conv2d(x, w, padding=1))
    ts = t.time(5)
    assert t.info.batch > 1 and t.info.mode in ("graph", "events+batch"), t.info
    assert all(0 < v < 50e-6 for v in ts), ts
    # a long kernel is timed alone
    a = torch.randn(4096, 4096, device="cuda")
    t2 = LaunchTimer(lambda: a @ a)
    assert all(v > 50e-6 for v in t2.time(3)) and t2.info.batch == 1


@pytest.mark.gpu
def test_timer_retakes_a_sample_the_host_outran() -> None:
    """A call whose host side stalls now and then (a cold call, a descheduled thread) must not put
    the stall into the GPU time: the sample is retaken with a longer spin."""
    import time

    import torch

    from convdoctor.measure.timing import LaunchTimer

    a = torch.randn(1 << 20, device="cuda")
    calls = [0]

    def stalling() -> None:
        calls[0] += 1
        a.add_(1.0)
        if calls[0] > 8 and calls[0] % 3 == 0:
            time.sleep(0.003)       # 3 ms on the host, after preparation measured the cover
        a.add_(1.0)

    t = LaunchTimer(stalling, batch=1, graph=False)
    samples = t.time(12)
    assert t.info.retakes >= 1
    # two elementwise kernels over 4 MiB: a few microseconds each, never the 3 ms host stall
    assert max(samples) < 1e-3, samples
