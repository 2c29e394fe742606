"""PaddlePaddle templates: CUDA/cuDNN version checks at device start-up, dynamic library loading."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

SRC = Source(
    framework="paddle",
    repo="PaddlePaddle/Paddle",
    version="per template (commit of the file read)",
    url="https://github.com/PaddlePaddle/Paddle",
)
RES = "paddle/phi/backends/gpu/gpu_resources.cc"
RES_V = "57462fd6517d3c8acceb6c3ef4b4ed0861bbee32"
DL = "paddle/phi/backends/dynload/dynamic_loader.cc"
DL_V = "f0ac098834dbb01b6934d8404ccdf871668d7061"

TEMPLATES = [
    T("paddle.gpu.device_info",
      "Please NOTE: device: {dev}, GPU Compute Capability: {major}.{minor}, Driver API Version: {dmaj}.{dmin}, "
      "Runtime API Version: {rmaj}.{rmin}", ["0", "8", "6", "12", "2", "11", "8"], RES, version=RES_V,
      kinds={0: "int", 1: "int", 2: "int", 3: "int", 4: "int", 5: "int", 6: "int"},
      groups={1: "cc_major", 2: "cc_minor", 3: "driver_cuda_major", 4: "driver_cuda_minor", 5: "runtime_cuda_major",
              6: "runtime_cuda_minor"}, role="noise",
      cond="LOG_FIRST_N(WARNING) when GPU resources are created", causes={"harmless-warning": 1.0},
      why="start-up information; carries compute capability and CUDA versions"),
    T("paddle.gpu.cudnn_info", "device: {dev}, cuDNN Version: {major}.{minor}.", ["0", "8", "9"], RES,
      version=RES_V, kinds={0: "int", 1: "int", 2: "int"}, groups={1: "cudnn_major", 2: "cudnn_minor"}, role="noise",
      cond="LOG_FIRST_N(WARNING) with the loaded cuDNN version", causes={"harmless-warning": 1.0},
      why="start-up information; carries the loaded cuDNN version"),
    T("paddle.gpu.cuda_cudnn_incompatible",
      "The installed Paddle is compiled with CUDA%d/cuDNN%d,but CUDA/cuDNN version in your machine is "
      "CUDA%d/cuDNN%d. which will cause serious incompatible bug. Please recompile or reinstall Paddle with "
      "compatible CUDA/cuDNN version.", ["12", "8", "11", "7"], RES, version=RES_V,
      groups={0: "compiled_cuda_major", 1: "compiled_cudnn_major", 2: "driver_cuda_major", 3: "cudnn_major"},
      upto="which will cause serious incompatible bug.",
      cond="driver CUDA major < compiled CUDA major and loaded cuDNN major < compiled cuDNN major (Linux)",
      causes={"driver-too-old": 0.5, "cudnn-version-mismatch": 0.5},
      why="the driver's CUDA and the loaded cuDNN are both older than Paddle's build"),
    T("paddle.gpu.cuda_older",
      "WARNING: device: {dev}. The installed Paddle is compiled with CUDA {cmaj}.{cmin}, but CUDA runtime version in "
      "your machine is {lmaj}.{lmin}, which may cause serious incompatible bug. Please recompile or reinstall Paddle "
      "with compatible CUDA version.", ["0", "12", "0", "11", "8"], RES, version=RES_V,
      kinds={0: "int", 1: "int", 2: "int", 3: "int", 4: "int"},
      groups={1: "compiled_cuda_major", 2: "compiled_cuda_minor", 3: "driver_cuda_major", 4: "driver_cuda_minor"},
      upto="which may cause serious incompatible bug.",
      cond="driver-reported CUDA version < compiled CUDA version", causes={"driver-too-old": 1.0},
      why="the 'CUDA runtime version in your machine' is computed from the driver version"),
    T("paddle.gpu.cudnn_older",
      "WARNING: device: {dev}. The installed Paddle is compiled with CUDNN {cmaj}.{cmin}, but CUDNN version in your "
      "machine is {lmaj}.{lmin}, which may cause serious incompatible bug. Please recompile or reinstall Paddle with "
      "compatible CUDNN version.", ["0", "8", "9", "8", "4"], RES, version=RES_V,
      kinds={0: "int", 1: "int", 2: "int", 3: "int", 4: "int"},
      groups={1: "compiled_cudnn_major", 2: "compiled_cudnn_minor", 3: "cudnn_major", 4: "cudnn_minor"},
      upto="which may cause serious incompatible bug.",
      cond="loaded cuDNN (major.minor) < compiled cuDNN (InitDnnHandle)", causes={"cudnn-version-mismatch": 1.0},
      why="the loaded cuDNN is older than Paddle's build"),
    T("paddle.dynload.not_configured",
      "The third-party dynamic library (%s) that Paddle depends on is not configured correctly. (error code is %s)",
      ["libcudnn.so", "libcudnn.so: cannot open shared object file: No such file or directory"], DL, version=DL_V,
      groups={0: "library", 1: "dlerror"},
      cond="dlopen failed in the user path, the default path and the extra paths (GetDsoHandleFromSearchPath)",
      causes={"missing-dependency-lib": 0.5, "cudnn-not-found": 0.4, "no-driver": 0.1},
      why="a CUDA library is missing; the library name decides (libcudnn -> cudnn-not-found, libcuda -> no-driver)"),
    T("paddle.dynload.cublaslt_old",
      "Your CUDA_VERSION less 10.1, not support CublasLt. If you want to use CublasLt, please upgrade CUDA and "
      "rebuild PaddlePaddle.", [], DL, version=DL_V, role="context", cond="built with CUDA < 10.1",
      causes={"missing-dependency-lib": 0.5, "harmless-warning": 0.5}, why="an old CUDA build without cuBLASLt"),
    T("paddle.dynload.nccl_hint",
      "You may need to install 'nccl2' from NVIDIA official website: https://developer.nvidia.com/nccl/nccl-download"
      "before install PaddlePaddle.", [], DL, version=DL_V, role="context", upto="You may need to install 'nccl2'",
      cond="libnccl.so could not be loaded", causes={"missing-dependency-lib": 1.0}, why="NCCL is missing"),
]
