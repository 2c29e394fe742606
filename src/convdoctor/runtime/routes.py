"""From tuning results to each site's routes.

A route holds, per direction, the executors of the tuned candidates in the order
`tune.select.route_order` gives (the only ranking: the tuner's measured times plus each engine's
host cost per eager call), then PyTorch as configured, then the fallback tail (`site.build_chain`).
Executors come from the engines (`engines.registry.engine_of`); cuDNN plans are built here, and
the first one is held to its tuned time by its workspace guard (`Settings.ws_guard`). On CUDA,
when `verify` runs, a second set of routes is ranked with no host cost per call (the routes under
CUDA graphs), kept only where it differs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..engines.flag_exec import flag_exec
from ..engines.registry import engine_of
from ..problem import ConvProblem
from ..tune.select import route_order
from . import site as _site
from .options import OptimizeOptions
from .record import Calls, Record, problems_for
from .report import DirectionChoice, LayerChoice, OptimizeReport
from .tuning import Results, Tuning

PYTORCH_KEY = "torch:default"


def tuned_s(result: Any, key: str) -> float | None:
    """The tuned median of `key` in a tuning result (None: not measured there)."""
    s = result.stats_for(key) if result is not None and hasattr(result, "stats_for") else None
    return None if s is None or s.median_s is None else float(s.median_s)


def _tuned_ms(result: Any, key: str) -> float | None:
    s = tuned_s(result, key)
    return None if s is None else s * 1e3


def baseline(result: Any) -> tuple[str, float | None]:
    """PyTorch's own path in a tuning result: its key and tuned time in ms ("", None: absent)."""
    for key in ("torch:heuristic", "cpu:mkldnn-on", "cpu:default"):
        s = result.stats_for(key) if hasattr(result, "stats_for") else None
        if s is not None and s.status == "ok" and s.median_s is not None:
            return key, s.median_s * 1e3
    return "", None


def executors(keys: list[str], problem: ConvProblem, dev: str, notes: list[str],
              result: Any = None, guard: bool = True,
              builds: dict[str, list[float]] | None = None) -> list[Any]:
    """Executors for `keys`, in order, from their engines (`engines.registry`); those that do not
    build here are skipped with a note. The first one, when its engine holds its setup to the
    tuned time (a cuDNN plan's workspace guard, unless `guard` is off), gets that time; the
    fallbacks behind it are not timed: they rarely run, so all but PyTorch's own paths are built
    on their first call (`LazyExec`), not here. A replaced workspace is noted; `builds` gets
    each engine's [executors built, seconds]."""
    out: list[Any] = []
    for key in keys:
        engine = engine_of(key)
        if engine is None:
            notes.append(f"candidate {key} has no runtime route; skipped")
            continue
        if engine.device not in (dev, "any"):
            continue
        if out and flag_exec(key) is None:
            out.append(LazyExec(key, problem, engine))
            continue
        t0 = time.monotonic()
        try:
            ref = None if out or not guard else tuned_s(result, key)
            ex = engine.executor(key, problem, ref)
        except Exception as exc:  # noqa: BLE001 - an executor that does not build is skipped
            notes.append(f"{key} for {problem.short()} not used: {type(exc).__name__}: {exc}")
            continue
        if ex is None:
            notes.append(f"candidate {key} has no runtime route; skipped")
            continue
        if builds is not None:   # what was built, and the seconds it took
            n_s = builds.setdefault(engine.name, [0, 0.0])
            n_s[0] += 1
            n_s[1] = round(n_s[1] + time.monotonic() - t0, 4)
        out.append(ex)
        g = getattr(ex, "guard", None)
        if g is not None and g.replaced:
            notes.append(f"{key} for {problem.short()}: {g.summary()}")
        if getattr(ex, "guard_error", ""):
            notes.append(f"{key} for {problem.short()}: workspace guard not run "
                         f"({ex.guard_error}); the plan runs with its own workspace")
    return out


def _capturing() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - no CUDA here: nothing is being captured
        return False


class RouteNotBuilt(RuntimeError):
    """A fallback executor could not be built on its first call: the chain moves on."""


