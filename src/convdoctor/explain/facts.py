"""Structured facts parsed from error text: cuDNN statuses (cuDNN 8 and 9 numbering), versions and
their relation, driver versions, compute capabilities, missing libraries, tensor types, shapes,
convolution parameters (PyTorch's repro snippet) and the framework."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .kb import status_table

INT32_MAX = 2**31 - 1

_F = re.IGNORECASE


@dataclass
class Version:
    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse_cudnn_version(text: str) -> Version | None:
    """'8.6.0', '(8, 5, 0)', '8906' (cuDNN 8: M*1000+m*100+p), '90501'/'91000' (cuDNN 9: M*10000+m*100+p)."""
    text = text.strip().strip("(),.:; ")
    m = re.fullmatch(r"(\d+)[.,]\s*(\d+)(?:[.,]\s*(\d+))?(?:\.\d+)*", text)
    if m:
        return Version(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if text.isdigit():
        n = int(text)
        if n >= 10000:  # cuDNN 9+: 90501 = 9.5.1, 91000 = 9.10.0
            return Version(n // 10000, (n // 100) % 100, n % 100)
        if n >= 1000:   # cuDNN <= 8: 8906 = 8.9.6, 7201 = 7.2.1
            return Version(n // 1000, (n // 100) % 10, n % 100)
    return None


def cuda_from_driver_api(n: int) -> str:
    """torch's 'found version 11040' is cudaDriverGetVersion: 1000*major + 10*minor."""
    return f"{n // 1000}.{(n % 1000) // 10}"


# first driver of each CUDA major (Linux), see /work/shared notes and docs/explain.md
DRIVER_FLOORS = {11: (450, 80), 12: (525, 60), 13: (580, 65)}


def max_cuda_major_for_driver(major: int) -> int | None:
    best = None
    for cuda, (drv, _) in DRIVER_FLOORS.items():
        if major >= drv:
            best = cuda
    return best if best is not None else (10 if major >= 384 else None)


@dataclass
class Facts:
    framework: str | None = None
    frameworks: dict[str, int] = field(default_factory=dict)
    statuses: list[str] = field(default_factory=list)
    cudnn_loaded: str | None = None
    cudnn_compiled: str | None = None
    cudnn_relation: str | None = None
    driver_found_cuda: str | None = None
    driver_version: str | None = None
    driver_max_cuda_major: int | None = None
    cuda_mentioned: list[str] = field(default_factory=list)
    gpu_sm: str | None = None
    arch_list: list[str] = field(default_factory=list)
    missing_libs: list[str] = field(default_factory=list)   # named as "cannot open"/dlerror
    failed_libs: list[str] = field(default_factory=list)    # named as "could not load X"
    cudnn_lib_dirs: list[str] = field(default_factory=list)
    type_pair: list[dict[str, str | None]] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    max_numel: int | None = None
    est_output_numel: int | None = None
    zero_size: bool = False
    memory_free_fraction: float | None = None
    conv: dict[str, Any] | None = None
    channels: dict[str, int] | None = None
    padded_vs_kernel: dict[str, list[int]] | None = None
    cudnn_channel_check: bool = False
    # derived from the above
    cudnn_relation_kind: str | None = None     # major-differs | runtime-older | same | runtime-newer
    driver_older_than_cuda: str | None = None
    missing_lib: str | None = None             # the library that really failed to open
    missing_lib_kind: str | None = None        # driver | cudnn | dependency
    type_device_differs: bool = False
    type_dtype_differs: bool = False
    over_int32: int | None = None              # elements of the largest tensor past 2^31-1
    layout_suspect: str | None = None          # an NHWC op's input that reads as NCHW data
    descriptor_call: str | None = None         # a cuDNN tensor/filter descriptor call that failed

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, [], {}, False)}


_FRAMEWORK_HINTS = (
    ("jax", r"\bjax\b|jaxlib|XlaRuntimeError|xla_bridge|JAX_TRACEBACK|XLA_PYTHON"),
    ("tensorflow", r"tensorflow|\btf\.|keras|bfc_allocator|dso_loader|local_xla|\[Op:|_Recv\[|Node: '"),
    ("pytorch", r"\btorch\b|torch\.|RuntimeError: (?:cuDNN|CUDA|Given groups|Calculated padded)|aten/src|c10::|PyTorch"),
)

