"""`convdoctor db list|export|import|prune`: look after the tuning database, share it across machines."""

from __future__ import annotations

import argparse
import datetime as _dt
from typing import Any

from ..argtypes import finite_float
from ..errors import UsageError
from . import env_name

DB_HELP = f"database file (default: {env_name('db')} or the user cache dir)"


def _db_option(p: argparse.ArgumentParser) -> None:
    """--db before or after the action (`db --db X list`, `db list --db X`)."""
    p.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=None, help=DB_HELP)
    sub = p.add_subparsers(dest="db_command", metavar="ACTION")
    ls = sub.add_parser("list", help="list stored results (reads only: creates no file)")
    _db_option(ls)
    ls.add_argument("--problem", default=None, help="only problems whose key contains this text")
    ls.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="print machine-readable JSON")
    ls.add_argument("--check-stale", action="store_true",
                    help="compare with this machine's environment (starts the tuning backend)")
    ls.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    ex = sub.add_parser("export", help="write every result (full statistics) to a JSON file")
    _db_option(ex)
    ex.add_argument("path")
    ex.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="print machine-readable JSON")
    im = sub.add_parser("import", help="merge a file written by `db export`, all of it or nothing "
                        "(every record checked first; newer wins, a result measured here is "
                        "kept); imported results are measured again here before they are used")
    _db_option(im)
    im.add_argument("path")
    im.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="print machine-readable JSON")
    pr = sub.add_parser("prune", help="delete stale or old results")
    _db_option(pr)
    pr.add_argument("--older-than", type=finite_float(0.0, 1e6, unit="days"), default=None,
                    metavar="DAYS", help="delete results older than DAYS (and any dated in the "
                    "future)")
    pr.add_argument("--stale", action="store_true", help="delete results of this device whose "
                    "versions differ from this machine's (starts the tuning backend)")
    pr.add_argument("--other-devices", action="store_true",
                    help="delete results of other devices (starts the tuning backend)")
    pr.add_argument("--left-out", action="store_true",
                    help="forget every engine remembered as hanging a candidate listing, so "
                    "the next listings try it again")
    pr.add_argument("--decisions", action="store_true",
                    help="forget every decision optimize measured (layout, routing, graphs, "
                         "speedup): the next optimize of each model measures them again")
    pr.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    pr.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    pr.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="print machine-readable JSON")


def _env(backend: str) -> dict[str, str]:
    from ..tune.harness import environment_of
    from ..tune.worker import WorkerBackend

    with WorkerBackend(backend) as be:
        return environment_of(be)


def _label(key: str) -> str:
    from ..problem import ConvProblem

    try:
        return ConvProblem.parse(key).short()
    except UsageError:
        return key


def _when(ts: Any) -> str:
    try:
        return _dt.datetime.fromtimestamp(float(ts)).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OverflowError, OSError):   # a date no clock wrote
        return "?"


