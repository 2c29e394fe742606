"""One fake machine per real-world breakage: each asserts the exact set of finding ids (nothing else
fires) and the evidence/fix that make the finding actionable."""

from __future__ import annotations

from pathlib import Path

import pytest
from env_machines import SITE, Machine, healthy

from convdoctor.env import diagnose
from convdoctor.report import Report

OWN = f"{SITE}/nvidia/cudnn/lib"
CU13 = f"{SITE}/nvidia/cu13/lib"


def ids(r: Report) -> set[str]:
    return set(r.ids())


def one(r: Report, rid: str):
    hits = [f for f in r.findings if f.id == rid]
    assert len(hits) == 1, r.ids()
    return hits[0]


def test_healthy_h100_has_no_findings(tmp_path: Path) -> None:
    r = diagnose(system=healthy(tmp_path).system())
    assert r.findings == [], [f.to_dict() for f in r.findings]
    assert r.exit_code == 0
    t = r.facts["torch"]["value"]
    assert (t["cudnn_compiled"], t["cudnn_runtime"]) == ("9.19.0", "9.19.0")
    main = next(c for c in r.facts["libraries"]["value"]["copies"] if c["name"] == "libcudnn.so.9")
    assert (main["version"], main["cuda_major"], main["pip_dist"]) == ("9.19.0", 13, "nvidia-cudnn-cu13")


def test_cpu_machine_without_driver_is_info_only(tmp_path: Path) -> None:
    m = Machine(tmp_path).no_driver().torch(version="2.13.0+cpu", cuda=None, cudnn=None)
    r = diagnose(system=m.system())
    assert ids(r) == {"no-nvidia-driver"}
    assert r.exit_code == 0
    # a CPU build on a machine without a driver: torch is read from version.py, never imported
    assert not [c for c in m.calls if c[0] == "torch_probe"]


def test_no_torch_no_driver(tmp_path: Path) -> None:
    r = diagnose(system=Machine(tmp_path).no_driver().system())
    assert ids(r) == {"no-nvidia-driver", "no-torch"}


def test_cpu_only_torch_with_gpu_present(tmp_path: Path) -> None:
    m = Machine(tmp_path).driver().torch(version="2.11.0+cpu", cuda=None, cudnn=None)
    r = diagnose(system=m.system())
    assert ids(r) == {"cpu-only-build"}
    f = one(r, "cpu-only-build")
    assert "--index-url https://download.pytorch.org/whl/cu130" in f.fix and "torch==2.11.0" in f.fix
    assert r.exit_code == 2


def test_cu12_cudnn_wheel_overwrote_cu13(tmp_path: Path) -> None:
    """pip install of a package pinning nvidia-cudnn-cu12 overwrote nvidia/cudnn/lib of a cu13 torch."""
    m = Machine(tmp_path).driver()
    m.cudnn(OWN, "9.10.2", 12, pip="nvidia-cudnn-cu12")
    m.cuda_libs(CU13, 13)
    m.torch(runtime="9.10.2")
    r = diagnose(system=m.system())
    assert ids(r) == {"cudnn-cuda-major-mismatch", "cudnn-version-mismatch"}
    f = one(r, "cudnn-cuda-major-mismatch")
    assert "CUDA 12" in f.title and "CUDA 13.0" in f.title
    assert "pip uninstall -y nvidia-cudnn-cu12" in f.fix and "nvidia-cudnn-cu13" in f.fix
    assert any("cudnnGetCudartVersion() = 12020" in e for e in f.evidence)


def test_driver_470_under_cuda12_torch(tmp_path: Path) -> None:
    m = Machine(tmp_path).driver(version="470.82.01", cuda=11040, gpus=(("Tesla T4", "7.5"),))
    m.cudnn(OWN, "9.5.1", 12, pip="nvidia-cudnn-cu12")
    m.cuda_libs(f"{SITE}/nvidia/cu12/lib", 12)
    m.torch(version="2.7.1+cu126", cuda="12.6", cudnn="9.5.1", cuda_available=False,
            arch=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
            cuda_error="RuntimeError: The NVIDIA driver on your system is too old (found version 11040).")
    r = diagnose(system=m.system())
    assert ids(r) == {"driver-too-old"}
    f = one(r, "driver-too-old")
    assert "470.82.01" in f.title and "525.60.13" in f.title
    assert "cu118" in f.fix  # the newest torch wheel index a CUDA 11.4 driver can run


