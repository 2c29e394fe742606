"""Pure logic of the GPU backend: layouts, tolerances, plan names, knobs, NVML bits, roofline,
batching, and the PyTorch direction/padding mapping (checked against autograd on the CPU)."""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch.nn.functional as F

from convdoctor.engines import cudnn_policy as policy
from convdoctor.engines.torch_ops import reference_cuda as reference
from convdoctor.engines.torch_ops import torch_conv
from convdoctor.measure import buffers, correctness, nvml, roofline, timing
from convdoctor.measure.correctness import compare_norm as compare
from convdoctor.problem import ConvProblem


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


# ---------------------------------------------------------------- layouts
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


# ---------------------------------------------------------------- names, dedupe, knobs
def test_plan_name_parse_and_keys() -> None:
    assert policy.parse_plan_name("eng0_k2=1_k3=0") == (0, {2: 1, 3: 0})
    assert policy.parse_plan_name("eng42") == (42, {})
    assert policy.parse_plan_name("eng7_k17=-1") == (7, {17: -1})
    for bad in ("", "eng", "engx_k1=2", "eng1_k=2", "cudnn:eng1", "eng1 _k2=3"):
        with pytest.raises(ValueError):
            policy.parse_plan_name(bad)
    assert policy.plan_name_of(policy.cudnn_key("eng3_k2=1")) == "eng3_k2=1"
    assert policy.plan_name_of("torch:benchmark") is None


def test_dedupe_keeps_first_occurrence_order() -> None:
    assert policy.dedupe(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]


def test_knob_values_bounded_and_include_ends() -> None:
    assert policy.knob_values(0, 1, 1) == [0, 1]
    assert policy.knob_values(0, 100, 1, limit=3) == [0, 50, 100]
    assert policy.knob_values(4, 4, 1) == [4]
    assert policy.knob_values(0, 10, 0) == [0]
    v = policy.knob_values(0, 1000, 8, limit=4)
    assert len(v) == 4 and v[0] == 0 and v[-1] == 1000 and all(x % 8 == 0 for x in v)


def test_knob_combinations_limit_and_first_is_all_minimum() -> None:
    combos = policy.knob_combinations([("a", 0, 5, 1), ("b", 1, 3, 1)], per_knob=3, limit=4)
    assert len(combos) == 4 and combos[0] == {"a": 0, "b": 1}
    assert policy.knob_combinations([]) == [{}]


# ---------------------------------------------------------------- tolerances
def test_tolerance_table_per_dtype_and_math() -> None:
    base = "n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1"
    assert correctness.tolerance(P(f"fprop {base} dtype=float32 math=strict")) == pytest.approx(1e-5)
    assert correctness.tolerance(P(f"fprop {base} dtype=float32 math=tf32")) == pytest.approx(5e-3)
    assert correctness.tolerance(P(f"fprop {base} dtype=float16")) == pytest.approx(5e-3)
    assert correctness.tolerance(P(f"fprop {base} dtype=bfloat16")) == pytest.approx(2e-2)


def test_strict_tolerance_grows_with_long_reductions_only() -> None:
    mid = P("wgrad n=8 c=8 h=28 w=28 k=8 r=3 s=3 pad=1 dtype=float32 math=strict")
    red = correctness.reduction_length(mid)
    assert red == 8 * 28 * 28
    assert correctness.tolerance(mid) == pytest.approx(4 * math.sqrt(red) * 2.0 ** -24)
    big = P("wgrad n=64 c=8 h=112 w=112 k=8 r=3 s=3 pad=1 dtype=float32 math=strict")
    assert correctness.tolerance(big) == pytest.approx(5e-5)  # capped: TF32 errors (>=2e-4) still fail


def test_rel_error_zero_reference() -> None:
    assert correctness.rel_error(0.0, 0.0) == 0.0
    assert correctness.rel_error(1.0, 0.0) == math.inf
    assert correctness.rel_error(1.0, 4.0) == 0.25


