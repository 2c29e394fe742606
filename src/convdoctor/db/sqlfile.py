"""The tuning database's SQLite file: what is at the path, how to open it, its tables.

`inspect` looks at the path before SQLite does, so that a file that is not a SQLite database is
refused without being opened for writing. `init_schema` creates the tables of a new (empty)
database, refuses another program's database, and migrates an older convdoctor file in place.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import urllib.parse
from pathlib import Path

from ..errors import UsageError

# the record format: part of every versions key, and the `schema` of an export file
SCHEMA_VERSION = 1
# the tables of the database file (meta 'schema'): 2 added `results.imported`
FILE_SCHEMA_VERSION = 2
SQLITE_MAGIC = b"SQLite format 3\x00"
# SQLite result codes that mean a damaged file (the low byte of sqlite_errorcode)
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26

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
    imported      INTEGER NOT NULL DEFAULT 0,
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
CREATE TABLE IF NOT EXISTS decisions (
    model_key     TEXT NOT NULL,
    device_key    TEXT NOT NULL,
    versions_key  TEXT NOT NULL,
    created       REAL NOT NULL,
    decision_json TEXT NOT NULL,
    PRIMARY KEY (model_key, device_key, versions_key)
);
"""


def _add_imported(conn: sqlite3.Connection) -> None:
    cols = {str(r[1]) for r in conn.execute("PRAGMA table_info(results)").fetchall()}
    if "imported" not in cols:
        conn.execute("ALTER TABLE results ADD COLUMN imported INTEGER NOT NULL DEFAULT 0")


# file schema N -> N + 1, each run in the transaction that records the new version
_MIGRATIONS = {1: _add_imported}




def _add_imported(conn: sqlite3.Connection) -> None:
    if "imported" not in columns(conn, "results"):
        conn.execute("ALTER TABLE results ADD COLUMN imported INTEGER NOT NULL DEFAULT 0")


# file schema N -> N + 1, each run in the transaction that records the new version
_MIGRATIONS = {1: _add_imported}


def is_corruption(exc: BaseException) -> bool:
    """True for SQLite's 'damaged file' errors only; a constraint, a bad parameter or a lock is
    never a reason to set a database aside."""
    if not isinstance(exc, sqlite3.DatabaseError) or type(exc) is not sqlite3.DatabaseError:
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (int(code) & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text or "quick_check" in text


def inspect(path: Path) -> str:
    """'missing', 'empty' or 'sqlite'; UsageError for anything else, which stays untouched."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        raise UsageError(f"cannot use the tuning database {path}: {exc.strerror}",
                         hint="pass another file with --db or CONVDOCTOR_DB") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"the tuning database path {path} is a directory",
                         hint="pass a file path with --db or CONVDOCTOR_DB")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"the tuning database path {path} is not a regular file",
                         hint="pass a file path with --db or CONVDOCTOR_DB")
    if st.st_size == 0:
        return "empty"
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise UsageError(f"cannot read the tuning database {path}: {exc.strerror}",
                         hint="check its permissions, or pass another file with --db") from None
    if head != SQLITE_MAGIC:
        raise UsageError(f"{path} is not a SQLite database; convdoctor left it as it is",
                         hint="pass the tuning database (or a new file name) with --db or "
                         "CONVDOCTOR_DB")
    return "sqlite"


def writable(path: Path) -> bool:
    """Whether this process may write the file and create its -wal/-shm files beside it."""
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.absolute().parent, os.W_OK | os.X_OK)
    parent = path.absolute().parent      # the nearest directory that exists
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def connect(path: Path, timeout_s: float, *, read_only: bool,
            immutable: bool = False) -> sqlite3.Connection:
    if read_only:
        query = "mode=ro" + ("&immutable=1" if immutable else "")
        uri = f"file:{urllib.parse.quote(str(path.absolute()))}?{query}"
        conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None)
    else:
        conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
    return conn


def empty_in_memory() -> sqlite3.Connection:
    """An empty database with the tables (what a missing file reads as, read-only)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for stmt in filter(None, (s.strip() for s in _DDL.split(";"))):
        conn.execute(stmt)
    return conn


def tables(conn: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})").fetchall()}


def foreign(path: Path) -> UsageError:
    return UsageError(f"{path} is a SQLite database of another program (no convdoctor meta "
                      "table); convdoctor left it as it is",
                      hint="pass the tuning database (or a new file name) with --db")


def file_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file schema recorded in meta (0 if none); UsageError when newer than this code's."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    version = int(row[0]) if row is not None and str(row[0]).isdigit() else 0
    if version > FILE_SCHEMA_VERSION:
        raise UsageError(
            f"the tuning database {path} has schema {version}, newer than this "
            f"convdoctor's ({FILE_SCHEMA_VERSION})",
            hint="upgrade convdoctor, or use another file with --db")
    return version


def init_schema(conn: sqlite3.Connection, path: Path) -> None:
    """WAL, the tables of a new database, or an older convdoctor file migrated in place (every
    row kept); another program's database is refused untouched."""
    if tables(conn) - {"meta", "results", "left_out", "decisions"} and "meta" not in tables(conn):
        raise foreign(path)      # before WAL mode, which would change the file's header
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        # e.g. a network file system: fall back, still atomic (rollback journal).
        conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        existing = tables(conn)
        if existing and "meta" not in existing:
            raise foreign(path)
        for stmt in filter(None, (s.strip() for s in _DDL.split(";"))):
            conn.execute(stmt)
        version = file_version(conn, path) if existing else 0
        if not version:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)",
                         (str(FILE_SCHEMA_VERSION),))
        while 0 < version < FILE_SCHEMA_VERSION:
            _MIGRATIONS[version](conn)
            version += 1
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(version),))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