_VENDORED_TF_RE = re.compile(r"\S*org_tensorflow\S*")
_STATUS_RE = re.compile(r"CUDNN_STATUS_[A-Z_]+")
_STATUS_NUM_RE = re.compile(r"CUDNN_STATUS_SUCCESS \((\d+) vs\. 0\)|\(0 vs\. (\d+)\)[^\n]*cudnn|cudnn (?:status|error)[:= ]+(\d{1,4})\b", _F)
_LOADED_RE = re.compile(
    r"Loaded runtime CuDNN library:?\s*([\d.]+)[^\n]*?compiled with:?\s*([\d.]+)", _F)
_TORCH_VER_RE = re.compile(
    r"PyTorch was compiled\s+against\s+(\([\d, ]+\)|\d+)\s+but (?:found runtime version|linked against)\s+(\([\d, ]+\)|\d+)", _F)
_JAX_VER_RE = re.compile(r"Found cuDNN version (\d+), but JAX was built against version (\d+)", _F)
_JAX_OUTDATED_RE = re.compile(
    r"Version JAX was built against:\s*(\d+)[\s\S]{0,120}?Installed version:\s*(\d+)", _F)
_JAX_MIN_RE = re.compile(r"Minimum supported:\s*(\d+)", _F)
_DRIVER_FOUND_RE = re.compile(r"too old \(found version (\d+)\)", _F)
_DRIVER_VER_RE = re.compile(r"(?:Driver Version:|insufficient driver version:|NVIDIA-SMI)\s*(\d{3})\.(\d+)", _F)
_CUDA_MENTION_RE = re.compile(r"CUDA Version:?\s*(\d+\.\d+)|\bcu(?:da)?(1[0-3])(?:\d)?\b|cuda(1[0-3])_pip|CUDA (1[0-3])\.\d", _F)
_SM_RE = re.compile(r"capability (sm_\d+) is not compatible|(?:cuda|compute) capability (\d+\.\d+)", _F)
_ARCH_LIST_RE = re.compile(r"supports CUDA capabilities ((?:sm_\d+\s*)+)", _F)
_MISSING_RE = re.compile(
    r"(lib[\w+\-]+(?:\.so[\w.]*|\.dylib)|[\w\-]+\.dll)['\"]?(?::| not found| was not found|;\s*dlerror)\s*(?:cannot open shared object file)?", _F)
_COULD_NOT_LOAD_RE = re.compile(r"Could not load (?:dynamic )?library '?(lib[\w.\-]+|[\w\-]+\.dll)'?", _F)
# libraries a framework tries to open and works without (TensorRT), and the driver's own libraries
_OPTIONAL_LIB_RE = re.compile(r"lib(?:nvinfer|nvinfer_plugin|nvonnxparser|nvparsers)\b|nvinfer", _F)
_DRIVER_LIB_RE = re.compile(r"libcuda\.so(?:\.\d+)*(?![\w-])|libnvidia-ml\.so(?:\.\d+)*(?![\w-])|nvcuda\.dll", _F)
_CUDNN_PATH_RE = re.compile(r"(/[\w./\-]+)/libcudnn[\w.]*\.so[\w.]*")
_TYPE_PAIR_RE = re.compile(
    r"Input type \(([^)]*)\) and (weight|bias) type \(([^)]*)\)|but type (\S+) does not equal (\S+)|expected scalar type (\w+) but found (\w+)", _F)
_SHAPE_RES = (
    re.compile(r"torch\.(?:randn|rand|ones|zeros|empty)\(\s*\[?([\d,\s]+)\]?"),
    re.compile(r"input\[([\d,\s]+)\]"),
    re.compile(r"shape\s*\[([\d,\s]+)\]"),
    re.compile(r"shape[=:]?\s*\(([\d,\s]+)\)"),                       # TF/Keras shape=(8, 224, 224, 3)
    re.compile(r"\b(?:b?f|s|u|c)(?:8|16|32|64|128)\[([\d,]+)\]"),      # XLA f32[8,3,224,224], bf16[...]
    re.compile(r"\bsize \[([\d, ]+)\]|torch\.Size\(\[([\d, ]+)\]\)"),
    re.compile(r"Tensor\{([\d,]+)\}"),
    re.compile(r"dimA = ([\d, ]+),"),
)
# lists of shapes: Theano's "Inputs shapes: [(0, 5, 6, 8), (3, 5, 5, 6), ...]"
_SHAPE_LIST_RE = re.compile(r"shapes?\s*[=:]\s*\[((?:\s*\([\d,\s]*\)\s*,?|\s*'[^']*'\s*,?)+)\]", _F)
_TUPLE_RE = re.compile(r"\(([\d,\s]+)\)")
# cuDNN's descriptor setters reject sizes: BAD_PARAM for a dimension <= 0, NOT_SUPPORTED for more
# than 2^31 elements or an unsupported rank (cudnnSetTensorNdDescriptor reference)
_DESCRIPTOR_RE = re.compile(r"cudnnSet(?:Tensor|Filter)(?:Nd|4d)Descriptor\w*|(?:set|create) (?:tensor|filter)(?:Nd|4d)? descriptor", _F)
# TensorFlow shape errors: "... (op: 'Conv2D') with input shapes: [?,1,32,32], [3,3,32,32]"
_OP_INPUT_RE = re.compile(r"with input shapes?: \[([\d?,\s-]+)\]", _F)
_CONV_RE = re.compile(
    r"(?:nn\.)?(Conv(?:Transpose)?[123]d)\(\s*(\d+)\s*,\s*(\d+)\s*(?:,\s*(?:kernel_size=)?\(?\[?([\d, ]+?)\]?\)?)?(?=[,)])([^\n]*)")
