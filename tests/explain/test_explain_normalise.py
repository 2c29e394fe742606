"""Normalisation: coloured, boxed, prefixed, HTML-escaped, Windows-path and wrapped log text reads the
same as the plain message, and each line keeps its log level and origin."""

from __future__ import annotations

import pytest

from convdoctor.explain import explain
from convdoctor.explain.normalise import normalise, normalise_line, strip_control, wrap_width


@pytest.mark.parametrize("raw,text,level,origin", [
    ("2024-07-19 15:49:01.341533: E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439] Loaded runtime "
     "CuDNN library: 8.1.0 but source was compiled with: 8.6.0.",
     "Loaded runtime CuDNN library: 8.1.0 but source was compiled with: 8.6.0.", "E",
     "external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439"),
    ("E0514 15:42:22.522887 3766360 cuda_dnn.cc:532] Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR",
     "Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR", "E", "cuda_dnn.cc:532"),
    ("I0000 00:00:1715786000.123456  12345 cuda_executor.cc:1015] successful NUMA node read",
     "successful NUMA node read", "I", "cuda_executor.cc:1015"),
    ("W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load dynamic library 'x.so'",
     "Could not load dynamic library 'x.so'", "W", "tensorflow/stream_executor/platform/default/dso_loader.cc:64"),
    ("/usr/lib/python3/site-packages/torch/nn/modules/conv.py:456: UserWarning: Plan failed",
     "Plan failed", "W", "/usr/lib/python3/site-packages/torch/nn/modules/conv.py:456"),
    ("2023-05-01 10:00:00.123 [E:onnxruntime:Default, provider_bridge_ort.cc:1351 TryGetProviderInfo_CUDA] boom",
     "boom", "E", "provider_bridge_ort.cc:1351"),
    ("2024-01-01 10:00:00,123 - root - ERROR - failed here", "failed here", "E", "root"),
    ("WARNING:tensorflow:something", "something", "W", "tensorflow"),
    ("RuntimeError: plain", "RuntimeError: plain", None, None),
])
def test_log_prefixes_become_level_and_origin(raw: str, text: str, level: str | None, origin: str | None) -> None:
    assert normalise_line(raw) == (text, level, origin)


