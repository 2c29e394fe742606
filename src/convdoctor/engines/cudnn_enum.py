"""Finding cuDNN plans for a problem: the heuristic lists and bounded engine/knob enumeration.

`enumerate_plans(problem)` lists every plan reachable for the problem: heuristic modes A, B and
FALLBACK (deduplicated by plan name), then engine/knob enumeration (bounded), all filtered by the
numerical notes the problem forbids (`cudnn_policy.note_filter`), each built so its workspace is
known. `build_plan(problem, name)` finds one named plan again. Built plans are cached per device,
problem and name (`cudnn_graph`). A listing names each step it takes (`listing.listing_step`) so a
worker's parent can leave out an engine whose step never returned (`excluding`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import cudnn_policy as policy
from .cudnn_graph import (
    _LOCK,
    _PLANS,
    ConvPlan,
    PlanInfo,
    _current_device,
    _device_ctx,
    _Graph,
    _new_graph,
    _numeric_notes,
    get_handle,
    import_cudnn,
)
from .listing import listing_step

if TYPE_CHECKING:
    from ..problem import ConvProblem

# engine id -> why: engines a listing leaves out (neither built nor enumerated), set by the CUDA
# backend from its `listing_exclude` for one listing (`excluding`): an engine whose plan never
# returned from a build or a quick time in an earlier listing (see `..backend.listing_step`).
_EXCLUDED: dict[int, str] = {}


def engine_unit(engine: int) -> str:
    """The listing-step unit of a cuDNN engine ("eng69"): what a hang leaves out."""
    return f"eng{engine}"


def plan_unit(name: str) -> str:
    """The listing-step unit of a plan: its engine ("eng69"), or "" where the name names none
    (nothing a listing could leave out)."""
    try:
        return engine_unit(policy.parse_plan_name(name)[0])
    except ValueError:
        return ""


def unit_engine(unit: str) -> int | None:
    """The engine id of a listing-step unit ("eng69" -> 69), or None."""
    if unit.startswith("eng") and unit[3:].isdigit():
        return int(unit[3:])
    return None


@contextlib.contextmanager
def excluding(engines: dict[int, str]) -> Iterator[None]:
    """`with excluding({69: "why"}):` the listing inside leaves those engines out (on top of any
    an enclosing block leaves out)."""
    old = dict(_EXCLUDED)
    _EXCLUDED.update(engines)
    try:
        yield
    finally:
        _EXCLUDED.clear()
        _EXCLUDED.update(old)


def excluded_engine(name: str) -> str | None:
    """Why the plan `name`'s engine is left out of this listing, or None."""
    if not _EXCLUDED:
        return None
    try:
        eng = policy.parse_plan_name(name)[0]
    except ValueError:
        return None
    return _EXCLUDED.get(eng)


def build_plan(problem: ConvProblem, plan_name: str | None = None, handle: Any = None,
               *, device: int | None = None) -> ConvPlan:
    """The named plan (None: the best heuristic plan that passes the note filter).

    Builds the named engine configuration directly, else looks in heuristic modes A, B,
    FALLBACK, then in the enumerated configs of the plan's engine. Raises LookupError when no
    such plan exists for this problem here, and
    RuntimeError (with cuDNN's message) when it exists but does not build.
    """
    torch, _ = import_cudnn()
    dev = _current_device(torch, device)
    hit = _PLANS.get((dev, problem.key(), plan_name or ""))
    if hit is not None:
        return hit
    h = handle if handle is not None else get_handle(dev)
    with _device_ctx(torch, dev):
        if plan_name is None:
            for mode in policy.HEUR_MODES:
                for _info, plan in _mode_plans(problem, h, mode, dev, stop_at_first=True):
                    if plan is not None:
                        with _LOCK:
                            _PLANS[(dev, problem.key(), "")] = plan
                        return plan
            raise RuntimeError(f"no cuDNN plan builds for {problem.short()} "
                               "(heuristic modes A, B, FALLBACK all failed)")
        policy.parse_plan_name(plan_name)  # ValueError for a malformed name
        last = ""
        # its own engine configuration first: one graph and one build, where the heuristic
        # modes cost a query each (mode B's the most) before the named plan comes up
        named = _named_plan(problem, h, plan_name, dev)
        if named is not None and named[1] is not None:
            return named[1]
        for mode in policy.HEUR_MODES:
            for info, plan in _mode_plans(problem, h, mode, dev, only=plan_name):
                if info.name == plan_name:
                    if plan is not None:
                        return plan
                    last = info.reason
        if named is not None:
            last = named[0].reason
        engine, _ = policy.parse_plan_name(plan_name)
        for info, plan in _engine_plans(problem, h, engine, dev):
            if info.name == plan_name:
                if plan is not None:
                    return plan
                last = info.reason
    if last:
        raise RuntimeError(f"cuDNN plan {plan_name} does not build for {problem.short()}: {last}")
    raise LookupError(f"cuDNN plan {plan_name} is not offered for {problem.short()} by this "
                      "cuDNN (heuristics and enumeration of its engine)")