_KW_RE = {k: re.compile(rf"{k}=\(?\[?([\d, ]+)\]?\)?") for k in ("stride", "padding", "dilation", "groups")}
_DTYPE_RE = re.compile(r"dtype=torch\.(\w+)")
_CHANNELS_RE = re.compile(
    r"weight of size \[([\d, ]+)\], expected input\[([\d, ]+)\] to have (\d+) channels, but got (\d+) channels", _F)
_PADDED_RE = re.compile(
    r"Calculated padded input size per channel: \(([\d x]+)\)\.\s*Kernel size: \(([\d x]+)\)", _F)
# cuDNN's own validation text for a convolution whose input channels are not a multiple of the
# filter's (cuDNN 9 through the frontend; benchmarks/gpu/explain_live.py provokes it)
_CHANNEL_CHECK_RE = re.compile(r"xDimA\[1\]\s*%\s*wDimA\[1\]")
_MEM_RE = re.compile(r"Memory usage: (\d+) bytes free, (\d+) bytes total", _F)
_ZERO_RE = re.compile(r"Tensor\{0,|\{count: 0 |input of size: \[0[\],]|\[0 x \d+", _F)


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _torch_type(t: str) -> dict[str, str | None]:
    t = t.strip()
    device = "cuda" if ".cuda." in t or t.startswith("CUDA") or "cuda" in t.lower().split("tensor")[0] else None
    if device is None and (t.startswith("torch.") or t.endswith("Tensor")):
        device = "cpu"
    m = re.search(r"(Half|Float|Double|BFloat16|Long|Int|Byte|Bool|Short|Char)(?:Tensor)?", t)
    dtype = m.group(1).lower() if m else None
    if dtype is None:
        low = t.lower().replace("c10::", "")
        dtype = {"float": "float", "half": "half", "double": "double", "bfloat16": "bfloat16",
                 "float32": "float", "float16": "half"}.get(low)
    return {"raw": t, "device": device, "dtype": dtype}


def extract(text: str, status_text: str | None = None) -> Facts:
    """Facts from `text`; cuDNN statuses and missing libraries only from `status_text` when given
    (the log without its harmless lines: statuses recovered from, optional libraries)."""
    f = Facts()
    hint_text = _VENDORED_TF_RE.sub(" ", text)   # jaxlib's vendored TensorFlow paths are not TensorFlow
    for name, rx in _FRAMEWORK_HINTS:
        n = len(re.findall(rx, hint_text))
        if n:
            f.frameworks[name] = n
    if f.frameworks:
        f.framework = max(f.frameworks, key=lambda k: f.frameworks[k])
    failing = text if status_text is None else status_text
    f.statuses = _statuses(failing)
    _versions(text, f)
    _driver(text, f)
    _libraries(failing, f)
    _shapes(text, f)
    f.cudnn_channel_check = bool(_CHANNEL_CHECK_RE.search(text))
    m = _DESCRIPTOR_RE.search(failing)
    if m:
        f.descriptor_call = m.group(0)
    m = _MEM_RE.search(text)
    if m and int(m.group(2)) > 0:
        f.memory_free_fraction = round(int(m.group(1)) / int(m.group(2)), 4)
    return f


def _statuses(text: str) -> list[str]:
    statuses: list[str] = []
    for s in _STATUS_RE.findall(text):
        if s not in statuses and s != "CUDNN_STATUS_SUCCESS":
            statuses.append(s)
    table = status_table()
    for groups in _STATUS_NUM_RE.findall(text):
        num = next((g for g in groups if g), None)
        if num is None:
            continue
        name = table["v9"].get(num) if int(num) >= 1000 else table["v8"].get(num)
        if name and name not in statuses:
            statuses.append(name)
    return statuses


