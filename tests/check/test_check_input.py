"""`convdoctor check` on malformed models: invalid ONNX nodes, symbolic batch dims, lazy modules,
a missing onnx package, names the system refuses. Each is a finding or one line, never OK
when something was not checked and never an internal error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from convdoctor.cli import main
from convdoctor.errors import DependencyMissing, UsageError

onnx = pytest.importorskip("onnx")
np = pytest.importorskip("numpy")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from convdoctor.check.onnx_check import check_onnx  # noqa: E402


def _conv_model(path: Path, wshape: tuple[int, ...], xshape: list, *, attrs: dict | None = None,
                inputs: tuple[str, ...] = ("x", "w")) -> str:
    w = numpy_helper.from_array(np.zeros(wshape, dtype=np.float32), "w")
    node = helper.make_node("Conv", list(inputs), ["y"], **(attrs or {}))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


@pytest.mark.parametrize(("name", "wshape", "attrs", "inputs", "words"), [
    ("kernel_shape contradicts the weight", (8, 3, 3, 3), {"kernel_shape": [5, 5]}, ("x", "w"),
     "kernel_shape (5, 5) contradicts"),
    ("unknown auto_pad", (8, 3, 3, 3), {"auto_pad": "BOGUS"}, ("x", "w"), "auto_pad='BOGUS'"),
    ("a Conv with one input", (8, 3, 3, 3), {}, ("x",), "has 1 input(s)"),
    ("strides of the wrong length", (8, 3, 3, 3), {"strides": [1, 1, 1]}, ("x", "w"),
     "strides has 3 values"),
    ("a stride beyond int32", (8, 3, 3, 3), {"strides": [2**40, 1]}, ("x", "w"), "out of range"),
])
def test_an_invalid_onnx_node_is_an_error_finding(tmp_path: Path, name: str, wshape, attrs,
                                                  inputs, words) -> None:
    path = _conv_model(tmp_path / "m.onnx", wshape, [1, 3, 16, 16], attrs=attrs, inputs=inputs)
    rep = check_onnx(path)
    assert [f.id for f in rep.errors] == ["onnx-invalid-node"], name
    assert words in rep.errors[0].title


def test_a_symbolic_batch_dim_is_checked_as_batch_1(tmp_path: Path) -> None:
    bad = _conv_model(tmp_path / "bad.onnx", (8, 4, 3, 3), ["N", 3, 16, 16])
    rep = check_onnx(bad)
    assert [f.id for f in rep.errors] == ["channel-mismatch"] and rep.facts["assumed_batch"] == 1
    ok = _conv_model(tmp_path / "ok.onnx", (8, 3, 3, 3), ["N", 3, 16, 16])
    assert check_onnx(ok).ok and not check_onnx(ok).findings


def test_nodes_left_without_shapes_are_a_warning_not_ok(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m.onnx", (8, 4, 3, 3), ["N", 3, "H", "W"])
    rep = check_onnx(path)
    assert [f.id for f in rep.warnings] == ["shape-unknown"] and rep.exit_code == 1


def test_channels_last_is_checked_for_onnx(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m.onnx", (8, 3, 3, 3), [1, 3, 16, 16])
    rep = check_onnx(path, memory_format="channels_last")
    assert rep.facts["memory_format"] == "channels_last"
    assert check_onnx(path).facts["memory_format"] == "contiguous"


def test_an_empty_onnx_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert main(["check", str(tmp_path / "empty.onnx")]) == 2
    assert "is empty (0 bytes)" in capsys.readouterr().err


def test_without_the_onnx_package_a_path_is_still_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _conv_model(tmp_path / "m.onnx", (8, 3, 3, 3), [1, 3, 16, 16])
    monkeypatch.setitem(sys.modules, "onnx", None)            # import onnx now fails
    with pytest.raises(UsageError, match="not found"):
        check_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(DependencyMissing, match="needs the onnx package"):
        check_onnx(path)


def test_lazy_modules_are_traced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    model = tmp_path / "lazy.py"
    model.write_text("import torch.nn as nn\n"
                     "def make():\n"
                     "    return nn.Sequential(nn.LazyConv2d(8, 3), nn.LazyBatchNorm2d(), nn.ReLU(),\n"
                     "                         nn.LazyConv2d(16, 3, stride=2))\n")
    for extra in ([], ["--channels-last", "--dtype", "float16"]):
        rc = main(["check", f"{model}:make", "--input-shape", "1,3,16,16", "--json", *extra])
        cap = capsys.readouterr()
        assert rc in (0, 1) and "internal error" not in cap.err, cap.err
        assert '"convolutions": 2' in cap.out
    assert main(["check", f"{model}:make", "--input-shape", "1,3,2,2"]) == 2
    assert "input-too-small" in capsys.readouterr().out


def test_names_the_system_refuses_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for spec in ("A" * 300, "A" * 300 + ".py:make", "A" * 300 + ".onnx"):
        assert main(["check", spec, "--input-shape", "1,3,8,8"]) == 2
        err = capsys.readouterr().err
        assert "File name too long" in err and "internal error" not in err


def test_help_says_a_model_file_runs_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        from convdoctor.cli import build_parser

        build_parser("check")[0].parse_args(["check", "--help"])
    assert "runs that file's code" in capsys.readouterr().out.replace("\n", " ").replace(
        "  ", " ")


def test_dims_beyond_int32_in_the_graph_are_an_error_finding(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m.onnx", (8, 3, 3, 3), [1, 3, 10**18, 16])
    rep = check_onnx(path)
    assert [f.id for f in rep.errors] == ["onnx-invalid-node"]
    assert "out of range" in rep.errors[0].title
