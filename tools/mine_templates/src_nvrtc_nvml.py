"""NVRTC and NVML status strings as programs print them.

- nvrtcResult: nvrtcGetErrorString returns the enum name itself ("NVRTC_ERROR_INVALID_OPTION"); CuPy prints it as
  '<name> (<code>)' (cupy_backends/cuda/libs/nvrtc.pyx, NVRTCError), Numba as 'Failed to call <fn>: <name>'.
  Names read in numba/numba's mirror of the header enum (numba/cuda/cudadrv/nvrtc.py, NvrtcResult).
- nvmlReturn_t: names and meanings from the NVML header NVIDIA/go-nvml ships (pkg/nvml/nvml.h); go-nvml prints
  'ERROR_<X>' (pkg/nvml/return.go) when libnvidia-ml is not loaded, C programs and cuda-python the full name;
  pynvml (nvidia-ml-py, mirrored in gpuopenanalytics/pynvml before it became a meta package) prints its own
  strings ("NVML Shared Library Not Found", "GPU is lost", ...).
- Messages around NVML start-up from NVIDIA/k8s-device-plugin and its vendored go-nvlib.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

NB = "5340f052d01403b12480fa19e596200ee0d0e131"      # numba/numba
GONVML = "2f9e261fe40a7a1c54783d66805e8920564763b4"  # NVIDIA/go-nvml
PYNVML = "a950ca64b1bb4b6ac6a5d6660d601ac23157d7db"  # gpuopenanalytics/pynvml, last commit with pynvml/nvml.py
K8S = "1b826acc6af3079d8923bac395c3124b8861a9a6"     # NVIDIA/k8s-device-plugin
SRC = Source(framework="nvrtc_nvml", repo="NVIDIA/go-nvml", version=f"{GONVML} (per template)",
             url="https://github.com/NVIDIA/go-nvml",
             note="NVRTC names from numba/numba, pynvml strings from gpuopenanalytics/pynvml, start-up messages from "
                  "NVIDIA/k8s-device-plugin; each template carries its repo and commit")

NVRTC_F = "numba/cuda/cudadrv/nvrtc.py"
RET = "pkg/nvml/return.go"
HDR = "pkg/nvml/nvml.h"
PY = "pynvml/nvml.py"


def _nvrtc(tid: str, name: str, line: int, cond: str, causes: dict[str, float], why: str) -> T:
    return T(tid, name, [], NVRTC_F, version=NB, repo="numba/numba", line=line, cond=cond, causes=causes, why=why)


def _nvml(tid: str, name: str, line: int, doc: str, causes: dict[str, float], why: str, role: str = "failure",
          header_only: bool = False) -> T:
    if header_only:
        return T(tid, f"NVML_ERROR_{name}", [], HDR, version=GONVML, repo="NVIDIA/go-nvml", line=line, role=role,
                 cond=f"an NVML call returned NVML_ERROR_{name} (nvml.h: '{doc}')", causes=causes, why=why)
    return T(tid, f"ERROR_{name}", [], RET, version=GONVML, repo="NVIDIA/go-nvml", line=line, role=role,
             cond=f"an NVML call returned NVML_ERROR_{name} (nvml.h: '{doc}'); the regex matches go-nvml's "
                  f"'ERROR_{name}' and the full NVML_ERROR_{name}",
             causes=causes, why=why)


def _pynvml(tid: str, text: str, line: int, code: str, causes: dict[str, float], why: str) -> T:
    return T(tid, text, [], PY, version=PYNVML, repo="gpuopenanalytics/pynvml", line=line,
             cond=f"pynvml raised NVMLError for {code} (NVMLError._errcode_to_string; class "
                  f"NVMLError_<CamelCase name>)", causes=causes, why=why)


TEMPLATES = [
    # --- NVRTC ---------------------------------------------------------------------------------------------
    _nvrtc("nvrtc.invalid_option", "NVRTC_ERROR_INVALID_OPTION", 25,
           "nvrtcCompileProgram rejected an option; the option frameworks vary is --gpu-architecture, taken from "
           "the device's compute capability",
           {"arch-unsupported": 0.7, "unknown": 0.3},
           "mostly an -arch this NVRTC does not know (GPU newer than the NVRTC, or an architecture it dropped)"),
    _nvrtc("nvrtc.compilation", "NVRTC_ERROR_COMPILATION", 26,
           "nvrtcCompileProgram failed to compile the source (the program log says why)",
           {"unknown": 0.6, "missing-dependency-lib": 0.2, "arch-unsupported": 0.2},
           "a compile error: in the source, a missing toolkit header (cuda_fp16.h), or an architecture feature"),
    _nvrtc("nvrtc.builtin_failure", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE", 27,
           "NVRTC could not run its builtin operations: libnvrtc-builtins (same version as libnvrtc) cannot be "
           "opened",
           {"missing-dependency-lib": 0.9, "unknown": 0.1},
           "libnvrtc-builtins.so is missing or of another version than libnvrtc"),
    # --- NVML names ----------------------------------------------------------------------------------------
    _nvml("nvml.library_not_found", "LIBRARY_NOT_FOUND", 69, "NVML Shared Library couldn't be found or loaded",
          {"no-driver": 0.8, "missing-dependency-lib": 0.2},
          "libnvidia-ml.so.1 ships with the driver: no driver, or a container without the driver libraries"),
    _nvml("nvml.driver_not_loaded", "DRIVER_NOT_LOADED", 63, "NVIDIA driver is not loaded", {"no-driver": 1.0},
          "the nvidia kernel module is not running"),
    _nvml("nvml.gpu_is_lost", "GPU_IS_LOST", 75,
          "The GPU has fallen off the bus or has otherwise become inaccessible", {"hardware-fault": 1.0},
          "the GPU fell off the bus (Xid 79)"),
    _nvml("nvml.lib_rm_version_mismatch", "LIB_RM_VERSION_MISMATCH", 81,
          "RM detects a driver/library version mismatch", {"driver-library-mismatch": 1.0},
          "libnvidia-ml and the loaded kernel module are different driver versions"),
    _nvml("nvml.reset_required", "RESET_REQUIRED", 77, "The GPU requires a reset before it can be used again",
          {"hardware-fault": 1.0}, "the GPU is in an error state that only a reset clears"),
    _nvml("nvml.corrupted_inforom", "CORRUPTED_INFOROM", 73, "infoROM is corrupted", {"hardware-fault": 1.0},
          "the board's infoROM is corrupted"),
    _nvml("nvml.insufficient_power", "INSUFFICIENT_POWER", 61,
          "A device's external power cables are not properly attached", {"hardware-fault": 1.0},
          "the GPU's external power is not connected"),
    _nvml("nvml.function_not_found", "FUNCTION_NOT_FOUND", 71,
          "Local version of NVML doesn't implement this function",
          {"driver-too-old": 0.7, "driver-library-mismatch": 0.3},
          "the installed libnvidia-ml is older than the program's NVML bindings"),
    _nvml("nvml.gpu_not_found", "GPU_NOT_FOUND", 1333, "No GPUs were found", {"no-driver": 1.0},
          "the driver sees no GPU", header_only=True),
    _nvml("nvml.operating_system", "OPERATING_SYSTEM", 1322,
          "The GPU control device has been blocked by the operating system/cgroups",
          {"no-driver": 0.7, "unknown": 0.3},
          "the process may not open the GPU device nodes (container cgroups)", header_only=True),
    _nvml("nvml.not_supported", "NOT_SUPPORTED", 1308, "The requested operation is not available on target device",
          {"harmless-warning": 1.0}, "a query this GPU or driver does not implement; monitoring tools go on",
          role="noise", header_only=True),
    # --- pynvml strings ------------------------------------------------------------------------------------
    _pynvml("pynvml.library_not_found", "NVML Shared Library Not Found", 829, "NVML_ERROR_LIBRARY_NOT_FOUND "
            "(CDLL('libnvidia-ml.so.1') / nvml.dll failed)", {"no-driver": 0.8, "missing-dependency-lib": 0.2},
            "libnvidia-ml ships with the driver: no driver, or a container without the driver libraries"),
    _pynvml("pynvml.driver_not_loaded", "Driver Not Loaded", 826, "NVML_ERROR_DRIVER_NOT_LOADED",
            {"no-driver": 1.0}, "the nvidia kernel module is not running"),
    _pynvml("pynvml.gpu_is_lost", "GPU is lost", 832, "NVML_ERROR_GPU_IS_LOST", {"hardware-fault": 1.0},
            "the GPU fell off the bus"),
    _pynvml("pynvml.lib_rm_version_mismatch", "RM has detected an NVML/RM version mismatch.", 835,
            "NVML_ERROR_LIB_RM_VERSION_MISMATCH", {"driver-library-mismatch": 1.0},
            "libnvidia-ml and the loaded kernel module are different driver versions"),
    _pynvml("pynvml.reset_required", "GPU requires restart", 833, "NVML_ERROR_RESET_REQUIRED",
            {"hardware-fault": 1.0}, "the GPU needs a reset"),
    _pynvml("pynvml.corrupted_inforom", "Corrupted infoROM", 831, "NVML_ERROR_CORRUPTED_INFOROM",
            {"hardware-fault": 1.0}, "the board's infoROM is corrupted"),
    _pynvml("pynvml.operating_system", "The operating system has blocked the request.", 834,
            "NVML_ERROR_OPERATING_SYSTEM", {"no-driver": 0.7, "unknown": 0.3},
            "the process may not open the GPU device nodes (container cgroups)"),
    # --- NVML start-up messages of NVIDIA tools --------------------------------------------------------------
    T("k8s.nvml.docker_runtime_hint", "If this is a GPU node, did you set the docker default runtime to `nvidia`?", [],
      "internal/plugin/factory.go", version=K8S, repo="NVIDIA/k8s-device-plugin", line=100, role="context",
      cond="nvml.Init() != SUCCESS in the device plugin (after 'Failed to initialize NVML: %v.')",
      causes={"no-driver": 1.0},
      why="NVML could not start inside the plugin's container: the driver was not injected"),
    T("gonvlib.nvml.could_not_load", "could not load NVML library: %v",
      ["libnvidia-ml.so.1: cannot open shared object file: No such file or directory"],
      "vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/info/property-extractor.go", version=K8S,
      repo="NVIDIA/k8s-device-plugin", line=55, role="context", groups={0: "dlerror"},
      cond="go-nvlib HasNvml(): libnvidia-ml.so.1 not found under the driver root (logged as 'NVML not detected: %v')",
      causes={"no-driver": 0.8, "missing-dependency-lib": 0.2},
      why="libnvidia-ml.so.1 is missing: no driver, or the driver root is not mounted"),
]