def _versions(text: str, f: Facts) -> None:
    loaded = compiled = None
    m = _LOADED_RE.search(text)
    if m:
        loaded, compiled = parse_cudnn_version(m.group(1)), parse_cudnn_version(m.group(2))
    m = _TORCH_VER_RE.search(text)
    if m:
        compiled, loaded = parse_cudnn_version(m.group(1)), parse_cudnn_version(m.group(2))
    m = _JAX_VER_RE.search(text)
    if m:
        loaded, compiled = parse_cudnn_version(m.group(1)), parse_cudnn_version(m.group(2))
    m = _JAX_OUTDATED_RE.search(text)
    if m:
        mm = _JAX_MIN_RE.search(text)
        compiled = parse_cudnn_version(mm.group(1) if mm else m.group(1))
        loaded = parse_cudnn_version(m.group(2))
    if not (loaded and compiled):
        return
    f.cudnn_loaded, f.cudnn_compiled = str(loaded), str(compiled)
    if loaded.major != compiled.major:
        f.cudnn_relation_kind = "major-differs"
        f.cudnn_relation = f"major differs: runtime {loaded} vs compiled {compiled}"
    elif loaded.minor < compiled.minor:
        f.cudnn_relation_kind = "runtime-older"
        f.cudnn_relation = f"runtime minor older: runtime {loaded} < compiled {compiled}"
    elif (loaded.minor, loaded.patch) == (compiled.minor, compiled.patch):
        f.cudnn_relation_kind = "same"
        f.cudnn_relation = f"same version {loaded} (a mismatch message here points at a mixed install)"
    else:
        f.cudnn_relation_kind = "runtime-newer"
        f.cudnn_relation = (f"runtime {loaded} newer than compiled {compiled} (accepted by current "
                            "frameworks; old TensorFlow required the exact version)")


def _driver(text: str, f: Facts) -> None:
    m = _DRIVER_FOUND_RE.search(text)
    if m:
        f.driver_found_cuda = cuda_from_driver_api(int(m.group(1)))
    m = _DRIVER_VER_RE.search(text)
    if m:
        f.driver_version = f"{m.group(1)}.{m.group(2)}"
        f.driver_max_cuda_major = max_cuda_major_for_driver(int(m.group(1)))
    for groups in _CUDA_MENTION_RE.findall(text):
        v = next((g for g in groups if g), None)
        if v and v not in f.cuda_mentioned:
            f.cuda_mentioned.append(v)
    if f.driver_max_cuda_major is not None:
        newer = [c for c in f.cuda_mentioned if (_major(c) or 0) > f.driver_max_cuda_major]
        if newer:
            f.driver_older_than_cuda = (f"driver {f.driver_version} supports CUDA {f.driver_max_cuda_major}.x "
                                        f"but CUDA {newer[0]} is in use")
        elif f.driver_max_cuda_major < 12:
            f.driver_older_than_cuda = f"driver {f.driver_version} predates CUDA 12 (current wheels need >= 525)"
    m = _SM_RE.search(text)
    if m:
        f.gpu_sm = m.group(1) or ("sm_" + m.group(2).replace(".", ""))
    m = _ARCH_LIST_RE.search(text)
    if m:
        f.arch_list = m.group(1).split()


def _libraries(text: str, f: Facts) -> None:
    for target, found in ((f.missing_libs, _MISSING_RE.findall(text)),
                          (f.failed_libs, _COULD_NOT_LOAD_RE.findall(text))):
        for lib in found:
            lib = lib.strip("'\".;:")
            if lib and lib not in target:
                target.append(lib)
    dirs: list[str] = []
    for d in _CUDNN_PATH_RE.findall(text):
        if d not in dirs:
            dirs.append(d)
    f.cudnn_lib_dirs = dirs
    needed = [m for m in f.missing_libs if not _OPTIONAL_LIB_RE.match(m)]
    cudnn = [m for m in needed if m.lower().startswith(("libcudnn", "cudnn"))]
    other = [m for m in needed if m not in cudnn]
    if other and not cudnn:
        f.missing_lib = other[0]
        f.missing_lib_kind = "driver" if _DRIVER_LIB_RE.match(other[0]) else "dependency"
    elif cudnn:
        f.missing_lib, f.missing_lib_kind = cudnn[0], "cudnn"
    for g in _TYPE_PAIR_RE.findall(text):
        a, b = (g[0], g[2]) if g[0] else ((g[3], g[4]) if g[3] else (g[5], g[6]))
        f.type_pair = [_torch_type(a), _torch_type(b)]
        ta, tb = f.type_pair
        f.type_device_differs = bool(ta.get("device") and tb.get("device") and ta["device"] != tb["device"])
        f.type_dtype_differs = bool(ta.get("dtype") and tb.get("dtype") and ta["dtype"] != tb["dtype"])
        break