def test_ld_library_path_cudnn_wins_whole(tmp_path: Path) -> None:
    """A complete older system cuDNN on LD_LIBRARY_PATH beats a torch whose libtorch_cuda has DT_RUNPATH."""
    m = Machine(tmp_path).driver(version="570.133.20", cuda=12080)
    sys_dir = "/usr/local/cudnn-9.1/lib"
    m.cudnn(sys_dir, "9.1.0", 12, versioned_files=True)
    m.cudnn(OWN, "9.5.1", 12, pip="nvidia-cudnn-cu12")
    m.cuda_libs(f"{SITE}/nvidia/cu12/lib", 12)
    m.env["LD_LIBRARY_PATH"] = f"{sys_dir}:/opt/other/lib"
    m.torch(version="2.7.1+cu126", cuda="12.6", cudnn="9.5.1", runtime="9.1.0", rpath=False,
            loaded=[f"{sys_dir}/libcudnn.so.9.1.0"] + [f"{sys_dir}/libcudnn_{s}.so.9.1.0" for s in ("graph", "ops", "cnn")])
    r = diagnose(system=m.system())
    assert ids(r) == {"cudnn-shadowed", "cudnn-version-mismatch"}
    f = one(r, "cudnn-shadowed")
    assert sys_dir in f.title and OWN in f.title and "9.1.0" in f.title
    assert any("searches LD_LIBRARY_PATH BEFORE DT_RUNPATH" in e for e in f.evidence)
    assert f.fix.startswith("export LD_LIBRARY_PATH=/opt/other/lib")
    assert "9.5.1" in one(r, "cudnn-version-mismatch").title


def _partial_cu12(tmp_path: Path) -> Machine:
    """The real fault run on the H100: some cu12 9.1.0 files first on LD_LIBRARY_PATH."""
    m = healthy(tmp_path)
    extra = "/repo/.gpu-extra/cudnn-cu12/lib"
    m.cudnn(extra, "9.1.0", 12, subs=("graph", "cnn", "engines_runtime_compiled"))
    m.env["LD_LIBRARY_PATH"] = extra
    loaded = [f"{OWN}/libcudnn.so.9"] + [f"{extra}/libcudnn_{s}.so.9" for s in ("graph", "cnn", "engines_runtime_compiled")] \
        + [f"{OWN}/libcudnn_{s}.so.9" for s in ("ops", "adv", "heuristic", "engines_precompiled")]
    m.torch(runtime="9.1.0", loaded=loaded)
    return m


def test_partial_cu12_copy_on_ld_library_path(tmp_path: Path) -> None:
    m = _partial_cu12(tmp_path)
    r = diagnose(system=m.system())
    assert ids(r) == {"cudnn-shadowed", "cudnn-sublibraries-mixed", "cudnn-version-mismatch", "cudnn-cuda-major-mismatch"}
    f = one(r, "cudnn-shadowed")
    # names the shadowing copy, its version, its CUDA major, the search rule and the fix
    assert f.data["shadow_path"] == "/repo/.gpu-extra/cudnn-cu12/lib/libcudnn_graph.so.9"
    assert (f.data["shadow_version"], f.data["shadow_cuda"]) == ("9.1.0", 12)
    assert (f.data["own_version"], f.data["own_cuda"]) == ("9.19.0", 13)
    assert any("DT_RUNPATH" in e and "LD_LIBRARY_PATH BEFORE" in e for e in f.evidence)
    assert f.fix.startswith("unset LD_LIBRARY_PATH")
    assert one(r, "cudnn-version-mismatch").fix.startswith("unset LD_LIBRARY_PATH")
    mixed = one(r, "cudnn-sublibraries-mixed")
    assert OWN in mixed.title and "/repo/.gpu-extra/cudnn-cu12/lib" in mixed.title