# ---------------------------------------------------------------- enumeration
def _apply_filter(problem: ConvProblem, g: _Graph) -> None:
    _, cudnn = import_cudnn()
    notes = _numeric_notes(cudnn, policy.note_filter(problem).numeric)
    if notes:
        g.graph.deselect_numeric_notes(notes)


def _build_index(problem: ConvProblem, g: _Graph, i: int, dev: int,
                 source: str) -> tuple[PlanInfo, ConvPlan | None]:
    name = str(g.graph.get_plan_name_at_index(i))
    why = excluded_engine(name)
    if why is not None:
        return PlanInfo(name, source, False, 0, f"left out: {why}"), None
    listing_step("build", plan_unit(name), name)
    try:
        g.graph.build_plan_at_index(i)
    except Exception as exc:  # noqa: BLE001 - cuDNN says why (deselected by notes, unsupported...)
        msg = " ".join(str(exc).split())[:300]
        if "Deselecting" in msg:
            msg = "dropped by the numerical-note filter (" + ", ".join(
                policy.note_filter(problem).numeric) + ")"
        return PlanInfo(name, source, False, 0, msg), None
    ws = int(g.graph.get_workspace_size_plan_at_index(i))
    plan = ConvPlan(problem, g, i, name, ws, dev)
    with _LOCK:
        _PLANS.setdefault((dev, problem.key(), name), plan)
        plan = _PLANS[(dev, problem.key(), name)]
    return PlanInfo(name, source, True, ws), plan


def _mode_plans(problem: ConvProblem, h: Any, mode: str, dev: int, *, stop_at_first: bool = False,
                only: str | None = None, skip: set[str] | None = None,
                deadline: float | None = None):  # type: ignore[no-untyped-def]
    """Yield (PlanInfo, ConvPlan|None) for a heuristic mode's list, in heuristic rank order."""
    _, cudnn = import_cudnn()
    try:
        g = _new_graph(problem, h, mode)
        g.graph.create_execution_plans([getattr(cudnn.heur_mode, mode)])
    except Exception as exc:  # noqa: BLE001
        yield PlanInfo(f"<heur {mode}>", mode, False, 0,
                       f"heuristic query failed: {' '.join(str(exc).split())[:300]}"), None
        return
    _apply_filter(problem, g)
    n = int(g.graph.get_execution_plan_count())
    for i in range(n):
        name = str(g.graph.get_plan_name_at_index(i))
        if (only is not None and name != only) or (skip is not None and name in skip):
            continue  # not wanted, or already built from an earlier mode's graph
        if deadline is not None and time.perf_counter() > deadline:
            yield PlanInfo(name, mode, False, 0, "not built: enumeration time budget spent"), None
            continue
        info, plan = _build_index(problem, g, i, dev, mode)
        yield info, plan
        if stop_at_first and plan is not None:
            return