def test_terminal_control_is_removed() -> None:
    raw = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mRuntimeError: cuDNN error: CUDNN_STATUS_BAD_PARAM\x1b[0m\x07\x9b1m"
    assert strip_control(raw) == "RuntimeError: cuDNN error: CUDNN_STATUS_BAD_PARAM"
    # escapes whose ESC byte was lost in a copy-paste
    assert strip_control("^[[1;31mRuntimeError^[[0m: x [31mfoo[0m") == "RuntimeError: x foo"


def test_rich_and_ipython_decoration() -> None:
    assert normalise_line("│ ❱ 456 │   │   return F.conv2d(input, weight, bias, self.stride,     │")[0].strip() \
        == "return F.conv2d(input, weight, bias, self.stride,"
    assert normalise_line("----> 5 y = conv(x)")[0] == "y = conv(x)"
    assert normalise_line("╭──── Traceback (most recent call last) ────╮")[0].strip() == "Traceback (most recent call last)"


def test_html_and_windows_paths() -> None:
    assert normalise_line("expected &lt;class &#39;int&#39;&gt; &amp; more")[0] == "expected <class 'int'> & more"
    assert normalise_line('  File "d:\\\\Code\\\\proj\\\\train.py", line 5')[0] == '  File "d:/Code/proj/train.py", line 5'
    assert normalise_line(r"C:\Users\me\anaconda3\lib\site-packages\torch\nn\modules\conv.py")[0] \
        == "C:/Users/me/anaconda3/lib/site-packages/torch/nn/modules/conv.py"


def test_wrapped_lines_are_joined() -> None:
    msg = ("RuntimeError: Given groups=1, weight of size [64, 3, 7, 7], expected input[1, 4, 224, 224] to have "
           "3 channels, but got 4 channels instead")
    width = 80
    other = ["x" * 80, "y" * 80, "z" * 80 + "", "short line"]
    pieces = [msg[i:i + width] for i in range(0, len(msg), width)]
    lines = list(enumerate(other[:3] + ["done"] + pieces + ["end"], 1))
    assert wrap_width(len(t) for _, t in lines) == 80
    texts = [ln.text for ln in normalise(lines)]
    assert msg in texts
    assert explain("\n".join(t for _, t in lines)).cause_id == "channel-mismatch"


def test_short_logs_are_not_joined() -> None:
    lines = [(1, "a" * 70), (2, "b" * 70), (3, "c")]
    assert [ln.text for ln in normalise(lines)] == ["a" * 70, "b" * 70, "c"]


def test_decorated_tracebacks_explain_like_plain_ones() -> None:
    plain = "RuntimeError: cuDNN error: CUDNN_STATUS_MAPPING_ERROR"
    rich = ("╭───────────── Traceback (most recent call last) ─────────────╮\n"
            "│ /home/u/train.py:12 in <module>                             │\n"
            "│ ❱ 12 │   y = model(x)                                         │\n"
            "╰─────────────────────────────────────────────────────────────╯\n"
            "\x1b[1;31mRuntimeError: \x1b[0mcuDNN error: CUDNN_STATUS_MAPPING_ERROR")
    jupyter = ("Cell In[3], line 2\n----> 2 y = model(x)\n"
               "File d:\\Code\\venv\\lib\\site-packages\\torch\\nn\\modules\\conv.py:456, in Conv2d._conv_forward\n"
               "RuntimeError: cuDNN error: CUDNN_STATUS_MAPPING_ERROR")
    ref = explain(plain)
    for text in (rich, jupyter):
        d = explain(text)
        assert d.ids()[:2] == ref.ids()[:2]
        assert all("\x1b" not in e.text for c in d.causes for e in c.evidence)


def test_a_python_warnings_message_runs_to_its_source_line() -> None:
    """A console cut PyTorch's one-line warning into four lines; Python printed the warned source
    line after it. The warning is one logical line (a harmless cuDNN plan note, not a failure)."""
    log = ("C:\\venv\\lib\\site-packages\\torch\\nn\\modules\\conv.py:605: UserWarning: Plan failed "
           "with a cudnnException:\n"
           "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed\n"
           "cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (Triggered internally at\n"
           "..\\aten\\src\\ATen\\native\\cudnn\\Conv_v8.cpp:919.)\n"
           "  return F.conv3d(\n"
           "Animating... 100%\n")
    lines = normalise(enumerate(log.splitlines(), 1))
    assert [ln.span for ln in lines] == [5, 1]
    assert lines[0].level == "W" and "cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (Triggered" in lines[0].text
    assert explain(log).cause_id == "harmless-warning"
    # without the source line after it, a warning's next lines are not taken as its message
    bare = normalise(enumerate(log.splitlines()[:4], 1))
    assert [ln.span for ln in bare] == [1, 1, 1, 1]


def test_an_exception_wrapped_at_word_boundaries_is_one_line() -> None:
    """rich wraps a long exception message at spaces, leaving one at the end of each cut line."""
    log = ("RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) \n"
           "should be the same or input should be a MKLDNN tensor and weight is a dense \n"
           "tensor\n"
           "Traceback (most recent call last):\n")
    lines = normalise(enumerate(log.splitlines(), 1))
    assert lines[0].span == 3 and lines[0].text.endswith("MKLDNN tensor and weight is a dense tensor")
    assert "weight type (torch.cuda.FloatTensor) should" in lines[0].text
    # a short line that ends in a space is not a console's cut
    short = normalise(enumerate(["ValueError: bad value ", "Epoch 3/10"], 1))
    assert [ln.span for ln in short] == [1, 1]
    assert lines[1].text.startswith("Traceback")
    assert explain(log).cause_id == "device-mismatch"


def test_a_warning_without_its_source_line_takes_no_failure_with_it() -> None:
    """A C++ abort after a warning is the failure, not the warning's message; absl lines that name
    a .py origin are not Python warnings."""
    log = ("/opt/app/lib/torch/_utils.py:831: UserWarning: TypedStorage is deprecated.\n"
           "terminate called after throwing an instance of 'c10::Error'\n"
           "  what():  CUDA error: an illegal memory access was encountered\n")
    assert [ln.span for ln in normalise(enumerate(log.splitlines(), 1))] == [1, 1, 1]
    assert explain(log).cause_id == "illegal-memory-access"
    absl = "W0514 15:42:22.522887 3766360 train.py:12] a note\nnext line\n  indented\n"
    assert [ln.span for ln in normalise(enumerate(absl.splitlines(), 1))] == [1, 1, 1]


def test_pytorchs_capability_warning_is_one_line_with_its_range() -> None:
    raw = ["/x/torch/cuda/__init__.py:283: UserWarning: ",
           "    Found GPU0 NVIDIA GB10 which is of cuda capability 12.1.",
           "    Minimum and Maximum cuda capability supported by this version of PyTorch is",
           "    (8.0) - (12.0)",
           "",
           "Unsloth: Your Flash Attention 2 installation seems to be broken?"]
    out = normalise(list(enumerate(raw, 1)))
    joined = [ln.text for ln in out if "cuda capability 12.1" in ln.text]
    assert len(joined) == 1 and joined[0].rstrip().endswith("(8.0) - (12.0)"), out
    assert any("Unsloth" in ln.text for ln in out)
    # same major version as the highest supported: the GPU runs that major's kernels
    assert explain("\n".join(raw)).to_dict()["cause"] == "harmless-warning"
    # another major version: not supported
    old = ["UserWarning:",
           "    Found GPU0 NVIDIA GeForce GTX 680 which is of cuda capability 3.0.",
           "    Minimum and Maximum cuda capability supported by this version of PyTorch is",
           "    (5.0) - (9.0)"]
    assert explain("\n".join(old)).to_dict()["cause"] == "arch-unsupported"
