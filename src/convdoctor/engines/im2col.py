"""`torch:im2col`: a grouped (not depthwise) 1D/2D convolution as one patch copy and one batched
cuBLAS product over the groups (`im2col_math`; dgrad folds the patches back).

TF32 as the math mode allows, fp16/bf16 reductions in fp32. One cuBLAS product and a fold that
sums by gathering: the same bits run to run. The patch matrix is allocated per call, so problems
whose patches would pass `MAX_BYTES` are not offered.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..problem import DTYPE_BYTES
from .base import Candidate, CandidateUnsupported, Engine
from .torch_paths import TorchRunner

if TYPE_CHECKING:
    from ..problem import ConvProblem

KEY = "torch:im2col"
MAX_BYTES = 1 << 30


def patch_bytes(problem: ConvProblem) -> int:
    """Bytes the candidate allocates for its patches: N x C x kernel x output positions, twice
    for dgrad (the products and their permuted copy for the fold, in fp32 for fp16/bf16)."""
    one = problem.n * problem.c * math.prod(problem.kernel) * math.prod(problem.out_spatial())
    if problem.direction == "dgrad":
        return 2 * one * 4
    return one * DTYPE_BYTES[problem.dtype]


def unfit(problem: ConvProblem) -> str | None:
    """None when the candidate is offered for `problem`, else why not: 1D/2D grouped convolutions
    that are not depthwise (those have `triton:dw_`), with a patch matrix of at most 1 GiB."""
    if problem.ndim not in (1, 2):
        return f"{problem.ndim}D: im2col runs 1D and 2D convolutions only"
    if problem.groups < 2:
        return "offered for grouped convolutions only (this one has one group)"
    if problem.groups == problem.c == problem.k:
        return "depthwise: the depthwise kernel (`triton:dw_`) covers it"
    nbytes = patch_bytes(problem)
    if nbytes > MAX_BYTES:
        return f"its patch matrix would take {nbytes / 2**30:.1f} GiB (at most 1 GiB)"
    return None


class Im2colRunner(TorchRunner):
    """The direction as a patch copy and one batched product over the groups."""

    def __init__(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> None:
        why = unfit(problem)
        if why:
            raise CandidateUnsupported(f"{KEY}: {why}")
        super(TorchRunner, self).__init__(backend, problem, candidate)
        self.tf32 = problem.math == "tf32"

    def run(self) -> Any:
        from . import gemm_math as gemm
        from . import im2col_math as im2col

        p = self.problem
        args = (p.stride, p.pad_pre, p.pad_post, p.dilation, p.groups)
        with gemm.reduced_precision(self.tf32):
            if p.direction == "fprop":
                return im2col.fprop(self.a, self.b, *args)
            if p.direction == "dgrad":
                return im2col.dgrad(self.a, self.b, p.spatial, *args)
            return im2col.wgrad(self.a, self.b, p.w_shape(), *args)


class Im2colEngine(Engine):
    name = "im2col"
    keys = (KEY,)
    device = "any"
    runs_transposed = False
    summary = "grouped convolutions as a patch copy and one batched cuBLAS product"

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        if unfit(problem) is not None:
            return []
        return [Candidate(KEY, "cuda", patch_bytes(problem), True,
                          ("grouped convolution as a patch copy and one batched cuBLAS product "
                           "over the groups; the copy (and dgrad's fold) timed",))]

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        try:
            return Im2colRunner(backend, problem, candidate)
        except RuntimeError as exc:
            raise CandidateUnsupported(f"{KEY} failed: {' '.join(str(exc).split())[:300]}"
                                       ) from None

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        from .im2col_exec import IM2COL_EXEC

        return IM2COL_EXEC


IM2COL = Im2colEngine()
