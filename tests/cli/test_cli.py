"""The command-line foundation: fast --help, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from convdoctor import cli
from convdoctor.report import Finding, Report


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convdoctor", *args], capture_output=True, text=True, timeout=120)


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from convdoctor import cli\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = cli.main(['--help'])\n"
        "assert rc == 0, rc\n"
        "assert 'doctor' in buf.getvalue()\n"
        "assert 'torch' not in sys.modules, 'convdoctor --help imported torch'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_every_command_has_help() -> None:
    for name, _module, _help in cli.COMMANDS:
        proc = _run(name, "--help")
        assert proc.returncode == 0, (name, proc.stderr)
        assert "--json" in proc.stdout, name
        assert "Traceback" not in proc.stderr


def test_unknown_command_is_a_usage_error_without_traceback() -> None:
    proc = _run("no-such-command")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("severities", "code"),
    [((), 0), (("info",), 0), (("info", "warning"), 1), (("warning", "error"), 2)],
)
def test_report_exit_codes(severities: tuple[str, ...], code: int) -> None:
    rep = Report(findings=[Finding(id=f"x{i}", severity=s, title="t") for i, s in enumerate(severities)])  # type: ignore[arg-type]
    assert rep.exit_code == code
    assert rep.ok == (code != 2)
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["exit_code"] == code


def test_finding_rejects_unknown_severity() -> None:
    with pytest.raises(ValueError):
        Finding(id="x", severity="fatal", title="t")  # type: ignore[arg-type]


def test_an_internal_error_names_the_debug_switch(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CONVDOCTOR_DEBUG", raising=False)
    assert cli._internal(ValueError("boom")) == 2
    err = capsys.readouterr().err
    assert "internal error: ValueError: boom" in err
    assert "Run again with CONVDOCTOR_DEBUG=1 to see the traceback" in err
