"""Bad input on any command: one line, exit 2, never an internal error; output a terminal cannot
be tricked by; standard streams closed or full."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from convdoctor.argtypes import bounded_int, finite_float, positive_seconds
from convdoctor.cli import main
from convdoctor.textsafe import clean, one_line, use_color

PROBLEM = "fprop n=1 c=8 h=8 w=8 k=8 r=3 s=3 pad=1"
SRC = str(Path(__file__).resolve().parents[2] / "src")

BAD = {
    "tune --limit -1": ["tune", "--problem", PROBLEM, "--limit", "-1"],
    "tune --limit 0": ["tune", "--problem", PROBLEM, "--limit", "0"],
    "tune --budget nan": ["tune", "--problem", PROBLEM, "--budget", "nan"],
    "tune --budget inf": ["tune", "--problem", PROBLEM, "--budget", "inf"],
    "tune --budget -1": ["tune", "--problem", PROBLEM, "--budget", "-1"],
    "tune --timeout 0": ["tune", "--problem", PROBLEM, "--timeout", "0"],
    "tune --timeout -1": ["tune", "--problem", PROBLEM, "--timeout", "-1"],
    "tune --timeout nan": ["tune", "--problem", PROBLEM, "--timeout", "nan"],
    "two directions": ["tune", "--problem", "fprop wgrad n=1 c=8 h=8 w=8 k=8 r=3 s=3"],
    "a size of 10**30": ["tune", "--problem", f"fprop n={10**30} c=8 h=8 w=8 k=8 r=3 s=3"],
    "bench --batch 0": ["bench", "cnn-layers", "--batch", "0"],
    "bench --batch 10**12": ["bench", "cnn-layers", "--batch", "1000000000000"],
    "bench --limit 0": ["bench", "cnn-layers", "--limit", "0"],
    "bench --budget nan": ["bench", "cnn-layers", "--budget", "nan"],
    "optimize --steps 10**12": ["optimize", "zoo:resnet50", "--steps", "1000000000000"],
    "optimize --steps 0": ["optimize", "zoo:resnet50", "--steps", "0"],
    "optimize --budget inf": ["optimize", "zoo:resnet50", "--budget", "inf"],
    "optimize --time-limit -1": ["optimize", "zoo:resnet50", "--time-limit", "-1"],
    "optimize --time-limit soon": ["optimize", "zoo:resnet50", "--time-limit", "soon"],
    "check --stride 10**30": ["check", "conv2d", "--input", "1x3x8x8", "--weight", "8x3x3x3",
                              "--stride", str(10**30)],
    "check --groups 0": ["check", "conv2d", "--input", "1x3x8x8", "--weight", "8x3x3x3",
                         "--groups", "0"],
    "check --gpu-memory -1": ["check", "zoo:resnet50", "--gpu-memory", "-1"],
    "check --gpu-memory nan": ["check", "zoo:resnet50", "--gpu-memory", "nan"],
    "check huge batch": ["check", "zoo:resnet50", "--input-shape",
                         "99999999999999999999999999,3,32,32"],
    "check huge spatial": ["check", "zoo:resnet50", "--input-shape",
                           "1,3,1000000000000,1000000000000"],
    "check too many elements": ["check", "zoo:resnet50", "--input-shape",
                                "100000,3,100000,100000"],
    "check a 300-character name": ["check", "A" * 300],
    "check a 300-character .onnx name": ["check", "A" * 300 + ".onnx"],
    "db export to an empty path": ["db", "export", ""],
    "db prune --older-than nan": ["db", "prune", "--older-than", "nan"],
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_one_line_and_exit_2(name: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CONVDOCTOR_DB", str(tmp_path / "t.sqlite3"))
    assert main(BAD[name]) == 2
    cap = capsys.readouterr()
    first = cap.err.splitlines()[0]
    assert first.startswith("convdoctor") and "error:" in first, cap.err
    assert "internal error" not in cap.err and "Traceback" not in cap.err
    assert len(cap.err.splitlines()) <= 2            # the message, and at most a hint
    assert not (tmp_path / "t.sqlite3").exists()     # nothing ran


def test_typed_argument_helpers() -> None:
    import argparse

    assert finite_float(0.0, 10.0)("2.5") == 2.5
    assert positive_seconds()("0.3") == 0.3
    assert bounded_int(1, 5)("5") == 5
    for parse, text in ((positive_seconds(), "0"), (positive_seconds(), "nan"),
                        (positive_seconds(), "1e400"), (finite_float(0.0, 1.0), "-0.1"),
                        (bounded_int(1), "0"), (bounded_int(1), "1.5"),
                        (bounded_int(1), "9" * 40)):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def _cli(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "convdoctor", *args], env=env, timeout=120,
                          **kw)  # type: ignore[call-overload]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_stdout_is_one_line_and_exit_2() -> None:
    with open("/dev/full", "wb") as full:
        p = _cli("env", "--no-subprocess", "--json", stdout=full)
    assert p.returncode == 2
    assert p.stderr.decode().strip() == ("convdoctor: error: cannot write to standard output: "
                                         "No space left on device")


def test_closed_stdout_and_stdin_are_one_line_and_exit_2() -> None:
    code = ("import os, subprocess, sys\n"
            "fd = int(sys.argv[1])\n"
            "p = subprocess.run([sys.executable, '-m', 'convdoctor', *sys.argv[2:]],\n"
            "                   stderr=subprocess.PIPE, pass_fds=(), close_fds=True,\n"
            "                   preexec_fn=lambda: os.close(fd))\n"
            "sys.stdout.write(str(p.returncode) + '\\n' + p.stderr.decode())\n")
    env = dict(os.environ, PYTHONPATH=SRC)
    for fd, args, words in ((1, ["env", "--no-subprocess", "--json"], "standard output is closed"),
                            (0, ["explain", "-"], "standard input is closed")):
        p = subprocess.run([sys.executable, "-c", code, str(fd), *args], capture_output=True,
                           text=True, env=env, timeout=120)
        rc, _, err = p.stdout.partition("\n")
        assert rc == "2" and err.startswith(f"convdoctor: error: {words}"), p.stdout
        assert "internal error" not in err


def test_a_closed_reader_is_not_an_error() -> None:
    p = subprocess.Popen([sys.executable, "-m", "convdoctor", "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE,
                         env=dict(os.environ, PYTHONPATH=SRC))
    assert p.stdout is not None
    p.stdout.close()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0 and b"Traceback" not in err and b"Exception ignored" not in err


# ---------------------------------------------------------------------- untrusted text
def test_clean_shows_control_characters_and_keeps_layout() -> None:
    hostile = "ok\tline\nnext\x1b]0;title\x07 \x1b[2J\r\x9b\u202e\x00"
    out = clean(hostile)
    assert out == "ok\tline\nnext\\x1b]0;title\\x07 \\x1b[2J\\r\\x9b\\u202e\\x00"
    assert one_line("a\nb\tc") == "a\\nb\\tc"
    assert clean(out) == out                               # cleaning twice changes nothing
    colored = "\x1b[31mERROR\x1b[0m " + clean("x\x1b[31m")
    assert clean(colored, keep_color=True) == colored
    assert clean("\x1b[8mhidden\x1b[0m", keep_color=True) == "\\x1b[8mhidden\x1b[0m"


def test_use_color_only_on_a_terminal_and_never_with_no_color(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert use_color(Tty())  # type: ignore[arg-type]
    assert not use_color(sys.stdout if not sys.stdout.isatty() else None)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty())  # type: ignore[arg-type]


def test_check_colours_on_a_terminal_and_not_with_no_color_or_a_pipe() -> None:
    import pty
    import select

    args = ["check", "conv2d", "--input", "1x3x8x8", "--weight", "8x4x3x3"]   # a channel error
    outs = {}
    for name, extra in (("tty", {}), ("no_color", {"NO_COLOR": "1"})):
        pid, master = pty.fork()
        if pid == 0:
            env = dict(os.environ, PYTHONPATH=SRC, TERM="xterm", **extra)
            os.execvpe(sys.executable, [sys.executable, "-m", "convdoctor", *args], env)
        buf = b""
        while True:
            r, _, _ = select.select([master], [], [], 60)
            if not r:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
        os.waitpid(pid, 0)
        os.close(master)
        outs[name] = buf
    piped = _cli(*args).stdout
    assert b"\x1b[31mERROR\x1b[0m" in outs["tty"]
    assert b"\x1b[" not in outs["no_color"] and b"ERROR" in outs["no_color"]
    assert b"\x1b[" not in piped and b"ERROR" in piped


def test_layer_names_with_escape_sequences_are_shown_escaped(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    model = tmp_path / "m.py"
    model.write_text("import torch.nn as nn\n"
                     "def make():\n"
                     "    m = nn.Sequential()\n"
                     "    m.add_module('evil\\x1b]0;owned\\x07\\x1b[2J', nn.Conv2d(4, 8, 3))\n"
                     "    return m\n")
    p = _cli("check", f"{model}:make", "--input-shape", "1,3,8,8")
    out = p.stdout.decode()
    assert p.returncode == 2 and "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]0;owned\\x07\\x1b[2J" in out


def test_environment_values_with_escape_sequences_are_shown_escaped() -> None:
    env_extra = {"LD_LIBRARY_PATH": "/opt/lib\x1b]0;owned\x07:/usr/lib"}
    env = dict(os.environ, PYTHONPATH=SRC, **env_extra)
    p = subprocess.run([sys.executable, "-m", "convdoctor", "env", "--no-subprocess"],
                       capture_output=True, env=env, timeout=120)
    assert b"\x1b" not in p.stdout and b"\x07" not in p.stdout and b"Traceback" not in p.stderr


def test_table_cells_are_one_line_and_escaped() -> None:
    from convdoctor.tune.render import table

    out = table([["cudnn:eng0\x1b[2J", "a\nb"]], ["engine", "x"])
    assert "\x1b" not in out and "cudnn:eng0\\x1b[2J" in out and "a\\nb" in out
    assert len(out.splitlines()) == 3
