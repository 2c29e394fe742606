"""Reading the files a report is made of, each checked for the shape the page needs.

A file that cannot be read, is not JSON, is nested too deep or holds the wrong kind of document
is refused with one `UsageError` line naming the flag and the file. Inside a document that has the
right shape, a value of the wrong type (a time that is a string, NaN) is treated as missing: it is
never plotted, and never stops the page.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import statistics
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..jsonfile import read_json
from ..problem import ConvProblem
from .model import (
    BENCHMARK_KEY,
    HEURISTIC_KEY,
    BenchDoc,
    Cand,
    DevicePeaks,
    EnvDoc,
    TunedProblem,
)
from .svg import finite, finite_list, positive

MAX_ROWS = 200_000
MAX_SAMPLES = 100_000
SQLITE_MAGIC = b"SQLite format 3\x00"
DATA = Path(__file__).resolve().parent / "data"
# a bench referee's time of a winner run in the heuristic's process (not a candidate of its own)
_TWIN = "twin:"


def display_name(path: str) -> str:
    """A file's name without its directory and its .json / .json.gz ending."""
    name = os.path.basename(path)
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name or path


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _str_dict(d: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in d.items()} if isinstance(d, dict) else {}


def _floats(items: Any, limit: int = MAX_SAMPLES) -> tuple[float, ...]:
    return finite_list(items, limit)


# ---------------------------------------------------------------------------------------- env
def load_env(path: str) -> EnvDoc:
    """A `convdoctor env --json` (or `doctor --json`) report."""
    doc = read_json(path, what="--env report", max_bytes=64 << 20)
    if not isinstance(doc, dict) or doc.get("kind") != "env" or not isinstance(doc.get("facts"),
                                                                                dict):
        raise UsageError(f"--env {path}: not a convdoctor env report (write one on each machine "
                         "with: convdoctor env --json > NODE.json)")
    if "findings" in doc and not isinstance(doc["findings"], list):
        raise UsageError(f"--env {path}: 'findings' is not a list; not a convdoctor env report")
    return EnvDoc(display_name(path), doc)


# -------------------------------------------------------------------------------------- bench
def load_bench(path: str) -> BenchDoc:
    """A `convdoctor bench ... --json` result (or its --out / --merge file)."""
    return bench_from_doc(read_json(path, what="--bench result"), display_name(path),
                          what=f"--bench {path}")


def bench_from_doc(doc: Any, name: str, *, what: str) -> BenchDoc:
    if not isinstance(doc, dict) or doc.get("kind") != "bench" or not isinstance(doc.get("rows"),
                                                                                  list):
        raise UsageError(f"{what}: not a convdoctor bench result (expected the JSON written by: "
                         "convdoctor bench SUITE --json, or its --out file)")
    rows = doc["rows"]
    if len(rows) > MAX_ROWS:
        raise UsageError(f"{what}: {len(rows)} rows, more than {MAX_ROWS}")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise UsageError(f"{what}: row {i} is not an object; not a convdoctor bench result")
    return BenchDoc(name=name, config=str(doc.get("config") or "?"),
                    direction=str(doc.get("direction") or "?"),
                    backend=str(doc.get("backend") or "?"), env=_str_dict(doc.get("env")),
                    summary=doc["summary"] if isinstance(doc.get("summary"), dict) else {},
                    rows=tuple(rows))


def _problem(key: Any) -> ConvProblem | None:
    if not isinstance(key, str):
        return None
    try:
        return ConvProblem.parse(key)
    except (UsageError, ValueError, TypeError, KeyError):
        return None


def _bench_cands(row: dict[str, Any]) -> list[Cand]:
    """A bench row's candidates: each tuning run's digest ([key, status, median us, reason]),
    one point per run, and the referee processes' times of the keys they timed."""
    per: dict[str, dict[str, Any]] = {}
    runs = row.get("tune_candidates")
    for run in runs if isinstance(runs, list) else []:
        for item in run if isinstance(run, list) else []:
            if not isinstance(item, list) or len(item) < 2 or not isinstance(item[0], str):
                continue
            e = per.setdefault(item[0], {"status": [], "samples": [], "reason": ""})
            e["status"].append(str(item[1]))
            us = positive(item[2]) if len(item) > 2 else None
            if us is not None:
                e["samples"].append(us * 1e-6)
            if len(item) > 3 and item[3] and not e["reason"]:
                e["reason"] = str(item[3])
    referee: dict[str, list[float]] = {}
    for ref in _dicts(row.get("referee_runs_s")):
        for k, v in ref.items():
            s = positive(v)
            if s is not None and not str(k).startswith(_TWIN):
                referee.setdefault(str(k), []).append(s)
    for k in referee:
        per.setdefault(k, {"status": ["ok"], "samples": [], "reason": ""})
    out = []
    for k, e in per.items():
        status = "ok" if "ok" in e["status"] else (e["status"][0] if e["status"] else "ok")
        samples = tuple(e["samples"])
        med = statistics.median(samples) if samples else None
        out.append(Cand(k, status, e["reason"], samples, med, None, 0, None,
                        tuple(referee.get(k, ()))))
    return out


