"""`torch:gemm`: a 1x1 convolution (no padding, one group) as cuBLAS matrix products.

The math is `gemm_math` (one plain GEMM in channels-last, a batched GEMM in NCHW; a strided input's
subsampling copy and wgrad's NCHW transposes are part of the time). TF32 as the math mode allows;
fp16/bf16 reductions in fp32. cuBLAS gives the same bits run to run on one stream (its documented
reproducibility), so the candidate counts as deterministic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Candidate, CandidateUnsupported, Engine
from .torch_paths import TorchRunner

if TYPE_CHECKING:
    from ..problem import ConvProblem

KEY = "torch:gemm"


def eligible(problem: ConvProblem) -> bool:
    """The problem is exactly a matrix product: 1x1 kernel, no padding, one group."""
    return (problem.groups == 1 and all(k == 1 for k in problem.kernel)
            and not any(problem.pad_pre) and not any(problem.pad_post))


class GemmRunner(TorchRunner):
    """The direction as matrix products; PyTorch allocates the output (poisoned like a torch
    path's)."""

    def __init__(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> None:
        if not eligible(problem):
            raise CandidateUnsupported(f"{KEY} applies to 1x1 convolutions with no padding and "
                                       "one group only")
        super(TorchRunner, self).__init__(backend, problem, candidate)
        self.cl = problem.layout == "nhwc" and problem.ndim in (2, 3)
        self.tf32 = problem.math == "tf32"

    def run(self) -> Any:
        from . import gemm_math as gemm

        p = self.problem
        with gemm.reduced_precision(self.tf32):
            if p.direction == "fprop":
                return gemm.fprop(self.a, self.b, p.stride, channels_last=self.cl)
            if p.direction == "dgrad":
                return gemm.dgrad(self.a, self.b, p.spatial, p.stride, channels_last=self.cl)
            return gemm.wgrad(self.a, self.b, p.stride, channels_last=self.cl)


class GemmEngine(Engine):
    name = "gemm"
    keys = (KEY,)
    device = "any"
    runs_transposed = False
    summary = "1x1 convolutions as cuBLAS matrix products"

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        if not eligible(problem):
            return []
        return [Candidate(KEY, "cuda", 0, True, ("1x1 convolution as cuBLAS matrix products; a "
                                                 "strided input's subsampling copy (and wgrad's "
                                                 "NCHW transposes) timed",))]

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        try:
            return GemmRunner(backend, problem, candidate)
        except RuntimeError as exc:
            raise CandidateUnsupported(f"{KEY} failed: {' '.join(str(exc).split())[:300]}"
                                       ) from None

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        from .gemm_exec import GEMM_EXEC

        return GEMM_EXEC


GEMM = GemmEngine()