def _engine_plans(problem: ConvProblem, h: Any, engine: int, dev: int, *, per_knob: int = 3,
                  limit: int = 6, skip: set[str] | None = None,
                  first_combo: list[dict[Any, int]] | None = None):  # type: ignore[no-untyped-def]
    """Yield (PlanInfo, ConvPlan|None) for bounded knob settings of one engine (its own graph)."""
    if engine in _EXCLUDED:
        return
    listing_step("engine", engine_unit(engine))
    try:
        g = _new_graph(problem, h, "enum")
        knobs = g.graph.get_knobs_for_engine(engine)
    except Exception as exc:  # noqa: BLE001
        yield PlanInfo(f"eng{engine}", "enum", False, 0,
                       f"engine does not take this graph: {' '.join(str(exc).split())[:200]}"), None
        return
    # knob types the frontend cannot name come back as NOT_SET: leave those at cuDNN's default
    spec = [(k.type, int(k.min_value), int(k.max_value), int(k.stride)) for k in knobs
            if not str(k.type).endswith("NOT_SET")]
    added = 0
    for combo in policy.knob_combinations(spec, per_knob=per_knob, limit=limit):
        try:
            g.graph.create_execution_plan(engine, combo)
            added += 1
            if first_combo is not None and not first_combo:
                first_combo.append(combo)
        except Exception:  # noqa: BLE001 - this knob setting is not valid for the engine
            continue
    if not added:
        return
    _apply_filter(problem, g)
    for i in range(int(g.graph.get_execution_plan_count())):
        if skip is not None and str(g.graph.get_plan_name_at_index(i)) in skip:
            continue
        yield _build_index(problem, g, i, dev, "enum")


# (problem key, engine id) -> (frontend knob specs, frontend knob type -> cuDNN knob number)
_KNOB_MAPS: dict[tuple[str, int], tuple[list[tuple[Any, int, int, int]], dict[Any, int]]] = {}


def engine_knobs(problem: ConvProblem, h: Any, engine: int
                 ) -> tuple[list[tuple[Any, int, int, int]], dict[Any, int]]:
    """An engine's knobs as (frontend type, min, max, stride), and which plan-name knob number
    (`k<n>`) each type is. The Python API numbers knob types differently from the backend
    numbers in plan names: a type's number comes from its name (`policy.knob_number_by_name`),
    and for names the table lacks it is learned from plan names (`policy.knob_number_map`): one
    plan with every knob at its minimum, then one per knob with only that knob moved.
    Raises RuntimeError when the engine does not take the problem's graph."""
    hit = _KNOB_MAPS.get((problem.key(), engine))
    if hit is not None:
        return hit
    try:
        g = _new_graph(problem, h, "enum")
        knobs = g.graph.get_knobs_for_engine(engine)
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"engine {engine} does not take this graph: "
                           f"{' '.join(str(exc).split())[:200]}") from None
    spec = [(k.type, int(k.min_value), int(k.max_value), int(k.stride)) for k in knobs
            if not str(k.type).endswith("NOT_SET")]
    mapping: dict[Any, int] = {}
    for t, *_r in spec:
        n = policy.knob_number_by_name(t)
        if n is not None:
            mapping[t] = n
    if len(mapping) == len(spec):
        out = (spec, mapping)
        with _LOCK:
            _KNOB_MAPS[(problem.key(), engine)] = out
        return out
    base = {t: lo for t, lo, _hi, _st in spec}

    def name_for(combo: dict[Any, int]) -> dict[int, int] | None:
        try:
            g.graph.create_execution_plan(engine, combo)
        except Exception:  # noqa: BLE001 - this setting is not valid for the engine
            return None
        name = str(g.graph.get_plan_name_at_index(int(g.graph.get_execution_plan_count()) - 1))
        try:
            return policy.parse_plan_name(name)[1]
        except ValueError:
            return None

    base_knobs = name_for(base)
    if base_knobs is not None:
        changed: dict[Any, dict[int, int]] = {}
        for t, lo, hi, st in spec:
            if hi <= lo or st <= 0:
                if len(spec) == len(base_knobs) == 1:  # the only knob: nothing else it can be
                    changed[t] = {}
                continue
            for v in (lo + st, hi):
                got = name_for({**base, t: v})
                if got is not None:
                    changed[t] = got
                    break
        mapping = {**policy.knob_number_map(base_knobs, changed), **mapping}
        # a knob that cannot move (min == max) still shows in names: give it the number left over
        left = [n for n in base_knobs if n not in mapping.values()]
        fixed = [t for t, lo, hi, _st in spec if t not in mapping and hi <= lo]
        if len(left) == 1 and len(fixed) == 1:
            mapping[fixed[0]] = left[0]
    out = (spec, mapping)
    with _LOCK:
        _KNOB_MAPS[(problem.key(), engine)] = out
    return out