def test_partial_cu12_predicted_without_running_torch(tmp_path: Path) -> None:
    """No GPU/conv in the child (only libcudnn.so.9 mapped): the ELF search rules still predict the mix."""
    m = _partial_cu12(tmp_path)
    m.children["torch"]["maps"] = {"libs": []}
    m.children["torch"]["cudnn_runtime"] = "9.19.0"
    r = diagnose(system=m.system())
    assert ids(r) == {"cudnn-shadowed", "cudnn-sublibraries-mixed", "cudnn-cuda-major-mismatch"}
    pred = r.facts["resolution"]["value"]["predicted"]
    assert pred["libcudnn.so.9"]["dir"] == OWN and "DT_RPATH" in pred["libcudnn.so.9"]["rule"]
    assert pred["libcudnn_graph.so.9"]["dir"] == "/repo/.gpu-extra/cudnn-cu12/lib"
    assert pred["libcudnn_ops.so.9"]["dir"] == OWN


def test_real_h100_fault_as_measured(tmp_path: Path) -> None:
    """What the H100 really did (run 1, 11:05 UTC): the cu12 libcudnn_graph.so.9 on LD_LIBRARY_PATH was
    loaded by torch's own libcudnn.so.9, cudnn.version() raised 9.19.0 vs 9.1.0, and the first conv
    aborted the process: 'undefined symbol: cudnnGetLibConfig'."""
    m = _partial_cu12(tmp_path)
    extra = "/repo/.gpu-extra/cudnn-cu12/lib"
    stderr = f"Could not load symbol cudnnGetLibConfig. Error: {extra}/libcudnn_graph.so.9: undefined symbol: cudnnGetLibConfig\n"
    t = m.children["torch"]
    t.update(stage="import", maps={"libs": [f"{OWN}/libcudnn.so.9", f"{extra}/libcudnn_graph.so.9"]},
             cudnn_version_check_error="RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 19, 0) but found runtime version (9, 1, 0).",
             _crash="killed by signal 6 (SIGABRT)", _stderr=stderr)
    t.pop("conv_ok", None)
    m.children["smoke"] = {"_crash": "killed by signal 6 (SIGABRT)", "_stderr": stderr}
    r = diagnose(system=m.system(), smoke=None)
    assert ids(r) == {"cudnn-shadowed", "cudnn-sublibraries-mixed", "cudnn-version-mismatch", "cudnn-cuda-major-mismatch",
                      "framework-conv-failed", "smoke-conv-failed"}
    conv = one(r, "framework-conv-failed")
    assert "SIGABRT" in conv.title and any("cudnnGetLibConfig" in e for e in conv.evidence)
    assert any(e.startswith("explained by: ") and "cudnn-sublibraries-mixed" in e for e in conv.evidence)
    sm = one(r, "smoke-conv-failed")
    assert "cudnn-sublibraries-mixed" in sm.fix
    assert r.facts["torch"]["value"]["cudnn_runtime"] == "9.1.0"  # kept from the lines printed before the crash


def test_sm61_gpu_with_cudnn_919(tmp_path: Path) -> None:
    m = healthy(tmp_path).driver(gpus=(("NVIDIA GeForce GTX 1080", "6.1"),))
    r = diagnose(system=m.system())
    assert ids(r) == {"arch-not-in-build", "cudnn-911-old-gpu"}
    assert "sm_61" in one(r, "arch-not-in-build").title
    assert "9.19.0" in one(r, "cudnn-911-old-gpu").title


