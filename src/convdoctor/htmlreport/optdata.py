"""`optimize` results as `OptimizeRun`s, from either file that holds them.

- `convdoctor optimize --json`: one model; its `report` has every layer's choice per direction
  with the tuner's times (the chosen path's and PyTorch's), the end-to-end decisions with their
  measured step times and margins, and `step_ms` (PyTorch against convdoctor, interleaved);
  `step_samples_ms` where the file has the samples.
- `benchmarks/bench_optimize.py` results (`configs` -> model config -> train / inference): each
  variant in its own processes with its samples and per-process medians, convdoctor's decisions,
  and no per-layer times.
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ..jsonfile import read_json
from .inputs import display_name
from .model import Decision, LayerDir, OptimizeRun, Timing
from .svg import finite, positive

OPTION_LABELS = {
    "as_given": "as given", "channels_last": "channels_last",
    "as_given_graphed": "as given, graphed", "channels_last_graphed": "channels_last, graphed",
    "unrouted": "PyTorch's path", "routed": "routed", "routed_nohost": "routed (graph routes)",
    "eager": "eager", "graphed": "graphed", "graphed_routed": "graphed with the routes",
}
VARIANT_LABELS = {
    "pytorch": "PyTorch", "convdoctor": "convdoctor", "eager_heuristic": "PyTorch (heuristic)",
    "eager_benchmark": "PyTorch (benchmark=True)", "compile": "torch.compile",
}


def _options(ms: Any, skip: tuple[str, ...] = ("chosen", "eager_host_cpu")
             ) -> list[tuple[str, float]]:
    if not isinstance(ms, dict):
        return []
    return [(str(k), v) for k, v in ((k, positive(x)) for k, x in ms.items())
            if k not in skip and v is not None]


def _chosen_of(opts: list[tuple[str, float]], chosen_ms: float | None, default: str) -> str:
    if chosen_ms is not None:
        for k, v in opts:
            if abs(v - chosen_ms) <= 1e-9 * max(1.0, v):
                return k
    return default


def _layout(opts: list[tuple[str, float]], cl: bool, margin: float | None, reason: str
            ) -> Decision:
    """Each layout is judged by its faster mode (eager or graphed): the challenger is the faster
    channels_last mode, the option to beat the faster as-given mode."""
    ms = dict(opts)

    def best(layout: str) -> str:
        keys = [k for k in (layout, f"{layout}_graphed") if k in ms]
        return min(keys, key=lambda k: ms[k]) if keys else layout

    base = best("as_given")
    return Decision("layout", best("channels_last") if cl else base, tuple(opts), base, margin,
                    reason)


def decisions_of(rep: dict[str, Any]) -> list[Decision]:
    """Layout, routing and CUDA graphs: the step times each decision measured, which it took,
    the option it had to beat and the margin a win needed."""
    margins = rep.get("margins") if isinstance(rep.get("margins"), dict) else {}
    out: list[Decision] = []
    lay = _options(rep.get("layout_ms"))
    if lay or rep.get("channels_last_reason"):
        out.append(_layout(lay, bool(rep.get("channels_last")), finite(margins.get("layout")),
                           str(rep.get("channels_last_reason") or "")))
    ver = _options(rep.get("verify_ms"))
    vm = rep.get("verify_ms") if isinstance(rep.get("verify_ms"), dict) else {}
    if ver or rep.get("routing_reason"):
        chosen = (_chosen_of([o for o in ver if o[0] != "unrouted"], positive(vm.get("chosen")),
                             "routed") if rep.get("routing") else "unrouted")
        out.append(Decision("routing", chosen, tuple(ver), "unrouted",
                            finite(margins.get("routing")), str(rep.get("routing_reason") or "")))
    gr = _options(rep.get("graphs_ms"))
    gm = rep.get("graphs_ms") if isinstance(rep.get("graphs_ms"), dict) else {}
    if gr or rep.get("graphs_reason"):
        chosen = (_chosen_of([o for o in gr if o[0] != "eager"], positive(gm.get("chosen")),
                             "graphed") if rep.get("graphs") else "eager")
        out.append(Decision("graphs", chosen, tuple(gr), "eager", finite(margins.get("graphs")),
                            str(rep.get("graphs_reason") or "")))
    return out


def layers_of(rep: dict[str, Any]) -> list[LayerDir]:
    out = []
    layers = rep.get("layers")
    for lay in layers if isinstance(layers, list) else []:
        if not isinstance(lay, dict):
            continue
        name = str(lay.get("layer") or "?")
        dirs = lay.get("directions")
        for d in dirs if isinstance(dirs, list) else []:
            if not isinstance(d, dict):
                continue
            out.append(LayerDir(name, str(d.get("direction") or "?"), str(d.get("key") or "?"),
                                str(d.get("source") or "?"), positive(d.get("winner_ms")),
                                positive(d.get("baseline_ms")), str(d.get("baseline_key") or ""),
                                str(d.get("problem") or "")))
    return out


def _timing(ms: Any, samples: Any = None, runs: Any = None) -> Timing:
    def fl(xs: Any) -> tuple[float, ...]:
        return tuple(v for v in (positive(x) for x in xs) if v is not None) \
            if isinstance(xs, list) else ()

    return Timing(positive(ms), fl(samples), fl(runs))


def _notes(rep: dict[str, Any]) -> tuple[str, ...]:
    notes = rep.get("notes")
    return tuple(str(n) for n in notes[:50]) if isinstance(notes, list) else ()


def run_of_cli(doc: dict[str, Any], source: str) -> OptimizeRun:
    """A `convdoctor optimize --json` payload."""
    rep = doc["report"] if isinstance(doc.get("report"), dict) else {}
    step = doc.get("step_ms") if isinstance(doc.get("step_ms"), dict) else {}
    samples = doc.get("step_samples_ms") if isinstance(doc.get("step_samples_ms"), dict) else {}
    variants = {k: _timing(step.get(k), samples.get(k)) for k in ("pytorch", "convdoctor")
                if positive(step.get(k)) is not None}
    sp = positive(doc.get("speedup"))
    train = bool(doc.get("train", rep.get("train", True)))
    shape = doc.get("input_shape")
    shape_txt = "x".join(str(v) for v in shape) if isinstance(shape, list) else ""
    name = " ".join(str(x) for x in (doc.get("model") or "model", shape_txt, doc.get("dtype") or "",
                                     "training" if train else "inference") if x)
    return OptimizeRun(name=name, device=str(doc.get("device") or rep.get("device") or "?"),
                       train=train, source=source, variants=variants,
                       speedups=(("convdoctor vs PyTorch", sp, ()),) if sp else (),
                       decisions=tuple(decisions_of(rep)), layers=tuple(layers_of(rep)),
                       problems=int(rep["problems"]) if isinstance(rep.get("problems"), int)
                       else None, notes=_notes(rep))


def _process_timing(t: dict[str, Any]) -> Timing:
    """A variant timed in one or more processes: `samples_ms` of the first, `repeats[i]` of
    the others; `ms` is the median over the processes (`runs_ms`)."""
    samples = list(t.get("samples_ms") or []) if isinstance(t.get("samples_ms"), list) else []
    for rep in _dicts(t.get("repeats")):
        if isinstance(rep.get("samples_ms"), list):
            samples += rep["samples_ms"]
    return _timing(t.get("ms"), samples, t.get("runs_ms"))


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _bench_speedups(m: dict[str, Any], cd: dict[str, Any]) -> list[tuple[str, float,
                                                                         tuple[float, ...]]]:
    out = []
    same = positive(cd.get("speedup_vs_heuristic_same_process"))
    if same is not None:
        runs = cd.get("speedup_vs_heuristic_same_process_runs")
        rv = tuple(v for v in (positive(x) for x in runs) if v is not None) \
            if isinstance(runs, list) else ()
        out.append(("vs PyTorch's heuristic, interleaved in one process", same, rv))
    for key, label in (("speedup_vs_heuristic", "vs PyTorch's heuristic, own processes"),
                       ("speedup_vs_best_eager", "vs the faster PyTorch eager, own processes")):
        v = positive(m.get(key))
        if v is not None:
            out.append((label, v, ()))
    return out


def runs_of_bench(doc: dict[str, Any], source: str) -> list[OptimizeRun]:
    """`benchmarks/bench_optimize.py` results: one run per model config and mode."""
    env = doc.get("env") if isinstance(doc.get("env"), dict) else {}
    errors = []
    variants_meta = doc.get("variants") if isinstance(doc.get("variants"), dict) else {}
    for v, meta in variants_meta.items():
        if isinstance(meta, dict) and meta.get("_error"):
            errors.append(f"{VARIANT_LABELS.get(str(v), v)}: {meta['_error']}")
    out = []
    for cfg, modes in doc["configs"].items():
        if not isinstance(modes, dict):
            continue
        for mode, m in modes.items():
            if not isinstance(m, dict):
                continue
            variants = {str(v): _process_timing(t) for v, t in m.items()
                        if isinstance(t, dict) and positive(t.get("ms")) is not None}
            cd = m.get("convdoctor") if isinstance(m.get("convdoctor"), dict) else {}
            rep = cd.get("report") if isinstance(cd.get("report"), dict) else {}
            out.append(OptimizeRun(
                name=f"{cfg} {mode}", device=str(env.get("device") or "?"),
                train=mode == "train", source=source, variants=variants,
                speedups=tuple(_bench_speedups(m, cd)), decisions=tuple(decisions_of(rep)),
                problems=int(rep["problems"]) if isinstance(rep.get("problems"), int) else None,
                notes=_notes(rep) + tuple(errors)))
    return out


def load_optimize(path: str) -> list[OptimizeRun]:
    doc = read_json(path, what="--optimize result")
    source = display_name(path)
    if isinstance(doc, dict) and isinstance(doc.get("report"), dict) and "step_ms" in doc:
        return [run_of_cli(doc, source)]
    if isinstance(doc, dict) and isinstance(doc.get("configs"), dict):
        runs = runs_of_bench(doc, source)
        if runs:
            return runs
    raise UsageError(f"--optimize {path}: not an optimize result (expected the output of: "
                     "convdoctor optimize MODEL --json, or a benchmarks/bench_optimize.py result)")