def _named_plan(problem: ConvProblem, h: Any, name: str, dev: int, source: str = "enum"
                ) -> tuple[PlanInfo, ConvPlan | None] | None:
    """Build exactly the engine configuration `name` (its own graph), or None when the engine's
    knobs cannot be read or the plan cuDNN builds is named differently (a knob of the name that
    the frontend cannot set, left at cuDNN's choice, came out another value)."""
    engine, knobs = policy.parse_plan_name(name)
    try:
        spec, mapping = engine_knobs(problem, h, engine)
    except RuntimeError:
        return None
    by_number = {n: t for t, n in mapping.items()}
    # knobs the frontend cannot set (NOT_SET types) are left at cuDNN's choice: the name check
    # below accepts the plan only when that choice is the one the name asks for
    combo = {by_number[n]: v for n, v in knobs.items() if n in by_number}
    try:
        g = _new_graph(problem, h, source)
        g.graph.create_execution_plan(engine, combo)
    except Exception as exc:  # noqa: BLE001 - cuDNN refuses this knob setting here
        return PlanInfo(name, source, False, 0,
                        f"engine config not accepted: {' '.join(str(exc).split())[:200]}"), None
    if policy.parse_plan_name(str(g.graph.get_plan_name_at_index(0))) != (engine, knobs):
        return None  # (the same configuration may list its knobs in another order)
    _apply_filter(problem, g)
    return _build_index(problem, g, 0, dev, source)


def probe_engine_notes(problem: ConvProblem, h: Any, engine: int, combo: dict[Any, int],
                       notes: tuple[str, ...] = ("NONDETERMINISTIC", "TENSOR_CORE")
                       ) -> set[str] | None:
    """Which of `notes` an engine carries (same no-build trick as `probe_notes`); None if unknown."""
    _, cudnn = import_cudnn()
    found: set[str] = set()
    for note in notes:
        enum = getattr(cudnn.numerical_note, note, None)
        if enum is None:
            return None
        try:
            g = _new_graph(problem, h, "enum")
            g.graph.create_execution_plan(engine, combo)
            g.graph.deselect_numeric_notes([enum])
            g.graph.deselect_workspace_greater_than(-1)
        except Exception:  # noqa: BLE001
            return None
        try:
            g.graph.build_plan_at_index(0)
            return None  # built despite a -1 workspace limit: the trick does not apply here
        except Exception as exc:  # noqa: BLE001
            msg = str(exc)
            if "Deselecting" in msg:
                found.add(note)
            elif "workspace" not in msg.lower():
                return None
    return found


PROBED_NOTES = ("NONDETERMINISTIC", "TENSOR_CORE")


def probe_notes(problem: ConvProblem, h: Any, mode: str,
                notes: tuple[str, ...] = PROBED_NOTES) -> dict[str, set[str]]:
    """Plan name -> which of `notes` its engine carries, for one heuristic mode's list.

    The Python API has no per-plan numerical-note getter, so for each note we query the heuristics
    on a fresh graph, deselect that note and set a workspace limit of -1: every plan then fails its
    support check without being built, with "Deselecting" when it carries the note and a workspace
    message when it does not (cudnn-frontend plans.h, check_support_at_index, cuDNN >= 9.2).
    """
    _, cudnn = import_cudnn()
    out: dict[str, set[str]] = {}
    for note in notes:
        enum = getattr(cudnn.numerical_note, note, None)
        if enum is None:
            continue
        try:
            g = _new_graph(problem, h, mode)
            g.graph.create_execution_plans([getattr(cudnn.heur_mode, mode)])
            g.graph.deselect_numeric_notes([enum])
            g.graph.deselect_workspace_greater_than(-1)
        except Exception:  # noqa: BLE001
            continue
        for i in range(int(g.graph.get_execution_plan_count())):
            name = str(g.graph.get_plan_name_at_index(i))
            out.setdefault(name, set())
            try:
                g.graph.build_plan_at_index(i)
            except Exception as exc:  # noqa: BLE001
                if "Deselecting" in str(exc):
                    out[name].add(note)
    return out


@dataclass
class Enumeration:
    """Every plan enumeration saw for a problem: built ones first in rank order, then the rest."""

    problem_key: str
    plans: list[PlanInfo]
    seconds: float
    engine_count: int = 0
    enum_added: int = 0

    def built(self) -> list[PlanInfo]:
        return [p for p in self.plans if p.built]

    def summary(self) -> dict[str, Any]:
        """A JSON-safe record for the tuning result (`TuneResult.listing`)."""
        return {"plans": len(self.plans), "built": len(self.built()),
                "engines": self.engine_count, "enum_added": self.enum_added,
                "seconds": round(self.seconds, 3)}


