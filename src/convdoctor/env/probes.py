"""Probes: small functions that read one part of the machine and return a `Fact`.

Every probe has the signature `(ctx: ProbeContext) -> Fact`, never raises (the runner turns an
unexpected exception into a problem on the fact) and bounds its child processes with timeouts.
`PROBES` is the ordered registry; later probes may read earlier facts through `ctx.facts`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .context import DEFAULT_DIRS, TORCH_TIMEOUT, Probe, ProbeContext
from .facts import Fact, cuda_int_to_str, cudnn_int_to_str
from .frameworks import _static_torch, probe_jax, probe_tensorflow, probe_torch, probe_triton
from .resolve import probe_resolution
from .system import System

ENV_PREFIXES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "CUDA_", "CUDNN_", "TORCH_CUDNN_", "TORCH_CUDA_",
                "PYTORCH_", "TF_", "XLA_", "NVIDIA_", "CONDA_PREFIX", "NCCL_DEBUG")
# TF_ is TensorFlow's prefix and Terraform's: Terraform's variables are no framework setting
# (https://developer.hashicorp.com/terraform/cli/config/environment-variables)
TERRAFORM_PREFIXES = ("TF_LOG", "TF_INPUT", "TF_VAR_", "TF_CLI_", "TF_DATA_DIR", "TF_WORKSPACE",
                      "TF_IN_AUTOMATION", "TF_REGISTRY_", "TF_STATE_PERSIST_INTERVAL", "TF_PLUGIN_",
                      "TF_IGNORE", "TF_TOKEN_", "TF_APPEND_USER_AGENT", "TF_REATTACH_PROVIDERS")
# libraries we track, by family; the soname is "<base>.so.<major>"
LIB_RE = re.compile(r"^(libcudnn(?:_[a-z_]+)?|libcudart|libcublasLt|libcublas|libnvrtc)\.so\.(\d+)((?:\.\d+)*)$")
FAMILY = {"libcudart": "cudart", "libcublas": "cublas", "libcublasLt": "cublasLt", "libnvrtc": "nvrtc"}
# cuDNN libraries whose version we read by loading them (the engines libraries are huge and skipped)
CUDNN_LOADABLE = ("libcudnn", "libcudnn_graph", "libcudnn_ops_infer")  # others would report their dependency's version

LIBINFO_TIMEOUT = 15.0
DRIVER_TIMEOUT = 15.0




# ---------------------------------------------------------------- environment variables
def probe_environ(ctx: ProbeContext) -> Fact:
    env = ctx.system.environ
    fact = Fact("environ", sources=["process environment"])
    fact.value = {k: v for k, v in sorted(env.items())
                  if k.startswith(ENV_PREFIXES) and not k.startswith(TERRAFORM_PREFIXES)}
    return fact


# ---------------------------------------------------------------- host
def probe_host(ctx: ProbeContext) -> Fact:
    """OS, Python, host name, time and convdoctor's version: what `env --compare` lines up."""
    return Fact("host", value=ctx.system.platform_info(),
                sources=["platform.uname()", "/etc/os-release", "socket.gethostname()"])


# ---------------------------------------------------------------- driver
_KMOD_RE = re.compile(r"Kernel Module(?: for [\w-]+)?\s+(\d+\.\d+(?:\.\d+)?)")


