"""`convdoctor run` behaves like the command run by a shell: signals, pipes, exit codes, speed."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "convdoctor"]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")

# counts the SIGINTs and SIGTERMs it gets, then says how many
COUNTER = """
import signal, sys, time
got = []
signal.signal(signal.SIGINT, lambda s, f: got.append("INT"))
signal.signal(signal.SIGTERM, lambda s, f: got.append("TERM"))
print("ready", flush=True)
t = time.time()
while not got and time.time() - t < 20:
    time.sleep(0.01)
time.sleep(1.0)          # a second, forwarded copy would arrive within this second
print("got " + ",".join(got), flush=True)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _start(args: list[str], **kw: object) -> subprocess.Popen[bytes]:
    """convdoctor in a session of its own, so `_reap` can end it and all it started."""
    return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(), start_new_session=True, **kw)  # type: ignore[call-overload]


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def _read_until(fd: int, token: bytes, timeout: float) -> bytes:
    buf = b""
    end = time.monotonic() + timeout
    while token not in buf and time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf


def test_ctrl_c_at_a_terminal_reaches_the_command_once() -> None:
    import pty

    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader with the pty as its terminal, in the foreground
        os.execvpe(sys.executable, [*CLI, "run", "--no-live", "--", sys.executable, "-c", COUNTER],
                   _env())
    try:
        assert b"ready" in _read_until(master, b"ready", 60)
        os.write(master, b"\x03")                 # the terminal sends SIGINT to the group
        out = _read_until(master, b"got", 30)
        out += _read_until(master, b"\n", 5)
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)       # the session pty.fork started, if still there
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(master)
    line = out[out.index(b"got"):].splitlines()[0].decode()
    assert line == "got INT", out


def test_sigterm_and_sighup_reach_the_command_and_no_orphan_is_left() -> None:
    for signo, name in ((signal.SIGTERM, "TERM"), (signal.SIGHUP, None)):
        proc = _start(["run", "--no-live", "--", sys.executable, "-c", COUNTER])
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"ready"
            kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)],
                                  capture_output=True, text=True).stdout.split()
            assert len(kids) == 1
            proc.send_signal(signo)
            out, _ = proc.communicate(timeout=30)
        finally:
            _reap(proc)
        if name:      # the command handles SIGTERM: it says so once and exits 0
            assert out.strip() == f"got {name}".encode() and proc.returncode == 0
        else:         # SIGHUP's default action ends the command: 128 + SIGHUP
            assert proc.returncode == 128 + signal.SIGHUP
        time.sleep(0.2)
        assert subprocess.run(["ps", "-p", kids[0]], capture_output=True).returncode != 0, \
            "the command outlived convdoctor"


def test_a_closed_reader_ends_the_command_with_sigpipe() -> None:
    yes = _start(["run", "--no-live", "--", "yes"])
    try:
        assert yes.stdout is not None
        assert yes.stdout.readline() == b"y\n"
        yes.stdout.close()                       # what `| head -1` does
        _, err = yes.communicate(timeout=30)
    finally:
        _reap(yes)
    assert yes.returncode == 128 + signal.SIGPIPE
    assert b"explanation" not in err and b"Traceback" not in err


def test_a_background_process_holding_the_pipes_does_not_hold_up_run() -> None:
    t0 = time.monotonic()
    p = _start(["run", "--no-live", "--", "sh", "-c", "sleep 30 & echo $!; exit 1"])
    try:
        p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        _reap(p)                                   # and the background sleep it left
    assert p.returncode == 1
    assert took < 10, took


def test_exit_codes_of_a_command_that_cannot_run_are_a_shells(tmp_path: Path) -> None:
    p = subprocess.run([*CLI, "run", "--", "no-such-binary-xyz"], capture_output=True,
                       env=_env(), timeout=60)
    assert p.returncode == 127 and b"command not found" in p.stderr
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    if os.geteuid() == 0:       # root may execute any file with an x bit: use a directory
        script = tmp_path
    p = subprocess.run([*CLI, "run", "--", str(script)], capture_output=True, env=_env(),
                       timeout=60)
    assert p.returncode == 126 and b"Traceback" not in p.stderr


def test_scanning_error_lines_does_not_throttle_the_command() -> None:
    from convdoctor.cli.run import run_command

    line = "RuntimeError: CUDA error: an illegal memory access was encountered"
    cmd = ["sh", "-c", f"yes '{line}' | head -c 200000000; exit 1"]
    with open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=null, check=False)
        direct = time.perf_counter() - t0
        o = run_command(cmd, out=null, err=null)
    assert o.rc == 1
    assert o.scan.total_lines == 200000000 // (len(line) + 1) + 1
    # every line holds an anchor; scanned in full this took minutes (about 5 MB/s)
    assert o.seconds < 10 * direct + 3, (o.seconds, direct)
    assert any("illegal memory access" in text for _, text in o.scan.lines[-5:])