def tuned_from_bench(b: BenchDoc) -> list[TunedProblem]:
    """The bench rows as tuned problems (points: each tuning run's median of a candidate)."""
    out = []
    heur = HEURISTIC_KEY if b.backend != "cpu" else "PyTorch default"
    for r in b.rows:
        p = _problem(r.get("problem_key"))
        layer = " ".join(str(r[k]) for k in ("group", "name") if r.get(k))
        label = (f"{layer} \u00b7 " if layer else "") + str(r.get("problem") or
                                                           (p.short() if p else "?"))
        winners = r.get("winners") if isinstance(r.get("winners"), list) else []
        picks = r.get("benchmark_picks") if isinstance(r.get("benchmark_picks"), list) else []
        base = [(k, v) for k, v in ((heur, positive(r.get("heuristic_s"))),
                                    (BENCHMARK_KEY, positive(r.get("benchmark_s"))))
                if v is not None]
        ts = finite_list(r.get("tuning_s"), 1000)
        out.append(TunedProblem(
            label=label, key=str(r.get("problem_key") or label),
            direction=p.direction if p else b.direction, dtype=p.dtype if p else "?",
            math=p.math if p else "?", flops=float(p.flops()) if p else None,
            min_bytes=float(p.min_bytes()) if p else None, device=b.device, backend=b.backend,
            source=f"bench {b.name}", sample_kind="run medians", candidates=tuple(_bench_cands(r)),
            chosen=tuple(dict.fromkeys(w for w in winners if isinstance(w, str))),
            chosen_s=positive(r.get("tuned_s")), baselines=tuple(base),
            benchmark_picks=tuple(dict.fromkeys(x for x in picks if isinstance(x, str))),
            tuning_s=statistics.median(ts) if ts else None,
            degraded=bool(r.get("degraded"))))
    return out


# ------------------------------------------------------------------------- tuning results
def _cand(c: dict[str, Any]) -> Cand | None:
    cd = c.get("candidate")
    key = cd.get("key") if isinstance(cd, dict) else c.get("key")
    if not isinstance(key, str):
        return None
    status = str(c.get("status") or "ok")
    pool = _floats(c.get("samples")) or _floats(c.get("screen_samples"))
    med = positive(c.get("median_s")) or (statistics.median(pool) if pool else None)
    lo, hi = positive(c.get("ci_low_s")), positive(c.get("ci_high_s"))
    disc = finite(c.get("discarded"))
    return Cand(key, status, str(c.get("reason") or ""), pool, med,
                (lo, hi) if lo is not None and hi is not None else None,
                int(disc) if disc is not None and disc >= 0 else 0, positive(c.get("clock_mhz")))


def tuned_from_result(d: dict[str, Any], source: str, *, imported: bool = False
                      ) -> TunedProblem | None:
    """A `TuneResult.to_dict()` record (database row, export file, `tune --json`), or None when
    its problem cannot be read."""
    try:
        p = ConvProblem.from_dict(d["problem"])
    except (UsageError, ValueError, TypeError, KeyError, AttributeError):
        return None
    env = _str_dict(d.get("env"))
    cands = [c for c in (_cand(x) for x in _dicts(d.get("candidates"))) if c is not None]
    b = d.get("baselines") if isinstance(d.get("baselines"), dict) else {}
    base = {str(k): v for k, v in ((k, positive(v)) for k, v in b.items()) if v is not None}
    for c in cands:  # records written without baselines: PyTorch's paths measured correct
        if c.key in (HEURISTIC_KEY, BENCHMARK_KEY) and c.status == "ok" and c.median_s:
            base.setdefault(c.key, c.median_s)
    order = sorted(base.items(), key=lambda kv: (kv[0] == BENCHMARK_KEY, kv[0] != HEURISTIC_KEY))
    w = d.get("winner")
    wkey = w.get("key") if isinstance(w, dict) else None
    notes = [str(n) for n in d.get("notes", []) if isinstance(n, str)] \
        if isinstance(d.get("notes"), list) else []
    return TunedProblem(
        label=p.short(), key=p.key(), direction=p.direction, dtype=p.dtype, math=p.math,
        flops=float(p.flops()), min_bytes=float(p.min_bytes()),
        device=env.get("gpu_name") or env.get("cpu") or str(d.get("backend") or "?"),
        backend=str(d.get("backend") or env.get("backend") or "?"), source=source,
        sample_kind="samples", candidates=tuple(cands),
        chosen=(wkey,) if isinstance(wkey, str) else (),
        chosen_s=positive(d.get("winner_time_s")), baselines=tuple(order),
        benchmark_picks=(), tuning_s=positive(d.get("tuning_s")),
        noise_band=finite(d.get("noise_band")), notes=tuple(notes),
        degraded=bool(d.get("degraded")), imported=imported)