def probe_driver(ctx: ProbeContext) -> Fact:
    s = ctx.system
    fact = Fact("driver")
    v: dict[str, Any] = {}
    text = s.read_text("/proc/driver/nvidia/version")
    if text is not None:
        fact.sources.append("/proc/driver/nvidia/version")
        m = _KMOD_RE.search(text)
        v["kernel_module"] = m.group(1) if m else None
        v["kernel_module_line"] = text.strip().splitlines()[0][:200] if text.strip() else ""
    elif s.exists("/proc/driver/nvidia/version"):
        fact.problem("/proc/driver/nvidia/version", s.read_error("/proc/driver/nvidia/version") or "unreadable")
    v["dev_nodes"] = [n for n in s.listdir("/dev") if re.fullmatch(r"nvidia\d+", n)]
    res = ctx.child("driver", "driver", timeout=DRIVER_TIMEOUT)
    if res.error or not isinstance(res.data, dict):
        fact.problem("NVML and libcuda.so.1 (child process)", res.error or "no output")
        v["nvml"] = {"ok": False, "error": res.error or "no output"}
        v["libcuda"] = {"ok": False, "error": res.error or "no output"}
    else:
        v["nvml"] = res.data.get("nvml", {})
        v["libcuda"] = res.data.get("libcuda", {})
        fact.sources += ["NVML (nvidia-ml-py)", "libcuda.so.1 cuDriverGetVersion (ctypes)"]
    lc = v["libcuda"]
    if lc.get("path"):
        real = s.realpath(lc["path"])
        m = re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", real)
        lc["file_version"] = m.group(1) if m else None
    if lc.get("cuda_driver_version"):
        lc["cuda_driver"] = cuda_int_to_str(lc["cuda_driver_version"])
    nv = v["nvml"]
    if nv.get("cuda_driver_version"):
        nv["cuda_driver"] = cuda_int_to_str(nv["cuda_driver_version"])
    v["user_space"] = nv.get("driver_version") or lc.get("file_version")
    v["version"] = v["user_space"] or v.get("kernel_module")
    v["cuda_driver"] = nv.get("cuda_driver") or lc.get("cuda_driver")
    v["present"] = bool(v.get("kernel_module") or nv.get("ok") or lc.get("ok") or v["dev_nodes"])
    fact.value = v
    return fact


# ---------------------------------------------------------------- GPUs
def probe_gpus(ctx: ProbeContext) -> Fact:
    drv = ctx.facts["driver"].value
    fact = Fact("gpus", sources=["NVML (nvidia-ml-py)"])
    nv = drv.get("nvml", {})
    devices = list(nv.get("devices") or [])
    cvd = ctx.system.environ.get("CUDA_VISIBLE_DEVICES")
    fact.value = {"count": len(devices), "devices": devices, "cuda_visible_devices": cvd,
                  "visible": visible_indices(cvd, devices)}
    return fact


def visible_indices(cvd: str | None, devices: list[dict[str, Any]]) -> list[int]:
    """The NVML indices CUDA will see: CUDA stops parsing at the first invalid entry."""
    if cvd is None:
        return [d.get("index", i) for i, d in enumerate(devices)]
    out: list[int] = []
    for raw in cvd.split(","):
        tok = raw.strip()
        if not tok:
            break
        if re.fullmatch(r"\d+", tok):
            i = int(tok)
            if i >= len(devices) or i in out:
                break
            out.append(i)
        elif tok.startswith(("GPU-", "MIG-")):
            hit = [d.get("index", i) for i, d in enumerate(devices) if str(d.get("uuid", "")).startswith(tok)]
            if len(hit) != 1:
                break
            out.append(hit[0])
        else:
            break
    return out


# ---------------------------------------------------------------- library copies on the search paths
def _ld_cache_dirs(s: System, fact: Fact) -> list[str]:
    """Directories of the tracked libraries listed in /etc/ld.so.cache, in cache order."""
    path = "/etc/ld.so.cache"
    try:
        with open(s.host(path), "rb") as f:
            data = f.read(8 << 20)
    except FileNotFoundError:
        return []
    except OSError as exc:
        fact.problem(path, exc.strerror or type(exc).__name__)
        return []
    fact.sources.append(path)
    dirs: list[str] = []
    for m in re.finditer(rb"(/[\w./+-]+)/(lib(?:cudnn|cudart|cublas|nvrtc)[\w.]*\.so[\w.]*)", data):
        d = m.group(1).decode("utf-8", "replace")
        if d not in dirs:
            dirs.append(d)
    return dirs


