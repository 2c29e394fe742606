"""What every probe receives: the machine view, the facts so far, and a pool for child processes."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from .facts import Fact
from .system import ChildResult, System

DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib",
                "/usr/lib")
TORCH_TIMEOUT = 90.0


@dataclass
class ProbeContext:
    system: System
    facts: dict[str, Fact] = field(default_factory=dict)
    run_conv: bool = True
    pool: ThreadPoolExecutor | None = None
    pending: dict[str, Future[ChildResult]] = field(default_factory=dict)

    def child(self, key: str, script: str, args: tuple[str, ...] = (), timeout: float = 20.0,
              env: dict[str, str] | None = None) -> ChildResult:
        """Result of a child script, started earlier by `start` when possible (probes overlap)."""
        fut = self.pending.pop(key, None)
        if fut is not None:
            return fut.result()
        return self.system.child(script, args, timeout=timeout, env=env)

    def start(self, key: str, script: str, args: tuple[str, ...] = (), timeout: float = 20.0,
              env: dict[str, str] | None = None) -> None:
        if self.pool is not None and key not in self.pending:
            self.pending[key] = self.pool.submit(self.system.child, script, args, timeout=timeout, env=env)


Probe = Callable[[ProbeContext], Fact]