def run(args: argparse.Namespace) -> int:
    from ..db import TuningDB
    from . import emit

    action = getattr(args, "db_command", None)
    if not action:
        raise UsageError("say what to do: convdoctor db list|export PATH|import PATH|prune ...")
    records = None
    if action == "import":      # the whole file is checked before the database is opened
        from ..db.importfile import load_export
        from ..db.store import SCHEMA_VERSION

        records = load_export(args.path, schema_version=SCHEMA_VERSION)
    db = TuningDB(args.db, read_only=action in ("list", "export"))
    try:
        if action == "list":
            env = _env(args.backend) if args.check_stale else None
            recs = db.list(env, problem_contains=args.problem)
            left = db.left_out_records()
            decided = db.decision_records()
            payload: dict[str, Any] = {"kind": "db-list", "db": str(db.path), "count": len(recs),
                                       "records": [r.to_dict() for r in recs],
                                       "left_out": left, "decisions": decided}
            lines = [f"database: {db.path} ({len(recs)} results"
                     + (", no file yet)" if not db.path.exists() else ")")]
            from ..tune.render import fmt_time, table

            rows = []
            for r in recs:
                dev = r.device.get("gpu_name") or r.device.get("cpu") or r.backend
                state = "" if r.stale is None else ("STALE" if r.stale else "valid")
                if r.imported:      # never used until measured here
                    state = (state + " " if state else "") + "imported"
                t = r.winner_time_s
                shown = fmt_time(t) if isinstance(t, (int, float)) and not isinstance(t, bool) \
                    else "?"
                rows.append([_label(r.problem_key), dev, str(r.winner or "-"), shown,
                             _when(r.created), state])
            if rows:
                lines.append(table(rows, ["problem", "device", "winner", "time", "tuned",
                                          "state"]))
            for x in left:
                dev = x["device"].get("gpu_name") or x["device"].get("cpu") or "?"
                lines.append(f"left out of {x['kind']} listings on {dev} since "
                             f"{_when(x['created'])}: {x['unit']} ({x['why'][:120]})")
            if left:
                lines.append("(`convdoctor db prune --left-out` forgets them)")
            lines += _decision_lines(decided)
            emit(args, payload, "\n".join(lines))
            return 0
        if action == "export":
            n = db.export(args.path)
            emit(args, {"kind": "db-export", "db": str(db.path), "path": args.path, "count": n},
                 f"exported {n} results from {db.path} to {args.path}")
            return 0
        if action == "import":
            assert records is not None
            counts = db.import_records(records)
            emit(args, {"kind": "db-import", "db": str(db.path), "path": args.path, **counts},
                 f"imported {args.path} into {db.path}: {counts['added']} added, "
                 f"{counts['replaced']} replaced, {counts['kept']} kept (ours newer, or "
                 "measured here); imported results are measured again here before they are used")
            return 0
        if action == "prune":
            if not (args.stale or args.other_devices or args.older_than is not None
                    or args.left_out or args.decisions):
                raise UsageError("say what to prune: --stale, --other-devices, --left-out, "
                                 "--decisions and/or --older-than DAYS")
            n = 0
            if args.stale or args.other_devices or args.older_than is not None:
                env = _env(args.backend) if (args.stale or args.other_devices) else None
                n = db.prune(env, stale=args.stale, other_devices=args.other_devices,
                             older_than_days=args.older_than, dry_run=args.dry_run)
            lo = db.forget_left_out(dry_run=args.dry_run) if args.left_out else 0
            dn = db.forget_decisions(dry_run=args.dry_run) if args.decisions else 0
            verb = "would delete" if args.dry_run else "deleted"
            text = f"{verb} {n} results from {db.path}"
            if args.left_out:
                text += f"; {'would forget' if args.dry_run else 'forgot'} {lo} left-out engines"
            if args.decisions:
                text += (f"; {'would forget' if args.dry_run else 'forgot'} {dn} optimize "
                         "decisions")
            emit(args, {"kind": "db-prune", "db": str(db.path), "deleted": 0 if args.dry_run
                        else n, "matched": n, "dry_run": args.dry_run,
                        "left_out_forgotten": 0 if args.dry_run else lo,
                        "left_out_matched": lo,
                        "decisions_forgotten": 0 if args.dry_run else dn,
                        "decisions_matched": dn}, text)
            return 0
        raise UsageError(f"unknown db action {action!r}")
    finally:
        db.close()


def _decision_lines(decided: list[dict[str, Any]]) -> list[str]:
    """One line per model whose optimize decisions are stored."""
    def on(v: Any) -> str:
        return "on" if v else "off"

    lines = []
    for d in decided:
        dev = d["device"].get("gpu_name") or d["device"].get("cpu") or "?"
        sp = d.get("speedup")
        what = (f"layout only, channels_last {on(d.get('channels_last'))} (problems were left "
                "untuned; the next call measures the rest)" if d.get("partial") else
                "changes undone (not faster)" if d.get("undone") else
                f"channels_last {on(d.get('channels_last'))}, routing {on(d.get('routing'))}, "
                f"CUDA graphs {on(d.get('graphs'))}"
                + (f", {sp:.2f}x" if isinstance(sp, (int, float)) else ""))
        lines.append(f"optimize decisions for model {str(d['model_key'])[:12]} on {dev} "
                     f"({d['problems']} problems), measured {_when(d['created'])}: {what}")
    if decided:
        lines.append("(`convdoctor db prune --decisions` forgets them; `optimize(..., "
                     "remeasure=True)` measures one model again)")
    return lines
