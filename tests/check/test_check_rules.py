"""check_conv rules: each finding id on a known case, with layer, data and fix."""

from __future__ import annotations

import subprocess
import sys

import pytest

from convdoctor.check.checker import check_conv
from convdoctor.errors import UsageError


def ids(rep) -> list[str]:  # noqa: ANN001
    return [f.id for f in rep.findings]


def test_valid_conv_is_ok_on_both_devices() -> None:
    for device in ("cuda", "cpu"):
        rep = check_conv((8, 64, 56, 56), (64, 64, 3, 3), padding=1, device=device)
        assert rep.ok and rep.findings == [], (device, ids(rep))


def test_input_too_small_gives_layer_minimum_and_fix() -> None:
    rep = check_conv((8, 3, 1, 1), (32, 3, 3, 3), padding=0, layer="stem")
    assert not rep.ok and ids(rep) == ["input-too-small"]
    f = rep.findings[0]
    assert f.layer == "stem" and f.fix and f.data["min_layer_input"] == [3, 3]
    assert f.data["x_shape"] == [8, 3, 1, 1] and f.data["w_shape"] == [32, 3, 3, 3]
    # dilation 2 makes the 3x3 kernel span 5; padding 1 lowers the need to 3
    assert check_conv((1, 3, 2, 9), (4, 3, 3, 3), dilation=2, padding=1).findings[0].data["min_layer_input"] == [3, 3]


@pytest.mark.parametrize("kw,fid", [
    ({"stride": 0}, "invalid-parameter"),
    ({"stride": (1, -1)}, "invalid-parameter"),
    ({"dilation": -1}, "invalid-parameter"),
    ({"dilation": 0}, "invalid-parameter"),
    ({"padding": -1}, "invalid-parameter"),
    ({"padding": "same", "stride": 2}, "invalid-parameter"),
    ({"padding": "full"}, "invalid-parameter"),
    ({"groups": 0}, "invalid-parameter"),
    ({"groups": 5}, "channel-mismatch"),
    ({"dtype": "float16", "weight_dtype": "float32"}, "dtype-mismatch"),
    ({"dtype": "int32"}, "unsupported-dtype"),
    ({"weight_device": "cpu"}, "device-mismatch"),
])
def test_each_error_id(kw: dict, fid: str) -> None:
    rep = check_conv((2, 4, 8, 8), (4, 4, 3, 3), padding=kw.pop("padding", 1), **kw)
    assert fid in [f.id for f in rep.errors], ids(rep)


def test_channel_mismatch_and_groups() -> None:
    rep = check_conv((2, 16, 8, 8), (32, 8, 3, 3), padding=1)
    assert ids(rep) == ["channel-mismatch"] and rep.findings[0].data["expected_channels"] == 8
    assert check_conv((2, 16, 8, 8), (32, 8, 3, 3), padding=1, groups=2).ok
    assert "channel-mismatch" in ids(check_conv((2, 15, 8, 8), (30, 5, 3, 3), padding=1, groups=4))
    assert "channel-mismatch" in ids(check_conv((2, 4, 8, 8), (4, 4, 3, 3), bias_shape=(5,)))


def test_empty_tensors() -> None:
    assert check_conv((0, 3, 8, 8), (4, 3, 3, 3)).ok  # empty batch is fine
    assert ids(check_conv((2, 3, 0, 8), (4, 3, 1, 1))) == ["empty-tensor"]
    assert "empty-tensor" in ids(check_conv((2, 3, 8, 8), (4, 3, 0, 3)))


def test_transposed_rules() -> None:
    assert check_conv((1, 4, 5, 5), (4, 3, 3, 3), transposed=True, stride=2, output_padding=1).ok
    assert ids(check_conv((1, 4, 5, 5), (4, 3, 3, 3), transposed=True, output_padding=1)) == ["invalid-parameter"]
    assert ids(check_conv((1, 4, 1, 1), (4, 3, 1, 1), transposed=True, padding=1)) == ["input-too-small"]
    assert ids(check_conv((1, 5, 5, 5), (4, 3, 3, 3), transposed=True)) == ["channel-mismatch"]


def test_cpu_dtype_table_differs_from_cuda() -> None:
    assert check_conv((1, 4, 5, 5), (3, 4, 3, 3), dtype="int64", device="cpu").ok
    assert not check_conv((1, 4, 5, 5), (3, 4, 3, 3), dtype="int64", device="cuda").ok
    assert not check_conv((1, 4, 5, 5), (3, 4, 2, 2), dtype="int32", dilation=2, device="cpu").ok


def test_performance_warnings_cuda_only() -> None:
    rep = check_conv((8, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3, dtype="float16")
    assert rep.ok and set(ids(rep)) == {"tensor-core-alignment", "use-channels-last"}
    nhwc = check_conv((8, 64, 56, 56), (64, 64, 3, 3), padding=1, dtype="bfloat16", memory_format="channels_last")
    assert nhwc.findings == []
    assert check_conv((8, 3, 224, 224), (64, 3, 7, 7), dtype="float16", device="cpu").findings == []
    tf32 = check_conv((8, 64, 56, 56), (64, 64, 3, 3), padding=1, allow_tf32=False)
    assert ids(tf32) == ["tf32-disabled"] and tf32.findings[0].severity == "info"
    dw = check_conv((8, 96, 56, 56), (96, 1, 3, 3), padding=1, groups=96, dtype="float16",
                    memory_format="channels_last")
    assert dw.findings == []  # depthwise never uses tensor cores: no alignment warning


def test_tensor_too_large_depends_on_batch_split_and_cudnn_version() -> None:
    # 2 samples of 1.07e9 elements each: PyTorch splits the batch -> info only
    split = check_conv((2, 64, 4, 2048, 2048), (64, 64, 1, 3, 3), padding=(0, 1, 1), dtype="float16",
                       memory_format="channels_last")
    assert split.ok and "large-tensor-split" in ids(split)
    # one sample of 2.3e9 elements: cannot split; cuDNN >= 9.3 indexes it with 64 bits
    big = dict(padding=(0, 1, 1), dtype="float16", memory_format="channels_last")
    assert "tensor-too-large-64bit" in ids(check_conv((1, 64, 8, 2048, 2200), (8, 64, 1, 3, 3), cudnn_version=91900, **big))
    old = check_conv((1, 64, 8, 2048, 2200), (8, 64, 1, 3, 3), cudnn_version=90100, **big)
    assert [f.id for f in old.errors] == ["tensor-too-large"]
    assert check_conv((1, 64, 8, 2048, 2200), (8, 64, 1, 3, 3), device="cpu", **big).ok


def test_bad_parameters_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        check_conv((1, 3, 8, 8), (4, 3, 3, 3), stride=(1, 2, 3))
    with pytest.raises(UsageError):
        check_conv((1, 3, 8, 8), (4, 3, 3, 3), device="tpu")


def test_check_package_import_is_torch_free() -> None:
    code = ("import sys\nimport convdoctor\nfrom convdoctor import check\n"
            "r = convdoctor.check_conv((8, 3, 1, 1), (32, 3, 3, 3))\n"
            "assert not r.ok\nassert 'torch' not in sys.modules\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
