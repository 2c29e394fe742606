"""`convdoctor bench --merge`: join the JSON results of several bench runs into one, with provenance.

A whole suite pass often runs as several shards, sometimes measured by different code (80
re-measured stride-1 rows joined with 21 strided rows of an older version). The joined figure is
honest only if a reader can see where every row came from, so the merge:
- refuses results of another suite, configuration, direction or backend, and results measured on
  another machine or software stack (every `env` field that both results record: GPU, SM count,
  compute capability, driver, CUDA runtime, cuDNN, frontend, torch; on the CPU the processor,
  cores and threads): such figures cannot share one geomean;
- keeps each problem once, from the first file that has it, and marks the row with the file it
  came from (`merged_source`, a chain when a merged file is merged again) and the code that
  measured it (`measured_by`, carried through later merges);
- lists per file how many rows it supplied (`merged_rows`) and per code version how many rows it
  measured (`merged_codes`), and says so in the human output: a note when the rows come from
  different code, or from files that do not record their code or their machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UsageError
from ..tune.provenance import code_label, same_code

# fields of a bench result that must agree for its rows to share one summary
SAME_RUN_FIELDS = ("suite", "config", "direction", "backend")


def load_result(path: str) -> Any:
    """A bench result file's JSON; `FILE.json.gz` is read through gzip (the repository keeps raw
    results compressed, in benchmarks/results/bench)."""
    from ..jsonfile import read_json

    return read_json(path, what="bench result")


def read_result(path: str) -> dict[str, Any]:
    """A bench result with its rows (what `--referee-only` re-times); UsageError otherwise."""
    doc = load_result(path)
    if not isinstance(doc, dict) or doc.get("kind") != "bench" or not isinstance(
            doc.get("rows"), list):
        raise UsageError(f"{path} is not a bench result (written by `convdoctor bench --out`)")
    return doc


def validate(path: str, doc: Any) -> dict[str, Any]:
    """The document when it is a bench result whose rows can be merged; UsageError otherwise."""
    if not isinstance(doc, dict) or doc.get("kind") != "bench" or "rows" not in doc:
        raise UsageError(f"{path} is not a `convdoctor bench --json` result")
    rows = doc["rows"]
    if not isinstance(rows, list):
        raise UsageError(f"{path}: `rows` is not a list; is the file a whole bench result?")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("problem_key"), str):
            raise UsageError(f"{path}: row {i + 1} is not a bench row (no `problem_key`)")
    if not isinstance(doc.get("summary"), dict):
        raise UsageError(f"{path}: no `summary`; a bench run's --out file has one (a "
                         ".partial state file cannot be merged: finish the run with --resume)")
    for field in ("env", "code"):
        if doc.get(field) is not None and not isinstance(doc[field], dict):
            raise UsageError(f"{path}: `{field}` is not an object")
    return doc


def check_compatible(paths: Sequence[str], docs: Sequence[dict[str, Any]]) -> None:
    """UsageError when the results cannot be summarized as one run."""
    first, first_path = docs[0], paths[0]
    for path, d in zip(paths, docs, strict=True):
        for field in SAME_RUN_FIELDS:
            if d.get(field) != first.get(field):
                raise UsageError(f"{path}: {field} {d.get(field)!r} differs from "
                                 f"{first_path}'s {first.get(field)!r}; merge only shards of "
                                 "one suite, configuration and direction")
    envs = [(p, d["env"]) for p, d in zip(paths, docs, strict=True) if isinstance(d.get("env"), dict)]
    for i, (path, env) in enumerate(envs):
        for ref_path, ref in envs[:i]:
            for field in sorted(set(env) & set(ref)):
                if env[field] != ref[field]:
                    raise UsageError(
                        f"{path}: measured with {field} {env[field]!r}, {ref_path} with "
                        f"{ref[field]!r}; results of different machines or software stacks "
                        "cannot share one summary - merge each stack's results on their own")


def merge_docs(paths: Sequence[str], docs: Sequence[dict[str, Any]],
               summarize: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> dict[str, Any]:
    """One bench payload from several; `summarize` is the bench's own summary of rows."""
    docs = [validate(p, d) for p, d in zip(paths, docs, strict=True)]
    check_compatible(paths, docs)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    per_file: list[dict[str, Any]] = []
    for path, d in zip(paths, docs, strict=True):
        took = dup = 0
        for r in d["rows"]:
            if r["problem_key"] in seen:   # a problem run in two files counts once: the first's
                dup += 1
                continue
            seen.add(r["problem_key"])
            chain = r.get("merged_source")
            chain = [str(c) for c in chain] if isinstance(chain, list) else []
            # a row of a merged file keeps the code of the file that measured it
            by = r["measured_by"] if "measured_by" in r else d.get("code")
            rows.append(dict(r, merged_source=[str(path), *chain], measured_by=by))
            took += 1
        per_file.append({"file": str(path), "rows": took, "duplicates_dropped": dup,
                         "code": d.get("code"), "env_recorded": isinstance(d.get("env"), dict)})
    try:
        summary = summarize(rows)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"a row cannot be summarized ({type(exc).__name__}: {exc}); are all "
                         "files `convdoctor bench --json` results of this version?") from None
    summary["wall_s"] = sum(_num(d["summary"].get("wall_s")) for d in docs)
    summary["tuning_s_total_per_run"] = [
        sum(_num(x) for x in col) for col in zip(*(_list(d["summary"].get("tuning_s_total_per_run"))
                                                   for d in docs), strict=False)]
    codes = code_groups(rows)
    env = next((d["env"] for d in docs if isinstance(d.get("env"), dict)), None)
    return dict(docs[0], rows=rows, summary=summary, shard=None, env=env,
                code=codes[0]["code"] if len(codes) == 1 else None,
                merged_from=[str(p) for p in paths], merged_rows=per_file, merged_codes=codes)


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) else 0.0


