"""The knowledge base is well-formed: every pattern is backed by a real message with its source, every
example matches its own pattern and is seen by the streaming pre-filter."""

from __future__ import annotations

import json
import re
from importlib import resources

from convdoctor.explain.engine import analyze
from convdoctor.explain.kb import CAUSE_IDS, causes, live_map, patterns, status_table
from convdoctor.explain.scan import ANCHORS, scan_text


def test_causes_cover_the_issue_ids() -> None:
    assert set(causes()) == set(CAUSE_IDS)
    for cid, info in causes().items():
        assert info["title"] and info["fix"], cid
        if cid != "unknown":
            assert info["sources"], cid


def test_patterns_backed_by_real_messages() -> None:
    pats = [p for p in patterns() if p.origin == "patterns"]
    assert len(pats) >= 30
    for p in pats:
        assert p.examples, p.id
        assert p.role in ("failure", "context", "noise", "backoff"), p.id
        for c in p.causes:
            assert c in CAUSE_IDS, (p.id, c)
        for ex in p.examples:
            assert ex["source"].startswith("https://"), p.id
            assert p.regex.search(ex["text"]), (p.id, ex["text"])


def _unanchored() -> set[str]:
    raw = json.loads(resources.files("convdoctor.explain").joinpath("data", "patterns.json").read_text())
    return {p["id"] for p in raw["patterns"] if p.get("unanchored")}


def test_templates_name_their_source_and_match_their_example() -> None:
    tpls = [p for p in patterns() if p.origin != "patterns"]
    for p in tpls:
        assert p.source, p.id
        assert p.role in ("failure", "context", "noise"), p.id
        assert set(p.causes) <= set(CAUSE_IDS), p.id
        for ex in p.examples:
            assert p.regex.search(ex["text"]), (p.id, ex["text"])


def test_template_failures_found_at_the_end_of_large_logs() -> None:
    """A failure message without an anchor is still seen where a dying program prints it: last. The
    scanner always keeps a large log's last lines (test_explain_scan.py); here the engine's large-log
    path (full=False: failure patterns on anchor lines and the last lines) must match each one."""
    noise = [(i, f"INFO step {i} loss 0.1") for i in range(1, 200)]
    by_text: dict[str, list[str]] = {}   # a template and its pasted variant share their example
    for p in patterns():
        if p.origin == "patterns" or p.role != "failure" or not p.examples or not p.causes:
            continue
        by_text.setdefault(p.examples[0]["text"], []).append(p.id)
    for text, ids in by_text.items():
        fired = analyze(noise + [(200, text)], full=False).looked_at["patterns_fired"]
        for pid in ids:
            assert pid in fired, pid


def test_anchor_prefilter_sees_every_failure_example() -> None:
    exempt = _unanchored()
    for p in patterns():
        if p.origin != "patterns" or p.role != "failure" or p.id in exempt:
            continue
        for ex in p.examples:
            low = ex["text"].lower().encode()
            assert any(a in low for a in ANCHORS), (p.id, ex["text"])


def test_unanchored_messages_found_at_the_end_of_large_logs() -> None:
    noise = "".join(f"INFO step {i} loss 0.1\n" for i in range(60000))
    for p in patterns():
        if p.id not in _unanchored():
            continue
        for ex in p.examples:
            res = scan_text(noise + ex["text"] + "\nAborted\n")
            assert not res.whole
            d = analyze(res.lines)
            assert d.cause_id == next(iter(p.causes)), (p.id, d.ids())


def test_status_tables() -> None:
    st = status_table()
    assert st["v8"]["1"] == "CUDNN_STATUS_NOT_INITIALIZED"
    assert st["v8"]["6"] == "CUDNN_STATUS_ARCH_MISMATCH"
    assert st["v9"]["1001"] == "CUDNN_STATUS_NOT_INITIALIZED"
    assert st["v9"]["1002"] == "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"
    assert st["v9"]["3007"].endswith("ARCH_MISMATCH")
    for name, votes in st["status_causes"].items():
        assert name.startswith("CUDNN_STATUS_")
        assert set(votes) <= set(CAUSE_IDS)


