"""The doctor on the real machine it runs on (CI: no GPU, no driver), real child processes, real
library loading, the CLI's bad-input paths. No fakes here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from convdoctor.env.system import System

REPO = Path(__file__).resolve().parents[2]
EXTRA = REPO / ".gpu-extra" / "cudnn-cu12" / "lib"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "convdoctor", *args], capture_output=True, text=True, timeout=180, env=e)


def _has_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia/version")


def test_doctor_on_this_machine() -> None:
    cp = cli("doctor", "--json")
    assert "Traceback" not in cp.stderr, cp.stderr
    rep = json.loads(cp.stdout)
    assert rep["kind"] == "env" and cp.returncode == rep["exit_code"]
    assert {"driver", "gpus", "libraries", "torch", "resolution"} <= set(rep["facts"])
    if not _has_driver():
        # CI: a sensible report, not an error storm
        assert {f["id"] for f in rep["findings"]} <= {"no-nvidia-driver", "no-torch"}
        assert "no-nvidia-driver" in {f["id"] for f in rep["findings"]}
        assert cp.returncode == 0
    text = cli("doctor")
    assert text.returncode == cp.returncode
    assert text.stdout.startswith("driver:") and "findings:" in text.stdout


def test_doctor_json_facts_match_this_python() -> None:
    rep = json.loads(cli("env", "--json").stdout)
    t = rep["facts"]["torch"]["value"]
    try:
        import torch
    except ImportError:
        assert t["installed"] is False
        return
    assert t["version"] == torch.__version__ and t["cuda"] == torch.version.cuda


def test_no_subprocess_mode_starts_no_children(monkeypatch: pytest.MonkeyPatch) -> None:
    from convdoctor.env import diagnose

    calls: list[object] = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    r = diagnose(system=System(subprocess_ok=False))
    assert calls == []
    assert r.facts["driver"]["problems"]  # says it could not check NVML/libcuda


@pytest.mark.skipif(not (EXTRA / "libcudnn.so.9").exists(), reason="needs the cu12 cuDNN copy in .gpu-extra/")
def test_real_cudnn_library_version_and_cuda_major(tmp_path: Path) -> None:
    """Load the real nvidia-cudnn-cu12 9.1.0 libraries in a child: version and CUDA major from the library itself."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(EXTRA))
    rep = json.loads(cli("env", "--json", env=env).stdout)
    copies = {c["path"]: c for c in rep["facts"]["libraries"]["value"]["copies"]}
    main = copies[str(EXTRA / "libcudnn.so.9")]
    assert (main["version"], main["cuda_major"], main["version_source"]) == ("9.1.0", 12, "cudnnGetVersion")
    assert main["via"] == "LD_LIBRARY_PATH[0]"
    assert main["elf_runpath"] == [str(EXTRA)]  # $ORIGIN expanded: sub-libraries come after LD_LIBRARY_PATH
    graph = copies[str(EXTRA / "libcudnn_graph.so.9")]
    assert (graph["version"], graph["cuda_major"]) == ("9.1.0", 12)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a crashing library")
def test_real_library_that_segfaults_on_load(tmp_path: Path) -> None:
    """A real libcudnn.so.9 whose constructor segfaults: the doctor reports it and carries on."""
    src = tmp_path / "crash.c"
    src.write_text("#include <signal.h>\n__attribute__((constructor)) static void boom(void) { raise(SIGSEGV); }\n"
                   "unsigned long cudnnGetVersion(void) { return 91900; }\n")
    lib = tmp_path / "lib"
    lib.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "libcudnn.so.9"), str(src)], check=True, timeout=60)
    (lib / "libcudnn_graph.so.9").write_bytes(b"not a library")
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib))
    cp = cli("env", "--json", env=env)
    assert "Traceback" not in cp.stderr
    rep = json.loads(cp.stdout)
    msgs = [f["title"] for f in rep["findings"] if f["id"] == "could-not-check"]
    assert any("libcudnn.so.9" in m and "crashed" in m and "signal 11" in m for m in msgs), msgs
    assert any("libcudnn_graph.so.9" in m and "could not be loaded" in m for m in msgs), msgs


def test_compare_two_machines(tmp_path: Path) -> None:
    rep = json.loads(cli("env", "--json").stdout)
    a, b = tmp_path / "node1.json", tmp_path / "node2.json"
    a.write_text(json.dumps(rep))
    rep2 = json.loads(json.dumps(rep))
    rep2["facts"]["driver"]["value"]["version"] = "550.54.14"
    rep2["facts"]["environ"]["value"]["LD_LIBRARY_PATH"] = "/usr/local/cuda/lib64"
    b.write_text(json.dumps(rep2))
    cp = cli("env", "--compare", str(a), str(b))
    assert cp.returncode == 1, cp.stderr
    assert "550.54.14" in cp.stdout and "LD_LIBRARY_PATH" in cp.stdout and "node1" in cp.stdout
    same = cli("env", "--compare", str(a), str(a), "--json")
    assert same.returncode == 0 and json.loads(same.stdout)["differences"] == []


@pytest.mark.parametrize("content,expect", [(None, "no such file"), ("{not json", "not JSON"), ('{"kind": "tune"}', "not a convdoctor env report")])
def test_compare_bad_input_is_a_clean_error(tmp_path: Path, content: str | None, expect: str) -> None:
    p = tmp_path / "bad.json"
    if content is not None:
        p.write_text(content)
    good = tmp_path / "good.json"
    good.write_text(cli("env", "--json").stdout)
    cp = cli("env", "--compare", str(good), str(p))
    assert cp.returncode == 2 and expect in cp.stderr and "Traceback" not in cp.stderr