# ---------------------------------------------------------------- torch direction mapping (CPU)
CASES = [
    "n=2 c=4 h=9 w=8 k=6 r=3 s=3 pad=1",
    "n=2 c=4 h=9 w=8 k=6 r=3 s=2 stride=2 pad_pre=0 pad_post=1",
    "n=2 c=6 h=7 w=7 k=6 r=3 s=3 groups=6 stride=2 pad_pre=1,0 pad_post=0,2 dil=1",
    "n=2 c=3 w=40 k=5 s=7 stride=3 pad_pre=2 pad_post=4",
    "n=1 c=2 d=5 h=6 w=7 k=4 t=3 r=3 s=3 pad=1 dil=2",
]


def _autograd(p: ConvProblem, x, w):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    pad = []
    for a, b in zip(reversed(p.pad_pre), reversed(p.pad_post), strict=True):
        pad += [a, b]
    conv = (F.conv1d, F.conv2d, F.conv3d)[p.ndim - 1]
    y = conv(F.pad(x, pad), w, None, p.stride, 0, p.dilation, p.groups)
    dy = torch.randn_like(y)
    y.backward(dy)
    return y.detach(), dy, x.grad, w.grad


@pytest.mark.parametrize("text", CASES)
def test_torch_conv_matches_autograd_for_all_directions(text: str) -> None:
    torch.manual_seed(0)
    p = P("fprop " + text + " dtype=float32")
    x = torch.randn(p.x_shape(), dtype=torch.float64)
    w = torch.randn(p.w_shape(), dtype=torch.float64)
    y, dy, dx, dw = _autograd(p, x, w)
    assert tuple(y.shape) == p.y_shape()
    assert torch.allclose(torch_conv(p, x, w), y, atol=1e-10)
    pd = p.with_direction("dgrad")
    assert torch.allclose(torch_conv(pd, dy, w, torch.empty_like(x)), dx, atol=1e-10)
    pw = p.with_direction("wgrad")
    assert torch.allclose(torch_conv(pw, x, dy, torch.empty_like(w)), dw, atol=1e-10)


def test_reference_is_float64_and_compare_flags_nan_and_error() -> None:
    torch.manual_seed(1)
    p = P("fprop n=2 c=4 h=6 w=6 k=3 r=3 s=3 pad=1 dtype=float16")
    x = torch.randn(p.x_shape()).half()
    w = torch.randn(p.w_shape()).half()
    ref = reference(p, x, w, None, None)
    assert ref.dtype == torch.float64
    good = ref.half()
    c = compare(p, good, ref)
    assert c.ok and c.max_rel_err < 1e-3 and c.tolerance == pytest.approx(5e-3)
    bad = good.clone()
    bad[0, 0, 0, 0] = float("nan")
    c = compare(p, bad, ref)
    assert not c.ok and "NaN" in c.detail
    c = compare(p, (ref * 1.05).half(), ref)
    assert not c.ok and c.max_rel_err == pytest.approx(0.05, rel=0.05)


# ---------------------------------------------------------------- NVML
class FakeNvml:
    NVML_CLOCK_SM = 1

    def __init__(self, reasons: int, new_api: bool = True, fail_init: bool = False) -> None:
        self.reasons = reasons
        self.fail_init = fail_init
        if new_api:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda h: self.reasons

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetHandleByUUID(self, u: str) -> str:
        return "hu"

    def nvmlDeviceGetClockInfo(self, h, clk) -> int:
        return 1755

    def nvmlDeviceGetMaxClockInfo(self, h, clk) -> int:
        return 1980

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h) -> int:
        return self.reasons

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.65.06"


@pytest.mark.parametrize("bits,slow", [(0, False), (nvml.GPU_IDLE, False),
                                       (nvml.SW_POWER_CAP, True), (nvml.HW_THERMAL_SLOWDOWN, True),
                                       (nvml.SW_THERMAL_SLOWDOWN | nvml.GPU_IDLE, True),
                                       (nvml.HW_POWER_BRAKE_SLOWDOWN, True),
                                       (nvml.SYNC_BOOST, False)])
