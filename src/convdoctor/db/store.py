"""The tuning database: SQLite (stdlib), one row per problem x device x versions, full statistics.

Safety: WAL journal, one transaction per write, a busy timeout so several tuning processes can write
at once; SQLite's atomic commit means a crash (even kill -9) mid-write leaves the previous state.
A file that is not a readable database is renamed aside (`<name>.corrupt-<time>`) with a clear
message, and a fresh database is started: tuning data is a cache, never a reason to crash.
A stored result whose versions (driver, CUDA, cuDNN, frontend, torch, schema) differ from the
current environment is *stale*: `get` never returns it as valid; `lookup` says what differs.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..problem import ConvProblem

SCHEMA_VERSION = 1
EXPORT_FORMAT = "convdoctor-tuning-db"
ENV_VAR = "CONVDOCTOR_DB"

# Environment parts that, when they change, make a stored timing stale (not merely another device).
VERSION_KEYS = ("driver", "cuda_runtime", "cudnn", "cudnn_frontend", "cudnn_frontend_backend",
                "triton", "kernels", "settings",
                "torch", "mkldnn", "onednn", "schema")

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    problem_key   TEXT NOT NULL,
    device_key    TEXT NOT NULL,
    versions_key  TEXT NOT NULL,
    backend       TEXT NOT NULL,
    winner        TEXT,
    winner_time_s REAL,
    created       REAL NOT NULL,
    tuning_s      REAL,
    env_json      TEXT NOT NULL,
    result_json   TEXT NOT NULL,
    PRIMARY KEY (problem_key, device_key, versions_key)
);
CREATE INDEX IF NOT EXISTS results_device ON results (device_key);
CREATE TABLE IF NOT EXISTS left_out (
    kind          TEXT NOT NULL,
    unit          TEXT NOT NULL,
    device_key    TEXT NOT NULL,
    versions_key  TEXT NOT NULL,
    why           TEXT NOT NULL,
    created       REAL NOT NULL,
    PRIMARY KEY (kind, unit, device_key, versions_key)
);
"""


