"""CUDA.jl templates: driver/runtime discovery and initialisation, CuError, out-of-memory, device support,
cuDNN loading and convolution algorithm selection.

Read at CUDA.jl HEAD (CUDACore/ after the package split) and, for messages the split removed or reworded, at the
v5.9.7 and v5.0.0 release tags.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "fd1008df7adde63bd46e078d075e6180c783f9cc"      # HEAD (CUDA.jl 6.x, CUDACore split)
V597 = "1810b7a8841dccd9fcc5f4f77a901707f18b872b"   # tag v5.9.7
V500 = "2fa65728eb19a9b0ca324e7a68478e4868f742f0"   # tag v5.0.0
SRC = Source(framework="cudajl", repo="JuliaGPU/CUDA.jl", version=f"{H} (per template; some at v5.9.7 / v5.0.0)",
             url="https://github.com/JuliaGPU/CUDA.jl")

INIT = "CUDACore/src/initialization.jl"
INIT5 = "src/initialization.jl"
ERR = "CUDACore/lib/cudadrv/error.jl"
MEM = "CUDACore/src/memory.jl"
STATE = "CUDACore/lib/cudadrv/state.jl"

_NO_RUNTIME = {"missing-dependency-lib": 0.6, "no-driver": 0.2, "unknown": 0.2}
_CUINIT = {"no-driver": 0.5, "driver-library-mismatch": 0.2, "forward-compat-unsupported": 0.1,
           "hardware-fault": 0.1, "unknown": 0.1}

TEMPLATES = [
    # --- initialisation (__init__ stores a reason; functional(true) / first use raises it with error()) ---
    T("cudajl.init.driver_not_found", "CUDA driver not found", [], INIT, version=H, line=64,
      cond="CUDA_Driver_jll.libcuda is nothing, or (unsupported JLL platform) Libdl.find_library('libcuda.so.1', "
           "'libcuda.so') returns ''",
      causes={"no-driver": 0.85, "missing-dependency-lib": 0.15},
      why="no libcuda could be found: no driver, a container without the GPU runtime, or libcuda off the path"),
    T("cudajl.init.driver_not_functional", "CUDA driver not functional", [], INIT, version=H, line=88,
      cond="set_driver_version() threw: cuDriverGetVersion could not be called or failed on the libcuda found",
      causes={"no-driver": 0.4, "driver-library-mismatch": 0.2, "missing-dependency-lib": 0.2, "unknown": 0.2},
      why="a libcuda was found but does not answer (a stub libcuda, a broken or mixed driver install)"),
    T("cudajl.init.driver_too_old_msg",
      "This version of CUDA.jl requires an NVIDIA driver for CUDA 12.x or higher (yours only supports up to CUDA "
      "{driver})", ["11.4.0"], INIT, version=H, line=93, kinds={0: "ver"}, groups={0: "driver_cuda_version"},
      cond="driver_version() < v\"12\" (@error, then the init error 'NVIDIA driver too old')",
      causes={"driver-too-old": 1.0}, why="the driver supports an older CUDA than CUDA.jl needs"),
    T("cudajl.init.driver_too_old", "NVIDIA driver too old", [], INIT, version=H, line=94,
      cond="driver_version() < v\"12\" (the stored init error; v4/v5.0 stored 'CUDA driver too old')",
      causes={"driver-too-old": 1.0}, why="the driver supports an older CUDA than CUDA.jl needs"),
    T("cudajl.init.driver_cuda11_msg",
      "This version of CUDA.jl only supports NVIDIA drivers for CUDA 11.x or higher (yours is for CUDA {driver})",
      ["10.2.0"], INIT5, version=V500, line=70, kinds={0: "ver"}, groups={0: "driver_cuda_version"},
      cond="CUDA.jl 4.x-5.0: driver_version() < v\"11\"", causes={"driver-too-old": 1.0},
      why="the driver supports an older CUDA than CUDA.jl needs"),
    T("cudajl.init.driver_older_than_runtime",
      "You are using CUDA {runtime} with a driver that only supports up to {driver_major}.x.\nIt is recommended to "
      "upgrade your driver, or switch to automatic installation of CUDA.", ["12.1.0", "11"], INIT5, version=V500,
      line=116, role="context", kinds={0: "ver", 1: "int"}, groups={0: "cuda_runtime_version", 1: "driver_cuda_major"},
      upto="with a driver that only supports up to",
      cond="CUDA.jl 5.0 @warn: runtime.major > driver.major",
      causes={"driver-too-old": 1.0}, why="the CUDA runtime in use is newer than the driver supports"),
    T("cudajl.init.no_runtime",
      "CUDA.jl could not find an appropriate CUDA runtime to use.\n\n{reason}\n\nFor more details, refer to the CUDA.jl "
      "documentation at\nhttps://cuda.juliagpu.org/stable/installation/overview/",
      ["You requested use of a local CUDA toolkit, but not all\nrequired components were discovered."], INIT,
      version=H, line=136, upto="could not find an appropriate CUDA runtime to use.",
      cond="!CUDA_Runtime.is_available(): a local toolkit lacks components, the platform has no artifact, or the "
           "runtime JLL was precompiled without a driver present (host_platform cuda = none)",
      causes=_NO_RUNTIME,
      why="no usable CUDA runtime: the reason that follows decides (local toolkit incomplete, JLL precompiled "
          "without a driver, unsupported platform)"),
    T("cudajl.init.runtime_not_found", "CUDA runtime not found", [], INIT, version=H, line=142,
      cond="the stored init error after 'could not find an appropriate CUDA runtime'", causes=_NO_RUNTIME,
      why="no usable CUDA runtime (see the @error printed at load time)"),
    T("cudajl.init.precompiled_no_driver",
      "CUDA.jl's JLLs were precompiled without an NVIDIA driver present.\nThis can happen when installing CUDA.jl on "
      "an HPC log-in node,\nor in a container.", [], INIT, version=H, line=115, role="context",
      upto="were precompiled without an NVIDIA driver present.",
      cond="reason given when CUDA_Runtime_jll.host_platform['cuda'] == 'none'",
      causes={"missing-dependency-lib": 0.6, "no-driver": 0.4},
      why="no CUDA runtime artifact was selected because no driver was visible when CUDA.jl was precompiled"),
    T("cudajl.init.local_toolkit_incomplete",
      "You requested use of a local CUDA toolkit, but not all\nrequired components were discovered.", [], INIT,
      version=H, line=102, role="context",
      cond="reason given when CUDA_Runtime is CUDA_Runtime_Discovery (local toolkit) and it is not available",
      causes={"missing-dependency-lib": 1.0}, why="the local CUDA toolkit lacks libraries CUDA.jl needs"),
    T("cudajl.init.no_device", "No CUDA-capable device found", [], INIT5, version=V597, line=126,
      cond="CUDA.jl 4.x-5.x: runtime_version() threw CuError ERROR_NO_DEVICE",
      causes={"no-driver": 1.0}, why="the driver sees no GPU (none installed, or hidden by CUDA_VISIBLE_DEVICES)"),
    T("cudajl.init.cuinit_failed", "CUDA initialization failed: {error}", ["CUDA error (code 100, CUDA_ERROR_NO_DEVICE)"],
      INIT, version=H, line=149, groups={0: "init_error"},
      cond="cuInit(0) threw; the CuError is shown as 'CUDA error (code N, CUDA_ERROR_X)'",
      causes=_CUINIT,
      why="cuInit fails mostly for no visible GPU, else a driver/library mismatch (CUDA_ERROR_UNKNOWN, 803), "
          "forward compatibility (804) or a lost GPU; the CUresult decides"),
    T("cudajl.init.runtime_too_old_msg",
      "This version of CUDA.jl only supports CUDA 12 or higher (your toolkit provides CUDA {runtime})", ["11.8.0"],
      INIT, version=H, line=157, kinds={0: "ver"}, groups={0: "cuda_runtime_version"},
      cond="runtime_version() < v\"12\" (a local toolkit or pinned runtime older than 12)",
      causes={"missing-dependency-lib": 0.6, "unknown": 0.4},
      why="the CUDA runtime selected is older than CUDA.jl supports"),
    # --- CUDA errors and memory ------------------------------------------------------------------------------
    T("cudajl.error.cuerror", "CUDA error: {description} (code {code}, {name})",
      ["out of memory", "2", "ERROR_OUT_OF_MEMORY"], ERR, version=H, line=79,
      kinds={1: "int", 2: "word"}, groups={0: "cuda_error_desc", 1: "cuda_error_code", 2: "cuda_error_name"},
      cond="showerror(CuError) once CUDA is functional: description = cuGetErrorString, name = cuGetErrorName "
           "without 'CUDA_'",
      causes={"unknown": 1.0}, why="the CUresult (captured) decides: see cuda_errors.json"),
    T("cudajl.error.cuerror_uninit", "CUDA error (code {code}, {name})", ["999", "CUDA_ERROR_UNKNOWN"], ERR, version=H,
      line=77, kinds={0: "int", 1: "word"}, groups={0: "cuda_error_code", 1: "cuda_error_name"},
      cond="showerror(CuError) before CUDA is functional (e.g. a failing cuInit)",
      causes={"unknown": 1.0}, why="the CUresult (captured) decides: see cuda_errors.json"),
    T("cudajl.memory.oom", "Out of GPU memory trying to allocate {size}", ["1.500 GiB"], MEM, version=H, line=443,
      upto="Out of GPU memory",
      cond="showerror(OutOfGPUMemoryError): an allocation failed after the pool reclaimed what it could (also "
           "cuMemAlloc returning ERROR_OUT_OF_MEMORY)",
      causes={"gpu-out-of-memory": 1.0}, why="device memory exhausted"),
    T("cudajl.memory.usage", "Effective GPU memory usage: %.2f%% (%s/%s)", ["99.95", "15.766 GiB", "15.773 GiB"], MEM,
      version=H, line=378, role="context", groups={0: "memory_used_percent"},
      cond="pool_status(): printed under OutOfGPUMemoryError (or on request)",
      causes={"gpu-out-of-memory": 0.7, "harmless-warning": 0.3},
      why="the device memory use when the OOM happened"),
    # --- device support ------------------------------------------------------------------------------------
    T("cudajl.arch.too_old",
      "Your {name} GPU (compute capability {major}.{minor}) is not supported by CUDA.jl.\nPlease use a device with "
      "at least capability 5.0, or downgrade CUDA.jl (see the README for compatibility details).",
      ["Tesla K80", "3", "7"], STATE, version=H, line=189, kinds={1: "int", 2: "int"},
      groups={1: "cc_major", 2: "cc_minor"}, start="GPU (compute capability", upto="is not supported by CUDA.jl.",
      cond="create_context: capability(dev) < v\"5.0\" (@error, maxlog=1)",
      causes={"arch-unsupported": 1.0}, why="the GPU is older than CUDA.jl supports"),
    T("cudajl.arch.cuda13",
      "Your {name} GPU (compute capability {major}.{minor}) is not supported by CUDA toolkit 13+.\nPlease use a device "
      "with at least capability 7.5, or use an older CUDA toolkit (see `CUDA.set_runtime_version!`).",
      ["Tesla V100-SXM2-16GB", "7", "0"], STATE, version=H, line=193, kinds={1: "int", 2: "int"},
      groups={1: "cc_major", 2: "cc_minor"}, start="GPU (compute capability", upto="is not supported by CUDA toolkit 13+.",
      cond="create_context: runtime_version() >= v\"13\" and capability(dev) < v\"7.5\"",
      causes={"arch-unsupported": 1.0}, why="CUDA 13 dropped this GPU's architecture"),
    T("cudajl.compile.cc_ptxas", "Compute capability {cap} is not supported by ptxas {ver} at PTX ISA {ptx}",
      ["3.7.0", "13.0.48", "8.8"], "CUDACore/src/compiler/compilation.jl", version=H, line=298,
      kinds={0: "ver", 1: "ver", 2: "ver"}, groups={0: "compute_capability", 1: "ptxas_version"},
      cond="compiler_config: no SM supported by the chosen PTX ISA can run on the device",
      causes={"arch-unsupported": 1.0}, why="the toolkit's ptxas cannot target this GPU"),
    # --- cuDNN ---------------------------------------------------------------------------------------------
    T("cudajl.cudnn.not_available", "cuDNN is not available on your system (looked in {dirs})",
      ["/usr/local/cuda/lib64"], "lib/cudnn/src/cuDNN.jl", version=H, line=196, groups={0: "search_dirs"},
      cond="local toolkit: CUDA_Runtime_Discovery.get_library(dirs, 'cudnn') found nothing",
      causes={"cudnn-not-found": 1.0}, why="no libcudnn in the local toolkit's directories"),
    T("cudajl.cudnn.error", "CUDNNError: {name} (code {code})", ["CUDNN_STATUS_NOT_SUPPORTED", "9"],
      "lib/cudnn/src/error.jl", version=H, line=10, kinds={0: "word", 1: "int"}, groups={0: "cudnn_status"},
      cond="a cuDNN call returned a status != CUDNN_STATUS_SUCCESS (name = cudnnGetErrorString)",
      causes={"unknown": 1.0}, why="the cuDNN status (captured) decides"),
    T("cudajl.cudnn.no_valid_algo", "No valid algorithm found, probably bad params for convolution.", [],
      "lib/cudnn/src/legacy/convolution.jl", version=H, line=265, role="context",
      cond="@warn: no cudnnFind*AlgorithmEx result had CUDNN_STATUS_SUCCESS and the requested math type; "
           "algorithm 0 is tried instead",
      causes={"unsupported-config": 0.5, "gpu-out-of-memory": 0.3, "harmless-warning": 0.2},
      why="every benchmarked algorithm failed (unsupported for these parameters, or no workspace memory)"),
    T("cudajl.cudnn.no_backup_algo", "Cannot find backup algorithm for convolution, giving up.", [],
      "lib/cudnn/src/legacy/convolution.jl", version=H, line=267,
      cond="no successful algorithm and algorithm 0 is absent from the perf results",
      causes={"unsupported-config": 0.7, "gpu-out-of-memory": 0.3},
      why="cuDNN has no working algorithm for this convolution (parameters, or memory for the workspace)"),
]
