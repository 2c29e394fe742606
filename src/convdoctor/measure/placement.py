"""Several buffer placements per problem, shared by every candidate timed in one process.

Why: on an H100 the same PyTorch convolution timed
in one process over 8 fresh allocations of its input and weight spread by 2.7-8.1% for fp16 1x1
layers of 7-11 us and by 1.8-2.1% for a 205 us fp32 3x3 layer (two alternating values), at a
steady 1980 MHz. A tuner that gives each candidate its own buffers compares placements as much as
engines, and a referee in another process sees other placements again: every remaining "> 2% slower"
row of the fp16 suite was inside that spread.

So a problem gets `count` placements: sets of (inputs, output, shape-givers) allocated one after
another with a random-size spacer before each (kept alive, so the next set lands elsewhere). All
runners of the problem in this process use the same sets; the harness passes the round number as
the slot, so every candidate of a round runs on the same placement (paired rounds) and each
candidate's samples cover all placements in turn (its median is over placements, not one).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .buffers import empty_for, fill_random, io_roles

if TYPE_CHECKING:
    from ..problem import ConvProblem

DEFAULT_COUNT = 4
# Extra placements stop where one more set of buffers would pass this many bytes in all.
DEFAULT_BUDGET_BYTES = 1 << 30


def placement_count(set_bytes: int, *, wanted: int = DEFAULT_COUNT,
                    budget_bytes: int = DEFAULT_BUDGET_BYTES) -> int:
    """How many placements to keep: `wanted`, fewer when the sets would pass `budget_bytes`
    together, never fewer than one."""
    if set_bytes <= 0:
        return max(1, wanted)
    return max(1, min(wanted, budget_bytes // set_bytes))


# Workspaces of one plan's placements lie this far apart inside one buffer: 1 MiB + 17 pages of
# 4 KiB, so the offsets differ at the 4 KiB, 64 KiB and 1 MiB scales and no two of the first four
# share a 2 MiB phase (the probe found fast and slow addresses at all of those scales).
WORKSPACE_STEP = (1 << 20) + (17 << 12)


def workspace_offsets(workspace_bytes: int, count: int) -> list[int]:
    """Byte offsets of a plan's `count` workspaces inside one buffer (the first at 0).

    Why: on the H100 (`lab/ws_probe.py`) wav2vec2 conv1's split-K plan
    `eng67_k2=9_...` ran 141-145 us with its workspace at some addresses and 161-169 us at others,
    in one process, on the same inputs (offsets 4 KiB and 64 KiB fast; 0, 256 B, 1 MiB slow), while
    the plan without split-K ran 142-144 us everywhere. With one workspace per plan the tuner saw
    only the fast address and chose the plan, which ran 15% slower where the referee's (or the
    user's) workspace landed. Each placement slot now gets its own workspace address, so a plan's
    median covers several. A plan with no workspace keeps a single 1-byte buffer."""
    if workspace_bytes <= 0 or count <= 1:
        return [0] * max(1, count)
    return [i * WORKSPACE_STEP for i in range(count)]


def roles_of(problem: ConvProblem) -> tuple[str, ...]:
    """Tensor roles a runner needs: its two inputs, its output, and the shape-giver of dgrad (x)
    or wgrad (w)."""
    (ra, rb), rout = io_roles(problem.direction)
    extra = {"dgrad": ("x",), "wgrad": ("w",)}.get(problem.direction, ())
    return (ra, rb, rout) + extra


@dataclass
class Placements:
    """The placements of one problem: `sets[i][role]` is a tensor; `spacers` keep the gaps."""

    key: str
    sets: list[dict[str, Any]]
    spacers: list[Any] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.sets)


def allocate(problem: ConvProblem, device: int, *, wanted: int | None = None,
             seed: int = 4321) -> Placements:
    """`count` sets of the problem's buffers, inputs filled with uniform(-1, 1) noise."""
    import torch

    dev = f"cuda:{device}"
    roles = roles_of(problem)
    first = {r: empty_for(problem, r, dev) for r in roles}
    set_bytes = sum(t.numel() * t.element_size() for t in first.values())
    n = placement_count(set_bytes, wanted=DEFAULT_COUNT if wanted is None else wanted)
    rng = random.Random(seed)
    sets = [first]
    spacers: list[Any] = []
    for _ in range(n - 1):
        # a spacer of 4 KiB-256 KiB plus a multiple of 256 B shifts the next set's addresses
        size = rng.randrange(1, 64) * 4096 + rng.randrange(0, 16) * 256
        spacers.append(torch.empty(size, dtype=torch.uint8, device=dev))
        sets.append({r: empty_for(problem, r, dev) for r in roles})
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    (ra, rb), _ = io_roles(problem.direction)
    for s in sets:
        for r in (ra, rb):
            fill_random(s[r], gen)
    return Placements(problem.key(), sets, spacers)
