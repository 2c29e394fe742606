"""`convdoctor check` from the command line: outputs, exit codes, bad input without tracebacks."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from convdoctor import cli, zoo
from convdoctor.check.onnx_check import check_onnx


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in-process (same code path as the console script; fast)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["check", *args])
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def run_subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convdoctor", "check", *args], capture_output=True,
                          text=True, timeout=120)


def test_real_process_bad_input_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    raise RuntimeError('in factory')\n")
    for args in ((f"{tmp_path / 'm.py'}:f", "--input-shape", "1,3,8,8"), ("zoo:resnet50", "--input-shape", "8;3")):
        p = run_subprocess(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr and "convdoctor: error:" in p.stderr


def test_zoo_model_ok_and_json() -> None:
    p = run("zoo:mobilenet_v2", "--input-shape", "2,3,224,224", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ok"] is True and d["facts"]["convolutions"] == 52 and d["findings"] == []


def test_too_small_single_conv_exit_2_with_fix() -> None:
    p = run("conv2d", "--input", "8x3x1x1", "--weight", "32x3x3x3", "--padding", "0")
    assert p.returncode == 2 and "input-too-small" in p.stdout and "fix:" in p.stdout
    p = run("conv2d", "--input", "8x3x1x1", "--weight", "32x3x3x3", "--padding", "1", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"]


def test_warnings_exit_1() -> None:
    p = run("zoo:resnet50", "--input-shape", "2,3,224,224", "--dtype", "float16")
    assert p.returncode == 1 and "use-channels-last" in p.stdout and "more layers" in p.stdout
    p = run("zoo:resnet50", "--input-shape", "2,8,224,224", "--dtype", "float16")
    assert p.returncode == 2 and "channel-mismatch [conv1]" in p.stdout


def test_too_small_model_reports_minimum() -> None:
    p = run("zoo:speech_frontend", "--input-shape", "8,1,300", "--json")
    assert p.returncode == 2
    d = json.loads(p.stdout)
    assert d["facts"]["min_input_shape"] == [8, 1, 400]
    f = d["findings"][0]
    assert f["id"] == "input-too-small" and f["layer"] == "conv_layers.6.0" and f["severity"] == "error"
    assert f["fix"] and f["message"] and f["data"]["x_shape"] == [8, 512, 1]


@pytest.mark.parametrize("args,needle", [
    (("zoo:resnet50", "--input-shape", "8,3,x,224"), "cannot parse"),
    (("zoo:resnet50", "--input-shape", "8,-3,224,224"), "sizes must be"),
    (("zoo:nope",), "unknown zoo model"),
    (("conv2d", "--input", "8x3x5x5"), "needs --input SHAPE and --weight SHAPE"),
    (("conv2d", "--input", "8x3x5x5", "--weight", "4x3x3"), "needs a 4-D weight"),
    (("conv2d", "--input", "8x3x5x5", "--weight", "4x3x3x3", "--stride", "a"), "--stride"),
    (("missing.py:f", "--input-shape", "1,3,8,8"), "not found"),
    (("missing.onnx",), "not found"),
])
def test_bad_input_is_a_clean_error(args: tuple[str, ...], needle: str) -> None:
    p = run(*args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and needle in p.stderr, p.stderr


def test_model_file_errors(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import torch\n"
                 "def bad():\n    raise ValueError('boom')\n"
                 "def notmod():\n    return {'a': 1}\n"
                 "def good():\n    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 5), torch.nn.Conv2d(8, 8, 5))\n")
    (tmp_path / "syntax.py").write_text("def f(:\n")
    for spec, needle in ((f"{f}:bad", "raised ValueError: boom"), (f"{f}:notmod", "not a torch.nn.Module"),
                         (f"{tmp_path / 'syntax.py'}:f", "SyntaxError")):
        p = run(spec, "--input-shape", "1,3,16,16")
        assert p.returncode == 2 and "Traceback" not in p.stderr and needle in p.stderr, p.stderr
    p = run(f"{f}:good", "--input-shape", "1,3,6,6", "--json")
    d = json.loads(p.stdout)
    assert p.returncode == 2 and [x["layer"] for x in d["findings"]] == ["1"]
    assert d["facts"]["min_input_shape"] == [1, 3, 9, 9]


def test_corrupt_onnx_is_a_clean_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf\xff\xff\xff")
    p = run(str(bad), "--input-shape", "1,3,8,8")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "cannot read" in p.stderr, p.stderr


def test_onnx_model(tmp_path: Path) -> None:
    path = tmp_path / "speech.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(zoo.get("speech_frontend").eval(), (torch.randn(1, 1, 16000),), str(path),
                          input_names=["wav"], dynamic_axes={"wav": {0: "n", 2: "t"}}, dynamo=False)
    ok = check_onnx(str(path), (8, 1, 16000))
    assert ok.ok and ok.facts["convolutions"] == 7 and ok.findings == []
    small = check_onnx(str(path), (8, 1, 300))
    assert [f.id for f in small.errors] == ["input-too-small"]
    assert small.errors[0].layer.endswith("conv_layers.6.0/Conv")
    p = run(str(path), "--input-shape", "8,1,399")
    assert p.returncode == 2 and "input-too-small" in p.stdout
    p = run(str(path), "--input-shape", "8,1,400")
    assert p.returncode == 0, p.stdout
