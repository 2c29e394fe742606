"""Framework probes: torch (static version.py + ELF of libtorch_cuda.so + a child that imports it),
TensorFlow, JAX and Triton (read from their files, never imported)."""

from __future__ import annotations

import os
import re
from typing import Any

from .context import TORCH_TIMEOUT, ProbeContext
from .facts import Fact
from .system import System


def _static_torch(s: System, torch_dir: str) -> dict[str, Any]:
    """torch/version.py read as text: version and CUDA build without importing torch."""
    out: dict[str, Any] = {}
    text = s.read_text(os.path.join(torch_dir, "version.py")) or ""
    for key in ("__version__", "cuda", "hip"):
        m = re.search(rf"^{re.escape(key)}\s*(?::\s*[\w\[\], |]+)?=\s*(.+)$", text, re.M)
        if m:
            raw = m.group(1).strip()
            out[key.strip("_") if key == "__version__" else key] = None if raw == "None" else raw.strip("'\"")
    return out


def probe_torch(ctx: ProbeContext) -> Fact:
    s = ctx.system
    fact = Fact("torch")
    torch_dir = ctx.facts["libraries"].value.get("torch_dir") or s.find_module_dir("torch")
    if not torch_dir:
        fact.value = {"installed": False}
        fact.sources.append("importlib.util.find_spec('torch')")
        return fact
    v: dict[str, Any] = {"installed": True, "dir": torch_dir}
    v.update(_static_torch(s, torch_dir))
    fact.sources.append(os.path.join(torch_dir, "version.py"))
    lib = os.path.join(torch_dir, "lib", "libtorch_cuda.so")
    if s.exists(lib):
        dyn = s.elf_dynamic(lib)
        origin = os.path.dirname(lib)
        from .elf import expand_origin

        v["libtorch_cuda"] = {"path": lib, "rpath": expand_origin(dyn.rpath, origin),
                              "runpath": expand_origin(dyn.runpath, origin),
                              "needed_cudnn": [n for n in dyn.needed if n.startswith("libcudnn")],
                              "error": dyn.error}
        fact.sources.append(f"{lib} ELF dynamic section")
    if v.get("cuda") is None and v.get("version"):
        v["build"] = "cpu"
    else:
        v["build"] = "cuda"
    drv = ctx.facts["driver"].value
    # import torch in a child only where it can tell more than version.py: a CUDA build
    if v["build"] == "cuda" or drv.get("present"):
        res = ctx.child("torch", "torch_probe", ("conv",) if ctx.run_conv else (), timeout=TORCH_TIMEOUT)
        staged = [ln for ln in res.lines if isinstance(ln, dict) and "stage" in ln]
        d = staged[-1] if staged else (res.data if isinstance(res.data, dict) else None)
        if d is None:
            fact.problem("import torch (child process)", res.error or "no output")
            v["child_error"] = res.error or "no output"
            v["child_stderr_tail"] = res.stderr_tail[-800:]
        else:
            for k, val in d.items():
                if k == "version" or k not in v or val is not None:
                    v[k] = val
            fact.sources.append("import torch in a child process (torch._C._cudnn, _cuda_getArchFlags, /proc/self/maps)")
            if d.get("stage") == "import" and res.error:
                # it died after printing its facts: during the one tiny conv
                v["conv_ok"] = False
                v["conv_crashed"] = res.error
                v["conv_error"] = f"the process was {res.error}: " + " | ".join(res.stderr_tail.strip().splitlines()[-3:])[:800]
    else:
        v["child_skipped"] = "CPU-only build and no NVIDIA driver: importing torch adds nothing"
    fact.value = v
    return fact


def probe_tensorflow(ctx: ProbeContext) -> Fact:
    """TensorFlow without importing it: build_info.py and the wheel's cudnn_version.h."""
    s = ctx.system
    fact = Fact("tensorflow")
    tf_dir = s.find_module_dir("tensorflow")
    if not tf_dir:
        fact.value = {"installed": False}
        return fact
    v: dict[str, Any] = {"installed": True, "dir": tf_dir}
    text = s.read_text(os.path.join(tf_dir, "python", "platform", "build_info.py")) or ""
    if text:
        fact.sources.append(os.path.join(tf_dir, "python/platform/build_info.py"))
    for key in ("cuda_version", "cudnn_version", "is_cuda_build"):
        m = re.search(rf"['\"]{key}['\"]\s*[:,]\s*['\"]?([\w.]+)", text)
        if m:
            v[key] = m.group(1)
    hdr = os.path.join(tf_dir, "include", "external", "cuda_cudnn", "include", "cudnn_version.h")
    htext = s.read_text(hdr)
    if htext:
        nums = {k: re.search(rf"#define\s+CUDNN_{k}\s+(\d+)", htext) for k in ("MAJOR", "MINOR", "PATCHLEVEL")}
        if all(nums.values()):
            v["cudnn_compiled"] = ".".join(m.group(1) for m in nums.values() if m)
            fact.sources.append(hdr)
    site = os.path.dirname(tf_dir)
    for name in s.listdir(site):
        m = re.fullmatch(r"tensorflow(?:[_-]\w+)?-([\w.]+)\.dist-info", name)
        if m and name.startswith("tensorflow-"):
            v["version"] = m.group(1)
    fact.value = v
    return fact


def probe_jax(ctx: ProbeContext) -> Fact:
    """JAX CUDA plugins (jax_cuda12_plugin / jax_cuda13_plugin) from their dist-info."""
    s = ctx.system
    fact = Fact("jax")
    plugins = []
    for site in s.site_packages():
        for name in s.listdir(site):
            m = re.fullmatch(r"jax_cuda(\d+)_plugin-([\w.]+)\.dist-info", name)
            if m:
                plugins.append({"cuda_major": int(m.group(1)), "version": m.group(2), "site": site})
    jax_dir = s.find_module_dir("jax")
    fact.value = {"installed": bool(jax_dir), "plugins": plugins}
    if plugins:
        fact.sources.append("jax_cuda*_plugin dist-info")
    return fact






def probe_triton(ctx: ProbeContext) -> Fact:
    """Triton (ships with CUDA builds of torch): its version from triton/__init__.py, not imported.
    convdoctor's own kernels (`convdoctor.kernels`, tuner candidates `triton:dw_`, `triton:wg_`,
    `triton:sc_`, `triton:fp_`) need it."""
    s = ctx.system
    fact = Fact("triton")
    d = s.find_module_dir("triton")
    if not d:
        fact.value = {"installed": False}
        fact.sources.append("importlib.util.find_spec('triton')")
        return fact
    init = os.path.join(d, "__init__.py")
    m = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", s.read_text(init) or "", re.M)
    fact.value = {"installed": True, "dir": d, "version": m.group(1) if m else None}
    fact.sources.append(init)
    return fact
