"""Facts about the machine a log came from: GPU and its compute capability, the CUDA a build targets
and the CUDA the driver supports, free memory, memory settings (XLA preallocation, TensorFlow memory
growth), CUDA_VISIBLE_DEVICES, where it ran (Colab, Kaggle, a container, WSL, Windows), log levels.

`derive()` compares them with the tables in data/gpus.json and the driver floors, giving the
conflicts the rules in data/rules.json weigh (an architecture the build cannot run on, a driver
older than the build's CUDA, a CUDA_VISIBLE_DEVICES that hides every GPU).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

_F = re.IGNORECASE


@functools.lru_cache(maxsize=1)
def gpu_table() -> dict[str, Any]:
    text = resources.files("convdoctor.explain").joinpath("data", "gpus.json").read_text(encoding="utf-8")
    data = json.loads(text)
    data["compiled"] = [(re.compile(rf"(?<![\w-])(?:{rx})(?!\w)", _F), cc) for rx, cc in data["names"]]
    return data


# first driver (Linux) of each CUDA major: NVIDIA's CUDA compatibility guide, minor-version compatibility
DRIVER_FLOORS = {10: (410, 48), 11: (450, 80), 12: (525, 60), 13: (580, 65)}


def cuda_major_for_driver(major: int) -> int | None:
    """The newest CUDA major a driver branch supports (None below the CUDA 10 floor)."""
    best = None
    for cuda, (drv, _) in sorted(DRIVER_FLOORS.items()):
        if major >= drv:
            best = cuda
    return best


def _ver(v: str | None) -> tuple[int, int] | None:
    if not v:
        return None
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class EnvFacts:
    gpu_name: str | None = None
    gpu_cc: str | None = None          # "8.6"
    build_cuda: str | None = None      # the CUDA the framework/program was built for
    driver_cuda: str | None = None     # the newest CUDA the driver supports
    visible_devices: str | None = None
    xla_preallocate: bool | None = None
    xla_mem_fraction: float | None = None
    tf_memory_growth: bool | None = None
    places: list[str] = field(default_factory=list)   # colab, kaggle, container, wsl, windows, notebook
    levels: dict[str, int] = field(default_factory=dict)
    # derived (derive())
    arch_conflict: str | None = None
    driver_conflict: str | None = None
    visible_devices_hide_all: bool = False
    gpu_generation: str | None = None  # "newest" (cc >= 10) or "legacy" (cc < 5)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, [], {}, False)}


_CC_RES = (
    re.compile(r"(?:compute ?capability|computeCapability|GPU Compute Capability|\bcc)[:= ]+\(?(\d{1,2})[., ]\s*(\d)\)?", _F),
    re.compile(r"CUDA Capability:?\s*(\d)(\d)\b|compute_capability\s*=\s*(\d)(\d)0\b", _F),   # Paddle 75, darknet 860
    re.compile(r"CUDA capability (?:sm_|major/minor version number:\s*)(\d{1,2})(\d)\b", _F),
    re.compile(r"\bcapability (?:sm_)?(\d{1,2})(\d)\b(?! *\.)", _F),
)
_GPU_NAME_RES = (
    re.compile(r"(?:name|device \d+ name|GPU \d+|Found device \d+ with properties:\s*name|device: \d+, name)[:=]?\s*"
               r"((?:NVIDIA |Tesla |GeForce |Quadro |TITAN )*[A-Z][\w \-]{1,40}?)(?:,|\s{2,}|\s*\(| pci| major|$)", re.M),
    re.compile(r"\b((?:NVIDIA )?(?:GeForce |Tesla |Quadro |RTX |TITAN |Jetson )[\w \-]{1,30}?)(?:,|\s{2,}|\s*\(|$| with CUDA| Off| On)",
               re.M),
)
_BUILD_CUDA_RES = (
    re.compile(r"[+.]cu(1[0-3])(\d)\b"),                               # torch 2.1.0+cu121, .cu118
    re.compile(r"\bcu(1[0-3])(\d)\b(?!\w)"),                          # cu118 index URLs
    re.compile(r"(?:built|compiled) (?:with|against|for) CUDA(?: version)?:? ?(\d+)\.(\d+)", _F),
    re.compile(r"Runtime (?:API )?Version:? ?(\d+)\.(\d+)", _F),       # Paddle
    re.compile(r"CUDA runtime version:? ?(\d+)\.?(\d)", _F),
    re.compile(r"cuda_version['\"]?\s*[:=]\s*['\"]?(\d+)\.(\d+)", _F),
    re.compile(r"release (\d+)\.(\d+), V\d+"),                         # nvcc --version
    re.compile(r"libcudart\.so\.(\d+)\.(\d+)"),
)
_DRIVER_CUDA_RES = (
    re.compile(r"CUDA Version:? ?(\d+)\.(\d+)", _F),                   # nvidia-smi header
    re.compile(r"Driver (?:API )?Version:? ?(\d{1,2})\.(\d)\b", _F),     # Paddle (a CUDA version, not 470.x)
)
_DRIVER_FOUND_RE = re.compile(r"(?:too old \(found version|CUDA driver version:?|driver version) (\d{4,5})\b", _F)
_VISIBLE_RE = re.compile(r"CUDA_VISIBLE_DEVICES['\"]?\]?\s*(?:=|:|is set to)\s*['\"]?([\w,\-]*)['\"]?", _F)
_PREALLOC_RE = re.compile(r"XLA_PYTHON_CLIENT_PREALLOCATE['\"]?\]?\s*=\s*['\"]?(\w+)", _F)
_FRACTION_RE = re.compile(r"XLA_PYTHON_CLIENT_MEM_FRACTION['\"]?\]?\s*=\s*['\"]?([\d.]+)|per_process_gpu_memory_fraction\s*=\s*([\d.]+)", _F)
_GROWTH_RE = re.compile(r"allow_growth\s*=\s*(True|False)|set_memory_growth\([^,]+,\s*(True|False)\)|TF_FORCE_GPU_ALLOW_GROWTH['\"]?\]?\s*=\s*['\"]?(\w+)", _F)
_PLACES = (
    ("colab", re.compile(r"/usr/local/lib/python3\.\d+/dist-packages|/content/|google\.colab|colab_kernel", _F)),
    ("kaggle", re.compile(r"/kaggle/|/opt/conda/lib/python3\.\d+/site-packages/kaggle", _F)),
    ("container", re.compile(r"docker|nvidia-container|/\.dockerenv|podman|singularity|apptainer|enroot", _F)),
    ("wsl", re.compile(r"/usr/lib/wsl/|\bWSL2?\b|microsoft-standard", _F)),
    ("windows", re.compile(r"\b[A-Z]:/(?:Users|Program Files|ProgramData|Anaconda|Python|Code)|\.dll\b|\\site-packages\\", _F)),
    ("notebook", re.compile(r"ipykernel|ipython-input-|/tmp/ipykernel_|Cell In\[\d+\]|<ipython", _F)),
)


def extract_env(text: str, levels: dict[str, int] | None = None) -> EnvFacts:
    e = EnvFacts(levels=dict(levels or {}))
    for rx in _CC_RES:
        m = rx.search(text)
        if m:
            major, minor = [g for g in m.groups() if g is not None][:2]
            e.gpu_cc = f"{int(major)}.{int(minor)}"
            break
    table = gpu_table()
    for rx in _GPU_NAME_RES:
        for m in rx.finditer(text):
            name = " ".join(m.group(1).split())
            cc = next((cc for crx, cc in table["compiled"] if crx.search(name)), None)
            if cc:
                e.gpu_name = name
                e.gpu_cc = e.gpu_cc or cc
                break
        if e.gpu_name:
            break
    if e.gpu_name is None:  # a bare model name anywhere ("on my RTX 5090")
        for crx, cc in table["compiled"]:
            m = crx.search(text)
            if m and len(m.group(0)) >= 3:
                e.gpu_name, e.gpu_cc = m.group(0), e.gpu_cc or cc
                break
    for rx in _BUILD_CUDA_RES:
        m = rx.search(text)
        if m:
            e.build_cuda = f"{int(m.group(1))}.{int(m.group(2))}"
            break
    for rx in _DRIVER_CUDA_RES:
        m = rx.search(text)
        if m:
            e.driver_cuda = f"{int(m.group(1))}.{int(m.group(2))}"
            break
    if e.driver_cuda is None:
        m = _DRIVER_FOUND_RE.search(text)
        if m:
            n = int(m.group(1))
            e.driver_cuda = f"{n // 1000}.{(n % 1000) // 10}"
    m = _VISIBLE_RE.search(text)
    if m:
        e.visible_devices = m.group(1)
    m = _PREALLOC_RE.search(text)
    if m:
        e.xla_preallocate = m.group(1).lower() not in ("false", "0", "no")
    m = _FRACTION_RE.search(text)
    if m:
        try:
            e.xla_mem_fraction = float(m.group(1) or m.group(2))
        except ValueError:
            pass
    m = _GROWTH_RE.search(text)
    if m:
        e.tf_memory_growth = (m.group(1) or m.group(2) or m.group(3) or "").lower() in ("true", "1")
    e.places = [name for name, rx in _PLACES if rx.search(text)]
    return e


def derive(e: EnvFacts, *, driver_version: str | None = None, arch_list: list[str] | None = None) -> EnvFacts:
    """Conflicts between the facts and the compatibility tables."""
    cc = _ver(e.gpu_cc)
    if cc is not None:
        e.gpu_generation = "newest" if cc[0] >= 10 else ("legacy" if cc[0] < 5 else None)
    build = _ver(e.build_cuda)
    rows = gpu_table()["arch_cuda"]["rows"]
    if cc is not None and e.gpu_cc in rows:
        first, dropped = (_ver(v) for v in rows[e.gpu_cc])
        sm = f"sm_{cc[0]}{cc[1]}"
        if arch_list:
            if sm not in arch_list and not any(_ver_sm(a) and _ver_sm(a) <= cc and a.startswith("compute_")
                                               for a in arch_list):
                e.arch_conflict = f"GPU {sm} is not in the build's architecture list ({' '.join(arch_list)})"
        if build is not None and e.arch_conflict is None:
            if first is not None and build < first:
                e.arch_conflict = (f"GPU {sm} needs CUDA >= {first[0]}.{first[1]}; the build targets CUDA "
                                   f"{e.build_cuda}")
            elif dropped is not None and build >= dropped:
                e.arch_conflict = (f"CUDA {dropped[0]}.{dropped[1]} and later cannot target GPU {sm}; the "
                                   f"build targets CUDA {e.build_cuda}")
    drv_cuda = _ver(e.driver_cuda)
    if drv_cuda is None and driver_version:
        major = cuda_major_for_driver(int(driver_version.split(".")[0]))
        drv_cuda = (major, 9) if major else None
    if drv_cuda is not None and build is not None and drv_cuda[0] < build[0]:
        e.driver_conflict = (f"the driver supports CUDA up to {drv_cuda[0]}.x"
                             + (f" ({e.driver_cuda})" if e.driver_cuda else f" (driver {driver_version})")
                             + f"; the build needs CUDA {e.build_cuda}")
    if e.visible_devices is not None and (e.visible_devices in ("", "-1", "NoDevFiles", "none", "None")):
        e.visible_devices_hide_all = True
    return e


def _ver_sm(a: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)(\d)$", a)
    return (int(m.group(1)), int(m.group(2))) if m else None