def search_dirs(ctx: ProbeContext, torch_dir: str | None) -> list[tuple[str, str]]:
    """Every directory a loader might take our libraries from, labelled with why it is searched."""
    s = ctx.system
    env = s.environ
    out: list[tuple[str, str]] = []

    def add(d: str | None, via: str) -> None:
        if d:
            d = os.path.normpath(d)
            if not any(d == x for x, _ in out):
                out.append((d, via))

    for i, d in enumerate(p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p):
        add(d, f"LD_LIBRARY_PATH[{i}]")
    sites = s.site_packages()
    if torch_dir:
        site = os.path.dirname(torch_dir)
        if site not in sites:
            sites = [site, *sites]
        add(os.path.join(torch_dir, "lib"), "torch/lib")
    for site in sites:
        nv = os.path.join(site, "nvidia")
        for sub in s.listdir(nv):
            add(os.path.join(nv, sub, "lib"), f"pip wheel ({site})")
    if env.get("CONDA_PREFIX"):
        add(os.path.join(env["CONDA_PREFIX"], "lib"), "conda (CONDA_PREFIX)")
    if env.get("CUDNN_PATH"):
        add(os.path.join(env["CUDNN_PATH"], "lib"), "CUDNN_PATH")
        add(os.path.join(env["CUDNN_PATH"], "lib64"), "CUDNN_PATH")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            add(os.path.join(env[var], "lib64"), var)
    add("/usr/local/cuda/lib64", "/usr/local/cuda")
    return out


def _dist_owners(s: System, sites: list[str], fact: Fact) -> dict[str, tuple[str, str]]:
    """Map library path -> (pip distribution, version) from the RECORD files of nvidia-* wheels."""
    owners: dict[str, tuple[str, str]] = {}
    for site in sites:
        for name in s.listdir(site):
            m = re.fullmatch(r"(nvidia_[\w]+?)-([\w.+]+)\.dist-info", name)
            if not m:
                continue
            record = s.read_text(os.path.join(site, name, "RECORD"))
            if record is None:
                continue
            dist = m.group(1).replace("_", "-")
            for line in record.splitlines():
                rel = line.split(",", 1)[0]
                if ".so" in rel:
                    owners[os.path.normpath(os.path.join(site, rel))] = (dist, m.group(2))
    return owners


def probe_libraries(ctx: ProbeContext) -> Fact:
    s = ctx.system
    fact = Fact("libraries")
    torch_dir = s.find_module_dir("torch")
    dirs = search_dirs(ctx, torch_dir)
    cache_dirs = _ld_cache_dirs(s, fact)
    for d in cache_dirs:
        if not any(d == x for x, _ in dirs):
            dirs.append((d, "ld.so.cache"))
    for d in DEFAULT_DIRS:
        if not any(d == x for x, _ in dirs):
            dirs.append((d, "default dirs"))
    sites = sorted({os.path.dirname(os.path.dirname(os.path.dirname(d))) for d, via in dirs if via.startswith("pip wheel")})
    owners = _dist_owners(s, sites, fact)
    copies: list[dict[str, Any]] = []
    seen_real: dict[str, str] = {}
    for d, via in dirs:
        names = s.listdir(d)
        if not names:
            if s.exists(d) and not s.is_dir(d):
                continue
            if s.exists(d) and s.read_error(d) is None and not os.access(s.host(d), os.R_OK | os.X_OK):
                fact.problem(d, "directory not readable")
            continue
        groups: dict[tuple[str, str], list[str]] = {}
        for n in names:
            m = LIB_RE.match(n)
            if m:
                groups.setdefault((m.group(1), m.group(2)), []).append(n)
        for (base, major), files in sorted(groups.items()):
            soname = f"{base}.so.{major}"
            name = soname if soname in files else sorted(files, key=len)[0]
            path = os.path.join(d, name)
            real = s.realpath(path)
            m = LIB_RE.match(os.path.basename(real))
            file_version = (major + m.group(3)) if m and m.group(3) else None
            family = "cudnn" if base == "libcudnn" else ("cudnn-sub" if base.startswith("libcudnn_") else FAMILY.get(base, base))
            c: dict[str, Any] = {"name": soname, "base": base, "family": family, "major": int(major),
                                 "path": path, "realpath": real, "dir": d, "via": via,
                                 "file_version": file_version}
            own = owners.get(os.path.normpath(path)) or owners.get(os.path.normpath(real))
            if own:
                c["pip_dist"], c["pip_version"] = own
            if family in ("cudart", "cublas", "cublasLt", "nvrtc"):
                c["cuda_major"] = int(major)
                c["version"] = file_version or (own[1] if own else None)
            if family == "cudnn":
                dyn = s.elf_dynamic(path)
                from .elf import expand_origin

                c["elf_rpath"] = expand_origin(dyn.rpath, d)
                c["elf_runpath"] = expand_origin(dyn.runpath, d)
            if real in seen_real:
                c["same_file_as"] = seen_real[real]
            else:
                seen_real[real] = path
            copies.append(c)
    fact.value = {"search_dirs": [{"dir": d, "via": via, "exists": s.is_dir(d)} for d, via in dirs],
                  "ld_cache_dirs": cache_dirs, "copies": copies, "torch_dir": torch_dir}
    fact.sources.append("directory listings of the search dirs")
    return fact


