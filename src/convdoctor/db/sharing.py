"""Writing a tuning result row, and writing an export file where a user asked for it."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..problem import ConvProblem
from .keys import split_env


def put_row(conn: sqlite3.Connection, payload: dict[str, Any], *, imported: bool) -> str:
    """Insert one result inside the caller's transaction: 'added', 'replaced' or 'kept'. An
    imported row replaces only an older imported row; a row measured here replaces any."""
    device_key, versions_key = split_env(payload["env"])
    pkey = ConvProblem.from_dict(payload["problem"]).key()
    winner = (payload.get("winner") or {}).get("key")
    created = float(payload.get("created") or time.time())
    row = (pkey, device_key, versions_key, str(payload.get("backend", "")), winner,
           payload.get("winner_time_s"), created, payload.get("tuning_s"),
           json.dumps(payload["env"], sort_keys=True), json.dumps(payload, separators=(",", ":")),
           int(imported))
    old = conn.execute(
        "SELECT created, imported FROM results WHERE problem_key = ? AND device_key = ? AND "
        "versions_key = ?", (pkey, device_key, versions_key)).fetchone()
    if old is not None and imported and (not old[1] or float(old[0]) >= created):
        return "kept"
    conn.execute(
        "INSERT OR REPLACE INTO results (problem_key, device_key, versions_key, backend, winner, "
        "winner_time_s, created, tuning_s, env_json, result_json, imported) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    return "added" if old is None else "replaced"


def write_file(out: Path, text: str) -> None:
    """Write `text` to the file a user named without replacing what is not a regular file: a
    device or a pipe is written as a stream; a regular file (or a symbolic link's target) is
    replaced atomically through a temporary file beside it."""
    try:
        st = os.stat(out)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror}") from None
    try:
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise UsageError(f"cannot write {out}: it is a directory")
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(text)
            return
        target = Path(os.path.realpath(out))
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