def test_cuda_visible_devices_empty(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.env["CUDA_VISIBLE_DEVICES"] = ""
    m.torch(cuda_available=False)
    r = diagnose(system=m.system())
    assert ids(r) == {"no-visible-gpu"}
    assert one(r, "no-visible-gpu").fix.startswith("unset CUDA_VISIBLE_DEVICES")


@pytest.mark.parametrize("cvd,visible", [("0", [0]), ("1", []), ("-1", []), ("GPU-00000000", [0]), ("0,5", [0])])
def test_cuda_visible_devices_parsing(tmp_path: Path, cvd: str, visible: list[int]) -> None:
    m = healthy(tmp_path)
    m.env["CUDA_VISIBLE_DEVICES"] = cvd
    r = diagnose(system=m.system())
    assert r.facts["gpus"]["value"]["visible"] == visible
    assert ("no-visible-gpu" in ids(r)) == (not visible)


def test_nvml_driver_library_mismatch(tmp_path: Path) -> None:
    m = healthy(tmp_path).driver(version="580.65.06", kernel="570.133.20", nvml_error="Driver/library version mismatch")
    m.torch(cuda_available=False, cuda_error="RuntimeError: CUDA driver initialization failed (803)")
    r = diagnose(system=m.system())
    assert ids(r) == {"nvml-driver-mismatch"}
    f = one(r, "nvml-driver-mismatch")
    assert "570.133.20" in f.title and "580.65.06" in f.title
    assert "Reboot" in f.fix


def test_missing_nvrtc(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.remove(f"{CU13}/libnvrtc.so.13")
    r = diagnose(system=m.system())
    assert ids(r) == {"missing-nvrtc"}
    assert "nvidia-cuda-nvrtc" in one(r, "missing-nvrtc").fix


def test_missing_cublaslt(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.remove(f"{CU13}/libcublasLt.so.13")
    r = diagnose(system=m.system())
    assert ids(r) == {"missing-cublaslt"}


def test_tensorflow_compiled_86_finds_81_first(tmp_path: Path) -> None:
    m = Machine(tmp_path).driver(version="525.85.12", cuda=12000, gpus=(("NVIDIA A100-SXM4-40GB", "8.0"),))
    old = "/usr/local/cuda-11.2/lib64"
    m.cudnn(old, "8.1.0", 11, subs=("ops_infer", "cnn_infer"), versioned_files=True)
    m.cuda_libs(old, 11)
    m.env["LD_LIBRARY_PATH"] = old
    tf = f"{SITE}/tensorflow"
    m.modules["tensorflow"] = tf
    m.file(f"{tf}/python/platform/build_info.py", "build_info = {'cuda_version': '11.8', 'cudnn_version': '8', 'is_cuda_build': True}\n")
    m.file(f"{tf}/include/external/cuda_cudnn/include/cudnn_version.h",
           "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 6\n#define CUDNN_PATCHLEVEL 0\n")
    m.file(f"{SITE}/tensorflow-2.12.0.dist-info/METADATA")
    r = diagnose(system=m.system())
    assert ids(r) == {"cudnn-version-mismatch", "no-torch"}
    f = one(r, "cudnn-version-mismatch")
    assert f.layer == "tensorflow" and "8.6.0" in f.title and "8.1.0" in f.title
    assert f.fix.startswith("unset LD_LIBRARY_PATH")


def test_library_that_segfaults_on_load(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    bad = "/opt/broken/lib"
    m.cudnn(bad, "9.19.0", 13, subs=("graph",))
    m.libs[f"{bad}/libcudnn.so.9"] = "segfault"
    m.libs[f"{bad}/libcudnn_graph.so.9"] = "segfault"
    m.env["LD_LIBRARY_PATH"] = bad
    r = diagnose(system=m.system())
    assert ids(r) == {"could-not-check"}
    found = [f for f in r.findings if f.id == "could-not-check"]
    assert len(found) == 2 and all("crashed" in f.title and "signal 11" in f.title for f in found)
    # the crash did not stop the other copies from being read
    main = next(c for c in r.facts["libraries"]["value"]["copies"] if c["path"] == f"{OWN}/libcudnn.so.9")
    assert main["version"] == "9.19.0"


def test_unreadable_driver_file_and_nvml_permission(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.unreadable.add("/proc/driver/nvidia/version")
    r = diagnose(system=m.system())
    assert ids(r) == {"could-not-check"}
    assert "Permission denied" in one(r, "could-not-check").title


def test_torch_import_fails(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.torch(import_error="ImportError: libcudnn_graph.so.9: cannot open shared object file: No such file or directory")
    r = diagnose(system=m.system())
    assert ids(r) == {"framework-import-failed"}
    assert "libcudnn_graph.so.9" in one(r, "framework-import-failed").title


def test_gpu_throttling_and_ecc(tmp_path: Path) -> None:
    m = healthy(tmp_path).driver(mask=0x40 | 0x1, ecc=3)
    r = diagnose(system=m.system())
    assert ids(r) == {"gpu-throttling", "gpu-ecc-errors"}
    assert "HW thermal slowdown" in one(r, "gpu-throttling").title
    assert r.exit_code == 1


def test_idle_and_app_clock_reasons_are_not_throttling(tmp_path: Path) -> None:
    r = diagnose(system=healthy(tmp_path).driver(mask=0x1 | 0x2 | 0x10).system())
    assert r.findings == []


def test_driver_child_times_out(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.children["driver"] = "timed out after 15 s"
    r = diagnose(system=m.system())
    assert ids(r) == {"could-not-check"}
    assert "timed out" in one(r, "could-not-check").title


def test_smoke_failure_is_explained_by_env_finding(tmp_path: Path) -> None:
    m = _partial_cu12(tmp_path)
    err = "RuntimeError: cuDNN error: CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"
    m.children["smoke"] = {"ran": True, "seconds": 1.0, "cases": [
        {"device": 0, "gpu": "H100", "case": "fp32", "tol": 1e-4, "ok": False, "phase": "fprop", "error": err},
        {"device": 0, "gpu": "H100", "case": "fp16", "tol": 1e-2, "ok": True, "rel_err": {"fprop": 1e-4}}]}
    r = diagnose(system=m.system(), smoke=True)
    f = one(r, "smoke-conv-failed")
    assert "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH" in f.title
    assert "cudnn-sublibraries-mixed" in f.fix


def test_smoke_wrong_numbers(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.children["smoke"] = {"ran": True, "seconds": 1.0, "cases": [
        {"device": 0, "gpu": "H100", "case": "bf16", "tol": 5e-2, "ok": False, "rel_err": {"fprop": 0.01, "dgrad": 0.4, "wgrad": 0.01}}]}
    r = diagnose(system=m.system(), smoke=True)
    assert ids(r) == {"smoke-conv-wrong"}
    assert "dgrad" in one(r, "smoke-conv-wrong").title


def test_smoke_auto_runs_only_with_visible_gpu(tmp_path: Path) -> None:
    m = healthy(tmp_path)
    m.children["smoke"] = {"ran": True, "seconds": 0.5, "cases": []}
    diagnose(system=m.system(), smoke=None)
    assert any(c[0] == "smoke" for c in m.calls)
    m2 = Machine(tmp_path / "cpu").no_driver().torch(version="2.13.0+cpu", cuda=None, cudnn=None)
    diagnose(system=m2.system(), smoke=None)
    assert not any(c[0] == "smoke" for c in m2.calls)


def test_every_emitted_id_is_in_rules_json(tmp_path: Path) -> None:
    import json

    from convdoctor.env.rules import DATA, RULES

    table = {r["id"] for r in json.loads((DATA / "rules.json").read_text())["rules"]}
    assert {rid for rid, _ in RULES} <= table
    for r in json.loads((DATA / "rules.json").read_text())["rules"]:
        assert r["id"] == r["id"].lower() and " " not in r["id"] and r["severity"] in ("error", "warning", "info")


def test_triton_is_reported_from_its_files(tmp_path: Path) -> None:
    """Triton's version is read from triton/__init__.py (never imported); without it the summary
    says convdoctor's own kernels are not offered."""
    from convdoctor.env.render import summary

    m = healthy(tmp_path)
    r = diagnose(system=m.system())
    assert r.facts["triton"]["value"] == {"installed": False}
    assert "triton:    not installed" in summary(r)
    m.modules["triton"] = f"{SITE}/triton"
    m.file(f"{SITE}/triton/__init__.py", '"""Triton"""\n__version__ = "3.6.0"\n')
    r = diagnose(system=m.system())
    assert r.facts["triton"]["value"]["version"] == "3.6.0"
    assert "triton:    3.6.0" in summary(r)
    assert r.findings == []
