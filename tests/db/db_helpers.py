"""Builders for tuning-database tests: realistic TuneResults without running anything."""

from __future__ import annotations

import random
import time

from convdoctor.problem import ConvProblem
from convdoctor.tune.backend import Candidate, Correctness
from convdoctor.tune.result import CandidateStats, TuneResult

ENV = {"backend": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": "132",
       "compute_capability": "9.0", "driver": "580.65", "cuda_runtime": "13.0", "cudnn": "91900",
       "cudnn_frontend": "1.16.0", "torch": "2.11.0"}


def problem(i: int) -> ConvProblem:
    return ConvProblem.parse(f"fprop n={1 + i % 7} c={8 * (1 + i % 5)} h={7 + i} w={7 + i} "
                             f"k={16 * (1 + i % 3)} r=3 s=3 pad=1")


def result(i: int, env: dict[str, str] | None = None, *, n_cands: int = 12, n_samples: int = 60,
           tag: float = 0.0) -> TuneResult:
    rng = random.Random(i)
    cands = []
    for j in range(n_cands):
        base = 1e-4 * (1 + j * 0.1) + tag
        cands.append(CandidateStats(
            candidate=Candidate(key=f"cudnn:eng{j}_k2=1", backend="cudnn-frontend",
                                workspace_bytes=j * 1024, deterministic=j % 2 == 0),
            status="ok", samples=[base * (1 + rng.gauss(0, 0.01)) for _ in range(n_samples)],
            warmup_runs=6, first_run_s=base * 5, clock_mhz=1980.0,
            correctness=Correctness(True, 1e-6, 5e-3)))
    return TuneResult(problem=problem(i), env=dict(env or ENV), backend="cuda",
                      winner=cands[0].candidate, candidates=cands, tuning_s=1.5,
                      created=time.time())
