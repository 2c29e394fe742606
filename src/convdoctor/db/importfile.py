"""The schema of a `convdoctor db export` file, checked in full before `db import` writes anything.

An export file comes from another machine, or was edited by hand, so every field a reader uses is
checked for its JSON type (a boolean is a JSON boolean, a list of sizes is a list of whole numbers:
nothing is coerced), for a finite value in its range, and for agreement with the rest of the record:
the winner is one of the record's candidates, measured correct, with the time the record states.
A record that fails names itself (its index and field) in a `UsageError`, and the import writes
nothing. Keys a reader does not use are kept as they are (later versions add fields), within the
file's size and depth bounds (`convdoctor.jsonfile`).
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from ..errors import UsageError
from ..problem import DIRECTIONS, DTYPES, LAYOUTS, MATH_MODES, ConvProblem

EXPORT_FORMAT = "convdoctor-tuning-db"
MAX_RECORDS = 100_000
MAX_CANDIDATES = 10_000
MAX_SAMPLES = 1_000_000
MAX_SIZE = 2**31 - 1              # a tensor dimension, a channel count
MAX_SECONDS = 1e6                 # any time stored in a record
BACKENDS = ("cpu", "cuda")
# the characters of a candidate key; which keys exist is the engines' registry's to say
ENGINE_KEY = re.compile(r"[a-z][a-z0-9-]{0,15}:[A-Za-z0-9_.,=+-]{1,200}")
STATUSES = ("ok", "disqualified", "failed", "screened-out", "unsupported", "not-measured")
_ENV_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_LABEL = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MAX_TEXT = 4096


class _Bad(Exception):
    pass


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(v: Any, where: str, lo: int, hi: int) -> int:
    if not _is_int(v) or not lo <= v <= hi:
        raise _Bad(f"{where} must be a whole number from {lo} to {hi}, got {_show(v)}")
    return int(v)


def _num(v: Any, where: str, lo: float, hi: float, *, null: bool = False,
         lo_open: bool = False) -> float | None:
    if v is None and null:
        return None
    ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
          and (lo < v if lo_open else lo <= v) and v <= hi)
    if not ok:
        rule = f"{'>' if lo_open else '>='} {lo:g} and <= {hi:g}"
        raise _Bad(f"{where} must be a finite number {rule}{' or null' if null else ''}, "
                   f"got {_show(v)}")
    return float(v)


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise _Bad(f"{where} must be true or false (a JSON boolean), got {_show(v)}")
    return v


def _str(v: Any, where: str, *, max_len: int = MAX_TEXT, choices: tuple[str, ...] = (),
         pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(v, str) or len(v) > max_len:
        raise _Bad(f"{where} must be text of at most {max_len} characters, got {_show(v)}")
    if choices and v not in choices:
        raise _Bad(f"{where} must be one of {', '.join(choices)}, got {_show(v)}")
    if pattern is not None and not pattern.fullmatch(v):
        raise _Bad(f"{where} {_show(v)} is not in the expected form")
    return v


def _engine_key(v: Any, where: str) -> str:
    """A candidate key some engine owns (`engines.registry`)."""
    from ..engines.registry import engine_of

    key = _str(v, where, max_len=220, pattern=ENGINE_KEY)
    if engine_of(key) is None:
        raise _Bad(f"{where} {_show(key)} names no engine convdoctor knows")
    return key


def _list(v: Any, where: str, max_len: int) -> list[Any]:
    if not isinstance(v, list) or len(v) > max_len:
        raise _Bad(f"{where} must be a list of at most {max_len} items, got {_show(v)}")
    return v


def _dict(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Bad(f"{where} must be an object, got {_show(v)}")
    return v


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def check_problem(d: Any, where: str) -> ConvProblem:
    d = _dict(d, where)
    _str(d.get("direction"), f"{where}.direction", choices=DIRECTIONS)
    for name in ("n", "c", "k"):
        _int(d.get(name), f"{where}.{name}", 1, MAX_SIZE)
    _int(d.get("groups", 1), f"{where}.groups", 1, MAX_SIZE)
    nd = len(_list(d.get("spatial"), f"{where}.spatial", 3))
    for name, lo in (("spatial", 1), ("kernel", 1), ("stride", 1), ("pad_pre", 0),
                     ("pad_post", 0), ("dilation", 1)):
        vals = _list(d.get(name), f"{where}.{name}", 3)
        if len(vals) != nd or not nd:
            raise _Bad(f"{where}.{name} must list one whole number per spatial dim (1 to 3)")
        for i, v in enumerate(vals):
            _int(v, f"{where}.{name}[{i}]", lo, MAX_SIZE)
    _str(d.get("dtype", "float32"), f"{where}.dtype", choices=DTYPES)
    _str(d.get("math", "tf32"), f"{where}.math", choices=MATH_MODES)
    _str(d.get("layout", "nchw"), f"{where}.layout", choices=LAYOUTS)
    _bool(d.get("deterministic", False), f"{where}.deterministic")
    try:
        return ConvProblem.from_dict(d)
    except UsageError as exc:
        raise _Bad(f"{where}: {exc}") from None


def check_candidate(d: Any, where: str) -> str:
    d = _dict(d, where)
    key = _engine_key(d.get("key"), f"{where}.key")
    _str(d.get("backend"), f"{where}.backend", pattern=_LABEL)
    _int(d.get("workspace_bytes", 0), f"{where}.workspace_bytes", 0, 2**50)
    _bool(d.get("deterministic", True), f"{where}.deterministic")
    _bool(d.get("pinned", True), f"{where}.pinned")
    for i, n in enumerate(_list(d.get("notes", []), f"{where}.notes", 64)):
        _str(n, f"{where}.notes[{i}]")
    return key


def _check_stats(d: Any, where: str) -> tuple[str, dict[str, Any]]:
    d = _dict(d, where)
    key = check_candidate(d.get("candidate"), f"{where}.candidate")
    _str(d.get("status", "ok"), f"{where}.status", choices=STATUSES)
    _str(d.get("reason", ""), f"{where}.reason")
    for name in ("samples", "screen_samples"):
        for i, v in enumerate(_list(d.get(name, []), f"{where}.{name}", MAX_SAMPLES)):
            _num(v, f"{where}.{name}[{i}]", 0.0, MAX_SECONDS, lo_open=True)
    for name in ("median_s", "ci_low_s", "ci_high_s", "prepare_s", "first_run_s", "second_run_s",
                 "rank_s"):
        _num(d.get(name), f"{where}.{name}", 0.0, MAX_SECONDS, null=True)
    _num(d.get("cost_s", 0.0), f"{where}.cost_s", 0.0, MAX_SECONDS, null=True)
    _num(d.get("clock_mhz"), f"{where}.clock_mhz", 0.0, 1e5, null=True)
    for name in ("n", "warmup_runs", "discarded"):
        _int(d.get(name, 0), f"{where}.{name}", 0, MAX_SAMPLES)
    corr = d.get("correctness")
    if corr is not None:
        corr = _dict(corr, f"{where}.correctness")
        _bool(corr.get("ok"), f"{where}.correctness.ok")
        _num(corr.get("max_rel_err"), f"{where}.correctness.max_rel_err", 0.0, math.inf, null=True)
        _num(corr.get("tolerance"), f"{where}.correctness.tolerance", 0.0, 1e6)
        _str(corr.get("detail", ""), f"{where}.correctness.detail")
    return key, d


def check_record(rec: Any, where: str, *, now: float) -> None:
    """Raise _Bad naming the first field of `rec` that is wrong."""
    rec = _dict(rec, where)
    problem = check_problem(rec.get("problem"), f"{where}.problem")
    if "problem_key" in rec and rec["problem_key"] != problem.key():
        raise _Bad(f"{where}.problem_key does not match {where}.problem")
    env = _dict(rec.get("env"), f"{where}.env")
    if len(env) > 64:
        raise _Bad(f"{where}.env has more than 64 entries")
    for k, v in env.items():
        _str(k, f"{where}.env key", pattern=_ENV_KEY)
        _str(v, f"{where}.env.{k}", max_len=512)
    backend = _str(rec.get("backend"), f"{where}.backend", choices=BACKENDS)
    if env.get("backend", backend) != backend:
        raise _Bad(f"{where}.env.backend does not match {where}.backend")
    created = rec.get("created")
    if not (isinstance(created, (int, float)) and not isinstance(created, bool)
            and 0 <= created <= now + 86400.0):   # NaN fails both comparisons
        raise _Bad(f"{where}.created must be a Unix time in seconds, not in the future, got "
                   f"{_show(created)}")
    _num(rec.get("tuning_s", 0.0), f"{where}.tuning_s", 0.0, MAX_SECONDS)
    _num(rec.get("noise_band", 0.0), f"{where}.noise_band", 0.0, 1.0)
    for i, n in enumerate(_list(rec.get("notes", []), f"{where}.notes", 1000)):
        _str(n, f"{where}.notes[{i}]")
    if _bool(rec.get("degraded", False), f"{where}.degraded"):
        raise _Bad(f"{where} was measured under a clock slowdown (degraded): never stored")
    if _bool(rec.get("short_list", False), f"{where}.short_list"):
        raise _Bad(f"{where} was tuned from a short list: never stored")
    _dict(rec.get("listing", {}), f"{where}.listing")
    for k, v in _dict(rec.get("baselines", {}), f"{where}.baselines").items():
        _engine_key(k, f"{where}.baselines key")
        _num(v, f"{where}.baselines.{k}", 0.0, MAX_SECONDS, lo_open=True)
    stats: dict[str, dict[str, Any]] = {}
    for i, c in enumerate(_list(rec.get("candidates"), f"{where}.candidates", MAX_CANDIDATES)):
        key, d = _check_stats(c, f"{where}.candidates[{i}]")
        stats[key] = d
    if rec.get("winner") is None:
        raise _Bad(f"{where}.winner is missing: a record without a winner is never stored")
    wkey = check_candidate(rec.get("winner"), f"{where}.winner")
    _check_winner(stats.get(wkey), rec.get("winner_time_s"), f"{where}.winner ({wkey})")


def _check_winner(ws: dict[str, Any] | None, time_s: Any, where: str) -> None:
    if ws is None:
        raise _Bad(f"{where} is not one of the record's candidates")
    if ws.get("status", "ok") != "ok":
        raise _Bad(f"{where} has status {ws.get('status')!r}; a winner ran correctly (ok)")
    corr = ws.get("correctness")
    if corr is not None and corr.get("ok") is not True:
        raise _Bad(f"{where} failed its correctness check")
    pool = ws.get("samples") or ws.get("screen_samples") or []
    if not pool:
        raise _Bad(f"{where} has no timing samples")
    ordered = sorted(float(v) for v in pool)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
    t = _num(time_s, f"{where} winner_time_s", 0.0, MAX_SECONDS, null=True, lo_open=True)
    # samples are stored to 6 significant digits: the stated time agrees with them to 1e-4
    if t is not None and abs(t - median) > 1e-4 * median:
        raise _Bad(f"{where}: winner_time_s {t:g} is not the median of its samples ({median:g})")


def check_export(doc: Any, what: str, *, schema_version: int) -> list[dict[str, Any]]:
    """The records of an export document, every one checked; UsageError on the first fault."""
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise UsageError(f"{what} is not a convdoctor tuning export (no format {EXPORT_FORMAT!r})")
    schema = doc.get("schema", 1)
    if not _is_int(schema) or schema < 1:
        raise UsageError(f"{what}: schema must be a whole number >= 1, got {_show(schema)}")
    if schema > schema_version:
        raise UsageError(f"{what} was written with schema {schema}, newer than this "
                         f"convdoctor's ({schema_version}); upgrade convdoctor")
    now = time.time()
    try:
        records = _list(doc.get("records"), "records", MAX_RECORDS)
        for i, rec in enumerate(records):
            check_record(rec, f"records[{i}]", now=now)
    except _Bad as exc:
        raise UsageError(f"{what}: {exc}; nothing was imported",
                         hint="fix or remove that record (files written by `convdoctor db "
                         "export` pass)") from None
    return records


def load_export(path: Any, *, schema_version: int) -> list[dict[str, Any]]:
    """The records of an export file, read within bounds (`jsonfile`) and every one checked."""
    from ..jsonfile import read_json

    return check_export(read_json(path, what="import file"), str(path),
                        schema_version=schema_version)
