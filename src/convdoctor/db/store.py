"""The tuning database: SQLite (stdlib), one row per problem x device x versions, full statistics.

Safety: WAL journal, one transaction per write, a busy timeout so several tuning processes can write
at once; SQLite's atomic commit means a crash (even kill -9) mid-write leaves the previous state.
The file a user names is never renamed or replaced unless it is convdoctor's own database and
SQLite finds it damaged: a file that is not a SQLite database, or a SQLite database of another
program, is refused with a message and left as it is; a damaged database that convdoctor created
(it has the `meta` table) is renamed aside (`<name>.corrupt-<time>`) with a clear message and a
fresh one started: tuning data is a cache, never a reason to crash. A database in a read-only
directory (or a read-only file) is opened read-only: lookups work, stores are skipped with one
warning, and `import`/`prune` say it cannot be written. Read-only use (`read_only=True`: `db list`,
`db export`) creates no file or directory.
A stored result whose versions (driver, CUDA, cuDNN, frontend, torch, schema) differ from the
current environment is *stale*: `get` never returns it as valid; `lookup` says what differs. A
result that came in through `import_` is *imported* until this machine measures the problem itself:
`lookup` says so, and `get` never returns it, so the tuner measures it here before it is used.
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
from . import sharing, sqlfile
from .decisions import DecisionsTable
from .importfile import EXPORT_FORMAT
from .keys import VERSION_KEYS, split_env
from .sqlfile import FILE_SCHEMA_VERSION, SCHEMA_VERSION

ENV_VAR = "CONVDOCTOR_DB"
__all__ = ["ENV_VAR", "EXPORT_FORMAT", "FILE_SCHEMA_VERSION", "SCHEMA_VERSION", "VERSION_KEYS",
           "DatabaseCorrupt", "DatabaseReadOnly", "Lookup", "Record", "TuningDB", "default_path",
           "split_env"]


def default_path() -> Path:
    """CONVDOCTOR_DB if set, else `tuning.sqlite3` in the user cache dir (platformdirs)."""
    from ..settings import current

    named = current().db
    if named:
        return Path(named).expanduser()
    try:
        from platformdirs import user_cache_dir
    except ImportError:  # without platformdirs: the XDG default it would use
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "convdoctor" / "tuning.sqlite3"
    return Path(user_cache_dir("convdoctor")) / "tuning.sqlite3"


@dataclass
class Lookup:
    """What the database holds for a problem on this device: hit, stale, imported or miss."""

    # "hit" (measured here, current versions) | "stale" | "imported" (from `import_`, not yet
    # measured here: `result` is the imported TuneResult, never to be used as measured) | "miss"
    status: str
    result: Any = None                            # TuneResult on a hit (and on imported)
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
    imported: bool = False                        # from `import_`, not measured by this database

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class DatabaseCorrupt(UsageError):
    pass


class DatabaseReadOnly(UsageError):
    """The database was opened read-only (read-only directory or file, or `read_only=True`)."""


class TuningDB(DecisionsTable):
    """The tuning database. `path=None`: CONVDOCTOR_DB or the user cache dir. `read_only`: never
    write, never create (a missing file reads as an empty database)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout_s: float = 60.0,
                 warn: Any = None, read_only: bool = False) -> None:
        if path is not None and not os.fspath(path):
            raise UsageError("the tuning database path is empty",
                             hint="pass a file path with --db or CONVDOCTOR_DB")
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.timeout_s = timeout_s
        self.set_aside: Path | None = None
        self.read_only = read_only            # True once opened read-only, asked for or not
        self._ours = False                    # the file has convdoctor's meta table
        self._has_imported = True             # the results table has the `imported` column
        self._warned_read_only = False
        self._warn = warn if warn is not None else (lambda m: print(m, file=sys.stderr))
        self._conn: sqlite3.Connection | None = None
        self._open()

    # ------------------------------------------------------------------ connection
    def _connect(self, *, read_only: bool, immutable: bool = False) -> sqlite3.Connection:
        return sqlfile.connect(self.path, self.timeout_s, read_only=read_only, immutable=immutable)

    def _open_read_only(self, kind: str) -> sqlite3.Connection:
        self.read_only = True
        if kind == "missing" or kind == "empty":      # nothing stored: an empty database
            return sqlfile.empty_in_memory()
        try:
            conn = self._connect(read_only=True)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            # WAL without -shm in a directory nobody may write: nobody can change it either
            conn = self._connect(read_only=True, immutable=True)
        try:
            if not {"meta", "results"} <= sqlfile.tables(conn):
                raise sqlfile.foreign(self.path)
            self._ours = True
            sqlfile.file_version(conn, self.path)
            self._has_imported = "imported" in sqlfile.columns(conn, "results")
        except BaseException:
            conn.close()
            raise
        return conn

    def _open(self) -> None:
        kind = sqlfile.inspect(self.path)
        conn: sqlite3.Connection | None = None
        try:
            if self.read_only or not sqlfile.writable(self.path):
                conn = self._open_read_only(kind)
            else:
                if kind == "missing":
                    try:
                        self.path.parent.mkdir(parents=True, exist_ok=True)
                    except OSError as exc:
                        raise UsageError(
                            f"cannot create the directory for the tuning database {self.path}: "
                            f"{exc.strerror}",
                            hint="pass a writable path with --db or CONVDOCTOR_DB") from None
                conn = self._connect(read_only=False)
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                try:
                    sqlfile.init_schema(conn, self.path)
                except sqlite3.OperationalError as exc:
                    if kind == "missing" or "readonly" not in str(exc).replace("-", "").lower():
                        raise
                    conn.close()       # a read-only file system: permissions said otherwise
                    conn = None
                    conn = self._open_read_only(kind)
                self._ours = True
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
            if not self._may_set_aside(exc):
                raise self._damaged(exc) from None
            self._set_aside(exc)
            conn = self._connect(read_only=False)
            sqlfile.init_schema(conn, self.path)
            self._ours = True
            self._conn = conn
        except BaseException:
            if conn is not None:
                conn.close()
            raise

    def _damaged(self, exc: BaseException) -> DatabaseCorrupt:
        why = "open read-only" if self.read_only else "not a database convdoctor created"
        return DatabaseCorrupt(
            f"the tuning database {self.path} is damaged ({exc}); convdoctor left it as it is "
            f"({why})", hint="repair it with the sqlite3 tool, delete it, or pass another file "
            "with --db")

    def _may_set_aside(self, exc: BaseException) -> bool:
        """Only convdoctor's own database (meta table seen), writable, damaged per SQLite."""
        if self.read_only or not sqlfile.is_corruption(exc):
            return False
        if self._ours:
            return True
        try:   # the table list says whose file it is (writable_schema: read it despite damage)
            probe = self._connect(read_only=True)
            try:
                probe.execute("PRAGMA writable_schema = ON")
                return "meta" in sqlfile.tables(probe)
            finally:
                probe.close()
        except sqlite3.Error:
            return False

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
        self._ours = False
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
                if self.read_only and "readonly" in str(exc).replace("-", "").lower():
                    raise self._read_only_error("written") from None
                raise UsageError(f"tuning database {self.path}: {exc}",
                                 hint="another process may hold it; try again, or use --db") \
                    from None
            if not sqlfile.is_corruption(exc):
                raise      # a constraint or a bad value: the database itself is fine
            if not self._may_set_aside(exc):
                raise self._damaged(exc) from None
            self.close()
            self._set_aside(exc)
            self._open()
            return fn(self.conn)

    def _read_only_error(self, what: str) -> DatabaseReadOnly:
        return DatabaseReadOnly(
            f"the tuning database {self.path} is open read-only (its directory or the file cannot "
            f"be written, or the command only reads): it cannot be {what}",
            hint="pass a writable file with --db or CONVDOCTOR_DB")

    def _write(self, body: Any) -> Any:
        """body(conn) inside one BEGIN IMMEDIATE transaction (rolled back if it raises),
        through `_guard`."""
        if self.read_only:
            raise self._read_only_error("changed")

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
    @property
    def _imported_col(self) -> str:
        return "imported" if self._has_imported else "0"   # a schema-1 file opened read-only

    def lookup(self, problem: ConvProblem, env: dict[str, str]) -> Lookup:
        from ..tune.result import TuneResult

        device_key, versions_key = split_env(env)
        pkey = problem.key()

        def q(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
            return conn.execute(
                f"SELECT versions_key, result_json, {self._imported_col} FROM results WHERE "
                "problem_key = ? AND device_key = ? ORDER BY created DESC",
                (pkey, device_key)).fetchall()

        rows = self._guard(q)
        if not rows:
            return Lookup("miss")
        for vkey, rjson, imported in rows:
            if vkey == versions_key:
                try:
                    result = TuneResult.from_dict(json.loads(rjson))
                except (ValueError, KeyError, TypeError, UsageError):
                    return Lookup("miss")
                return Lookup("imported" if imported else "hit", result)
        have = json.loads(rows[0][0])
        want = json.loads(versions_key)
        diffs = {k: (have.get(k), want.get(k)) for k in sorted(set(have) | set(want))
                 if have.get(k) != want.get(k)}
        return Lookup("stale", None, diffs)

    def get(self, problem: ConvProblem, env: dict[str, str]) -> Any:
        """The TuneResult measured here for this problem and environment, or None (miss, stale,
        or imported and not yet measured here)."""
        lk = self.lookup(problem, env)
        return lk.result if lk.status == "hit" else None

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
                f"created, tuning_s, {self._imported_col} FROM results "
                "ORDER BY problem_key, created").fetchall()

        for row in self._guard(q):
            if problem_contains and problem_contains not in row[0]:
                continue
            stale = None
            if env is not None:
                stale = row[1] == cur_dev and row[2] != cur_ver
            yield Record(problem_key=row[0], device=json.loads(row[1]), versions=json.loads(row[2]),
                         backend=row[3], winner=row[4], winner_time_s=row[5], created=row[6],
                         tuning_s=row[7], stale=stale, imported=bool(row[8]))

    def list(self, env: dict[str, str] | None = None, *, problem_contains: str | None = None
             ) -> list[Record]:
        return list(self.records(env, problem_contains=problem_contains))

    def count(self) -> int:
        return int(self._guard(lambda c: c.execute("SELECT count(*) FROM results").fetchone()[0]))

    # ------------------------------------------------------------------ writes
    def put(self, result: Any) -> None:
        """Store a TuneResult measured here (replacing one with the same problem, device and
        versions, imported or not). On a read-only database: one warning, nothing stored."""
        if getattr(result, "degraded", False):
            raise UsageError("refusing to store a result measured under a clock slowdown")
        if self.read_only:
            if not self._warned_read_only:
                self._warned_read_only = True
                self._warn(f"convdoctor: warning: the tuning database {self.path} is read-only; "
                           "results measured now are used but not stored")
            return
        payload = result.to_dict()
        self._write(lambda conn: sharing.put_row(conn, payload, imported=False))

    def prune(self, env: dict[str, str] | None = None, *, stale: bool = True,
              older_than_days: float | None = None, other_devices: bool = False,
              dry_run: bool = False) -> int:
        """Delete stale rows (same device, other versions; needs env), rows older than N days
        (and rows dated in the future, which no clock wrote), or rows of other devices. Returns
        how many rows were (or would be) deleted."""
        if older_than_days is not None and not (isinstance(older_than_days, (int, float))
                                                and 0 <= older_than_days <= 1e6):
            raise UsageError(f"older than {older_than_days!r} days: expected a number of days "
                             "from 0 to 1000000")
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
            now = time.time()
            conds.append("(created < ? OR created > ?)")
            params += [now - older_than_days * 86400.0, now + 86400.0]
        if not conds:
            return 0
        where = " OR ".join(conds)

        def w(conn: sqlite3.Connection) -> int:
            n = int(conn.execute(f"SELECT count(*) FROM results WHERE {where}",
                                 params).fetchone()[0])
            if not dry_run:
                conn.execute(f"DELETE FROM results WHERE {where}", params)
                # remembered left-out units and optimize's decisions go by the same rules (same
                # column names)
                conn.execute(f"DELETE FROM left_out WHERE {where}", params)
                if "decisions" in sqlfile.tables(conn):
                    conn.execute(f"DELETE FROM decisions WHERE {where}", params)
            return n

        return int(self._guard(w) if dry_run else self._write(w))

    # ------------------------------------------------------------------ units left out
    # A unit (a cuDNN engine) whose step hung or crashed a candidate listing on this device and
    # these versions (`tune.worker.WorkerBackend.hung`): later processes leave it out of listings
    # of the same problem kind from the start instead of paying the hang again (on an H100
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

        return int(self._guard(w) if dry_run else self._write(w))

    # ------------------------------------------------------------------ sharing
    def export(self, path: str | os.PathLike[str]) -> int:
        """Write every record (full statistics) to a JSON file; returns the count. A regular file
        is replaced atomically (through a symbolic link, its target); a device or a pipe
        (/dev/stdout) is written as a stream, never replaced."""
        if not os.fspath(path):
            raise UsageError("export needs a file path (got an empty one)")
        rows = self._guard(lambda c: c.execute(
            "SELECT result_json FROM results ORDER BY problem_key, created").fetchall())
        doc: dict[str, Any] = {"format": EXPORT_FORMAT, "schema": SCHEMA_VERSION,
                               "exported": time.time(),
                               "records": [json.loads(r[0]) for r in rows]}
        sharing.write_file(Path(path), json.dumps(doc))
        return len(doc["records"])

    def import_(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """Merge an exported file, all of it or nothing: every record is checked first
        (`importfile.load_export`), then all are written in one transaction (`import_records`)."""
        from .importfile import load_export

        if self.read_only:
            raise self._read_only_error("imported into")
        return self.import_records(load_export(path, schema_version=SCHEMA_VERSION))

    def import_records(self, records: builtins.list[dict[str, Any]]) -> dict[str, int]:
        """Write records checked by `importfile.load_export` in one transaction. Imported rows are
        marked so (`Lookup.status == "imported"`): never used until measured here. A record
        replaces an imported one with the same key only when newer, and never one measured here."""
        if self.read_only:
            raise self._read_only_error("imported into")
        counts = {"added": 0, "replaced": 0, "kept": 0, "invalid": 0}

        def w(conn: sqlite3.Connection) -> None:
            for rec in records:
                counts[sharing.put_row(conn, rec, imported=True)] += 1

        self._write(w)
        return counts
