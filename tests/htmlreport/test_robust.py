"""Documents of the right kind with values of any type anywhere inside (a list where a number
was, a string where a list was, null): the page is still written, well-formed, and shows what
it can. Each case is a seeded random mutation of a real file."""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest
from reportdata import BENCH_H200, OPT_RESNET, env_report, optimize_payload
from test_page import check_page

from convdoctor.htmlreport.inputs import bench_from_doc, tuned_from_bench, tuned_from_result
from convdoctor.htmlreport.model import EnvDoc, Inputs
from convdoctor.htmlreport.optdata import run_of_cli, runs_of_bench
from convdoctor.htmlreport.page import render_page

ODD: list[Any] = [None, 0, -1, 1e308, float("nan"), "", "x", [], [1, "a"], {}, {"a": None}, True]


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            out += _nodes(v, (*path, i))
    return out


def mutate(doc: Any, rng: random.Random, n: int = 25) -> Any:
    doc = copy.deepcopy(doc)
    nodes = [p for p in _nodes(doc) if len(p) >= 2]   # keep the top-level kind
    for path in rng.sample(nodes, min(n, len(nodes))):
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD))
        except (KeyError, IndexError, TypeError):
            continue
    return doc


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with gzip.open(BENCH_H200, "rt") as fh:
        bench = json.load(fh)
    with gzip.open(OPT_RESNET, "rt") as fh:
        opt = json.load(fh)
    spec_path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_report.py"
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_report", spec_path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"env": env_report(tmp_path_factory.mktemp("m"), broken=True), "bench": bench,
            "opt_bench": opt, "opt_cli": optimize_payload(3),
            "result": mod.synthetic_result(random.Random(3), 0)}


@pytest.mark.parametrize("seed", range(80))
def test_mutated_inputs_still_make_a_page(originals: dict[str, Any], seed: int) -> None:
    rng = random.Random(seed)
    env = mutate(originals["env"], rng)
    bench = mutate(originals["bench"], rng)
    bench["rows"] = [r if isinstance(r, dict) else {} for r in bench.get("rows", [])] \
        if isinstance(bench.get("rows"), list) else []
    b = bench_from_doc(bench, "b", what="b")
    opt_b = mutate(originals["opt_bench"], rng)
    runs = runs_of_bench(opt_b, "o") if isinstance(opt_b.get("configs"), dict) else []
    runs.append(run_of_cli(mutate(originals["opt_cli"], rng), "c"))
    res = tuned_from_result(mutate(originals["result"], rng), "r")
    tuned = tuned_from_bench(b) + ([res] if res is not None else [])
    inp = Inputs(envs=(EnvDoc("a", env), EnvDoc("b", originals["env"])), tuned=tuple(tuned),
                 benches=(b,), runs=tuple(runs))
    check_page(render_page(inp).html)
