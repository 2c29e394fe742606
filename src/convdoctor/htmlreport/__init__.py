"""`convdoctor report`: one self-contained HTML page of everything convdoctor measured.

Sections (each shown when its data is there): the machine's diagnosis and library search order,
every tuned problem's candidates, the roofline, bench speedup distributions, and optimize's
decisions and per-layer times. The plots are inline SVG written with the standard library; the
page has no script and fetches nothing.

`report_for_bench(path, payload)` and `report_for_optimize(path, payload, samples)` write the
page of one `bench` or `optimize` run (their `--report FILE.html`); `check_report_path(path)`
refuses a bad path before the run starts.
"""

from __future__ import annotations

from typing import Any


def check_report_path(path: str) -> None:
    """A UsageError now when the page could not be written at `path` later."""
    from .writer import check_out

    check_out(path, flag="--report")


def report_for_bench(path: str, payload: dict[str, Any]) -> None:
    """The page of one `convdoctor bench` result (its JSON payload)."""
    from .build import inputs_of, write
    from .inputs import bench_from_doc

    b = bench_from_doc(payload, f"{payload.get('suite') or 'bench'} {payload.get('config') or ''}"
                       f" {payload.get('direction') or ''}".strip(), what="bench result")
    write(inputs_of(benches=[b], sources=["this bench run"]), path, flag="--report")


def report_for_optimize(path: str, payload: dict[str, Any], samples: Any = None,
                        db: str | None = None) -> None:
    """The page of one `convdoctor optimize` run: its payload (`optimize --json`), the step
    samples (`{"pytorch": [...], "convdoctor": [...]}`) and, from the tuning database, the
    tuning of the run's problems."""
    from ..report import to_jsonable
    from .build import inputs_of, tuned_for_run, write
    from .optdata import run_of_cli

    doc = to_jsonable(payload)
    if isinstance(samples, dict):
        doc["step_samples_ms"] = {str(k): list(v) for k, v in samples.items()}
    run = run_of_cli(doc, "this optimize run")
    write(inputs_of(runs=[run], tuned=tuned_for_run(run, db), sources=["this optimize run"]),
          path, flag="--report")