def _shapes(text: str, f: Facts) -> None:
    shapes: list[list[int]] = []
    for shape_rx in _SHAPE_RES:
        for s in shape_rx.findall(text):
            dims = _ints(s if isinstance(s, str) else " ".join(s))
            if 2 <= len(dims) <= 6 and dims not in shapes:
                shapes.append(dims)
    for m in _SHAPE_LIST_RE.finditer(text):
        for tup in _TUPLE_RE.findall(m.group(1)):
            dims = _ints(tup)
            if 2 <= len(dims) <= 6 and dims not in shapes:
                shapes.append(dims)
    f.shapes = shapes[:20]
    if shapes:
        f.max_numel = max(math.prod(s) for s in shapes)
    f.zero_size = bool(_ZERO_RE.search(text)) or any(0 in s for s in shapes)
    m = _CHANNELS_RE.search(text)
    if m:
        f.channels = {"expected": int(m.group(3)), "got": int(m.group(4))}
        w, x = _ints(m.group(1)), _ints(m.group(2))
        f.conv = {"x_shape": x, "w_shape": w, "source": "channel message"}
    m = _PADDED_RE.search(text)
    if m:
        f.padded_vs_kernel = {"padded_input": _ints(m.group(1)), "kernel": _ints(m.group(2))}
    conv = _parse_conv(text)
    if conv is not None:
        f.conv = conv
        x_shape = conv.get("x_shape")
        if x_shape and len(x_shape) >= 3:
            est = x_shape[0] * conv["out_channels"] * math.prod(x_shape[2:])
            if conv.get("transposed"):
                est *= math.prod(conv.get("stride") or [1]) or 1
            f.est_output_numel = est
    numel = max(f.max_numel or 0, f.est_output_numel or 0)
    if numel > INT32_MAX:
        f.over_int32 = numel
    m = _OP_INPUT_RE.search(text)
    if m:
        dims = [-1 if d.strip() in ("?", "-1") else int(d) for d in m.group(1).split(",") if d.strip()]
        if len(dims) in (4, 5) and 1 <= dims[1] <= 4 and all(d >= 16 for d in dims[2:]):
            f.layout_suspect = "[" + ",".join("?" if d < 0 else str(d) for d in dims) + "]"


def _major(v: str) -> int | None:
    try:
        return int(str(v).split(".")[0])
    except ValueError:
        return None


def _parse_conv(text: str) -> dict[str, Any] | None:
    m = _CONV_RE.search(text)
    if not m:
        return None
    kind, cin, cout, ks, rest = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), m.group(5) or ""
    nd = int(kind[-2])
    transposed = "Transpose" in kind
    positional = _ints(ks) if ks else []
    kernel = positional[:nd] if len(positional) >= nd else (positional[:1] * nd if positional else [3] * nd)
    conv: dict[str, Any] = {"kind": kind, "in_channels": cin, "out_channels": cout, "kernel": kernel,
                            "transposed": transposed, "source": "code/repro snippet"}
    for key, rx in _KW_RE.items():
        km = rx.search(rest)
        if km:
            vals = _ints(km.group(1))
            conv[key] = vals[0] if key == "groups" else (vals if len(vals) == nd else vals[:1] * nd)
    if "stride" not in conv and len(positional) == 1:
        # ConvTranspose3d(32, 1, 3, 2, 1, 1): kernel, stride, padding, output_padding positional
        tail = _ints(rest.split(")")[0]) if rest.startswith(",") else []
        if tail:
            conv["stride"] = tail[:1] * nd
    groups = int(conv.get("groups", 1) or 1)
    conv["w_shape"] = ([cin, cout // groups] if transposed else [cout, cin // groups]) + list(kernel)
    # the input: a torch.randn/ones(...) with the conv's channel count
    for rx in _SHAPE_RES[:1]:
        for s in rx.findall(text):
            dims = _ints(s)
            if len(dims) == nd + 2 and dims[1] == cin:
                conv["x_shape"] = dims
                break
    dm = _DTYPE_RE.search(text)
    if dm:
        conv["dtype"] = {"float": "float32", "half": "float16"}.get(dm.group(1), dm.group(1))
    if "channels_last" in text:
        conv["memory_format"] = "channels_last"
    return conv


def shape_numel(shapes: Sequence[Sequence[int]]) -> int:
    return max((math.prod(s) for s in shapes), default=0)