def default_path() -> Path:
    """CONVDOCTOR_DB if set, else `tuning.sqlite3` in the user cache dir (platformdirs)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    try:
        from platformdirs import user_cache_dir
    except ImportError:  # a bare environment (the GPU box): the XDG default platformdirs would use
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "convdoctor" / "tuning.sqlite3"
    return Path(user_cache_dir("convdoctor")) / "tuning.sqlite3"


def split_env(env: dict[str, str]) -> tuple[str, str]:
    """(device_key, versions_key): canonical JSON of the identity and of the version parts."""
    full = {str(k): str(v) for k, v in env.items()}
    full.setdefault("schema", str(SCHEMA_VERSION))
    ident = {k: v for k, v in sorted(full.items()) if k not in VERSION_KEYS}
    vers = {k: v for k, v in sorted(full.items()) if k in VERSION_KEYS}
    return (json.dumps(ident, sort_keys=True, separators=(",", ":")),
            json.dumps(vers, sort_keys=True, separators=(",", ":")))


@dataclass
class Lookup:
    """What the database holds for a problem on this device: hit, stale or miss."""

    status: str                                   # "hit" | "stale" | "miss"
    result: Any = None                            # TuneResult on a hit
    differences: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)


@dataclass
class Record:
    problem_key: str
    device: dict[str, str]
    versions: dict[str, str]
    backend: str
    winner: str | None
    winner_time_s: float | None
    created: float
    tuning_s: float | None
    stale: bool | None = None                     # relative to a given env, when one was given

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class DatabaseCorrupt(UsageError):
    pass


class TuningDB:
    """The tuning database. `path=None`: CONVDOCTOR_DB or the user cache dir."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout_s: float = 60.0,
                 warn: Any = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.timeout_s = timeout_s
        self.set_aside: Path | None = None
        self._warn = warn if warn is not None else (lambda m: print(m, file=sys.stderr))
        self._conn: sqlite3.Connection | None = None
        self._open()

    # ------------------------------------------------------------------ connection
    def _connect(self) -> sqlite3.Connection:
        if self.path.exists() and self.path.is_dir():
            raise UsageError(f"the tuning database path {self.path} is a directory",
                             hint="pass a file path with --db or CONVDOCTOR_DB")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create the directory for the tuning database {self.path}: "
                             f"{exc}", hint="pass a writable path with --db or CONVDOCTOR_DB"
                             ) from None
        conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
        return conn

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            # e.g. a network file system: fall back, still atomic (rollback journal).
            conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in filter(None, (s.strip() for s in _DDL.split(";"))):
                conn.execute(stmt)
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema', ?)",
                             (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                conn.execute("ROLLBACK")
                raise UsageError(
                    f"the tuning database {self.path} has schema {row[0]}, newer than this "
                    f"convdoctor's ({SCHEMA_VERSION})",
                    hint="upgrade convdoctor, or use another file with --db")
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _open(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            self._init_schema(conn)
            ok = conn.execute("PRAGMA quick_check").fetchone()
            if ok is None or ok[0] != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {ok[0] if ok else 'no answer'}")
            self._conn = conn
        except sqlite3.OperationalError as exc:
            # locked, read-only, no space, cannot open: the file is not damaged, so keep it.
            if conn is not None:
                conn.close()
            raise UsageError(f"cannot use the tuning database {self.path}: {exc}",
                             hint="check its permissions and free space, wait for other "
                             "processes, or pass another file with --db / CONVDOCTOR_DB") from None
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            self._set_aside(exc)
            conn = self._connect()
            self._init_schema(conn)
            self._conn = conn

    def _set_aside(self, exc: Exception) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        try:
            os.replace(self.path, target)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    os.replace(side, target.with_name(target.name + suffix))
        except OSError as err:
            raise DatabaseCorrupt(
                f"the tuning database {self.path} is unreadable ({exc}) and could not be moved "
                f"aside ({err})", hint="delete it or pass another file with --db") from None
        self.set_aside = target
        self._warn(f"convdoctor: warning: the tuning database {self.path} was unreadable ({exc}); "
                   f"it was moved to {target} and a new, empty database was started. Tuned "
                   "choices will be measured again.")

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self._open()
        assert self._conn is not None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _guard(self, fn: Any) -> Any:
        """Run fn(conn); a database that turns out corrupt is set aside and fn retried once."""
        try:
            return fn(self.conn)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise UsageError(f"tuning database {self.path}: {exc}",
                                 hint="another process may hold it; try again, or use --db") \
                    from None
            self.close()
            self._set_aside(exc)
            self._open()
            return fn(self.conn)

    def _write(self, body: Any) -> Any:
        """body(conn) inside one BEGIN IMMEDIATE transaction (rolled back if it raises),
        through `_guard`."""
        def w(conn: sqlite3.Connection) -> Any:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = body(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return out

        return self._guard(w)

    # ------------------------------------------------------------------ reads
    def lookup(self, problem: ConvProblem, env: dict[str, str]) -> Lookup:
        from ..tune.result import TuneResult

        device_key, versions_key = split_env(env)
        pkey = problem.key()

        def q(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            return conn.execute(
                "SELECT versions_key, result_json FROM results WHERE problem_key = ? AND "
                "device_key = ? ORDER BY created DESC", (pkey, device_key)).fetchall()

        rows = self._guard(q)
        if not rows:
            return Lookup("miss")
        for vkey, rjson in rows:
            if vkey == versions_key:
                try:
                    return Lookup("hit", TuneResult.from_dict(json.loads(rjson)))
                except (ValueError, KeyError, TypeError, UsageError):
                    return Lookup("miss")
        have = json.loads(rows[0][0])
        want = json.loads(versions_key)
        diffs = {k: (have.get(k), want.get(k)) for k in sorted(set(have) | set(want))
                 if have.get(k) != want.get(k)}
        return Lookup("stale", None, diffs)

    def get(self, problem: ConvProblem, env: dict[str, str]) -> Any:
        """The stored TuneResult for this problem and environment, or None (miss or stale)."""
        return self.lookup(problem, env).result

    def get_many(self, problems: Iterable[ConvProblem], env: dict[str, str]) -> dict[str, Lookup]:
        """Lookups for many problems in one read transaction, keyed by problem key."""
        out: dict[str, Lookup] = {}
        conn = self.conn
        conn.execute("BEGIN")
        try:
            for p in problems:
                out[p.key()] = self.lookup(p, env)
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")
        return out

    def records(self, env: dict[str, str] | None = None, *, problem_contains: str | None = None
                ) -> Iterator[Record]:
        cur_dev, cur_ver = split_env(env) if env is not None else (None, None)

        def q(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT problem_key, device_key, versions_key, backend, winner, winner_time_s, "
                "created, tuning_s FROM results ORDER BY problem_key, created").fetchall()

        for row in self._guard(q):
            if problem_contains and problem_contains not in row[0]:
                continue
            stale = None
            if env is not None:
                stale = row[1] == cur_dev and row[2] != cur_ver
            yield Record(problem_key=row[0], device=json.loads(row[1]), versions=json.loads(row[2]),
                         backend=row[3], winner=row[4], winner_time_s=row[5], created=row[6],
                         tuning_s=row[7], stale=stale)

    def list(self, env: dict[str, str] | None = None, *, problem_contains: str | None = None
             ) -> list[Record]:
        return list(self.records(env, problem_contains=problem_contains))

    def count(self) -> int:
        return int(self._guard(lambda c: c.execute("SELECT count(*) FROM results").fetchone()[0]))

    # ------------------------------------------------------------------ writes
    def put(self, result: Any) -> None:
        """Store a TuneResult (replacing one with the same problem, device and versions)."""
        if getattr(result, "degraded", False):
            raise UsageError("refusing to store a result measured under a clock slowdown")
        payload = result.to_dict()
        self._put_row(payload)

    def _put_row(self, payload: dict[str, Any], *, only_if_newer: bool = False) -> str:
        device_key, versions_key = split_env(payload["env"])
        pkey = ConvProblem.from_dict(payload["problem"]).key()
        winner = (payload.get("winner") or {}).get("key")
        row = (pkey, device_key, versions_key, str(payload.get("backend", "")), winner,
               payload.get("winner_time_s"), float(payload.get("created") or time.time()),
               payload.get("tuning_s"), json.dumps(payload["env"], sort_keys=True),
               json.dumps(payload, separators=(",", ":")))

        def w(conn: sqlite3.Connection) -> str:
            conn.execute("BEGIN IMMEDIATE")
            try:
                old = conn.execute(
                    "SELECT created FROM results WHERE problem_key = ? AND device_key = ? AND "
                    "versions_key = ?", (pkey, device_key, versions_key)).fetchone()
                if old is not None and only_if_newer and float(old[0]) >= row[6]:
                    conn.execute("ROLLBACK")
                    return "kept"
                conn.execute(
                    "INSERT OR REPLACE INTO results (problem_key, device_key, versions_key, backend,"
                    " winner, winner_time_s, created, tuning_s, env_json, result_json) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return "added" if old is None else "replaced"

        return str(self._guard(w))

    def prune(self, env: dict[str, str] | None = None, *, stale: bool = True,
              older_than_days: float | None = None, other_devices: bool = False,
              dry_run: bool = False) -> int:
        """Delete stale rows (same device, other versions; needs env), rows older than N days,
        or rows of other devices. Returns how many rows were (or would be) deleted."""
        conds: list[str] = []
        params: list[Any] = []
        if env is not None:
            dev, ver = split_env(env)
            if stale:
                conds.append("(device_key = ? AND versions_key != ?)")
                params += [dev, ver]
            if other_devices:
                conds.append("(device_key != ?)")
                params.append(dev)
        if older_than_days is not None:
            conds.append("(created < ?)")
            params.append(time.time() - older_than_days * 86400.0)
        if not conds:
            return 0
        where = " OR ".join(conds)

        def w(conn: sqlite3.Connection) -> int:
            n = int(conn.execute(f"SELECT count(*) FROM results WHERE {where}",
                                 params).fetchone()[0])
            if not dry_run:
                conn.execute(f"DELETE FROM results WHERE {where}", params)
                # remembered left-out units go by the same rules (same column names)
                conn.execute(f"DELETE FROM left_out WHERE {where}", params)
            return n

        return int(self._write(w))

    # ------------------------------------------------------------------ units left out
    # A unit (a cuDNN engine) whose step hung or crashed a candidate listing on this device and
    # these versions (`tune.worker.WorkerBackend.hung`): later processes leave it out of listings
    # of the same problem kind from the start instead of paying the hang again (session 19, H100:
    # eng69's quick time hung once per process on 3D fp16 wgrad, 30-40 s each time). Only an
    # exact device and versions match is used; `prune` removes these rows by the same rules as
    # results, `forget_left_out` all of them. They are not exported (they describe one machine).
    def left_out(self, env: dict[str, str]) -> dict[str, dict[str, str]]:
        """{problem kind: {unit: why}} remembered for this device and versions."""
        dev, ver = split_env(env)
        rows = self._guard(lambda c: c.execute(
            "SELECT kind, unit, why FROM left_out WHERE device_key = ? AND versions_key = ? "
            "ORDER BY kind, unit", (dev, ver)).fetchall())
        out: dict[str, dict[str, str]] = {}
        for kind, unit, why in rows:
            out.setdefault(str(kind), {})[str(unit)] = str(why)
        return out

    def left_out_records(self) -> builtins.list[dict[str, Any]]:  # `list` here is TuningDB.list
        """Every remembered unit, with its device and versions (for `convdoctor db list`)."""
        rows = self._guard(lambda c: c.execute(
            "SELECT kind, unit, why, device_key, versions_key, created FROM left_out "
            "ORDER BY created").fetchall())
        return [{"kind": k, "unit": u, "why": w, "device": json.loads(d),
                 "versions": json.loads(v), "created": t} for k, u, w, d, v, t in rows]

    def remember_left_out(self, env: dict[str, str], units: dict[str, dict[str, str]]) -> int:
        """Store {problem kind: {unit: why}} for this device and versions (one transaction);
        returns how many were new."""
        dev, ver = split_env(env)
        now = time.time()
        rows = [(str(k), str(u), dev, ver, str(w), now)
                for k, us in units.items() for u, w in us.items()]
        if not rows:
            return 0

        def w(conn: sqlite3.Connection) -> int:
            before = conn.total_changes
            conn.executemany("INSERT OR IGNORE INTO left_out (kind, unit, device_key, "
                             "versions_key, why, created) VALUES (?, ?, ?, ?, ?, ?)", rows)
            return conn.total_changes - before

        return int(self._write(w))

    def forget_left_out(self, *, dry_run: bool = False) -> int:
        """Delete every remembered unit (all devices); returns how many."""
        def w(conn: sqlite3.Connection) -> int:
            n = int(conn.execute("SELECT count(*) FROM left_out").fetchone()[0])
            if not dry_run:
                conn.execute("DELETE FROM left_out")
            return n

        return int(self._write(w))

    # ------------------------------------------------------------------ sharing
    def export(self, path: str | os.PathLike[str]) -> int:
        """Write every record (full statistics) to a JSON file; returns the count."""
        rows = self._guard(lambda c: c.execute(
            "SELECT result_json FROM results ORDER BY problem_key, created").fetchall())
        doc: dict[str, Any] = {"format": EXPORT_FORMAT, "schema": SCHEMA_VERSION,
                               "exported": time.time(),
                               "records": [json.loads(r[0]) for r in rows]}
        out = Path(path)
        tmp = out.with_name(out.name + ".tmp")
        try:
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, out)
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc}") from None
        return len(doc["records"])

    def import_(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """Merge an exported file; a record replaces one with the same key only when newer."""
        p = Path(path)
        try:
            doc = json.loads(p.read_text())
        except OSError as exc:
            raise UsageError(f"cannot read {p}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p} is not JSON ({exc}); expected a file written by "
                             "`convdoctor db export`") from None
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise UsageError(f"{p} is not a convdoctor tuning export (no format "
                             f"{EXPORT_FORMAT!r})")
        if int(doc.get("schema", 0)) > SCHEMA_VERSION:
            raise UsageError(f"{p} was written with schema {doc.get('schema')}, newer than this "
                             f"convdoctor's ({SCHEMA_VERSION}); upgrade convdoctor")
        counts = {"added": 0, "replaced": 0, "kept": 0, "invalid": 0}
        from ..tune.result import TuneResult

        for rec in doc.get("records", []):
            try:
                TuneResult.from_dict(rec)      # validates the record
                status = self._put_row(rec, only_if_newer=True)
            except (KeyError, TypeError, ValueError, UsageError):
                counts["invalid"] += 1
                continue
            counts[status] += 1
        return counts