def test_live_map_targets_are_cause_ids() -> None:
    lm = live_map()
    for target in list(lm["map"].values()) + list(lm["check_map"].values()):
        assert target is None or target in CAUSE_IDS


def test_template_files_are_what_their_generators_write() -> None:
    """templates/*.json are generated from tools/mine_templates/src_*.py: a hand edit to a JSON file
    is lost at the next build, so none may exist."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "mine_templates" / "build.py"
    spec = importlib.util.spec_from_file_location("convdoctor_mine_templates_build", path)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)    # puts its own folder on sys.path for its src_*.py modules
    try:
        assert build.stale() == []
    finally:
        sys.path.remove(str(path.parent))


def test_a_templates_pasted_variant_takes_elided_values_missing_stops_and_cut_lines() -> None:
    from convdoctor.explain.kb import loose_regex

    text = "Grid size {grid_size} will likely result in GPU under-utilization due to low occupancy."
    rx = re.compile(loose_regex(text, ("grid_size",)) or "", re.IGNORECASE)
    m = rx.search("NumbaPerformanceWarning: Grid size ... will likely result in GPU under-utilization")
    assert m is not None and m.group("grid_size") == "..."
    assert rx.search("Grid size 4 will likely result in GPU under-utilization due to low occupancy")
    # the whole message may go on; a cut one must end its line
    assert rx.search("Grid size 4 will likely result in GPU under-utilization due to low occupancy. x")
    assert not rx.search("Grid size 4 will likely result in GPU under-utilization, we think")
    # fewer than 60 % of the words is not the message
    assert not rx.search("Grid size 4 will likely")
    assert loose_regex("Out of memory.") is None            # too short to cut
    assert loose_regex("Line one of it\n{x}\nand line three of it") is None   # several lines


def _one(line: str):
    """The diagnosis of a log of one line."""
    return analyze([(1, line)])


def _reads_no_cuda_status(line: str) -> bool:
    return not any(p.startswith("cuda:") for p in _one(line).looked_at["patterns_fired"])


def test_library_statuses_printed_as_numbers() -> None:
    assert _one("cuFFT error: 2 /src/fft.cu 978").cause_id == "gpu-out-of-memory"
    assert _one("Check failed: (cufftPlanMany(&p, 1, &n)) == CUFFT_SUCCESS (2 vs. 0)").cause_id \
        == "gpu-out-of-memory"
    # a number that is not a status of that library says nothing
    assert _one("cuFFT error: 3.5 seconds").cause_id == "unknown"


def test_cuda_statuses_printed_as_numbers_after_the_api_call() -> None:
    assert _one("panicked at 'cudaHostRegister error: 35 ptr: 0x7efe93615b80'").cause_id == "driver-too-old"
    # "CUDA error 36" or a library's "cuFFT error: 5" is not a CUDA API call's status number
    assert _reads_no_cuda_status("cuFFT error: 5 /src/rir.cu 978")
    # after the driver or runtime call that returned it, with or without its arguments
    assert _one("CUDA not supported: cuInit() returned 100").cause_id == "no-driver"
    assert _one("cudaRuntimeGetVersion() failed with error #35").cause_id == "driver-too-old"
    assert _one('CUDA error calling "cudaGetDeviceCount(&devCount)", code is 35').cause_id \
        == "driver-too-old"
    d = _one("call to cuLaunchKernel returned error 701: Launch out of resources")
    assert "cuda:CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" in d.looked_at["patterns_fired"]
    # TensorRT's allocator prints the runtime status after the function's name
    assert _one("[E] [TRT] safeRuntime.cpp (25) - Cuda Error in allocate: 2").cause_id \
        == "gpu-out-of-memory"


def test_counts_library_names_and_foreign_enums_are_not_cuda_statuses() -> None:
    # libraries' names are not driver calls, a getter's value is not a status, and enum
    # members named like CUDA's mean nothing without CUDA on the line
    for line in ("cuDeviceGetCount returned 3 devices", "CUresult error: 2 devices found",
                 "cuDNN error: 3", "cuBLAS returned 3", "cuTENSOR returned 3", "cuRAND error 100",
                 "cuDeviceGetCount returned 2", "cudaGetDeviceCount returned 2",
                 "Failed to load ROM: ResultStatus::ErrorFileNotFound", "Result: ErrorNotSupported"):
        assert _reads_no_cuda_status(line), line
    # a metric is not a CUDA status; a CUDA error 700 is
    for line in ("Validation error: 700.25", "training error: 700"):
        assert _one(line).cause_id == "unknown", line
    assert _one("RuntimeError: Cuda error: 700[cudaLaunchKernel(k)]").cause_id == "illegal-memory-access"


def test_driver_statuses_as_dotnet_enum_members_and_cuResult_numbers() -> None:
    # ManagedCuda and CUDAfy print CUresult's members: ErrorIllegalAddress, ErrorOutOfMemory
    assert _one("ManagedCuda.CudaException: 'ErrorIllegalAddress: kernel failed'").cause_id \
        == "illegal-memory-access"
    assert _one("CUresult error  result=2 file=csrc/saver.cpp func=cu_mem_create").cause_id \
        == "gpu-out-of-memory"
    # the member reads case-sensitively
    assert _one("errorillegaladdress").cause_id == "unknown"


def test_a_bare_oserror_names_a_cuda_library_the_drivers_or_neither() -> None:
    assert _one("OSError: libcusparse.so.10").cause_id == "missing-dependency-lib"
    assert _one("OSError: libnvidia-ml.so.1").cause_id == "no-driver"
    assert _one("OSError: libcurl.so.4").cause_id == "unknown"


def test_xla_unimplemented_dnn_library_is_not_a_missing_implementation() -> None:
    # TensorFlow prints two spaces after the status; the library, not the op, is missing
    for msg in ("(0) UNIMPLEMENTED: DNN library is not found.", "(0) UNIMPLEMENTED:  DNN library is not found."):
        assert _one(msg).cause_id in ("cudnn-version-mismatch", "cudnn-not-found"), msg


def test_required_literals_look_through_hoisted_boundaries_and_groups() -> None:
    from convdoctor.explain.kb import required_literals

    # the parser hoists a \b every alternative starts with out of the alternation
    assert required_literals(r"\bcuFFT\s*error|\bCUFFT_SUCCESS \(2") == ("cufft",
                                                                           "cufft_success (2")
    # a run inside a group counts on its own: the longest of "cuda" and "error"
    assert required_literals(r"\b(?-i:cuda[A-Z])\w*\s+error") == ("error",)
    assert required_literals(r"\b(?-i:cuda[A-Z])\w*\s+ab") == ("cuda",)
    assert required_literals(r"(?:ab|cd)efg") == ("efg",)     # no literal certain in the group
    assert required_literals(r"a|bc") is None


def test_a_status_number_is_not_a_count_and_a_cut_never_ends_on_a_value() -> None:
    from convdoctor.explain.kb import loose_regex

    for line in ("cudaGetDeviceCount returned 3 devices", "cuBLAS status 14 of 20 handles",
                 "cudaMemcpy failed 2 times, retrying"):
        fired = analyze([(1, line)]).looked_at["patterns_fired"]
        assert not any("#number" in p or p.startswith("cuda:cuda") for p in fired), (line, fired)
    # cut right after a value: the value would take the rest of the line, so no such cut
    rx = re.compile(loose_regex("cuDNN status Error in: file: {file} line: {line} "
                                "function: {func}") or "", re.IGNORECASE)
    assert not rx.search("cuDNN status Error in: file: src/conv.c, continuing with CPU fallback")
    assert rx.search("cuDNN status Error in: file: src/conv.c line: 78 function: fwd")
    assert rx.search("cuDNN status Error in: file: src/conv.c line:")   # cut after a word
    # many values: no pasted variant (a near miss would backtrack long)
    assert loose_regex("a {a} b {b} c {c} d {d} e {e} f {f} failure here") is None
