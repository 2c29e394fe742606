"""Numba CUDA target templates: driver discovery and init, driver API errors, NVVM/libdevice/NVRTC loading,
compute-capability checks, performance warnings.

Read in numba/numba (the built-in `numba.cuda` target, still in the tree) and in NVIDIA/numba-cuda (the
out-of-tree target that replaces it); where both print the same text one template covers both.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

NB = "5340f052d01403b12480fa19e596200ee0d0e131"   # numba/numba HEAD (0.68.0dev0)
NC = "b18b944b2f88a4e840424e49a1b0d29488263b40"   # NVIDIA/numba-cuda HEAD
NC_REPO = "NVIDIA/numba-cuda"
SRC = Source(framework="numba", repo="numba/numba", version=f"{NB} (per template; numba-cuda templates at {NC})",
             url="https://github.com/numba/numba",
             note="numba-cuda templates carry repo NVIDIA/numba-cuda and their own commit")

DRV = "numba/cuda/cudadrv/driver.py"
NVVM = "numba/cuda/cudadrv/nvvm.py"
NVRTC = "numba/cuda/cudadrv/nvrtc.py"
NC_DRV = "numba_cuda/numba/cuda/cudadrv/driver.py"
NC_NVVM = "numba_cuda/numba/cuda/cudadrv/nvvm.py"
NC_NVRTC = "numba_cuda/numba/cuda/cudadrv/nvrtc.py"

_CUINIT = {"no-driver": 0.5, "driver-library-mismatch": 0.2, "forward-compat-unsupported": 0.1,
           "hardware-fault": 0.1, "unknown": 0.1}

TEMPLATES = [
    # --- driver discovery and initialisation -----------------------------------------------------------
    T("numba.driver.not_found",
      "\nCUDA driver library cannot be found.\nIf you are sure that a CUDA driver is installed,\n"
      "try setting environment variable NUMBA_CUDA_DRIVER\nwith the file path of the CUDA driver shared library.\n",
      [], DRV, version=NB, line=174, upto="cannot be found.",
      cond="load_driver: dlopen failed for every candidate (libcuda.so, libcuda.so.1, /usr/lib{,64}/libcuda.so*) "
           "and none of them exists as a file, or NUMBA_CUDA_DRIVER=0; numba-cuda "
           f"({NC_DRV}:212) prints the same first line followed by 'Ensure that a compatible NVIDIA driver is "
           "installed and available on your system path.'",
      causes={"no-driver": 0.85, "missing-dependency-lib": 0.15},
      why="libcuda.so (the driver's user-space library) is not on the loader path: no driver, a container "
          "started without the GPU runtime, or (WSL) /usr/lib/wsl/lib missing from the path"),
    T("numba.driver.load_error",
      "\nPossible CUDA driver libraries are found but error occurred during load:\n%s\n",
      ["/usr/lib64/libcuda.so: wrong ELF class: ELFCLASS32"], DRV, version=NB, line=181,
      groups={0: "dlerror"},
      cond="load_driver: a libcuda candidate exists as a file but dlopen raised OSError (errors joined)",
      causes={"missing-dependency-lib": 0.35, "driver-library-mismatch": 0.35, "no-driver": 0.3},
      why="a libcuda file is there but cannot be loaded (wrong architecture, broken or mixed driver install); "
          "the captured dlerror decides"),
    T("numba.driver.disabled",
      "CUDA is disabled due to setting NUMBA_DISABLE_CUDA=1 in the environment, or because CUDA is "
      "unsupported on 32-bit systems.", [], DRV, version=NB, line=234,
      cond="config.DISABLE_CUDA (NUMBA_DISABLE_CUDA=1, or a 32-bit interpreter); also runtime.py:47",
      causes={"cpu-only-build": 0.7, "unknown": 0.3},
      why="CUDA is switched off in this process by configuration, not by the machine"),
    T("numba.driver.init_error", "Error at driver init: {description}",
      ["Call to cuInit results in CUDA_ERROR_NO_DEVICE (100)"], DRV, version=NB, line=258,
      groups={0: "init_error"},
      cond="cuInit(0) raised CudaAPIError (description '<Call to cuInit results in NAME> (<code>)'); a later "
           "API use repeats it as 'Error at driver init: \\n%s:' (line 295), also after a failed driver load; "
           f"same text in numba-cuda ({NC_DRV}:294)",
      causes=_CUINIT,
      why="cuInit fails mostly for no visible GPU (CUDA_ERROR_NO_DEVICE), else a driver/library mismatch "
          "(CUDA_ERROR_UNKNOWN, 803), forward compatibility (804) or a fallen-off GPU; the CUresult name decides"),
    T("numba.driver.api_error", "Call to %s results in %s", ["cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY"], DRV,
      version=NB, line=395, kinds={0: "word", 1: "word"}, groups={0: "cuda_api", 1: "cuda_error_name"},
      cond="a driver API call returned != CUDA_SUCCESS (CudaAPIError, printed '[<code>] Call to <fn> results in "
           "<CUDA_ERROR_NAME>'); runtime.py:87 prints the same with a cudaError name; also numba-cuda",
      causes={"unknown": 1.0},
      why="the CUresult/cudaError name (captured) decides: see cuda_errors.json (e.g. cuMemAlloc + "
          "CUDA_ERROR_OUT_OF_MEMORY is an OOM after numba already flushed its pending frees)"),
    T("numba.driver.missing_function", "Driver missing function: {fname}", ["cuLinkCreate_v2"], DRV, version=NB,
      line=381, kinds={0: "word"}, groups={0: "cuda_api"},
      cond="the loaded libcuda exports neither <fn>_v2 nor <fn> (_find_api, ctypes binding)",
      causes={"driver-too-old": 0.9, "unknown": 0.1},
      why="the driver predates a driver API function this numba uses"),
    T("numba.driver.fork", "CUDA initialized before forking", [], DRV, version=NB, line=390,
      cond="an API call returned CUDA_ERROR_NOT_INITIALIZED in a process whose pid differs from the one that "
           "initialised CUDA (fork after CUDA init)",
      causes={"unknown": 1.0},
      why="a usage error (multiprocessing fork after CUDA init), none of the environment causes"),
    T("numba.device.cc_too_low", "%s has compute capability < %s", ["<CUDA device 0 'b'Tesla K10.G2.8GB''>", "(3, 5)"],
      DRV, version=NB, line=703, kinds={1: "shape"}, groups={1: "min_cc"},
      cond="met_requirement_for_device: device.compute_capability < MIN_REQUIRED_CC (3, 5)",
      causes={"arch-unsupported": 1.0}, why="the GPU is older than the oldest architecture numba supports"),
    T("numba.module.load_error", "cuModuleLoadDataEx error:\n%s",
      ["ptxas application ptx input, line 9; fatal   : Unsupported .version 8.4; current version is '8.2'"], DRV,
      version=NB, line=1565, groups={0: "jit_log"},
      cond="cuModuleLoadDataEx rejected the PTX/cubin numba generated; the driver's JIT error log follows",
      causes={"driver-too-old": 0.5, "arch-unsupported": 0.3, "unknown": 0.2},
      why="the driver's PTX JIT cannot load the module: most often PTX from a newer toolkit than the driver "
          "(Unsupported .version), else code for another architecture"),
    T("numba.linker.mvc_missing",
      "Minor version compatibility requires ptxcompiler and cubinlinker packages to be available", [], DRV,
      version=NB, line=2677,
      cond="NUMBA_CUDA_ENABLE_MINOR_VERSION_COMPATIBILITY=1 but ptxcompiler/cubinlinker cannot be imported",
      causes={"missing-dependency-lib": 1.0},
      why="the packages needed to run a newer toolkit's PTX on an older 11.x/12.x driver are missing"),
    # --- toolkit libraries: NVVM, libdevice, NVRTC --------------------------------------------------------
    T("numba.nvvm.not_found", "libNVVM cannot be found. Do `conda install cudatoolkit`:\n%s",
      ["libnvvm.so: cannot open shared object file: No such file or directory"], NVVM, version=NB, line=142,
      groups={0: "dlerror"}, cond="open_cudalib('nvvm') raised OSError",
      causes={"missing-dependency-lib": 1.0}, why="libNVVM (CUDA toolkit nvcc component) cannot be loaded"),
    T("numba_cuda.nvvm.not_available", "libNVVM is not available", [], NC_NVVM, version=NC, repo=NC_REPO, line=74,
      cond="cuda.bindings.nvvm could not be imported (cuda-bindings or the NVVM library missing)",
      causes={"missing-dependency-lib": 1.0}, why="numba-cuda cannot use libNVVM"),
    T("numba.nvvm.missing_libdevice",
      "Missing libdevice file.\nPlease ensure you have a CUDA Toolkit 11.2 or higher.\nFor CUDA 12, ``cuda-nvcc`` and "
      "``cuda-nvrtc`` are required:", [], NVVM, version=NB, line=419, upto="Missing libdevice file.",
      cond=f"get_libdevice() returned None (no libdevice.10.bc found); numba-cuda ({NC_NVVM}:269) starts with "
           "the same line",
      causes={"missing-dependency-lib": 1.0}, why="the toolkit's libdevice bitcode (cuda-nvcc) is not installed"),
    T("numba.nvvm.ctk_unsupported",
      "CUDA Toolkit {ctk_ver} is unsupported by Numba - {min_major}.{min_minor} is the minimum required version.",
      ["10.2", "11", "2"], NVVM, version=NB, line=365, role="context",
      kinds={0: "ver", 1: "int", 2: "int"}, groups={0: "cuda_toolkit_version"},
      cond="warnings.warn when the cudart version is below the oldest CTK_SUPPORTED entry; no CCs are supported then",
      causes={"missing-dependency-lib": 0.6, "unknown": 0.4},
      why="the CUDA toolkit (cudart) found is older than numba supports; kernels cannot be compiled"),
    T("numba.nvvm.no_supported_ccs",
      "No supported GPU compute capabilities found. Please check your cudatoolkit version matches your CUDA version.",
      [], NVVM, version=NB, line=386,
      cond="find_closest_arch: get_supported_ccs() is empty: cudaRuntimeGetVersion failed (cudart missing or "
           "broken) or the toolkit is below the minimum",
      causes={"missing-dependency-lib": 0.7, "unknown": 0.3},
      why="numba could not read a usable CUDA runtime version"),
    T("numba.nvvm.cc_not_supported", "GPU compute capability %d.%d is not supported(requires >=%d.%d)",
      ["3", "0", "5", "0"], NVVM, version=NB, line=398, groups={0: "cc_major", 1: "cc_minor"},
      cond=f"the device CC is below the lowest CC the toolkit supports; numba-cuda {NC_NVRTC}:201 raises the same",
      causes={"arch-unsupported": 1.0}, why="the installed toolkit dropped this GPU's architecture"),
    T("numba.nvrtc.not_loaded", "NVRTC cannot be loaded", [], NVRTC, version=NB, line=112,
      cond="open_cudalib('nvrtc') raised OSError", causes={"missing-dependency-lib": 1.0},
      why="libnvrtc (cuda-nvrtc) is not installed or not on the loader path"),
    T("numba.nvrtc.call_failed", "Failed to call {name}: {error_name}",
      ["nvrtcCompileProgram", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE"], NVRTC, version=NB, line=131,
      kinds={0: "word", 1: "word"}, groups={0: "nvrtc_call", 1: "nvrtc_error"},
      cond="an NVRTC call returned an error other than NVRTC_ERROR_COMPILATION",
      causes={"missing-dependency-lib": 0.4, "arch-unsupported": 0.3, "unknown": 0.3},
      why="BUILTIN_OPERATION_FAILURE = libnvrtc-builtins missing, INVALID_OPTION = an -arch NVRTC does not know; "
          "the captured name decides (see nvrtc_nvml.json)"),
    T("numba_cuda.nvrtc.cc_below_min",
      "Device compute capability {cc} is less than the minimum supported by NVRTC {version}. Supported compute "
      "capabilities are {ccs}.", ["3.5", "12.9", "5.0, 5.2, 5.3, 6.0"], NC_NVRTC, version=NC, repo=NC_REPO, line=53,
      kinds={0: "ver", 1: "ver"}, groups={0: "compute_capability", 1: "nvrtc_version"},
      upto="is less than the minimum supported by NVRTC",
      cond="_verify_cc_tuple: no NVRTC-supported CC <= the device CC",
      causes={"arch-unsupported": 1.0}, why="the NVRTC in use no longer targets this GPU's architecture"),
    T("numba_cuda.nvrtc.cc_newer",
      "Device compute capability {cc} is not supported by NVRTC {version}. Using {found} instead.",
      ["12.0", "12.6", "9.0"], NC_NVRTC, version=NC, repo=NC_REPO, line=62, role="noise",
      kinds={0: "ver", 1: "ver", 2: "ver"}, groups={0: "compute_capability", 1: "nvrtc_version"},
      cond="warnings.warn: the device CC is newer than any NVRTC supports; the closest lower CC is used",
      causes={"harmless-warning": 1.0},
      why="code is built for an older architecture and JIT-compiled by the driver; it still runs"),
    T("numba_cuda.bindings_missing",
      "NVIDIA CUDA Python bindings not found. Install the 'cuda' package (e.g. pip install \"cuda-bindings==XY.*\" "
      "or \"numba-cuda[cuXY]\", with XY=12 or XY=13).", [], "numba_cuda/numba/cuda/__init__.py", version=NC,
      repo=NC_REPO, line=27, upto="NVIDIA CUDA Python bindings not found.",
      cond="importlib cannot find cuda.bindings when numba.cuda is imported",
      causes={"missing-dependency-lib": 1.0}, why="numba-cuda requires the cuda-bindings package"),
    # --- cuda.detect() and performance warnings -----------------------------------------------------------
    T("numba.detect.not_supported", "[NOT SUPPORTED: CC < 3.5]", [], "numba/cuda/api.py", version=NB, line=487,
      role="context", cond="cuda.detect(): a listed device has compute capability < 3.5",
      causes={"arch-unsupported": 1.0}, why="numba reports the device as unsupported"),
    T("numba.perf.grid_size", "Grid size {grid_size} will likely result in GPU under-utilization due to low occupancy.",
      ["1"], "numba/cuda/dispatcher.py", version=NB, line=538, role="noise", kinds={0: "int"},
      cond="NumbaPerformanceWarning when the launch grid is smaller than CUDA_LOW_OCCUPANCY_WARNINGS' minimum",
      causes={"harmless-warning": 1.0}, why="a performance hint; the kernel runs"),
    T("numba.perf.host_copy", "Host array used in CUDA kernel will incur copy overhead to/from device.", [],
      "numba/cuda/cudadrv/devicearray.py", version=NB, line=888, role="noise",
      cond="NumbaPerformanceWarning when a NumPy host array is passed to a kernel (implicit copy)",
      causes={"harmless-warning": 1.0}, why="a performance hint; the kernel runs"),
]