def test_nvml_slowdown_bits(bits: int, slow: bool) -> None:
    for new in (True, False):
        r = nvml.NvmlClock(0, nvml=FakeNvml(bits, new_api=new)).read()
        assert r.slowdown is slow and r.reasons == bits
        assert r.sm_clock_mhz == 1755 and r.max_sm_clock_mhz == 1980


def test_nvml_never_raises() -> None:
    c = nvml.NvmlClock(0, nvml=FakeNvml(0, fail_init=True))
    assert not c.ok and c.read() is None and "NVML" in c.error
    assert c.describe()["nvml"] is False
    broken = FakeNvml(0)
    broken.nvmlDeviceGetCurrentClocksEventReasons = lambda h: (_ for _ in ()).throw(OSError())
    r = nvml.NvmlClock(0, nvml=broken).read()
    assert r is not None and r.reasons == 0
    assert nvml.reason_names(nvml.SW_POWER_CAP | nvml.GPU_IDLE) == ["gpu_idle", "sw_power_cap"]
    assert nvml.NvmlClock(0, nvml=FakeNvml(0)).driver_version() == "580.65.06"


# ---------------------------------------------------------------- roofline, batching
def test_percent_of_roofline_compute_and_memory_bound() -> None:
    r = roofline.percent_of_roofline(1e12, 1e9, 0.01, peak_flops=200e12, peak_bw=2e12)
    # intensity 1000 FLOP/B * 2e12 B/s = 2e15 > 2e14 -> compute bound; achieved 1e14 -> 50 %
    assert r["bound"] == "compute" and r["percent"] == pytest.approx(50.0)
    r = roofline.percent_of_roofline(1e9, 1e9, 1e-3, peak_flops=200e12, peak_bw=2e12)
    # intensity 1 -> attainable 2e12 FLOP/s; achieved 1e12 -> 50 %, memory bound
    assert r["bound"] == "memory" and r["percent"] == pytest.approx(50.0)
    assert roofline.percent_of_roofline(1, 1, 0, 1, 1)["percent"] is None
    p = P("fprop n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1 dtype=float16")
    pk = roofline.Peaks("dev", {"float16": 1e12}, 1e9)
    assert roofline.roofline_for(p, 1e-3, pk)["percent"] > 0
    assert roofline.math_key("float32", "strict") == "float32/strict"


def test_cover_for_spin_margin() -> None:
    assert timing.cover_for(0.0) == pytest.approx(30e-6)
    assert timing.cover_for(100e-6) == pytest.approx(180e-6)
    assert timing.cover_for(1.0) == 0.05


def test_choose_batch() -> None:
    assert timing.choose_batch(1e-3) == 1
    assert timing.choose_batch(50e-6) == 1
    assert timing.choose_batch(10e-6) == 20
    assert timing.choose_batch(1e-6) == 64
    assert timing.choose_batch(float("nan")) == 1 and timing.choose_batch(0) == 1


def test_package_imports_no_torch_or_cudnn() -> None:
    import subprocess
    import sys

    code = ("import sys, convdoctor.engines.registry, convdoctor.tune.cuda_backend, "
            "convdoctor.measure.timing, convdoctor.measure.placement; "
            "print('torch' in sys.modules, 'cudnn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


_ = types  # keep import for fakes readability


def test_heuristic_child_worker_spec_resolves() -> None:
    """The child worker spec names a real callable; without a GPU it fails with a clear message."""
    import importlib

    from convdoctor.errors import ConvdoctorError
    from convdoctor.tune.worker import WorkerBackend

    mod, _, attr = "convdoctor.tune.cuda_backend:in_process_backend".partition(":")
    assert callable(getattr(importlib.import_module(mod), attr))
    if torch.cuda.is_available():
        pytest.skip("GPU present: covered by the gpu tests")
    with pytest.raises(ConvdoctorError, match="did not start.*CUDA"):
        WorkerBackend("convdoctor.tune.cuda_backend:in_process_backend", startup_timeout_s=60)