def _is_sqlite(path: str) -> bool:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return False
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def _db_records(path: str) -> list[tuple[dict[str, Any], bool]]:
    """Every stored result of a tuning database (opened read-only: nothing is created)."""
    from ..db import TuningDB

    db = TuningDB(path, read_only=True)
    try:
        cur = db.conn.execute("SELECT * FROM results ORDER BY problem_key, created")
        cols = [c[0] for c in cur.description]
        ri, ii = cols.index("result_json"), (cols.index("imported") if "imported" in cols
                                             else None)
        out = []
        for row in cur.fetchall():
            try:
                d = json.loads(row[ri])
            except (TypeError, ValueError, RecursionError):
                continue
            if isinstance(d, dict):
                out.append((d, bool(row[ii]) if ii is not None else False))
        return out
    except (sqlite3.Error, ValueError) as exc:
        raise UsageError(f"--db {path}: cannot read the tuning database ({exc})") from None
    finally:
        db.close()


def load_tuned(path: str, *, named: bool = True) -> tuple[list[TunedProblem], list[dict[str, Any]],
                                                           int]:
    """Tuned problems from a tuning database, a `db export` file or `tune --json` output:
    (problems, peaks dicts found in the file, records that could not be read)."""
    if not os.path.exists(path):
        if named:
            raise UsageError(f"--db {path}: no such file")
        return [], [], 0
    peaks: list[dict[str, Any]] = []
    if _is_sqlite(path):
        recs = _db_records(path)
        source = f"database {path}"
    else:
        doc = read_json(path, what="--db file")
        if isinstance(doc, dict) and doc.get("format") == "convdoctor-tuning-db":
            recs = [(d, False) for d in _dicts(doc.get("records"))]
            source = f"export {display_name(path)}"
        elif isinstance(doc, dict) and doc.get("kind") == "tune":
            recs = [(d, False) for d in _dicts(doc.get("results"))]
            if isinstance(doc.get("peaks"), dict):
                peaks.append(doc["peaks"])
            source = f"tune {display_name(path)}"
        else:
            raise UsageError(f"--db {path}: not a tuning database, a `convdoctor db export` file "
                             "or `convdoctor tune --json` output")
    out = [tuned_from_result(d, source, imported=imp) for d, imp in recs]
    good = [t for t in out if t is not None]
    return good, peaks, len(out) - len(good)


# ------------------------------------------------------------------------------------ peaks
def peaks_from(d: Any, source: str) -> DevicePeaks | None:
    """One peaks record ({"device", "flops": {math key: FLOP/s}, "bandwidth"}), or None."""
    if not isinstance(d, dict) or not isinstance(d.get("flops"), dict):
        return None
    bw = positive(d.get("bandwidth"))
    flops = {str(k): f for k, f in ((k, positive(v)) for k, v in d["flops"].items())
             if f is not None}
    if bw is None or not flops:
        return None
    device = str(d.get("device") or "?").split("|")[0].strip()
    return DevicePeaks(device, flops, bw, source, True)


def load_peaks(path: str) -> list[DevicePeaks]:
    """Measured peaks: a roofline cache file ({device id: peaks}), one peaks record, or the
    `peaks` of `convdoctor tune --json` output."""
    doc = read_json(path, what="--peaks file", max_bytes=16 << 20)
    what = f"measured, {display_name(path)}"
    if isinstance(doc, dict) and isinstance(doc.get("peaks"), dict):
        doc = doc["peaks"]
    one = peaks_from(doc, what)
    if one is not None:
        return [one]
    if isinstance(doc, dict):
        found = [p for p in (peaks_from(v, what) for v in doc.values()) if p is not None]
        if found:
            return found
    raise UsageError(f"--peaks {path}: no peaks in it (expected convdoctor's roofline.json, or "
                     "the output of: convdoctor tune --json)")


def cached_peaks() -> list[DevicePeaks]:
    """The peaks this machine measured (convdoctor's roofline cache), if any."""
    from ..measure import roofline

    try:
        path = roofline._cache_file()
        if not path.is_file():
            return []
        doc = read_json(path, what="roofline cache", max_bytes=16 << 20)
    except (UsageError, OSError):
        return []
    if not isinstance(doc, dict):
        return []
    what = "measured on this machine"
    return [p for p in (peaks_from(v, what) for v in doc.values()) if p is not None]


def datasheet_peaks() -> list[DevicePeaks]:
    doc = json.loads((DATA / "datasheet_peaks.json").read_text(encoding="utf-8"))
    out = []
    for d in doc["devices"]:
        for name in d["names"]:
            out.append(DevicePeaks(name, {k: float(v) for k, v in d["flops"].items()},
                                   float(d["bandwidth"]), f"datasheet, {d['source']}", False))
    return out
