"""dlib templates (davisking/dlib): the CUDA layer's CHECK_CUDA/CHECK_CUDNN/CHECK_CUBLAS exceptions
(dlib::cuda_error and subclasses), the status strings dlib substitutes for cuDNN/cuBLAS codes, the
convolution's DLIB_CASSERT input checks, and the CMake messages that decide whether dlib uses CUDA.

Every CHECK_* macro throws "Error while calling <#call> in file <__FILE__>:<__LINE__>. code: <n>, reason: <s>";
templates that fix <#call> cover one call site whose failure admits fewer causes.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "3d40bf5790ca9073c160cebb898800d9f33e12ab"
OLD = "ffe78814638d100cbd12e116990afb1903b82b5e"   # last commit with the test_for_cudnn CMake project
SRC = Source(framework="dlib", repo="davisking/dlib", version=f"{H} (master, 2026-05-06)",
             url="https://github.com/davisking/dlib",
             note=f"the cuDNN/CUDA test-project CMake messages are read at {OLD} (removed by 5ce4891406)")
CU = "dlib/cuda/cuda_utils.h"
DN = "dlib/cuda/cudnn_dlibapi.cpp"
BL = "dlib/cuda/cublas_dlibapi.cpp"
GD = "dlib/cuda/gpu_data.cpp"
CM = "dlib/CMakeLists.txt"
WRAP = "Error while calling {call} in file {file}:{line}. code: {code}, reason: {reason}"
HANDLE_SPREAD = {"gpu-out-of-memory": 0.3, "driver-too-old": 0.25, "no-driver": 0.15, "cudnn-version-mismatch": 0.15,
                 "arch-unsupported": 0.15}

TEMPLATES = [
    # --- the CHECK_* wrappers ------------------------------------------------------------------------
    T("dlib.cuda.check", WRAP,
      ["cudaGetDevice(&the_device_id)", "/tmp/pip-install/dlib/cuda/gpu_data.cpp", "221", "35",
       "CUDA driver version is insufficient for CUDA runtime version"], CU, line=30, version=H,
      kinds={2: "int", 3: "int"}, groups={0: "call", 3: "cuda_error_code", 4: "cuda_error_desc"},
      cond="CHECK_CUDA(call) (also CHECK_CUDNN/CHECK_CUBLAS/CHECK_CURAND/CHECK_CUSOLVER, same wording): a call "
           "returned an error status; dlib throws dlib::cuda_error (or its cudnn/cublas/curand/cusolver subclass)",
      causes={"unknown": 1.0},
      why="any CUDA/library failure; the reason (cudaGetErrorString or dlib's status text, captured) and the call "
          "decide: see cuda_errors.json"),
    T("dlib.gpu_data.malloc",
      "Error while calling cudaMalloc(&data, new_size*sizeof(float)) in file {file}:{line}. code: {code}, "
      "reason: {reason}", ["/tmp/pip-install/dlib/cuda/gpu_data.cpp", "238", "2", "out of memory"], GD, line=238,
      version=H, kinds={1: "int", 2: "int"}, groups={2: "cuda_error_code", 3: "cuda_error_desc"},
      cond="gpu_data::set_size: cudaMalloc of a tensor's device buffer failed (CHECK_CUDA)",
      causes={"gpu-out-of-memory": 0.75, "illegal-memory-access": 0.1, "driver-too-old": 0.1, "unknown": 0.05},
      why="the device allocation of a tensor; out of memory unless an earlier sticky error or a failed runtime "
          "initialisation is reported through it"),
    T("dlib.gpu_data.get_device",
      "Error while calling cudaGetDevice(&the_device_id) in file {file}:{line}. code: {code}, reason: {reason}",
      ["/tmp/pip-install/dlib/cuda/gpu_data.cpp", "221", "35",
       "CUDA driver version is insufficient for CUDA runtime version"], GD, line=221, version=H,
      kinds={1: "int", 2: "int"}, groups={2: "cuda_error_code", 3: "cuda_error_desc"},
      cond="gpu_data::set_size: the first CUDA runtime call of a tensor allocation failed",
      causes={"driver-too-old": 0.4, "no-driver": 0.3, "driver-library-mismatch": 0.15, "unknown": 0.15},
      why="cudaGetDevice fails only when the CUDA runtime cannot initialise on this machine"),
    T("dlib.cuda.kernel_launch",
      "Error while calling cudaOccupancyMaxPotentialBlockSize(&num_blocks,&num_threads,K) in file {file}:{line}. "
      "code: {code}, reason: {reason}", ["/tmp/dlib/dlib/cuda/cuda_utils.h", "164", "209",
                                         "no kernel image is available for execution on the device"], CU,
      line=164, version=H, kinds={1: "int", 2: "int"}, groups={2: "cuda_error_code", 3: "cuda_error_desc"},
      cond="launch_kernel: querying a dlib kernel's launch configuration failed (before every dlib CUDA kernel)",
      causes={"arch-unsupported": 0.6, "illegal-memory-access": 0.15, "driver-too-old": 0.15, "unknown": 0.1},
      why="the kernel has no image for this GPU (dlib built for other CUDA architectures) unless an earlier "
          "sticky error is reported here"),
    T("dlib.cudnn.create",
      "Error while calling cudnnCreate(&handles[new_device_id]) in file {file}:{line}. code: {code}, "
      "reason: {reason}", ["/tmp/dlib/dlib/cuda/cudnn_dlibapi.cpp", "106", "1",
                           "CUDA Runtime API initialization failed."], DN, line=106, version=H,
      kinds={1: "int", 2: "int"}, groups={2: "cudnn_status_code", 3: "cudnn_reason"},
      cond="cudnn_context::get_handle: cudnnCreate failed for the current device", causes=HANDLE_SPREAD,
      why="cudnnCreate fails when CUDA cannot initialise, memory runs out, or the cuDNN loaded does not fit the "
          "driver/GPU; the reason decides"),
    T("dlib.cublas.create",
      "Error while calling cublasCreate(&handles[new_device_id]) in file {file}:{line}. code: {code}, "
      "reason: {reason}", ["/tmp/dlib/dlib/cuda/cublas_dlibapi.cpp", "78", "3",
                           "CUDA Resources could not be allocated."], BL, line=78, version=H,
      kinds={1: "int", 2: "int"}, groups={2: "cublas_status_code", 3: "cublas_reason"},
      cond="cublas_context::get_handle: cublasCreate failed for the current device",
      causes={"gpu-out-of-memory": 0.4, "driver-too-old": 0.3, "no-driver": 0.15, "unknown": 0.15},
      why="cublasCreate fails on CUDA initialisation (NOT_INITIALIZED) or allocation (ALLOC_FAILED)"),
    # --- the status strings dlib substitutes --------------------------------------------------------
    T("dlib.status.not_initialized", "CUDA Runtime API initialization failed.", [], DN, line=26, version=H,
      cond="cudnn/cublas/curand_get_error_string: CUDNN_/CUBLAS_/CURAND_STATUS_NOT_INITIALIZED (handle creation)",
      causes={"driver-too-old": 0.35, "no-driver": 0.25, "gpu-out-of-memory": 0.25, "cudnn-version-mismatch": 0.15},
      why="the library could not initialise the CUDA runtime: no usable GPU/driver, a driver older than the "
          "runtime, or no memory for the context"),
    T("dlib.status.alloc_failed", "CUDA Resources could not be allocated.", [], DN, line=28, version=H,
      cond="get_error_string: CUDNN_/CUBLAS_/CUSOLVER_STATUS_ALLOC_FAILED", causes={"gpu-out-of-memory": 1.0},
      why="the library could not allocate GPU memory"),
    T("dlib.cudnn.arch_mismatch", "CUDNN_STATUS_ARCH_MISMATCH: Your GPU is too old and not supported by cuDNN", [],
      DN, line=36, version=H, cond="cudnn_get_error_string: CUDNN_STATUS_ARCH_MISMATCH",
      causes={"arch-unsupported": 1.0}, why="cuDNN has no support for this GPU's compute capability"),
    T("dlib.cudnn.other", "A call to cuDNN failed", [], DN, line=38, version=H,
      cond="cudnn_get_error_string: any status other than NOT_INITIALIZED, ALLOC_FAILED, BAD_PARAM, "
           "EXECUTION_FAILED, NOT_SUPPORTED, ARCH_MISMATCH (INTERNAL_ERROR, MAPPING_ERROR, cuDNN 9 sub-codes, ...)",
      causes={"gpu-out-of-memory": 0.3, "cudnn-version-mismatch": 0.25, "unsupported-config": 0.2,
              "illegal-memory-access": 0.15, "missing-dependency-lib": 0.1},
      why="the status code (the 'code:' number before it) decides; internal errors are mostly allocation "
          "failures, cuDNN 9 codes often sub-library mismatches"),
    T("dlib.cublas.other", "A call to cuBLAS failed", [], BL, line=23, version=H,
      cond="cublas_get_error_string: any status other than NOT_INITIALIZED and ALLOC_FAILED",
      causes={"arch-unsupported": 0.3, "illegal-memory-access": 0.25, "unsupported-config": 0.2,
              "gpu-out-of-memory": 0.15, "unknown": 0.1},
      why="EXECUTION_FAILED/ARCH_MISMATCH/INVALID_VALUE/INTERNAL_ERROR; the 'code:' number decides"),
    T("dlib.cuda.free_failed", "cudaFree() failed. Reason: {reason}", ["an illegal memory access was encountered"],
      GD, line=242, version=H, groups={0: "cuda_error_desc"}, role="context",
      cond="a tensor's device buffer deleter: cudaFree != cudaSuccess (printed to stderr, not thrown)",
      causes={"unknown": 1.0},
      why="cudaFree reports an earlier sticky error (or a reset/lost device); the reason decides"),
    # --- convolution input checks (DLIB_CASSERT) -----------------------------------------------------
    T("dlib.conv.filter_fit", "Filter windows must be small enough to fit into the padded image.", [], DN,
      line=1120, version=H,
      cond="tensor_conv::operator(): filters.nc() > data.nc() + 2*padding_x or filters.nr() > data.nr() + "
           "2*padding_y (same check in cpu_dlib.cpp)",
      causes={"input-too-small": 1.0}, why="the input is smaller than the filter after padding"),
    T("dlib.conv.channels", "Failing expression was filters.k() == data.k().", [], DN, line=1117, version=H,
      cond="tensor_conv::setup/operator(): the filters' channel count differs from the input's (DLIB_CASSERT; "
           "dlib/assert.h prints 'Failing expression was <expr>.')",
      causes={"channel-mismatch": 1.0}, why="an input-channel check and nothing else"),
    # --- build configuration (CMake) ----------------------------------------------------------------
    T("dlib.cmake.no_cudnn", "DID NOT FIND CUDNN", [], CM, line=707, version=H, role="context",
      cond="find_package(CUDNN) failed while DLIB_USE_CUDA was on; dlib is built without CUDA",
      causes={"cudnn-not-found": 0.7, "cpu-only-build": 0.3},
      why="no cuDNN at build time makes the dlib build CPU-only"),
    T("dlib.cmake.no_cuda", "DID NOT FIND CUDA", [], CM, line=714, version=H, role="context",
      cond="no CUDA toolkit with nvcc found while DLIB_USE_CUDA was on",
      causes={"cpu-only-build": 0.6, "missing-dependency-lib": 0.4},
      why="no CUDA toolkit at build time makes the dlib build CPU-only"),
    T("dlib.cmake.disabling_cuda", "Disabling CUDA support for dlib.  DLIB WILL NOT USE CUDA", [], CM, line=708,
      version=H, cond="CUDA or cuDNN not found (or unusable) at configure time; DLIB_USE_CUDA forced OFF",
      causes={"cpu-only-build": 1.0}, why="the dlib being built has no CUDA support (dlib.DLIB_USE_CUDA is False)"),
    T("dlib.cmake.using_cuda",
      "Enabling CUDA support for dlib.  DLIB WILL USE CUDA using cuda arch {archs}.  If you don't want to use that "
      "arch set the CUDAARCHS env var or CMAKE_CUDA_ARCHITECTURES cmake variable.", ["70;75;80;86;89;90"], CM,
      line=703, version=H, role="noise", upto="DLIB WILL USE CUDA",
      cond="CUDA toolkit and cuDNN found at configure time", causes={"harmless-warning": 1.0},
      why="build information; the captured arch list is what the dlib kernels are built for"),
    T("dlib.cmake.cudnn_v5_not_found", "*** cuDNN V5.0 OR GREATER NOT FOUND.", [],
      "dlib/cmake_utils/test_for_cudnn/find_cudnn.txt", line=21, version=OLD, role="context",
      cond="find_library(cudnn)/find_path(cudnn.h) failed (dlib <= 20.0 CMake)",
      causes={"cudnn-not-found": 0.7, "cpu-only-build": 0.3},
      why="no cuDNN found at build time; dlib is built without CUDA"),
    T("dlib.cmake.cudnn_test_failed",
      "*** Found cuDNN, but we failed to compile the dlib/cmake_utils/test_for_cudnn project.", [], CM, line=753,
      version=OLD, role="context",
      cond="a cuDNN was found but the test project using it did not compile (dlib <= 20.0 CMake)",
      causes={"cudnn-version-mismatch": 0.6, "cudnn-not-found": 0.2, "cpu-only-build": 0.2},
      why="the message says an unsupported cuDNN version or a broken cuDNN install; dlib is built without CUDA"),
    T("dlib.cmake.cuda_test_failed",
      "*** CUDA was found but your compiler failed to compile a simple CUDA program so dlib isn't going to use CUDA.",
      [], CM, line=737, version=OLD, role="context",
      cond="the CUDA test project did not compile (nvcc/host compiler mismatch) (dlib <= 20.0 CMake)",
      causes={"cpu-only-build": 0.7, "missing-dependency-lib": 0.3},
      why="dlib is built without CUDA because nvcc cannot build with this host compiler"),
]