def enumerate_plans(problem: ConvProblem, *, device: int | None = None, handle: Any = None,
                    enumerate_engines: bool = True, max_extra: int = 24,
                    time_budget_s: float = 8.0, probe: bool = True,
                    build_budget_s: float = 45.0, max_extra_alone: int | None = None
                    ) -> Enumeration:
    """Plans for the problem: heuristic modes A, B, FALLBACK (deduplicated by name), then up to
    `max_extra` more from engine/knob enumeration (`max_extra_alone` when given and the heuristic
    modes built no plan) within `time_budget_s` more seconds. Building stops after `build_budget_s`
    in all (runtime-compiled engines can take long to build); plans not built for that reason are
    listed with that reason."""
    torch, _ = import_cudnn()
    dev = _current_device(torch, device)
    h = handle if handle is not None else get_handle(dev)
    t0 = time.perf_counter()
    seen: dict[str, PlanInfo] = {}
    order: list[str] = []
    engine_count = 0
    extra = 0

    def note(info: PlanInfo) -> bool:
        old = seen.get(info.name)
        if old is None:
            seen[info.name] = info
            order.append(info.name)
            return True
        if info.built and not old.built:
            seen[info.name] = info
        return False

    engine_notes: dict[int, set[str]] = {}
    with _device_ctx(torch, dev):
        for mode in policy.HEUR_MODES:
            listing_step("setup", "", f"heuristic mode {mode}")  # the query blames no engine
            done = {n for n, i in seen.items() if i.built}
            for info, _plan in _mode_plans(problem, h, mode, dev, skip=done,
                                           deadline=t0 + build_budget_s):
                note(info)
            if probe:
                listing_step("setup", "", f"behaviour notes of mode {mode}")
                for name, mode_notes in probe_notes(problem, h, mode).items():
                    try:
                        eng, _ = policy.parse_plan_name(name)
                    except ValueError:
                        continue
                    engine_notes.setdefault(eng, set()).update(mode_notes)
        t_enum = time.perf_counter()
        if max_extra_alone is not None and not any(i.built for i in seen.values()):
            max_extra = max(max_extra, max_extra_alone)
        if enumerate_engines and max_extra > 0:
            listing_step("setup", "", "engine count")
            try:
                g = _new_graph(problem, h, "enum")
                engine_count = int(g.graph.get_engine_count())
            except Exception:  # noqa: BLE001
                engine_count = 0
            for engine in range(engine_count):
                now = time.perf_counter()
                if extra >= max_extra or now - t_enum > time_budget_s or now - t0 > build_budget_s:
                    break
                done = {n for n, i in seen.items() if i.built}
                combos: list[dict[Any, int]] = []
                for info, _plan in _engine_plans(problem, h, engine, dev, skip=done,
                                                 first_combo=combos):
                    if info.name.startswith("eng") and note(info) and info.built:
                        extra += 1
                        if probe and engine not in engine_notes and combos:
                            found = probe_engine_notes(problem, h, engine, combos[0])
                            if found is not None:
                                engine_notes[engine] = found
                    if extra >= max_extra:
                        break
    plans = []
    for n in order:
        info = seen[n]
        try:
            eng, _ = policy.parse_plan_name(n)
        except ValueError:
            plans.append(info)
            continue
        found = engine_notes.get(eng)
        tags = tuple(sorted(found)) if found is not None else ("notes-unknown",)
        plans.append(PlanInfo(info.name, info.source, info.built, info.workspace_bytes,
                              info.reason, tags))
    plans.sort(key=lambda p: (not p.built,))  # stable: rank order kept within built / not built
    return Enumeration(problem.key(), plans, time.perf_counter() - t0, engine_count, extra)


def clear_cache() -> None:
    with _LOCK:
        _PLANS.clear()
        _KNOB_MAPS.clear()


def drop_plans(keep_problem_key: str | None = None) -> int:
    """Forget every cached plan except those of `keep_problem_key` (None: all); returns how many
    were dropped. Plans still referenced elsewhere (a runtime route) stay valid: only the cache's
    reference goes."""
    with _LOCK:
        gone = [k for k in _PLANS if k[1] != keep_problem_key]
        for k in gone:
            del _PLANS[k]
        for mk in [mk for mk in _KNOB_MAPS if mk[0] != keep_problem_key]:
            del _KNOB_MAPS[mk]
    return len(gone)
