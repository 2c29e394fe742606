"""The streaming pre-filter: same result whatever the block boundaries, line numbers right, memory
bounded, two-process scan equal to the single-process one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from convdoctor.explain.scan import Scanner, scan_bytes, scan_file


def _log(n: int, hits: dict[int, str]) -> bytes:
    rnd = random.Random(7)
    out = []
    for i in range(1, n + 1):
        out.append(hits.get(i, f"INFO step {i} loss {rnd.random():.4f}"))
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("step", [1, 5, 17, 4096, 1 << 20])
def test_block_boundaries_do_not_matter(step: int) -> None:
    data = _log(3000, {1500: "RuntimeError: CUDA error: an illegal memory access was encountered"})
    ref = scan_bytes(data, small=0)
    sc = Scanner(small=0)
    for i in range(0, len(data), step):
        sc.feed(data[i:i + step])
    got = sc.close()
    assert got.lines == ref.lines
    assert got.total_lines == 3000
    nums = [n for n, _ in got.lines]
    assert nums == list(range(1492, 1515)) + list(range(2961, 3001))  # window + last 40 lines
    assert dict(got.lines)[1500].startswith("RuntimeError")


def test_small_input_kept_whole() -> None:
    res = scan_bytes(b"a\nb\nc")
    assert res.whole and [t for _, t in res.lines] == ["a", "b", "c"]


def test_memory_bounded_with_many_hits() -> None:
    hits = {i: f"WARNING cuda thing {i}" for i in range(1, 200_001, 3)}
    res = scan_bytes(_log(200_000, hits), small=0)
    assert len(res.lines) <= 3000 + 20000
    assert res.lines[-1][0] == 200_000 or res.lines[-1][0] >= 199_990
    assert res.anchor_lines == 66_667


def test_long_line_without_newlines() -> None:
    data = b"x" * (3 << 20) + b" CUDNN_STATUS_NOT_INITIALIZED"
    res = scan_bytes(data, small=0)
    assert res.total_lines >= 1
    assert all(len(t) <= 4000 for _, t in res.lines)


def test_two_process_scan_matches(tmp_path: Path) -> None:
    data = _log(60_000, {10: "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
                         59_990: "torch.cuda.OutOfMemoryError: CUDA out of memory."})
    p = tmp_path / "x.log"
    p.write_bytes(data)
    one = scan_file(str(p), workers=1)
    two = scan_file(str(p), workers=2)
    assert one.total_lines == two.total_lines == 60_000
    got = dict(two.lines)
    assert got[10].startswith("RuntimeError") and got[59_990].startswith("torch.cuda")
    assert {n for n, _ in one.lines} - {n for n, _ in two.lines} <= set(range(29_990, 30_010))


def test_gzip_log(tmp_path: Path) -> None:
    import gzip

    data = _log(50_000, {49_000: "RuntimeError: CUDA error: an illegal memory access was encountered"})
    p = tmp_path / "train.log.gz"
    with gzip.open(p, "wb") as fh:
        fh.write(data)
    res = scan_file(str(p))
    assert res.total_lines == 50_000
    assert dict(res.lines)[49_000].startswith("RuntimeError")
