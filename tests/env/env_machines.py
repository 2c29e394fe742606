"""Builders for fake machines: a real directory tree under a temp root (the libraries are empty files,
their ELF headers and load-time answers are canned), a fake environment, and canned answers of the
child processes (NVML/libcuda, `import torch`, library loading, smoke test).

`healthy()` is an H100 with torch 2.11.0+cu130 from pip; each broken machine is a few edits of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from convdoctor.env.elf import ElfDynamic
from convdoctor.env.system import ChildResult, System

SITE = "/venv/lib/python3.11/site-packages"
CUDNN9_SUBS = ("graph", "ops", "cnn", "adv", "heuristic", "engines_precompiled", "engines_runtime_compiled")


def cudnn_int(version: str) -> int:
    p = [int(x) for x in version.split(".")]
    return p[0] * 10000 + p[1] * 100 + p[2] if p[0] >= 9 else p[0] * 1000 + p[1] * 100 + p[2]


class FakeSystem(System):
    def __init__(self, m: Machine) -> None:
        super().__init__(root=m.root, environ=m.env)
        self.m = m

    def site_packages(self) -> list[str]:
        return list(self.m.sites)

    def find_module_dir(self, name: str) -> str | None:
        d = self.m.modules.get(name)
        return d if d and self.exists(d) else None

    def elf_dynamic(self, path: str) -> ElfDynamic:
        e = self.m.elf.get(path)
        return ElfDynamic(**e) if e is not None else ElfDynamic(error="not an ELF file")

    def read_text(self, path: str, limit: int = 1 << 20) -> str | None:
        return None if path in self.m.unreadable else super().read_text(path, limit)

    def read_error(self, path: str) -> str | None:
        return "Permission denied" if path in self.m.unreadable else super().read_error(path)

    def child(self, script: str, args=(), *, timeout: float = 20.0, env=None) -> ChildResult:  # noqa: ANN001
        self.m.calls.append((script, tuple(args), dict(env or {}).get("LD_LIBRARY_PATH")))
        if script == "libinfo":
            res = ChildResult(returncode=0)
            for p in args:
                res.lines.append({"start": p})
                ans = self.m.libs.get(p, {"load_error": f"{p}: cannot open shared object file"})
                if ans == "segfault":
                    res.returncode, res.error = -11, "killed by signal 11"
                    return res
                res.lines.append({"result": {"path": p, **ans}})
            return res
        key = {"torch_probe": "torch"}.get(script, script)
        ans = self.m.children.get(key)
        if ans is None:
            return ChildResult(error=f"{script}: no canned answer", returncode=1)
        if isinstance(ans, str):
            return ChildResult(error=ans)
        if "_crash" in ans:  # printed some lines, then died (e.g. SIGABRT inside cuDNN)
            payload = {k: v for k, v in ans.items() if not k.startswith("_")}
            return ChildResult(lines=[payload] if payload else [], error=ans["_crash"], returncode=-6,
                               stderr_tail=ans.get("_stderr", ""))
        return ChildResult(data=ans, returncode=0)


class Machine:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp
        self.env: dict[str, str] = {}
        self.sites = [SITE]
        self.modules: dict[str, str] = {}
        self.children: dict[str, Any] = {}
        self.libs: dict[str, Any] = {}
        self.elf: dict[str, dict[str, Any]] = {}
        self.unreadable: set[str] = set()
        self.calls: list[tuple[str, tuple[str, ...], str | None]] = []
        self.mkdir(SITE)

    # -- filesystem
    def file(self, path: str, text: str = "") -> Machine:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return self

    def mkdir(self, path: str) -> None:
        (self.root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)

    def symlink(self, path: str, target: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        os.symlink(target, p)

    def remove(self, path: str) -> None:
        (self.root / path.lstrip("/")).unlink()

    # -- driver and GPUs
    def driver(self, version: str = "580.65.06", cuda: int = 13000, gpus: tuple[tuple[str, str], ...] = (("NVIDIA H100 80GB HBM3", "9.0"),),
               kernel: str | None = None, nvml_error: str | None = None, mask: int = 0, ecc: int = 0) -> Machine:
        self.file("/proc/driver/nvidia/version",
                  f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {kernel or version}  Release Build  (dvs-builder@U16)\n"
                  "GCC version:  gcc version 12.3.0\n")
        for i in range(len(gpus)):
            self.file(f"/dev/nvidia{i}")
        devices = [{"index": i, "name": n, "uuid": f"GPU-{i:08x}-aaaa", "cc": cc, "memory_total_mib": 81559,
                    "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "temperature_c": 35, "clock_event_mask": mask,
                    "ecc_uncorrected_volatile": ecc} for i, (n, cc) in enumerate(gpus)]
        nvml: dict[str, Any] = {"ok": True, "driver_version": version, "cuda_driver_version": cuda, "devices": devices}
        if nvml_error:
            nvml = {"ok": False, "error": nvml_error}
        self.file(f"/usr/lib/x86_64-linux-gnu/libcuda.so.{version}")
        self.symlink("/usr/lib/x86_64-linux-gnu/libcuda.so.1", f"libcuda.so.{version}")
        self.children["driver"] = {"nvml": nvml, "libcuda": {"ok": True, "rc": 0, "cuda_driver_version": cuda,
                                                             "path": "/usr/lib/x86_64-linux-gnu/libcuda.so.1"}}
        return self

    def no_driver(self) -> Machine:
        self.children["driver"] = {"nvml": {"ok": False, "error": "NVML Shared Library Not Found"},
                                   "libcuda": {"ok": False, "error": "libcuda.so.1: cannot open shared object file: No such file or directory"}}
        return self

    # -- libraries
    def cudnn(self, d: str, version: str, cuda_major: int, subs: tuple[str, ...] = CUDNN9_SUBS,
              pip: str | None = None, versioned_files: bool = False, main: bool = True) -> Machine:
        major = version.split(".")[0]
        names = ([f"libcudnn.so.{major}"] if main else []) + [f"libcudnn_{s}.so.{major}" for s in subs]
        for n in names:
            if versioned_files:
                self.file(f"{d}/{n}.{version.split('.', 1)[1]}")
                self.symlink(f"{d}/{n}", f"{n}.{version.split('.', 1)[1]}")
            else:
                self.file(f"{d}/{n}")
        ans = {"cudnn_version": cudnn_int(version), "cudart_version": cuda_major * 1000 + 20}
        if main:
            self.libs[f"{d}/libcudnn.so.{major}"] = ans
            self.elf[f"{d}/libcudnn.so.{major}"] = {"runpath": ["$ORIGIN"], "soname": f"libcudnn.so.{major}"}
        for sub in ("graph", "ops_infer"):  # the sub-libraries that export cudnnGetVersion themselves
            if sub in subs:
                self.libs[f"{d}/libcudnn_{sub}.so.{major}"] = ans
        if pip:
            rel = os.path.relpath(d, SITE)
            self.file(f"{SITE}/{pip.replace('-', '_')}-{version}.1.dist-info/RECORD",
                      "".join(f"{rel}/{n},sha256=x,1\n" for n in names))
        return self

    def cuda_libs(self, d: str, major: int, skip: tuple[str, ...] = ()) -> Machine:
        for base in ("libcudart", "libcublas", "libcublasLt", "libnvrtc"):
            if base not in skip:
                self.file(f"{d}/{base}.so.{major}")
        return self

    # -- frameworks
    def torch(self, version: str = "2.11.0+cu130", cuda: str | None = "13.0", cudnn: str | None = "9.19.0",
              runtime: str | None = None, arch: tuple[str, ...] = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
              rpath: bool = True, cuda_available: bool = True, loaded: list[str] | None = None,
              import_error: str | None = None, conv: bool = True, **extra: Any) -> Machine:
        tdir = f"{SITE}/torch"
        self.modules["torch"] = tdir
        self.file(f"{tdir}/version.py", f"__version__ = '{version}'\ncuda: Optional[str] = {cuda!r}\nhip = None\n".replace("'None'", "None"))
        child: dict[str, Any] = {"installed": True, "version": version, "cuda": cuda, "file": f"{tdir}/__init__.py"}
        if cuda:
            lib = f"{tdir}/lib/libtorch_cuda.so"
            self.file(lib)
            dirs = ["$ORIGIN/../../nvidia/cudnn/lib", f"$ORIGIN/../../nvidia/cu{cuda.split('.')[0]}/lib"]
            self.elf[lib] = {"needed": [f"libcudnn.so.{(cudnn or '9').split('.')[0]}", "libc10_cuda.so"],
                             **({"rpath": dirs} if rpath else {"runpath": dirs})}
            child.update(cudnn_compiled=cudnn, cudnn_runtime=runtime or cudnn, arch_list=list(arch),
                         cuda_available=cuda_available, device_count=1 if cuda_available else 0)
            if conv and cuda_available:
                child["conv_ok"] = True
        else:
            child.update(cudnn_error="AttributeError: module 'torch._C' has no attribute '_cudnn'", arch_list=[],
                         cuda_available=False, device_count=0)
        if loaded is None and cuda:
            own = f"{SITE}/nvidia/cudnn/lib"
            major = (cudnn or "9").split(".")[0]
            loaded = [f"{own}/libcudnn.so.{major}"] + ([f"{own}/libcudnn_{s}.so.{major}" for s in CUDNN9_SUBS]
                                                       if conv and cuda_available else [f"{own}/libcudnn_graph.so.{major}"])
        child["maps"] = {"libs": loaded or []}
        child.update(extra)
        if import_error:
            child = {"installed": True, "import_error": import_error, "maps": {"libs": []}}
        self.children["torch"] = child
        return self

    def system(self) -> FakeSystem:
        return FakeSystem(self)


def healthy(tmp: Path) -> Machine:
    """An H100, driver 580.65.06, torch 2.11.0+cu130 with its pip cuDNN 9.19.0 and CUDA 13 libraries."""
    m = Machine(tmp).driver()
    m.cudnn(f"{SITE}/nvidia/cudnn/lib", "9.19.0", 13, pip="nvidia-cudnn-cu13")
    m.cuda_libs(f"{SITE}/nvidia/cu13/lib", 13)
    m.torch()
    return m