def _list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def code_groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows grouped by the code that measured them: [{"code", "label", "rows"}], in order of
    first appearance; rows without a record form one "code not recorded" group."""
    groups: list[dict[str, Any]] = []
    for r in rows:
        by = r.get("measured_by")
        for g in groups:
            if (by is None and g["code"] is None) or same_code(by, g["code"]):
                g["rows"] += 1
                break
        else:
            groups.append({"code": by if isinstance(by, dict) else None,
                           "label": code_label(by), "rows": 1})
    return groups


def provenance_lines(payload: dict[str, Any]) -> list[str]:
    """The human lines saying which file supplied how many rows, and from which code."""
    per_file = payload.get("merged_rows")
    if not per_file:
        return []
    lines = ["rows per file: " + "; ".join(
        f"{f['file']} {f['rows']}" + (f" ({f['duplicates_dropped']} already given by an earlier "
                                      "file)" if f["duplicates_dropped"] else "")
        for f in per_file)]
    groups = payload.get("merged_codes") or []
    known = [g for g in groups if g["code"] is not None]
    unknown = sum(g["rows"] for g in groups if g["code"] is None)
    if len(known) > 1:
        lines.append("note: the merged rows were measured by different code ("
                     + "; ".join(f"{g['label']}: {g['rows']} rows" for g in known)
                     + "): a mixture of versions - say so where the figure is quoted (each "
                     "row's `merged_source` and `measured_by` name its file and code)")
    if unknown and len(per_file) > 1:
        lines.append(f"note: {unknown} rows come from files that do not record their code: a "
                     "mixture of versions cannot be ruled out")
    no_env = [f["file"] for f in per_file if f["rows"] and not f.get("env_recorded")]
    if no_env and len(per_file) > 1:
        lines.append("note: " + ", ".join(no_env) + " record(s) no machine or software stack "
                     "(`env`): not checked against the other files")
    return lines