def probe_cudnn_versions(ctx: ProbeContext) -> Fact:
    """Load each cuDNN copy in a child (per directory, LD_LIBRARY_PATH=that dir) and read its version."""
    s = ctx.system
    fact = Fact("cudnn_versions", sources=["cudnnGetVersion / cudnnGetCudartVersion in a child process"])
    copies = ctx.facts["libraries"].value.get("copies", [])
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for c in copies:
        if c["family"] in ("cudnn", "cudnn-sub") and c["base"] in CUDNN_LOADABLE and not c.get("same_file_as"):
            by_dir.setdefault(c["dir"], []).append(c)
    results: dict[str, dict[str, Any]] = {}
    if not s.subprocess_ok:
        if by_dir:
            fact.problem("cuDNN library versions", "subprocesses disabled (--no-subprocess)")
    else:
        def run_dir(d: str, items: list[dict[str, Any]]) -> None:
            # the main library first would load the sub-libraries through the shim; load graph first
            todo = sorted((c["path"] for c in items), key=lambda p: ("libcudnn.so" in p, p))
            env = dict(s.environ)
            env["LD_LIBRARY_PATH"] = d  # sibling sub-libraries of THIS install win
            while todo:
                res = s.child("libinfo", tuple(todo), timeout=LIBINFO_TIMEOUT, env=env)
                started = [ln["start"] for ln in res.lines if "start" in ln]
                for ln in res.lines:
                    if "result" in ln:
                        results[ln["result"]["path"]] = ln["result"]
                done = {p for p in todo if p in results}
                if res.error is None and len(done) == len(todo):
                    break
                crashed = started[-1] if started and started[-1] not in results else (todo[0] if not started else None)
                if crashed is None:
                    for p in todo:
                        if p not in results:
                            results[p] = {"path": p, "load_error": res.error or "no result"}
                    break
                results[crashed] = {"path": crashed, "crashed": res.error or f"exit code {res.returncode}"}
                todo = [p for p in todo if p not in results]
        futs = []
        pool = ctx.pool
        for d, items in by_dir.items():
            if pool is not None:
                futs.append(pool.submit(run_dir, d, items))
            else:
                run_dir(d, items)
        for f in futs:
            f.result()
    # fold results into the copies: version + CUDA major for each cuDNN copy
    for c in copies:
        if c["family"] not in ("cudnn", "cudnn-sub"):
            continue
        r = results.get(c["path"])
        if r is None and c.get("same_file_as"):
            r = results.get(c["same_file_as"])
        if r:
            if r.get("cudnn_version"):
                c["version"] = cudnn_int_to_str(r["cudnn_version"])
                c["version_source"] = "cudnnGetVersion"
            if r.get("cudart_version"):
                c["cudart_version"] = r["cudart_version"]
                c["cuda_major"] = r["cudart_version"] // 1000
            if r.get("mapped_cudnn"):
                c["loaded_with"] = r["mapped_cudnn"]
            if r.get("crashed"):
                c["load_error"] = f"crashed while loading: {r['crashed']}"
                fact.problem(f"{c['name']} at {c['path']}", f"the library crashed the child process on load ({r['crashed']})")
            elif r.get("load_error"):
                c["load_error"] = r["load_error"]
                fact.problem(f"{c['name']} at {c['path']}", f"could not be loaded: {r['load_error'][:300]}")
        if not c.get("version"):
            if c.get("file_version") and c["file_version"].count(".") >= 2:
                c["version"], c["version_source"] = c["file_version"], "file name"
            elif c.get("pip_version"):
                c["version"], c["version_source"] = ".".join(c["pip_version"].split(".")[:3]), f"pip {c['pip_dist']}"
        if not c.get("cuda_major") and c.get("pip_dist"):
            m = re.search(r"-cu(\d+)$", c["pip_dist"])
            if m:
                c["cuda_major"], c["cuda_major_source"] = int(m.group(1)), f"pip {c['pip_dist']}"
    # sub-libraries that cannot report their own version: the version of the install they sit in, marked
    known: dict[str, set[tuple[str, int | None]]] = {}
    for c in copies:
        if c["family"] in ("cudnn", "cudnn-sub") and c.get("version_source") == "cudnnGetVersion":
            known.setdefault(c["dir"], set()).add((c["version"], c.get("cuda_major")))
    for c in copies:
        if c["family"] != "cudnn-sub" or len(known.get(c["dir"], ())) != 1:
            continue
        (ver, cm), = known[c["dir"]]
        if not c.get("version"):
            c["version"], c["version_source"] = ver, "inferred: same directory as a library that reported it"
        if cm and not c.get("cuda_major") and c.get("version") == ver:
            c["cuda_major"], c["cuda_major_source"] = cm, "inferred: same directory as a library that reported it"
    fact.value = {"results": results}
    return fact


