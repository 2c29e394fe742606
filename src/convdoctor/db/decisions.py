"""The `decisions` table of the tuning database: what `optimize` measured for one model (layout,
routing, graphs, speedup), keyed by `runtime.decisions.model_key` and the device and versions.

Only an exact device and versions match is used; `prune` removes these rows by the results' rules
(`TuningDB.prune`), `forget_decisions` all of them. They are not exported: they describe one
machine. `TuningDB` gets these methods from `DecisionsTable`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from . import sqlfile
from .keys import split_env


class DecisionsTable:
    """`TuningDB`'s methods for `optimize`'s decisions (it provides `_guard`, `_write` and
    `read_only`)."""

    read_only: bool

    def _guard(self, fn: Any) -> Any:  # pragma: no cover - TuningDB's
        raise NotImplementedError

    def _write(self, body: Any) -> Any:  # pragma: no cover - TuningDB's
        raise NotImplementedError

    def decision(self, env: dict[str, str], model_key: str) -> dict[str, Any] | None:
        """The decision stored for `model_key` here, or None."""
        dev, ver = split_env(env)

        def q(conn: sqlite3.Connection) -> Any:
            if "decisions" not in sqlfile.tables(conn):    # an older file opened read-only
                return None
            return conn.execute("SELECT decision_json FROM decisions WHERE model_key = ? AND "
                                "device_key = ? AND versions_key = ?",
                                (model_key, dev, ver)).fetchone()

        row = self._guard(q)
        try:
            d = json.loads(row[0]) if row else None
        except ValueError:
            return None
        return d if isinstance(d, dict) else None

    def remember_decision(self, env: dict[str, str], model_key: str,
                          decision: dict[str, Any]) -> None:
        """Store (replace) the decision for `model_key` here; nothing on a read-only database."""
        if self.read_only:
            return
        dev, ver = split_env(env)
        row = (model_key, dev, ver, time.time(), json.dumps(decision))
        self._write(lambda conn: conn.execute(
            "INSERT OR REPLACE INTO decisions (model_key, device_key, versions_key, created, "
            "decision_json) VALUES (?, ?, ?, ?, ?)", row))

    def decision_records(self) -> list[dict[str, Any]]:
        """Every stored decision, oldest first: model key, device, versions, when, and what it
        decided (for `convdoctor db list`)."""
        def q(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            if "decisions" not in sqlfile.tables(conn):
                return []
            return conn.execute("SELECT model_key, device_key, versions_key, created, "
                                "decision_json FROM decisions ORDER BY created").fetchall()

        out = []
        for key, dev, ver, created, dj in self._guard(q):
            try:
                d = json.loads(dj)
            except ValueError:
                d = {}
            d = d if isinstance(d, dict) else {}
            out.append({"model_key": key, "device": json.loads(dev), "versions": json.loads(ver),
                        "created": created,
                        **{k: d.get(k) for k in ("channels_last", "routing", "graphs", "speedup",
                                                 "undone")},
                        "partial": bool(d.get("partial")),
                        "problems": len(d.get("problems") or [])})
        return out

    def forget_decisions(self, *, dry_run: bool = False) -> int:
        """Delete every stored decision (all devices); returns how many."""
        def w(conn: sqlite3.Connection) -> int:
            if "decisions" not in sqlfile.tables(conn):
                return 0
            n = int(conn.execute("SELECT count(*) FROM decisions").fetchone()[0])
            if not dry_run:
                conn.execute("DELETE FROM decisions")
            return n

        return int(self._guard(w) if dry_run else self._write(w))
