"""A bench row's printed ratio: what the referees measured, and never a loss read as a tie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bench_shard import _doc, _row

from convdoctor.bench.referee import referee_fields
from convdoctor.bench.report import fmt_ratio, human, split_lines, split_row
from convdoctor.bench.summary import summarize
from convdoctor.cli import main

MS = 1e-3


@pytest.mark.parametrize("x, text", [
    (0.784, "0.78x"), (1.2345, "1.23x"), (1.0, "1.00x"), (None, "-"), (float("nan"), "-"),
    (0.9964, "0.996x"), (0.9996, "0.9996x"), (1.0004, "1.0004x"), (0.9951, "0.995x"),
    (0.99999999, "0.999999x"), (1.00000001, "1.000001x"), (0.98, "0.98x")])
def test_a_ratio_reads_on_its_own_side_of_one(x: float | None, text: str) -> None:
    assert fmt_ratio(x) == text


def test_more_digits_keep_the_side_too() -> None:
    assert fmt_ratio(0.99996, 4) == "0.99996x" and fmt_ratio(1.07996, 4) == "1.0800x"
    assert fmt_ratio(0.9996, 3) == "0.9996x" and fmt_ratio(0.969, 3) == "0.969x"


def _cpu_row(refs: list[dict[str, float]]) -> dict:
    """A CPU bench row: convdoctor chose PyTorch's default path (cpu:mkldnn-on), both PyTorch
    processes' one-sample screens picked cpu:mkldnn-off+nhwc."""
    winners, picks = ["cpu:mkldnn-on", "cpu:mkldnn-on"], ["cpu:mkldnn-off+nhwc"] * 2
    rf = referee_fields(refs, "cpu:mkldnn-on", winners, picks)
    return {**_row("p", 1.0, 1.0, 1.0), **rf, "problem": "fprop 1x64x56x56 k64 3x3/1",
            "winners": winners, "benchmark_picks": picks}


def test_a_loss_in_the_median_times_is_not_printed_as_a_bare_tie(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # three referee processes on a loaded CPU: the first read the pick 22% faster than the
    # default path convdoctor chose; the other two read the pick slower. The row's times are
    # per-path medians (convdoctor 1.158 ms, pick 908 us), its ratio the median of the
    # processes' own ratios (1.00x: the default path vs itself, the smaller of the two).
    refs = [{"cpu:mkldnn-on": 1.158 * MS, "cpu:mkldnn-off+nhwc": 0.908 * MS},
            {"cpu:mkldnn-on": 0.500 * MS, "cpu:mkldnn-off+nhwc": 0.600 * MS},
            {"cpu:mkldnn-on": 2.000 * MS, "cpu:mkldnn-off+nhwc": 2.100 * MS}]
    r = _cpu_row(refs)
    assert (r["tuned_s"], r["benchmark_s"]) == (pytest.approx(1.158 * MS),
                                                 pytest.approx(0.908 * MS))
    assert r["speedup_vs_best"] == 1.0
    sp = split_row(r)
    assert sp is not None and sp["times"] == pytest.approx(0.908 / 1.158)
    assert [round(x, 3) for x in sp["per"]] == [0.784, 1.0, 1.0]
    assert split_lines([r], cpu=True) == [
        "* fprop 1x64x56x56 k64 3x3/1: 1.00x vs the faster PyTorch path is the median of 3 "
        "referee processes' own ratios (0.78x, 1.00x, 1.00x); the row's median times read 0.78x "
        "(one-sample pick 908.0 us, convdoctor 1.158 ms)"]
    doc = dict(_doc([r]), backend="cpu", summary=summarize([r]))
    doc["summary"]["wall_s"] = 1.0
    text = human(doc)
    row_line = next(line for line in text.splitlines() if line.startswith("fprop 1x64x56x56"))
    assert "1.00x*" in row_line and "908.0 us" in row_line and "1.158 ms" in row_line
    assert "the row's median times read 0.78x" in text
    # the same through `bench --merge` (its human output is the bench's)
    f = tmp_path / "a.json"
    f.write_text(json.dumps(doc))
    assert main(["bench", "--merge", str(f)]) == 0
    assert "the row's median times read 0.78x" in capsys.readouterr().out


def test_a_row_whose_processes_agree_has_no_mark() -> None:
    refs = [{"cpu:mkldnn-on": 1.0 * MS, "cpu:mkldnn-off+nhwc": 1.2 * MS}] * 3
    r = _cpu_row(refs)
    assert r["speedup_vs_best"] == 1.0 and split_row(r) is None
    assert split_lines([r], cpu=True) == []
    # a row slower than PyTorch is named by its own line ("slower than PyTorch"), not marked
    slow = _row("q", 1.0, 0.9, 1.0)
    slow["speedup_vs_best"] = 0.9
    assert split_row(slow) is None


def test_a_loss_under_one_percent_is_printed_as_a_loss() -> None:
    # H100 fp16 dgrad rows whose referees' median ratio (0.9964, 0.9996) printed "1.00x"
    a = _row("dgrad 32x512x28x28 k256 1x1/1 fp16 nhwc", 10.0, 10.0, 10.036)
    b = _row("dgrad 32x64x56x56 k256 1x1/1 fp16 nhwc", 10.0, 10.0, 10.004)
    doc = dict(_doc([a, b]), summary=summarize([a, b]))
    doc["summary"]["wall_s"] = 1.0
    lines = human(doc).splitlines()
    cells = [next(x for x in lines if x.startswith(r["problem"])) for r in (a, b)]
    assert "0.996x" in cells[0] and "0.9996x" in cells[1]
    assert not any("1.00x" in c for c in cells)
    assert any("(worst 0.996x)" in x for x in lines)
    # the summary's worst row, at 3 decimals, keeps its side of one too
    doc = dict(_doc([b]), summary=summarize([b]))
    doc["summary"]["wall_s"] = 1.0
    assert "(worst 0.9996x)" in human(doc)


def test_a_row_with_more_winners_than_notes_still_reads() -> None:
    # a file whose rows were edited to time a third choice: no notes for it, and none needed
    r = {**_row("p", 2.0, 2.0, 1.0), "winners": ["w", None, "v"], "tune_notes": [[], []]}
    doc = _doc([r])
    doc["summary"] = {**doc["summary"], **summarize([r])}
    assert "no winner in tuning run 2 for p: no reason recorded" in human(doc)
    # notes that do not line up are not shifted onto another run
    r["tune_notes"] = [[], ["listing failed: cuDNN"]]
    assert "no winner in tuning run 2 for p: no reason recorded" in human(doc)
    r["tune_notes"] = [[], ["listing failed: cuDNN"], []]
    assert "no winner in tuning run 2 for p: listing failed: cuDNN" in human(doc)
