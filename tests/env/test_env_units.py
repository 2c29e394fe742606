"""Small pieces: version decoding, the ELF reader, arch matching, the human rendering."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import pytest
from env_machines import healthy

from convdoctor.env import diagnose
from convdoctor.env.elf import expand_origin, read_dynamic
from convdoctor.env.facts import cuda_int_to_str, cudnn_int_to_str, parse_version
from convdoctor.env.render import render
from convdoctor.env.rules import _cc_supported


@pytest.mark.parametrize("v,s", [(8902, "8.9.2"), (8100, "8.1.0"), (90100, "9.1.0"), (91900, "9.19.0"), (91002, "9.10.2"), (0, None)])
def test_cudnn_version_ints(v: int, s: str | None) -> None:
    assert cudnn_int_to_str(v) == s


def test_cuda_version_ints_and_parse() -> None:
    assert cuda_int_to_str(12040) == "12.4" and cuda_int_to_str(13000) == "13.0" and cuda_int_to_str(11080) == "11.8"
    assert parse_version("580.65.06") == (580, 65, 6) and parse_version("2.11.0+cu130") == (2, 11, 0)
    assert parse_version(None) is None and parse_version("abc") is None


def test_elf_reader_on_a_real_library() -> None:
    path = "/usr/lib/x86_64-linux-gnu/libz.so.1"
    if not os.path.exists(path):
        pytest.skip("no libz here")
    d = read_dynamic(open(path, "rb"))
    assert d.error is None and d.soname == "libz.so.1" and "libc.so.6" in d.needed


def test_elf_reader_rejects_junk_without_raising() -> None:
    assert read_dynamic(io.BytesIO(b"hello")).error == "not an ELF file"
    truncated = b"\x7fELF\x02\x01" + b"\0" * 26 + struct.pack("<Q", 1 << 40) + b"\0" * 24
    assert read_dynamic(io.BytesIO(truncated)).error  # header points past the end: an error string, no exception


def test_expand_origin() -> None:
    assert expand_origin(["$ORIGIN/../../nvidia/cudnn/lib", "${ORIGIN}"], "/s/torch/lib") == ["/s/nvidia/cudnn/lib", "/s/torch/lib"]


@pytest.mark.parametrize("cc,arch,ok", [
    ("9.0", ["sm_80", "sm_90"], True), ("8.6", ["sm_80"], True), ("6.1", ["sm_75", "sm_80"], False),
    ("8.9", ["sm_80", "compute_80"], True), ("7.0", ["sm_75", "compute_75"], False), ("12.0", ["sm_90", "sm_100", "sm_120"], True),
    ("9.0", ["sm_90a"], True), ("10.3", ["sm_100"], True)])
def test_arch_matching(cc: str, arch: list[str], ok: bool) -> None:
    assert _cc_supported(cc, arch) is ok


def test_human_output_lists_facts_then_findings(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.remove(f"{m.sites[0]}/nvidia/cu13/lib/libnvrtc.so.13")
    text = render(diagnose(system=m.system()))
    lines = text.splitlines()
    assert lines[0].startswith("driver:    driver 580.65.06")
    assert any(ln.startswith("GPU 0:     NVIDIA H100 80GB HBM3  sm_90") for ln in lines)
    assert any("cuDNN compiled 9.19.0 / runtime 9.19.0" in ln for ln in lines)
    assert any("libcudnn.so.9" in ln and "9.19.0" in ln and "cuda13" in ln for ln in lines)
    assert "findings: 0 error(s), 1 warning(s), 0 info" in text
    assert "WARN  missing-nvrtc" in text


def test_terraform_variables_are_not_listed_as_tensorflow_settings(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.env.update({"TF_CLI_CONFIG_FILE": "/home/u/.terraformrc", "TF_VAR_region": "eu",
                  "TF_LOG": "DEBUG", "TF_CPP_MIN_LOG_LEVEL": "2",
                  "TF_FORCE_GPU_ALLOW_GROWTH": "true"})
    env = diagnose(system=m.system()).facts["environ"]["value"]
    assert {k for k in env if k.startswith("TF_")} == {"TF_CPP_MIN_LOG_LEVEL",
                                                       "TF_FORCE_GPU_ALLOW_GROWTH"}


def test_the_report_says_which_host_os_python_time_and_convdoctor(tmp_path: Path) -> None:
    import datetime
    import platform

    from convdoctor import __version__

    rep = diagnose(system=healthy(tmp_path).system())
    host = rep.facts["host"]["value"]
    assert host["python"] == platform.python_version() and host["convdoctor"] == __version__
    assert host["os"] and host["hostname"] and host["machine"]
    when = datetime.datetime.fromisoformat(host["time"])
    assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 600
    assert "convdoctor " + __version__ in render(rep)


def test_compare_names_os_python_and_convdoctor_differences(tmp_path: Path) -> None:
    import json

    from convdoctor.env import compare

    rep = diagnose(system=healthy(tmp_path).system()).to_dict()
    other = json.loads(json.dumps(rep))
    other["facts"]["host"]["value"].update(python="3.12.1", convdoctor="9.9.9")
    other["facts"]["gpus"]["value"]["devices"] = [7, "x"]         # wrong types: skipped
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(rep))
    b.write_text(json.dumps(other))
    rows = {r["fact"] for r in compare.rows({"a": compare.load(str(a)),
                                             "b": compare.load(str(b))})}
    assert {"Python", "convdoctor"} <= rows and "OS" not in rows
