"""`convdoctor explain` and `convdoctor run` end to end, in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "convdoctor"]


def _run(args: list[str], stdin: bytes | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, input=stdin, capture_output=True, timeout=timeout)


def test_explain_text_json() -> None:
    p = _run(["explain", "--json", "--no-live",
              "Loaded runtime CuDNN library: 8.7.0 but source was compiled with: 8.9.4."])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["cause"] == "cudnn-version-mismatch"
    c = out["causes"][0]
    assert {"id", "confidence", "evidence", "fix", "confirmation", "sources"} <= set(c)
    assert out["facts"]["cudnn_loaded"] == "8.7.0" and out["facts"]["cudnn_compiled"] == "8.9.4"


def test_explain_human_text() -> None:
    p = _run(["explain", "--no-live", "AssertionError: Torch not compiled with CUDA enabled"])
    assert p.returncode == 0
    text = p.stdout.decode()
    assert "cpu-only-build" in text and "fix:" in text and "line 1:" in text


def test_explain_stdin_dash_and_file(tmp_path: Path) -> None:
    log = b"INFO start\n" * 100 + b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    p = _run(["explain", "--json", "--no-live", "-"], stdin=log)
    assert json.loads(p.stdout)["cause"] == "arch-unsupported"
    f = tmp_path / "train.log"
    f.write_bytes(log)
    p = _run(["explain", "--json", "--no-live", "--file", str(f)])
    out = json.loads(p.stdout)
    assert out["cause"] == "arch-unsupported"
    assert out["causes"][0]["evidence"][0]["line"] == 101


def test_explain_bad_inputs_are_clean() -> None:
    p = _run(["explain", "--file", "/nonexistent/train.log"])
    assert p.returncode == 2
    assert b"no such file" in p.stderr and b"Traceback" not in p.stderr
    p = _run(["explain", "--file", "/tmp"])
    assert p.returncode == 2 and b"directory" in p.stderr
    p = _run(["explain", "--json", "--no-live", "-"], stdin=b"")
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert out["cause"] == "unknown" and "empty" in out["causes"][0]["reasons"][0]
    p = _run(["explain", "--json", "--no-live", "-"], stdin=bytes(range(256)) * 4000)
    assert p.returncode == 1 and json.loads(p.stdout)["cause"] == "unknown"


def test_run_passes_output_and_preserves_exit_code() -> None:
    script = ("import sys; print('epoch 1 loss 0.5', flush=True); "
              "print('RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED', file=sys.stderr); sys.exit(3)")
    p = _run(["run", "--no-live", "--", sys.executable, "-c", script])
    assert p.returncode == 3
    assert b"epoch 1 loss 0.5" in p.stdout
    err = p.stderr.decode()
    assert "CUDNN_STATUS_NOT_INITIALIZED" in err       # the child's own stderr, passed through
    assert "exited with 3" in err and "gpu-out-of-memory" in err


def test_run_json_and_success() -> None:
    p = _run(["run", "--json", "--no-live", "--", sys.executable, "-c",
              "raise AssertionError('Torch not compiled with CUDA enabled')"])
    assert p.returncode == 1
    err = p.stderr.decode()
    out = json.loads(err[err.index("{\n"):])
    assert out["cause"] == "cpu-only-build" and out["looked_at"]["exit_code"] == 1
    p = _run(["run", "--", sys.executable, "-c", "print('fine')"])
    assert p.returncode == 0 and p.stdout.strip() == b"fine" and b"convdoctor" not in p.stderr


def test_run_streams_before_exit(tmp_path: Path) -> None:
    # the first line must arrive while the child is still running (no buffering of everything):
    # the child prints it, then waits for this test to have read it before it goes on
    import select

    go = tmp_path / "go"
    script = ("import os, sys, time; print('first', flush=True); t = time.monotonic()\n"
              f"while not os.path.exists({str(go)!r}) and time.monotonic() - t < 60:\n"
              "    time.sleep(0.01)\n"
              "print('second')")
    proc = subprocess.Popen(CLI + ["run", "--no-live", "--", sys.executable, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    # a generous wait, only so that a run that holds the line back fails instead of hanging
    ready, _, _ = select.select([proc.stdout], [], [], 50)
    first = proc.stdout.readline() if ready else b""
    child_waiting = not go.exists()
    go.touch()
    out, _ = proc.communicate(timeout=60)
    assert first.strip() == b"first"
    assert child_waiting and out.strip() == b"second" and proc.returncode == 0


def test_run_bad_command() -> None:
    p = _run(["run", "--", "/nonexistent/binary-xyz"])
    assert p.returncode == 127 and b"command not found" in p.stderr   # as a shell says
    p = _run(["run"])
    assert p.returncode == 2 and b"nothing to run" in p.stderr


def test_log_escape_sequences_never_reach_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"\x1b]0;PWNED\x07\x1b[2J\x1b[31mRuntimeError: cuDNN error: CUDNN_STATUS_BAD_PARAM\n"
                    b"\x9b31m\x1bP1;2|x\x1b\\ \x0e\x7f ok\n")
    p = _run(["explain", "--no-live", "--file", str(log)])
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert b"CUDNN_STATUS_BAD_PARAM" in out
    for raw in (b"\x1b", b"\x07", b"\x9b", b"\xc2\x9b", b"\x0e", b"\x7f"):
        assert raw not in out, raw
    # the JSON keeps the text (escaped by the JSON encoder)
    p = _run(["explain", "--json", "--no-live", "--file", str(log)])
    assert b"\x1b" not in p.stdout and json.loads(p.stdout)["cause"] != "unknown"


def test_closed_stdin_is_one_line_and_exit_2() -> None:
    import os

    p = subprocess.run(CLI + ["explain", "--no-live", "-"], capture_output=True, timeout=60,
                       stdin=None, preexec_fn=lambda: os.close(0))
    assert p.returncode == 2
    err = p.stderr.decode()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "standard input" in err


def test_full_disk_on_output_is_one_line_and_exit_2() -> None:
    if not Path("/dev/full").exists():
        import pytest

        pytest.skip("no /dev/full here")
    with open("/dev/full", "wb") as full:
        p = subprocess.run(CLI + ["explain", "--json", "--no-live", "Torch not compiled with CUDA enabled"],
                           stdout=full, stderr=subprocess.PIPE, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 2
    assert "Traceback" not in err and "Exception ignored" not in err
    assert "cannot write" in err and "No space left" in err and len(err.strip().splitlines()) == 1


def test_answer_does_not_depend_on_hash_order() -> None:
    # equal scores (a status that admits two causes equally) must rank the same in every process
    import os

    msg = ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
           "non-contiguous input.")
    outs = []
    for seed in ("1", "2", "3", "4", "5"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        p = subprocess.run(CLI + ["explain", "--json", "--no-live", msg], capture_output=True, timeout=60, env=env)
        d = json.loads(p.stdout)
        d["looked_at"].pop("analysis_s", None)
        outs.append(json.dumps(d, sort_keys=True))
    assert len(set(outs)) == 1
