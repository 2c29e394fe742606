"""Warnings that PyTorch raises because of how `optimize` times and captures a model, silenced
around those steps only.

Each entry is the start of one warning's text, with the PyTorch source that raises it:
- "The AccumulateGrad node's stream does not match ..." (torch/csrc/autograd/input_buffer.cpp): a
  backward whose parameter's gradient accumulator was made on another stream. A CUDA graph's
  warm-up and capture run on a side stream, and the timing steps on the current one.
- "Attempting to run cuBLAS, but there was no current CUDA context! ..."
  (aten/src/ATen/cuda/CublasHandlePool.cpp, once per process): the first cuBLAS call of a thread
  with no current CUDA context, such as the autograd engine's device thread in the first timed
  or captured backward.
Only these texts, and only as UserWarning, are filtered, and only while `own_steps` is entered:
any other warning, the model's own included, passes as it would without convdoctor.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

OWN_WARNINGS: tuple[str, ...] = (
    "The AccumulateGrad node's stream does not match",
    "Attempting to run cuBLAS, but there was no current CUDA context",
)


@contextmanager
def own_steps() -> Iterator[None]:
    """Run convdoctor's own timing or capture steps without the `OWN_WARNINGS` they cause; the
    warning filters are as they were afterwards."""
    with warnings.catch_warnings():
        for text in OWN_WARNINGS:
            warnings.filterwarnings("ignore", message=re.escape(text), category=UserWarning)
        yield