class LazyExec:
    """A fallback executor built on its first call. A route's chain rarely goes past its first
    executor, and building every cuDNN plan of every candidate up front cost seconds per model.
    A build that fails raises `RouteNotBuilt`, which the site's chain treats like a backend error:
    it moves on to the next executor. A build refused for good (the engine cannot build this
    key here) is not tried again; one that ran out of memory is, on a later call, and none is
    tried inside a CUDA graph capture (building allocates, which would break the capture)."""

    kind = "lazy"

    def __init__(self, key: str, problem: ConvProblem, engine: Any) -> None:
        self.key, self.problem, self.engine = key, problem, engine
        self.built: Any = None
        self.error = ""
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The executor, built now if it was not yet."""
        if self.built is not None:
            return self.built
        with self._lock:
            if self.built is None and not self.error:
                if _capturing():
                    raise RouteNotBuilt(f"{self.key} for {self.problem.short()}: not built "
                                        "inside a CUDA graph capture")
                try:
                    self.built = self.engine.executor(self.key, self.problem, None)
                    if self.built is None:
                        self.error = "no runtime route"
                except Exception as exc:  # noqa: BLE001 - reported as RouteNotBuilt below
                    why = f"{type(exc).__name__}: {exc}"
                    if "out of memory" not in why.lower() and "OutOfMemory" not in why:
                        self.error = why          # for good; memory may be free on a later call
                    raise RouteNotBuilt(f"{self.key} for {self.problem.short()} could not be "
                                        f"built: {why}") from exc
            if self.built is None:
                raise RouteNotBuilt(f"{self.key} for {self.problem.short()} could not be built: "
                                    f"{self.error}")
            return self.built

    def fprop(self, x: Any, w: Any, b: Any, a: Any) -> Any:
        return self.get().fprop(x, w, b, a)

    def backward(self, gy: Any, x: Any, w: Any, bias_sizes: list[int] | None, a: Any,
                 mask: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]:
        return self.get().backward(gy, x, w, bias_sizes, a, mask)  # type: ignore[no-any-return]

    def is_noop(self) -> bool:
        return False  # PyTorch's own paths are never lazy

    def describe(self) -> str:
        if self.built is not None:
            return str(self.built.describe())
        return f"{self.key} (built on first use)"


class ExecutorCache:
    """Executors per problem, built once however many signatures share the problem: the eager
    route's and the graph route's (empty when the graph ranking equals the eager one)."""

    def __init__(self, dev: str, train: bool, guard: bool, notes: list[str],
                 builds: dict[str, list[float]] | None = None) -> None:
        self.dev, self.train, self.guard, self.notes = dev, train, guard, notes
        self.builds = builds
        self._cache: dict[tuple[str, bool, bool], list[Any]] = {}

    def _build(self, p: ConvProblem, res: Any, transposed: bool, graphed: bool) -> list[Any]:
        keys = route_order(res, transposed=transposed, train=self.train, graphed=graphed)
        if graphed and keys == [ex.key for ex in self.eager(p, res, transposed)]:
            return []
        return executors(keys, p, self.dev, self.notes, res, guard=self.guard,
                         builds=self.builds)

    def _get(self, p: ConvProblem, res: Any, transposed: bool, graphed: bool) -> list[Any]:
        k = (p.key(), transposed, graphed)
        if k not in self._cache:
            self._cache[k] = self._build(p, res, transposed, graphed)
        return self._cache[k]

    def eager(self, p: ConvProblem, res: Any, transposed: bool) -> list[Any]:
        return self._get(p, res, transposed, False)

    def graphed(self, p: ConvProblem, res: Any, transposed: bool) -> list[Any]:
        return self._get(p, res, transposed, True)


def _direction(d: str, p: ConvProblem | None, hit: tuple[Any, str] | None, transposed: bool,
               cache: ExecutorCache, graph_routes: bool
               ) -> tuple[DirectionChoice, list[Any], list[Any]]:
    """One direction of one signature: its choice, its eager chain and its graph chain (empty:
    the same as the eager one)."""
    choice = DirectionChoice(direction=d, key=PYTORCH_KEY, source="pytorch",
                             problem=p.short() if p is not None else "")
    tuned: list[Any] = []
    graph: list[Any] = []
    res = None
    if p is not None and hit is not None:
        res, src = hit
        tuned = cache.eager(p, res, transposed)
        if graph_routes:
            graph = cache.graphed(p, res, transposed)
        bkey, bms = baseline(res)
        choice = DirectionChoice(direction=d, key=tuned[0].key if tuned else PYTORCH_KEY,
                                 source=src, problem=p.short(),
                                 winner_ms=_tuned_ms(res, tuned[0].key) if tuned else None,
                                 baseline_ms=bms, baseline_key=bkey)
    chain = _site.build_chain(tuned, cache.dev)
    choice.chain = [ex.key for ex in chain]
    graph_chain: list[Any] = []
    if graph:
        graph_chain = _site.build_chain(graph, cache.dev)
        if graph[0].key != choice.key:
            choice.graph_key = graph[0].key
            choice.graph_chain = [ex.key for ex in graph_chain]
            choice.graph_winner_ms = _tuned_ms(res, choice.graph_key)
    return choice, chain, graph_chain


def _signature_routes(site: _site.Site, key: Any, rec: Record, probs: dict[str, ConvProblem],
                      results: Results, cache: ExecutorCache, graph_routes: bool) -> LayerChoice:
    """Install the route (and graph route) of one signature of `site`; return its choices."""
    layer = LayerChoice(layer=site.name, x_shape=tuple(rec["x_shape"]), dtype=rec["dtype"],
                        memory_format=rec["memory_format"])
    chains: dict[str, list[Any]] = {}
    graph_chains: dict[str, list[Any]] = {}
    for d in _site.DIRS:
        p = probs.get(d)
        hit = results.get(p.key()) if p is not None else None
        choice, chains[d], graph_chain = _direction(d, p, hit, site.transposed, cache,
                                                    graph_routes)
        if graph_chain:
            graph_chains[d] = graph_chain
        if p is not None:
            layer.directions.append(choice)
    site.routes[key] = _site.Route(chains, source="tuned")
    if graph_chains:
        site.graph_routes[key] = _site.Route({d: graph_chains.get(d, chains[d]) for d in chains},
                                             source="tuned-graph")
    return layer


def build_routes(sites: dict[str, _site.Site], calls: Calls, results: Results,
                 opts: OptimizeOptions, report: OptimizeReport, dev: str) -> None:
    """Give every recorded signature of every site its route from `results` (a problem without a
    result: PyTorch's path), and a graph route where `opts.graph_routes(dev)` and the ranking
    without host cost differs; each signature's choices go to `report.layers`."""
    cache = ExecutorCache(dev, opts.train, opts.settings.ws_guard, report.notes,
                          report.route_builds)
    graph_routes = opts.graph_routes(dev)
    for name, sigs in calls.per_site.items():
        for key, (rec, probs) in sigs.items():
            report.layers.append(_signature_routes(sites[name], key, rec, probs, results, cache,
                                                   graph_routes))


class FirstSight:
    """Tune a shape the first time it is seen (optimize(..., tune_on_first_sight=True)): the
    database's result or a new tuning run, with the same options and settings as `optimize`."""

    def __init__(self, opts: OptimizeOptions, dev: str) -> None:
        self.opts, self.dev = opts, dev

    def __call__(self, site: _site.Site, key: Any, facts: dict[str, Any]) -> _site.Route | None:
        if facts["transposed"]:
            return None
        train = self.opts.train
        # the output shape is not known yet: a placeholder (a plain convolution's problem does
        # not read it)
        rec = dict(facts, y_shape=(1, 1, 1), key=key, grad=train, x_requires_grad=train,
                   w_requires_grad=train)
        probs = problems_for(rec, train)
        tuning = Tuning.of(self.opts)
        chains: dict[str, list[Any]] = {}
        try:
            for d in _site.DIRS:
                p = probs.get(d)
                execs: list[Any] = []
                if p is not None:
                    res = tuning.lookup(p) or tuning.tune(p)
                    if res is not None and res.winner is not None:
                        keys = route_order(res, transposed=False, train=train, graphed=False)
                        execs = executors(keys, p, self.dev, [], res,
                                          guard=self.opts.settings.ws_guard)
                chains[d] = _site.build_chain(execs, self.dev)
        finally:
            tuning.close()
        return _site.Route(chains, source="first-sight")
