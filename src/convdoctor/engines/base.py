"""What an engine is: one way to run a convolution direction, for the tuner and the runtime alike.

An `Engine` owns a family of candidate keys ("cudnn:eng69_k24=0", "triton:fp_k64p32j32w4s4",
"torch:heuristic"). It says which keys it offers for a problem (`offers`), builds the runner the
tuner times (`runner`) and the executor the runtime routes a layer through (`executor`), and states
the facts the runtime ranks by (`host_cost_s`, `runs_transposed`, `routed`). Both the runner and
the executor run the engine's one launch path, so what was timed is what runs.

The engines are listed once, in `registry.ENGINES`; nothing else matches key prefixes.
Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

if TYPE_CHECKING:
    from ..measure.correctness import Correctness
    from ..problem import ConvProblem


@dataclass(frozen=True)
class Candidate:
    """One way to run a problem. `key` is stable across processes and machines of one kind.

    `pinned`: the key fixes the kernel that runs (a cuDNN engine configuration, a native kernel).
    False where a library picks the kernel anew in each process (PyTorch's cuDNN heuristic and
    benchmark paths): PyTorch's heuristic path can run a 19-20% slower kernel in one fresh process
    than in others (wav2vec2 conv1 170 vs 143 us on an H100), so a time measured for it in the
    tuner's process need not hold in the user's. Ties prefer pinned candidates."""

    key: str
    backend: str
    workspace_bytes: int = 0
    deterministic: bool = True
    notes: tuple[str, ...] = ()
    pinned: bool = True

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "backend": self.backend, "workspace_bytes": self.workspace_bytes,
                "deterministic": self.deterministic, "notes": list(self.notes),
                "pinned": self.pinned}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Candidate:
        return cls(key=str(d["key"]), backend=str(d["backend"]),
                   workspace_bytes=int(cast(int, d.get("workspace_bytes", 0) or 0)),
                   deterministic=bool(d.get("deterministic", True)),
                   notes=tuple(str(n) for n in cast("Iterable[object]", d.get("notes", ()) or ())),
                   pinned=bool(d.get("pinned", True)))


class CandidateUnsupported(Exception):
    """The candidate cannot run this problem (the engine says why); not a failure."""


class StickyError(Exception):
    """The device is unusable in this process (a sticky CUDA error): raise it from a runner and the
    worker process exits, so the parent marks the candidate failed and starts a fresh worker."""


@dataclass(frozen=True)
class ConvArgs:
    """A routed call's fixed convolution arguments (after any explicit pre-padding)."""

    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    transposed: bool
    output_padding: tuple[int, ...]
    groups: int


@runtime_checkable
class Runner(Protocol):
    """What the tuner times: one candidate on one problem's buffers."""

    candidate: Candidate

    def warmup(self) -> None:
        """One untimed run; the harness repeats it until first-run effects are gone."""

    def time(self, reps: int) -> list[float]:
        """`reps` timed runs, seconds each (flushing caches outside the timed interval)."""
        ...

    def check(self) -> Correctness:
        """Fresh random data, output poisoned (NaN) first, compared with a float64 reference."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Exec(Protocol):
    """What the runtime calls: one candidate key for the directions of one layer's calls.

    `fprop(x, w, b, args) -> y`; `backward(gy, x, w, bias_sizes, args, mask) -> (gx, gw, gb)`
    with `mask` saying which of the three are wanted. `is_noop()`: the call is exactly PyTorch's
    own path as the user configured it (the runtime then keeps PyTorch's native autograd node)."""

    key: str
    kind: str

    def fprop(self, x: Any, w: Any, b: Any, a: ConvArgs) -> Any: ...

    def backward(self, gy: Any, x: Any, w: Any, bias_sizes: list[int] | None, a: ConvArgs,
                 mask: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]: ...

    def is_noop(self) -> bool: ...

    def describe(self) -> str: ...


class Engine:
    """One way to run a convolution. Subclasses set the class attributes and override what they
    support; the defaults offer nothing and build nothing."""

    name: str = ""
    keys: tuple[str, ...] = ()      # exact keys this engine owns
    prefix: str = ""                # ... or every key starting with this
    device: str = "cuda"            # "cuda", "cpu" or "any": where its executors run
    routed: bool = True             # the runtime may route a layer to it
    runs_transposed: bool = True    # its executor takes transposed convolutions
    by_name: bool = False           # its runner builds any of its keys by name, listed or not
    summary: str = ""               # one line for `convdoctor env` and docs/engines.md

    def owns(self, key: str) -> bool:
        return key in self.keys or bool(self.prefix and key.startswith(self.prefix))

    def routes(self, key: str) -> bool:
        """The runtime may route a layer to `key`."""
        return self.routed

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        """The candidates of this engine for `problem` on `backend` (`lean`: the short listing
        the tuner falls back to when a full one failed)."""
        return []

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        """The tuner's runner for `candidate`; CandidateUnsupported when it cannot run here."""
        raise CandidateUnsupported(f"{candidate.key}: {self.name} builds no tuner runner")

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        """The runtime's executor for `key` on layers of `problem`'s shape, or None when it has
        none; may raise when it cannot be built here. `reference_s`: the tuned median, for
        engines that hold their setup to it (the cuDNN workspace guard)."""
        return None

    def host_cost_s(self, key: str, *, train: bool) -> float:
        """Host time per eager call beyond PyTorch's own dispatch (0 inside a CUDA graph, where a
        replay has no per-call host cost): the runtime adds it before ranking."""
        return 0.0

    def __repr__(self) -> str:
        return f"<engine {self.name}>"
