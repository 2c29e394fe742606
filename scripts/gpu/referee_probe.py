"""Why does the bench referee's heuristic child time PyTorch's heuristic path slower than every
other process? (Session 8, H100: c3d conv3a 342 us in the referee's child vs 285 us in the tuning
runs' children and in both PyTorch arms; wav2vec2 conv1 170 vs 143 us.)

    python scripts/gpu/referee_probe.py BENCH_JSON NAME [NAME ...]

Replays the bench's referee (`_referee_arm`, fresh worker process, heuristic path in its child)
with the keys recorded in BENCH_JSON: A = every row of the file in order; B = only the NAMEd rows;
C = the NAMEd rows with torch:heuristic alone; D = plain PyTorch in this process (benchmark off,
TF32 as the problem says), CUDA events over 50 calls, no convdoctor runner. Prints torch:heuristic
per variant; writes $OUT/referee_probe.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


class _Bar:
    def update(self, n: int, msg: str = "") -> None:
        print("  ", msg, flush=True)


def main() -> int:
    path, names = sys.argv[1], set(sys.argv[2:])
    import torch  # noqa: F401  (before cudnn)

    from convdoctor.problem import ConvProblem
    from convdoctor.tune.cmd_bench import _referee_arm

    doc = json.load(open(path))
    rows = doc["rows"]
    probs = {r["problem_key"]: ConvProblem.parse(r["problem_key"]) for r in rows}
    keys = {r["problem_key"]: sorted(r["referee_s"]) for r in rows}
    named = [r for r in rows if r["name"] in names]
    out: dict[str, Any] = {"recorded": {r["name"]: r["referee_s"].get("torch:heuristic")
                                        for r in named}}
    variants = {
        "A_all_rows": ([probs[r["problem_key"]] for r in rows], keys),
        "B_named_rows": ([probs[r["problem_key"]] for r in named], keys),
        "C_heuristic_alone": ([probs[r["problem_key"]] for r in named],
                              {r["problem_key"]: ["torch:heuristic"] for r in named}),
    }
    for tag, (ps, ks) in variants.items():
        t0 = time.monotonic()
        ref = _referee_arm(ps, ks, "cuda", doc.get("budget_s", 0.5), 60.0, _Bar())
        out[tag] = {r["name"]: ref.get(r["problem_key"], {}) for r in named}
        print(tag, f"{time.monotonic() - t0:.0f} s",
              {n: round(v.get("torch:heuristic", 0) * 1e6, 1) for n, v in out[tag].items()},
              flush=True)
    out["D_plain_torch"] = {r["name"]: plain(probs[r["problem_key"]]) for r in named}
    print("D_plain_torch", {n: round(v * 1e6, 1) for n, v in out["D_plain_torch"].items()})
    dest = os.environ.get("OUT", ".")
    with open(os.path.join(dest, "referee_probe.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    return 0


def plain(p: Any) -> float:
    import torch

    from convdoctor.tune.gpu.backend import torch_conv, torch_flags
    from convdoctor.tune.gpu.cudnn_plan import empty_for
    from convdoctor.tune.gpu.policy import io_roles

    (ra, rb), _ = io_roles(p.direction)
    a = empty_for(p, ra, "cuda:0").uniform_(-1, 1)
    b = empty_for(p, rb, "cuda:0").uniform_(-1, 1)
    # dgrad needs the input's shape, wgrad the weight's (as the tuner's runners pass them)
    like = {"dgrad": "x", "wgrad": "w"}.get(p.direction)
    like_t = empty_for(p, like, "cuda:0") if like else None
    with torch_flags("heuristic", p):
        for _ in range(5):
            torch_conv(p, a, b, like_t)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(50):
            torch_conv(p, a, b, like_t)
        e.record()
        torch.cuda.synchronize()
    return s.elapsed_time(e) / 50 / 1e3


if __name__ == "__main__":
    sys.exit(main())
