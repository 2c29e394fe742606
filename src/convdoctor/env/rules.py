"""Rules: pure functions from facts to findings.

Every rule has the signature `(facts: dict[str, Fact], data: RuleData) -> list[Finding]` and reads
only facts, never the machine. `RULES` is the ordered registry. Titles, fixes and source URLs come
from data/rules.json (ids are stable); compatibility tables come from data/compat.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from ..report import Finding
from .facts import Fact, parse_version

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class RuleData:
    rules: dict[str, dict[str, Any]]
    compat: dict[str, Any]


@lru_cache(maxsize=1)
def load_data() -> RuleData:
    rules = json.loads((DATA / "rules.json").read_text())["rules"]
    compat = json.loads((DATA / "compat.json").read_text())
    return RuleData({r["id"]: r for r in rules}, compat)


class _Safe(dict):  # str.format_map that leaves unknown {names} visible instead of raising
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def make(data: RuleData, rule_id: str, *, evidence: list[str] | tuple[str, ...] = (), layer: str | None = None,
         message: str | None = None, **fields: Any) -> Finding:
    r = data.rules[rule_id]
    vals = _Safe(fields)
    return Finding(
        id=rule_id, severity=r["severity"], title=r["title"].format_map(vals),
        message=message if message is not None else "",
        fix=r.get("fix", "").format_map(vals), evidence=tuple(evidence),
        sources=tuple(r.get("sources", ())), layer=layer,
        data={k: v for k, v in fields.items() if isinstance(v, (str, int, float, bool, type(None), list))},
    )


Rule = Callable[[dict[str, Fact], RuleData], list[Finding]]


def _v(facts: dict[str, Fact], name: str) -> dict[str, Any]:
    f = facts.get(name)
    return f.value if f is not None else {}


def _copies(facts: dict[str, Fact]) -> list[dict[str, Any]]:
    return list(_v(facts, "libraries").get("copies", []))


def _gpu_present(facts: dict[str, Fact]) -> bool:
    return bool(_v(facts, "gpus").get("count")) or bool(_v(facts, "driver").get("dev_nodes"))


def _vt(s: str | None) -> tuple[int, ...]:
    return parse_version(s) or ()


def _torch_cuda(facts: dict[str, Fact]) -> str | None:
    t = _v(facts, "torch")
    return t.get("cuda") if t.get("installed") else None


def _index_for(compat: dict[str, Any], cuda_driver: str | None) -> tuple[str, str] | None:
    """The newest PyTorch wheel index whose CUDA the driver supports."""
    rows = compat["torch_wheels"]["index_url_by_cuda"]["rows"]
    drv = _vt(cuda_driver)
    # minor-version compatibility: any runtime of the driver's CUDA major (or older) runs
    ok = [c for c in rows if not drv or _vt(c)[:1] <= drv[:1]]
    if not ok:
        return None
    best = max(ok, key=_vt)
    return best, rows[best]


def _torch_reinstall(facts: dict[str, Fact], data: RuleData, cuda: str | None = None) -> str:
    t = _v(facts, "torch")
    ver = (t.get("version") or "").split("+")[0]
    pick = None
    if cuda:
        url = data.compat["torch_wheels"]["index_url_by_cuda"]["rows"].get(cuda)
        pick = (cuda, url) if url else None
    if pick is None:
        pick = _index_for(data.compat, _v(facts, "driver").get("cuda_driver"))
    spec = f"torch=={ver}" if ver else "torch"
    if pick:
        return f"pip install --force-reinstall {spec} --index-url {pick[1]}   # CUDA {pick[0]} build"
    return f"pip install --force-reinstall {spec}   # a CUDA build from https://pytorch.org/get-started/locally/"


def _ld_without(environ: dict[str, str], drop: str) -> str:
    parts = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p and os.path.normpath(p) != os.path.normpath(drop)]
    return f"export LD_LIBRARY_PATH={':'.join(parts)}" if parts else "unset LD_LIBRARY_PATH"


# ------------------------------------------------------------------------------------------ rules
def rule_no_driver(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    d = _v(facts, "driver")
    if d.get("present"):
        return []
    ev = [f"/proc/driver/nvidia/version: {'absent' if d.get('kernel_module') is None else d['kernel_module']}",
          f"NVML: {d.get('nvml', {}).get('error', 'unavailable')}",
          f"libcuda.so.1: {d.get('libcuda', {}).get('error', 'unavailable')}"]
    return [make(data, "no-nvidia-driver", evidence=ev)]


def rule_visible(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    g = _v(facts, "gpus")
    if not g.get("count") or g.get("cuda_visible_devices") is None or g.get("visible"):
        return []
    cvd = g["cuda_visible_devices"]
    return [make(data, "no-visible-gpu", cvd=cvd, count=g["count"],
                 suggest=",".join(str(i) for i in range(g["count"])),
                 evidence=[f"CUDA_VISIBLE_DEVICES={cvd!r}", f"NVML sees {g['count']} GPU(s)"])]


def rule_driver_floor(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    d = _v(facts, "driver")
    cuda = _torch_cuda(facts)
    drv = d.get("version")
    if not cuda or not drv:
        return []
    major = cuda.split(".")[0]
    row = data.compat["driver_floor_by_cuda_major"]["rows"].get(major)
    if not row:
        return []
    floor = row["linux"]
    ev = [f"driver {drv} (from {'NVML' if d.get('nvml', {}).get('driver_version') else 'kernel module / libcuda'})",
          f"torch {_v(facts, 'torch').get('version')} uses CUDA runtime {cuda}",
          f"floor for CUDA {major}.x (minor-version compatibility): {floor}"]
    too_old = _vt(drv) < _vt(floor)
    cd = d.get("cuda_driver")
    if cd:
        ev.append(f"cuDriverGetVersion: CUDA {cd}")
        too_old = too_old or _vt(cd)[:1] < _vt(cuda)[:1]
    if not too_old:
        return []
    drv_major = (cd or "").split(".")[0] or "?"
    alt = _index_for(data.compat, cd)
    alt_fix = _torch_reinstall(facts, data, alt[0]) if alt else "see https://pytorch.org/get-started/previous-versions/"
    return [make(data, "driver-too-old", layer="torch", driver=drv, floor=floor, framework="torch", cuda=cuda,
                 branch=floor.split(".")[0], driver_cuda_major=drv_major, alt_fix=alt_fix, evidence=ev)]


def rule_nvml_mismatch(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    d = _v(facts, "driver")
    nv = d.get("nvml", {})
    kmod = d.get("kernel_module")
    user = nv.get("driver_version") or d.get("libcuda", {}).get("file_version")
    err = str(nv.get("error") or "")
    ev: list[str] = []
    if "mismatch" in err.lower():
        ev.append(f"NVML: {err}")
    if kmod and user and kmod != user:
        ev.append(f"kernel module {kmod} (/proc/driver/nvidia/version) != user-space driver {user}")
    lc = d.get("libcuda", {})
    if lc.get("rc") == 803:
        ev.append("cuDriverGetVersion/cuInit returned 803 (system has unsupported display driver / cuda driver combination)")
    if not ev:
        return []
    detail = f"kernel {kmod or '?'}, user space {user or '?'}"
    return [make(data, "nvml-driver-mismatch", detail=detail, user=user or "(the installed driver)", evidence=ev)]


def rule_cpu_only(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    t = _v(facts, "torch")
    if not t.get("installed") or t.get("build") != "cpu" or not _gpu_present(facts):
        return []
    return [make(data, "cpu-only-build", layer="torch", framework="torch", version=t.get("version"),
                 fix_cmd=_torch_reinstall(facts, data),
                 evidence=[f"torch.version.cuda is None ({t.get('dir')}/version.py)",
                           f"NVIDIA GPU present: {_v(facts, 'gpus').get('count') or 'device nodes ' + ','.join(_v(facts, 'driver').get('dev_nodes', []))}"])]


def rule_no_torch(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    t = facts.get("torch")
    if t is None or t.value.get("installed"):
        return []
    return [make(data, "no-torch")]


def rule_import_failed(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    t = _v(facts, "torch")
    err = t.get("import_error")
    if not err:
        return []
    return [make(data, "framework-import-failed", layer="torch", framework="torch", error=err.splitlines()[0][:200],
                 fix_cmd="Fix the library findings above first; if none, reinstall: " + _torch_reinstall(facts, data),
                 evidence=[f"python -c 'import torch' in a child: {err[:300]}"])]


def rule_conv_failed(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    t = _v(facts, "torch")
    if t.get("conv_ok") is not False:
        return []
    err = str(t.get("conv_error") or "unknown error")
    return [make(data, "framework-conv-failed", layer="torch", framework="torch", error=err.splitlines()[0][:200],
                 fix_cmd="Fix the cuDNN library findings of this report first (they explain this failure); "
                         "if there are none, run: convdoctor explain '<the error text>'",
                 evidence=[f"torch child: {err[:600]}"] + ([f"torch.backends.cudnn.version(): {t['cudnn_version_check_error'][:300]}"]
                                                          if t.get("cudnn_version_check_error") else []))]


def _loaded_cudnn(facts: dict[str, Fact]) -> tuple[list[dict[str, Any]], str]:
    """The libcudnn* copies torch loads: the mapped ones if a child really loaded them, else predicted."""
    r = _v(facts, "resolution")
    copies = _copies(facts)
    by_path = {c["path"]: c for c in copies}
    by_real = {c["realpath"]: c for c in copies if not c.get("same_file_as")}
    loaded = r.get("loaded") or []
    if loaded:
        out = []
        for p in loaded:
            c = by_path.get(p) or by_real.get(p)
            out.append(c or {"path": p, "realpath": p, "dir": os.path.dirname(p), "name": os.path.basename(p),
                             "family": "cudnn" if os.path.basename(p).startswith("libcudnn.so") else "cudnn-sub"})
        return out, "mapped"
    pred = r.get("predicted") or {}
    return [by_path[p["path"]] for p in pred.values() if p["path"] in by_path], "predicted"


def _real_dir(c: dict[str, Any]) -> str:
    return os.path.dirname(c.get("realpath") or c["path"])


def rule_shadowed(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    r = _v(facts, "resolution")
    own = r.get("own_dir")
    if not r.get("framework") or not own:
        return []
    copies = _copies(facts)
    own_by_name = {c["name"]: c for c in copies if c["dir"] == own}
    own_real = {os.path.dirname(c["realpath"]) for c in own_by_name.values()} | {own}
    loaded, how = _loaded_cudnn(facts)
    pred = r.get("predicted") or {}
    env = _v(facts, "environ")
    # the shim first, then copies whose version the library itself reported
    for c in sorted(loaded, key=lambda c: (c.get("family") != "cudnn", c.get("version_source") != "cudnnGetVersion")):
        if c["dir"] == own or _real_dir(c) in own_real:
            continue
        name = c.get("name") or os.path.basename(c["path"])
        mine = own_by_name.get(name)
        if mine is None:
            continue
        if mine.get("version") and c.get("version") == mine.get("version") and c.get("cuda_major") == mine.get("cuda_major"):
            continue  # an identical copy elsewhere is harmless
        p = pred.get(name, {})
        rule = p.get("rule") if p.get("dir") == c["dir"] else None
        via = p.get("via") or c.get("via", "")
        if rule is None:
            rule = (f"the process mapped it although {own} has the same soname"
                    + (f"; it is on {c.get('via')}" if c.get("via") else ""))
        if via == "LD_LIBRARY_PATH" or "LD_LIBRARY_PATH" in str(c.get("via")):
            fix = f"{_ld_without(env, c['dir'])}   # drop {c['dir']} from LD_LIBRARY_PATH"
        else:
            fix = (f"remove that cuDNN (dpkg -S {c['path']} names its package), or put torch's copy first: "
                   f"export LD_LIBRARY_PATH={own}:$LD_LIBRARY_PATH")
        ev = [f"{'mapped by a torch child process' if how == 'mapped' else 'predicted (ELF search rules)'}: {c['path']}"
              + (f" -> {c['realpath']}" if c.get("realpath") and c["realpath"] != c["path"] else ""),
              f"torch's own copy: {mine['path']} (cuDNN {mine.get('version', '?')}, CUDA {mine.get('cuda_major', '?')})",
              f"search rule: {rule}"]
        return [make(data, "cudnn-shadowed", layer="torch", framework="torch", name=name, shadow_dir=c["dir"],
                     shadow_path=c["path"], shadow_version=c.get("version", "?"), shadow_cuda=c.get("cuda_major", "?"),
                     own_dir=own, own_version=mine.get("version", "?"), own_cuda=mine.get("cuda_major", "?"),
                     rule=rule, fix_cmd=fix, evidence=ev)]
    return []


def rule_mixed(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    loaded, how = _loaded_cudnn(facts)
    copies = _copies(facts)
    ev: list[str] = []
    dirs: list[str] = []
    if loaded:
        for c in loaded:
            d = _real_dir(c)
            if d not in dirs:
                dirs.append(d)
        if len(dirs) > 1:
            ev += [f"{'mapped' if how == 'mapped' else 'predicted'}: {c['path']} (cuDNN {c.get('version', '?')})" for c in loaded]
    # one directory whose shim and sub-libraries report different versions (files copied over each other)
    by_dir: dict[str, set[str]] = {}
    for c in copies:
        if c["family"] in ("cudnn", "cudnn-sub") and c.get("version") and c.get("version_source") == "cudnnGetVersion":
            by_dir.setdefault(c["dir"], set()).add(c["version"])
    for d, vs in by_dir.items():
        if len(vs) > 1:
            ev.append(f"{d} holds cuDNN libraries of versions {', '.join(sorted(vs))}")
            if d not in dirs:
                dirs.append(d)
    if len(dirs) < 2 and not any("holds cuDNN libraries" in e for e in ev):
        return []
    env = _v(facts, "environ")
    r = _v(facts, "resolution")
    own = r.get("own_dir")
    foreign = [d for d in dirs if d != own]
    ld = [d for d in foreign if any(os.path.normpath(p) == d for p in env.get("LD_LIBRARY_PATH", "").split(":") if p)]
    if ld:
        fix = f"{_ld_without(env, ld[0])}   # so every cuDNN sub-library comes from {own or 'one install'}"
    else:
        fix = "Keep exactly one cuDNN install on the search path: pip uninstall -y nvidia-cudnn-cu12 nvidia-cudnn-cu13, then reinstall the one your framework pins."
    return [make(data, "cudnn-sublibraries-mixed", layer="torch" if r.get("framework") else None,
                 dirs=" + ".join(dirs), fix_cmd=fix, evidence=ev)]


def _runtime_copy(facts: dict[str, Fact]) -> dict[str, Any] | None:
    loaded, _ = _loaded_cudnn(facts)
    for fam in ("cudnn", "cudnn-sub"):
        for c in loaded:
            if c.get("family") == fam and (c.get("cuda_major") or c.get("version")):
                return c
    return None


def _cudnn_fix(facts: dict[str, Fact], data: RuleData, cuda_major: str, version: str | None) -> str:
    wheel = data.compat["pip_cudnn_wheel"]["rows"].get(cuda_major, f"nvidia-cudnn-cu{cuda_major}")
    pin = f"=={version}.*" if version else ""
    return f"pip install --force-reinstall \"{wheel}{pin}\""


def rule_cudnn_versions(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    out: list[Finding] = []
    t = _v(facts, "torch")
    comp, run = t.get("cudnn_compiled"), t.get("cudnn_runtime")
    cuda = t.get("cuda")
    if comp and run:
        c, r = _vt(comp), _vt(run)
        if c[:1] != r[:1] or r[:2] < c[:2]:
            loaded, how = _loaded_cudnn(facts)
            rc = next((x for x in loaded if x.get("version") == run and x.get("version_source") == "cudnnGetVersion"),
                      None) or _runtime_copy(facts)
            ev = [f"torch._C._cudnn.getCompileVersion() = {comp}", f"torch._C._cudnn.getRuntimeVersion() = {run}"]
            if t.get("cudnn_version_check_error"):
                ev.append(f"torch.backends.cudnn.version(): {t['cudnn_version_check_error'][:200]}")
            fix = _cudnn_fix(facts, data, (cuda or "12").split(".")[0], ".".join(comp.split(".")[:2]))
            if rc:
                ev.append(f"{how}: {rc['path']} reports cuDNN {rc.get('version', '?')} (via {rc.get('via', '?')})")
                if "LD_LIBRARY_PATH" in str(rc.get("via")):
                    fix = _ld_without(_v(facts, "environ"), rc["dir"]) + f"   # drop {rc['dir']} from LD_LIBRARY_PATH"
            out.append(make(data, "cudnn-version-mismatch", layer="torch", framework="torch", compiled=comp, runtime=run,
                            fix_cmd=fix, evidence=ev))
    tf = _v(facts, "tensorflow")
    if tf.get("installed") and (tf.get("cudnn_compiled") or tf.get("cudnn_version")):
        # truthy: the condition above checked the same expression
        comp = cast(str, tf.get("cudnn_compiled") or tf.get("cudnn_version"))
        major = comp.split(".")[0]
        rc = _generic_winner(facts, f"libcudnn.so.{major}")
        if rc and rc.get("version"):
            c, r = _vt(comp), _vt(rc["version"])
            if c[:1] != r[:1] or r[:2] < c[:2]:
                out.append(make(data, "cudnn-version-mismatch", layer="tensorflow", framework=f"TensorFlow {tf.get('version', '')}".strip(),
                                compiled=comp, runtime=rc["version"],
                                fix_cmd=(_ld_without(_v(facts, "environ"), rc["dir"]) + f"   # drop {rc['dir']}; then: pip install \"tensorflow[and-cuda]=={tf.get('version', '')}\""
                                         if "LD_LIBRARY_PATH" in rc.get("via", "") else f"pip install \"tensorflow[and-cuda]=={tf.get('version', '')}\""),
                                evidence=[f"TensorFlow compiled with cuDNN {comp} (cudnn_version.h / build_info.py)",
                                          f"first libcudnn.so.{major} on its search path: {rc['path']} via {rc.get('via')} (TF uses DT_RUNPATH: LD_LIBRARY_PATH is searched first)",
                                          f"that copy reports cuDNN {rc['version']}"]))
    jx = _v(facts, "jax")
    for p in jx.get("plugins", []):
        need = data.compat["jax_cudnn_min"]["rows"].get(f"cuda{p['cuda_major']}", {}).get("min_cudnn")
        rc = _generic_winner(facts, "libcudnn.so.9")
        if need and rc and rc.get("version") and _vt(rc["version"]) < _vt(need):
            fix = _cudnn_fix(facts, data, str(p["cuda_major"]), None)
            if "LD_LIBRARY_PATH" in str(rc.get("via")):
                fix = _ld_without(_v(facts, "environ"), rc["dir"]) + f"   # drop {rc['dir']} from LD_LIBRARY_PATH"
            out.append(make(data, "cudnn-version-mismatch", layer="jax", framework=f"jax_cuda{p['cuda_major']}_plugin {p['version']}",
                            compiled=f"(needs) >= {need}", runtime=rc["version"], fix_cmd=fix,
                            evidence=[f"jax_cuda{p['cuda_major']}_plugin needs cuDNN >= {need}", f"first libcudnn.so.9: {rc['path']} ({rc['version']})"]))
    return out


def _generic_winner(facts: dict[str, Fact], soname: str) -> dict[str, Any] | None:
    """First copy of `soname` in plain search order (LD_LIBRARY_PATH, pip dirs, caches), as a RUNPATH user sees it."""
    for c in _copies(facts):
        if c["name"] == soname:
            return c
    return None


def rule_cudnn_cuda_major(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    cuda = _torch_cuda(facts)
    if not cuda:
        return []
    loaded, how = _loaded_cudnn(facts)
    for c in sorted(loaded, key=lambda c: not c.get("cudart_version")):  # measured CUDA majors first
        cm = c.get("cuda_major")
        if cm and str(cm) != cuda.split(".")[0]:
            major = cuda.split(".")[0]
            other = "nvidia-cudnn-cu12" if major == "13" else "nvidia-cudnn-cu13"
            fix = (f"pip uninstall -y {other} && " + _cudnn_fix(facts, data, major, None)
                   + f"   # restores the cu{major} cuDNN torch expects")
            if "LD_LIBRARY_PATH" in str(c.get("via")):
                fix = _ld_without(_v(facts, "environ"), c["dir"]) + f"   # drop {c['dir']} from LD_LIBRARY_PATH"
            return [make(data, "cudnn-cuda-major-mismatch", layer="torch", framework="torch", version=c.get("version", "?"),
                         path=c["path"], cudnn_cuda=cm, cuda=cuda, fix_cmd=fix,
                         evidence=[f"{how}: {c['path']}", f"cudnnGetCudartVersion() = {c.get('cudart_version', '?')} -> CUDA {cm}"
                                   if c.get("cudart_version") else f"CUDA {cm} from {c.get('cuda_major_source', 'the library')}",
                                   f"torch.version.cuda = {cuda}"])]
    return []


def rule_cudnn_not_found(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    t = _v(facts, "torch")
    if not t.get("installed") or t.get("build") != "cuda":
        return []
    needed = (t.get("libtorch_cuda") or {}).get("needed_cudnn") or []
    if not needed:
        return []
    if any(c["name"] == needed[0] for c in _copies(facts)) or t.get("cudnn_runtime"):
        return []
    cuda = (t.get("cuda") or "12").split(".")[0]
    return [make(data, "cudnn-not-found", layer="torch", framework="torch", compiled=t.get("cudnn_compiled") or needed[0],
                 major=needed[0].rsplit(".", 1)[-1], fix_cmd=_cudnn_fix(facts, data, cuda, None),
                 evidence=[f"libtorch_cuda.so needs {needed[0]}", "no copy in: " + ", ".join(
                     d["dir"] for d in _v(facts, "libraries").get("search_dirs", []) if d.get("exists"))[:600]])]


def _cc_supported(cc: str, arch_list: list[str]) -> bool:
    maj, mnr = (int(x) for x in cc.split("."))
    for a in arch_list:
        kind, _, num = a.partition("_")
        digits = "".join(ch for ch in num if ch.isdigit())
        if len(digits) < 2:
            continue
        am, an = int(digits[:-1]), int(digits[-1])
        if kind == "sm" and am == maj and an <= mnr and not num.endswith("a"):
            return True
        if kind == "sm" and am == maj and an == mnr:
            return True
        if kind == "compute" and (am, an) <= (maj, mnr):
            return True
    return False


def rule_arch(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    t = _v(facts, "torch")
    arch = t.get("arch_list") or []
    out: list[Finding] = []
    if not arch:
        return out
    for d in _v(facts, "gpus").get("devices", []):
        cc = d.get("cc")
        if not cc or _cc_supported(cc, arch):
            continue
        out.append(make(data, "arch-not-in-build", layer="torch", framework="torch", version=t.get("version"),
                        gpu=d.get("name", f"GPU {d.get('index')}"), cc=cc.replace(".", ""), arch_list=" ".join(arch),
                        fix_cmd="install a torch build that lists this architecture: pip install \"torch<2.8\" --index-url https://download.pytorch.org/whl/cu126   # last wheels with sm_50/sm_60"
                        if _vt(cc) < (7, 0) else _torch_reinstall(facts, data),
                        evidence=[f"NVML: GPU {d.get('index')} compute capability {cc}", f"torch._C._cuda_getArchFlags(): {' '.join(arch)}"]))
    return out


def rule_cudnn_911_old_gpu(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    t = _v(facts, "torch")
    ver = t.get("cudnn_runtime")
    src = "torch._C._cudnn.getRuntimeVersion()"
    if not ver:
        rc = _runtime_copy(facts) or _generic_winner(facts, "libcudnn.so.9")
        ver = rc.get("version") if rc else None
        src = rc["path"] if rc else ""
    row = data.compat["cudnn_min_cc"]["rows"][0]
    if not ver or _vt(ver) < _vt(row["cudnn_from"]):
        return []
    out = []
    for d in _v(facts, "gpus").get("devices", []):
        cc = d.get("cc")
        if cc and _vt(cc) < _vt(row["min_cc"]):
            out.append(make(data, "cudnn-911-old-gpu", version=ver, gpu=d.get("name", "?"), cc=cc.replace(".", ""),
                            fix_cmd="pip install \"torch<2.11\" \"nvidia-cudnn-cu12<9.11\" --index-url https://download.pytorch.org/whl/cu126   # cuDNN 9.10 and a torch that still builds sm_" + cc.replace(".", ""),
                            evidence=[f"cuDNN {ver} ({src})", f"GPU {d.get('index')} {d.get('name')}: compute capability {cc}"]))
    return out


_THROTTLE_BITS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown",
                  0x40: "HW thermal slowdown", 0x80: "HW power brake"}


def rule_throttle(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    out = []
    for d in _v(facts, "gpus").get("devices", []):
        mask = d.get("clock_event_mask")
        if not mask:
            continue
        reasons = [name for bit, name in _THROTTLE_BITS.items() if mask & bit]
        if reasons:
            out.append(make(data, "gpu-throttling", index=d.get("index"), gpu=d.get("name", "?"), reasons=", ".join(reasons),
                            evidence=[f"nvmlDeviceGetCurrentClocksEventReasons = {mask:#x}",
                                      f"SM clock {d.get('sm_clock_mhz', '?')} of max {d.get('sm_clock_max_mhz', '?')} MHz, {d.get('temperature_c', '?')} C"]))
    return out


def rule_ecc(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    return [make(data, "gpu-ecc-errors", index=d.get("index"), gpu=d.get("name", "?"), count=d["ecc_uncorrected_volatile"],
                 evidence=[f"nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE) = {d['ecc_uncorrected_volatile']}"])
            for d in _v(facts, "gpus").get("devices", []) if d.get("ecc_uncorrected_volatile")]


def _needed_cuda_major(facts: dict[str, Fact]) -> str | None:
    cuda = _torch_cuda(facts)
    if cuda:
        return cuda.split(".")[0]
    for c in _copies(facts):
        if c["family"] == "cudnn" and c.get("cuda_major"):
            return str(c["cuda_major"])
    return None


def _missing(facts: dict[str, Fact], data: RuleData, family: str, rid: str, wheel12: str, wheel13: str) -> list[Finding]:
    major = _needed_cuda_major(facts)
    if not major or not _gpu_present(facts) and not _torch_cuda(facts):
        return []
    if not any(c["family"] == "cudnn" for c in _copies(facts)):
        return []
    if any(c["family"] == family and str(c.get("cuda_major")) == major for c in _copies(facts)):
        return []
    wheel = wheel12 if major == "12" else wheel13 if major == "13" else f"{wheel12.rsplit('-', 1)[0]}-cu{major}"
    searched = [d["dir"] for d in _v(facts, "libraries").get("search_dirs", []) if d.get("exists")]
    return [make(data, rid, major=major, fix_cmd=f"pip install \"{wheel}\"",
                 evidence=[f"CUDA {major} is needed ({'torch.version.cuda' if _torch_cuda(facts) else 'cuDNN build'})",
                           f"no lib{family}.so.{major} in: {', '.join(searched)[:600]}"])]


def rule_missing_nvrtc(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    return _missing(facts, data, "nvrtc", "missing-nvrtc", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc==13.*")


def rule_missing_cublaslt(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    return _missing(facts, data, "cublasLt", "missing-cublaslt", "nvidia-cublas-cu12", "nvidia-cublas==13.*")


def rule_could_not_check(facts: dict[str, Fact], data: RuleData) -> list[Finding]:
    out = []
    driver_absent = not _v(facts, "driver").get("present")
    for f in facts.values():
        for p in f.problems:
            if driver_absent and f.name == "driver":
                continue
            out.append(make(data, "could-not-check", layer=f.name, what=p.what, why=p.why, evidence=[f"probe {f.name}"]))
    return out


RULES: tuple[tuple[str, Rule], ...] = (
    ("no-nvidia-driver", rule_no_driver),
    ("no-visible-gpu", rule_visible),
    ("driver-too-old", rule_driver_floor),
    ("nvml-driver-mismatch", rule_nvml_mismatch),
    ("cpu-only-build", rule_cpu_only),
    ("no-torch", rule_no_torch),
    ("framework-import-failed", rule_import_failed),
    ("framework-conv-failed", rule_conv_failed),
    ("cudnn-not-found", rule_cudnn_not_found),
    ("cudnn-version-mismatch", rule_cudnn_versions),
    ("cudnn-cuda-major-mismatch", rule_cudnn_cuda_major),
    ("cudnn-shadowed", rule_shadowed),
    ("cudnn-sublibraries-mixed", rule_mixed),
    ("arch-not-in-build", rule_arch),
    ("cudnn-911-old-gpu", rule_cudnn_911_old_gpu),
    ("gpu-throttling", rule_throttle),
    ("gpu-ecc-errors", rule_ecc),
    ("missing-nvrtc", rule_missing_nvrtc),
    ("missing-cublaslt", rule_missing_cublaslt),
    ("could-not-check", rule_could_not_check),
)


def apply_rules(facts: dict[str, Fact], data: RuleData | None = None) -> list[Finding]:
    data = data or load_data()
    out: list[Finding] = []
    for name, rule in RULES:
        try:
            out.extend(rule(facts, data))
        except Exception as exc:  # noqa: BLE001 - a rule bug becomes a visible finding, not a crash
            out.append(make(data, "could-not-check", layer="rules", what=f"rule {name}", why=f"{type(exc).__name__}: {exc}"))
    return out
