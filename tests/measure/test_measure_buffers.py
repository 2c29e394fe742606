"""Buffer layouts (`convdoctor.measure.buffers`): packed and logical strides against PyTorch's
memory formats, cuDNN's dims and strides of a 1D NHWC tensor, and each direction's roles."""

from __future__ import annotations

import pytest
import torch

from convdoctor.engines import cudnn_policy as policy
from convdoctor.measure import buffers
from convdoctor.problem import ConvProblem


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


@pytest.mark.parametrize("shape,fmt", [((2, 3, 5, 7), torch.channels_last),
                                       ((2, 3, 4, 5, 6), torch.channels_last_3d),
                                       ((2, 3, 5, 7), torch.contiguous_format)])
def test_packed_strides_match_torch_memory_formats(shape, fmt) -> None:
    layout = "nchw" if fmt == torch.contiguous_format else "nhwc"
    want = torch.empty(shape).contiguous(memory_format=fmt).stride()
    assert buffers.packed_strides(shape, layout) == want


def test_1d_nhwc_strides_are_a_permuted_nwc_tensor() -> None:
    p = P("fprop n=2 c=3 w=10 k=4 s=3 layout=nhwc")
    nwc = torch.empty(2, 10, 3).permute(0, 2, 1)
    assert buffers.logical_strides(p, "x") == nwc.stride()
    dims, strides = policy.cudnn_dims_strides(p, "x")
    assert dims == [2, 3, 1, 10] and strides[0] == 30 and strides[1] == 1 and strides[3] == 3


def test_io_roles() -> None:
    assert buffers.io_roles("fprop") == (("x", "w"), "y")
    assert buffers.io_roles("dgrad") == (("dy", "w"), "dx")
    assert buffers.io_roles("wgrad") == (("x", "dy"), "dw")
    with pytest.raises(ValueError):
        buffers.io_roles("bprop")
