"""`convdoctor bench --merge`: join the JSON results of several bench runs into one, with provenance.

A whole suite pass often spans several device calls (shards), and sometimes two sessions (session
25 joined its 80 re-measured stride-1 rows with session 22's 21 strided rows). The joined figure is
honest only if a reader can see where every row came from, so the merge:
- refuses results of another suite, configuration, direction or backend (as before), and results
  measured on another machine or software stack (`env`: GPU, SM count, compute capability,
  driver, CUDA runtime, cuDNN, frontend, torch): such figures cannot share one geomean;
- keeps each problem once, from the first file that has it, and marks the row with the file it
  came from (`merged_source`, a chain when a merged file is merged again);
- records per file how many rows it supplied and which convdoctor code measured them
  (`merged_rows`), and says so in the human output when the files' code differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UsageError

# fields of a bench result that must agree for its rows to share one summary
SAME_RUN_FIELDS = ("suite", "config", "direction", "backend")
# the machine and software stack (`env`); a result without `env` (older files) is not checked
SAME_ENV_FIELDS = ("gpu_name", "sm_count", "compute_capability", "driver", "cuda_runtime", "cudnn",
                   "cudnn_frontend", "torch")


def check_compatible(paths: Sequence[str], docs: Sequence[dict[str, Any]]) -> None:
    """UsageError when the results cannot be summarized as one run."""
    first, first_path = docs[0], paths[0]
    for path, d in zip(paths, docs, strict=True):
        for field in SAME_RUN_FIELDS:
            if d.get(field) != first.get(field):
                raise UsageError(f"{path}: {field} {d.get(field)!r} differs from "
                                 f"{first_path}'s {first.get(field)!r}; merge only shards of "
                                 "one suite, configuration and direction")
    envs: list[tuple[str, dict[str, Any]]] = [
        (p, d["env"]) for p, d in zip(paths, docs, strict=True) if isinstance(d.get("env"), dict)]
    if not envs:
        return
    ref_path, ref = envs[0]
    for path, env in envs[1:]:
        for field in SAME_ENV_FIELDS:
            if env.get(field) != ref.get(field):
                raise UsageError(f"{path}: measured with {field} {env.get(field)!r}, {ref_path} "
                                 f"with {ref.get(field)!r}; results of different machines or "
                                 "software stacks cannot share one summary - merge each "
                                 "stack's results on their own")


def merge_docs(paths: Sequence[str], docs: Sequence[dict[str, Any]],
               summarize: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> dict[str, Any]:
    """One bench payload from several; `summarize` is the bench's own summary of rows."""
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
            chain = chain if isinstance(chain, list) else ([chain] if chain else [])
            rows.append(dict(r, merged_source=[str(path), *chain]))
            took += 1
        per_file.append({"file": str(path), "rows": took, "duplicates_dropped": dup,
                         "code": d.get("code"), "merged_from": d.get("merged_from")})
    summary = summarize(rows)
    summary["wall_s"] = sum(d["summary"].get("wall_s") or 0.0 for d in docs)
    summary["tuning_s_total_per_run"] = [
        sum(x or 0.0 for x in col) for col in zip(*(d["summary"].get("tuning_s_total_per_run")
                                                    or [] for d in docs), strict=False)]
    return dict(docs[0], rows=rows, summary=summary, shard=None,
                merged_from=[str(p) for p in paths], merged_rows=per_file)


def _code_label(code: Any) -> str:
    if not isinstance(code, dict):
        return "code not recorded"
    commit = code.get("commit")
    label = f"convdoctor {code.get('version', '?')}"
    if commit:
        label += f" @ {commit}" + ("+dirty" if code.get("dirty") else "")
    return label


def provenance_lines(payload: dict[str, Any]) -> list[str]:
    """The human lines saying which file supplied how many rows, and from which code."""
    per_file = payload.get("merged_rows")
    if not per_file:
        return []
    lines = ["rows per file: " + "; ".join(
        f"{f['file']} {f['rows']}" + (f" ({f['duplicates_dropped']} already given by an earlier "
                                      "file)" if f["duplicates_dropped"] else "")
        for f in per_file)]
    labels = {_code_label(f.get("code")) for f in per_file if f["rows"]}
    if len(labels) > 1:
        lines.append("note: the merged rows were measured by different code ("
                     + ", ".join(sorted(labels)) + "): a mixture of versions - say so where the "
                     "figure is quoted (each row's `merged_source` names its file)")
    return lines
