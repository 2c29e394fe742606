"""A fake `cudnn` module (cudnn-frontend 1.16's pygraph surface that convdoctor uses), for CPU tests.

It follows the frontend's semantics as read from its source (plans.h): a graph holds engine configs
from heuristic queries or `create_execution_plan`; `deselect_numeric_notes` bars configs whose engine
carries a note; `build_plan_at_index` fails with "Deselecting execution plan" for a barred config,
with a workspace message when the workspace limit is exceeded, and with a support error for
configs the fake marks unsupported.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

# engine id -> properties
ENGINES: dict[int, dict[str, Any]] = {
    0: {"notes": {"TENSOR_CORE"}, "ws": 1024, "knobs": [(2, 0, 1, 1)]},
    1: {"notes": set(), "ws": 0, "knobs": []},
    2: {"notes": {"NONDETERMINISTIC"}, "ws": 4096, "knobs": [(17, 0, 8, 1)]},
    3: {"notes": {"DOWN_CONVERT_INPUTS"}, "ws": 0, "knobs": []},
    4: {"notes": set(), "ws": 64, "knobs": [(2, 0, 3, 1), (24, 0, 1, 1)]},
    5: {"notes": {"TENSOR_CORE"}, "ws": 0, "knobs": []},
}
HEUR: dict[str, list[tuple[int, dict[int, int]]]] = {
    "A": [(0, {2: 1}), (1, {}), (3, {}), (2, {17: 0})],
    "B": [(1, {}), (4, {2: 0, 24: 0}), (0, {2: 1})],
    "FALLBACK": [(1, {}), (5, {}), (6, {})],  # engine 6 does not exist: never builds
}
UNSUPPORTED: set[str] = {"eng6"}
# True: knob types come back as `KnobType` objects numbered unlike the plan names' knob numbers,
# as cudnn-frontend's Python enum is (tests of learning the map turn it on)
FRONTEND_TYPES = {"on": False}


@dataclass(frozen=True)
class KnobType:
    backend: int

    def __int__(self) -> int:
        return self.backend + 100  # the frontend's own numbering differs from the backend's

    def __str__(self) -> str:
        # TILE_SIZE is a name convdoctor's table knows; the others must be learned from names
        return "knob_type." + {2: "TILE_SIZE"}.get(self.backend, f"K{self.backend}")


def name_of(engine: int, knobs: dict[int, int]) -> str:
    return f"eng{engine}" + "".join(f"_k{k}={v}" for k, v in sorted(knobs.items()))


class _Tensor:
    def __init__(self, name: str = "", dim: Any = None, stride: Any = None,
                 data_type: Any = None) -> None:
        self.name, self.dim, self.stride, self.data_type = name, dim, stride, data_type
        self.output = False

    def set_output(self, v: bool) -> _Tensor:
        self.output = v
        return self

    def set_data_type(self, v: Any) -> _Tensor:
        self.data_type = v
        return self

    def set_dim(self, v: Any) -> _Tensor:
        self.dim = list(v)
        return self

    def set_stride(self, v: Any) -> _Tensor:
        self.stride = list(v)
        return self


@dataclass
class FakeGraph:
    io_data_type: Any = None
    intermediate_data_type: Any = None
    compute_data_type: Any = None
    handle: Any = None
    configs: list[tuple[int, dict[int, int]]] = field(default_factory=list)
    barred: list[bool] = field(default_factory=list)
    built: set[int] = field(default_factory=set)
    ws_limit: int = 2 ** 62
    op: dict[str, Any] = field(default_factory=dict)
    executed: list[tuple[Any, ...]] = field(default_factory=list)

    def tensor(self, name: str = "", dim: Any = None, stride: Any = None, data_type: Any = None,
               **_: Any) -> _Tensor:
        return _Tensor(name, dim, stride, data_type)

    def _conv(self, kind: str, a: _Tensor, b: _Tensor, **kw: Any) -> _Tensor:
        self.op = {"kind": kind, "a": a, "b": b, **kw}
        out = _Tensor("out")
        self.op["out"] = out
        return out

    def conv_fprop(self, image: _Tensor, weight: _Tensor, **kw: Any) -> _Tensor:
        return self._conv("fprop", image, weight, **kw)

    def conv_dgrad(self, loss: _Tensor, filter: _Tensor, **kw: Any) -> _Tensor:  # noqa: A002
        return self._conv("dgrad", loss, filter, **kw)

    def conv_wgrad(self, image: _Tensor, loss: _Tensor, **kw: Any) -> _Tensor:
        return self._conv("wgrad", image, loss, **kw)

    def validate(self) -> None:
        pass

    def build_operation_graph(self) -> None:
        pass

    def create_execution_plans(self, modes: list[str]) -> None:
        for m in modes:
            for e, k in HEUR[m]:
                self.configs.append((e, dict(k)))
                self.barred.append(False)

    def create_execution_plan(self, engine: int, knobs: dict[Any, int]) -> None:
        if engine not in ENGINES:
            raise RuntimeError("CUDNN_BACKEND_API_FAILED: engine not available")
        nums = {(k.backend if isinstance(k, KnobType) else int(k)): int(v)
                for k, v in knobs.items()}
        ranges = {t: (lo, hi) for t, lo, hi, _st in ENGINES[engine]["knobs"]}
        for n, v in nums.items():
            if n not in ranges or not ranges[n][0] <= v <= ranges[n][1]:
                raise RuntimeError(f"CUDNN_STATUS_BAD_PARAM: knob {n}={v} not valid")
        self.configs.append((engine, nums))
        self.barred.append(False)

    def get_engine_count(self) -> int:
        return 7

    def get_knobs_for_engine(self, engine: int) -> list[Any]:
        if engine not in ENGINES:
            raise RuntimeError("engine does not support the graph")
        mk = KnobType if FRONTEND_TYPES["on"] else (lambda t: t)
        return [types.SimpleNamespace(type=mk(t), min_value=lo, max_value=hi, stride=st)
                for t, lo, hi, st in ENGINES[engine]["knobs"]]

    def deselect_numeric_notes(self, notes: list[str]) -> None:
        for i, (e, _) in enumerate(self.configs):
            if ENGINES.get(e, {"notes": set()})["notes"] & set(notes):
                self.barred[i] = True

    def deselect_workspace_greater_than(self, n: int) -> None:
        self.ws_limit = n

    def get_execution_plan_count(self) -> int:
        return len(self.configs)

    def get_plan_name_at_index(self, i: int) -> str:
        return name_of(*self.configs[i])

    def build_plan_at_index(self, i: int) -> None:
        if self.barred[i]:
            raise RuntimeError("[cudnn_frontend] Error: Deselecting execution plan")
        e, _ = self.configs[i]
        name = self.get_plan_name_at_index(i)
        if e not in ENGINES or name in UNSUPPORTED:
            raise RuntimeError(f"[cudnn_frontend] Error: {name} is not supported")
        if ENGINES[e]["ws"] > self.ws_limit:
            raise RuntimeError("[cudnn_frontend] Error: Skipping plan since workspace violation")
        self.built.add(i)

    def get_workspace_size_plan_at_index(self, i: int) -> int:
        return ENGINES[self.configs[i][0]]["ws"] if i in self.built else 0

    def execute_plan_at_index(self, pack: dict[Any, Any], ws: Any, index: int,
                              handle: Any = None) -> None:
        if index not in self.built:
            raise RuntimeError("plan not built")
        self.executed.append((pack, ws, index, handle))


GRAPHS: list[FakeGraph] = []


def _pygraph(**kw: Any) -> FakeGraph:
    g = FakeGraph(**kw)
    GRAPHS.append(g)
    return g


def make_module() -> types.ModuleType:
    m = types.ModuleType("cudnn")
    m.__version__ = "1.16.0-fake"
    m.pygraph = _pygraph
    m.create_handle = lambda: 4242
    m.set_stream = lambda handle, stream: None
    m.backend_version = lambda: 91900
    m.data_type = types.SimpleNamespace(FLOAT="FLOAT", HALF="HALF", BFLOAT16="BFLOAT16")
    m.heur_mode = types.SimpleNamespace(A="A", B="B", FALLBACK="FALLBACK")
    m.numerical_note = types.SimpleNamespace(
        TENSOR_CORE="TENSOR_CORE", DOWN_CONVERT_INPUTS="DOWN_CONVERT_INPUTS",
        NONDETERMINISTIC="NONDETERMINISTIC")
    return m


_SETTING_OF = {"enumerate_engines": "cudnn_enum", "max_extra": "cudnn_enum_extra",
               "enum_budget_s": "cudnn_enum_budget_s", "max_plans": "cudnn_max_plans",
               "refine": "cudnn_refine", "refine_budget_s": "cudnn_refine_budget_s",
               "dual": "cudnn_dual"}


def listing_backend(placements: Any = None, **settings: Any) -> Any:
    """A CudaBackend without a GPU (no __init__) for listing on the fake cudnn: its settings from
    `settings` (by the settings' names, or the short names of `_SETTING_OF`); `placements`: what
    `placements_for` returns (default: one empty set)."""
    from convdoctor.settings import Settings
    from convdoctor.tune import cuda_backend as gb

    be = object.__new__(gb.CudaBackend)
    be.settings = Settings().replace(**{_SETTING_OF.get(k, k): v for k, v in settings.items()})
    be.device, be.isolate_heuristic, be._clock, be._child = 0, False, None, None
    be._env = {"sm_count": "132"}
    be._placements = None
    be.last_listing, be.last_enumeration, be.last_refinement, be.cudnn_error = {}, None, None, ""
    be.listing_exclude, be.listing_exclude_why = set(), {}
    sets = placements if placements is not None else types.SimpleNamespace(sets=[{}])
    be.placements_for = lambda p: sets  # type: ignore[method-assign]
    be.release = lambda problem=None: None  # type: ignore[method-assign]
    return be


def cudnn_candidates(be: Any, problem: Any, *, lean: bool = False) -> list[Any]:
    """The cuDNN plans (own and dual) of a full (or lean) listing of `be`."""
    from convdoctor.engines.registry import is_plan_key

    return [c for c in be._listing(problem, lean=lean) if is_plan_key(c.key)]
