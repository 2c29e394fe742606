"""Pure-Python convolution shape arithmetic (no torch), shared by the tracer and the checker.

Formulas as in PyTorch's aten/src/ATen/native/ConvUtils.h (`conv_output_size`,
`conv_input_size` for transposed convolutions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def expand(value: Any, n: int, name: str = "value") -> tuple[int, ...]:
    """An int or a sequence of ints as an n-tuple (a 1-sequence is broadcast, as PyTorch does)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int or a tuple of ints, got {value!r}")
    if isinstance(value, int):
        return (int(value),) * n
    try:
        seq = [int(v) for v in value]
    except TypeError:
        raise ValueError(f"{name} must be an int or a tuple of ints, got {value!r}") from None
    if len(seq) == 1:
        return (seq[0],) * n
    if len(seq) != n:
        raise ValueError(f"{name} has {len(seq)} values but the convolution has {n} spatial dims")
    return tuple(seq)


def conv_out_size(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    """Output length of one spatial dim (may be <= 0: the input is too small)."""
    if stride <= 0:
        return 0
    span = size + 2 * pad - dil * (k - 1) - 1
    return span // stride + 1


def conv_transpose_out_size(size: int, k: int, stride: int, pad: int, dil: int, out_pad: int) -> int:
    return (size - 1) * stride - 2 * pad + dil * (k - 1) + out_pad + 1


def output_shape(x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], groups: int, transposed: bool,
                 output_padding: Sequence[int]) -> tuple[int, ...]:
    """N, C_out, *spatial for a batched input shape (spatial entries may be <= 0)."""
    n = x_shape[0]
    spatial = x_shape[2:]
    ks = w_shape[2:]
    if transposed:
        cout = w_shape[1] * groups
        out = [conv_transpose_out_size(s, k, st, p, d, op) for s, k, st, p, d, op in
               zip(spatial, ks, stride, padding, dilation, output_padding, strict=False)]
    else:
        cout = w_shape[0]
        out = [conv_out_size(s, k, st, p, d) for s, k, st, p, d in
               zip(spatial, ks, stride, padding, dilation, strict=False)]
    return (n, cout, *out)


def numel(shape: Sequence[int]) -> int:
    total = 1
    for s in shape:
        total *= int(s)
    return total