def run_probes(system: System, *, run_conv: bool = True, probes: tuple[tuple[str, Probe], ...] | None = None,
               on_probe: Callable[[str], None] | None = None) -> dict[str, Fact]:
    """Run every probe in order; child processes that do not depend on other facts start at once."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        ctx = ProbeContext(system=system, run_conv=run_conv, pool=pool)
        if system.subprocess_ok:
            ctx.start("driver", "driver", timeout=DRIVER_TIMEOUT)
            if _torch_child_wanted(system):
                ctx.start("torch", "torch_probe", ("conv",) if run_conv else (), timeout=TORCH_TIMEOUT)
        for name, probe in (PROBES if probes is None else probes):
            try:
                ctx.facts[name] = probe(ctx)
            except Exception as exc:  # noqa: BLE001 - a probe bug must not stop the diagnosis
                f = Fact(name)
                f.problem(name, f"probe failed: {type(exc).__name__}: {exc}")
                ctx.facts[name] = f
            if on_probe is not None:
                on_probe(name)
        for fut in ctx.pending.values():
            fut.cancel()
    return ctx.facts


def _torch_child_wanted(s: System) -> bool:
    """Start the torch child early when probe_torch will want it (a CUDA build, or a driver present)."""
    d = s.find_module_dir("torch")
    if not d:
        return False
    if _static_torch(s, d).get("cuda"):
        return True
    return s.exists("/proc/driver/nvidia/version") or any(re.fullmatch(r"nvidia\d+", n) for n in s.listdir("/dev"))


PROBES: tuple[tuple[str, Probe], ...] = (
    ("host", probe_host),
    ("environ", probe_environ),
    ("driver", probe_driver),
    ("gpus", probe_gpus),
    ("libraries", probe_libraries),
    ("cudnn_versions", probe_cudnn_versions),
    ("torch", probe_torch),
    ("resolution", probe_resolution),
    ("tensorflow", probe_tensorflow),
    ("jax", probe_jax),
    ("triton", probe_triton),
)
