"""Apache MXNet templates (src/common/cuda/utils.h, c_api)."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "b84609d3fc73d20929c114eab95faaa56e6c5ede"
SRC = Source(framework="mxnet", repo="apache/mxnet", version=f"{H} (2.0.0.beta1-92)",
             url="https://github.com/apache/mxnet")
UT = "src/common/cuda/utils.h"

TEMPLATES = [
    T("mxnet.cudnn.call", "cuDNN: {status}", ["CUDNN_STATUS_EXECUTION_FAILED"], UT, line=652, version=H,
      kinds={0: "word"}, groups={0: "cudnn_status"}, cond="CUDNN_CALL: a cuDNN call returned != SUCCESS",
      causes={"unsupported-config": 0.3, "gpu-out-of-memory": 0.2, "arch-unsupported": 0.2,
              "cudnn-version-mismatch": 0.2, "illegal-memory-access": 0.1},
      why="the CUDNN_STATUS name (captured) decides"),
    T("mxnet.cuda.driver_unknown", "CUDA Driver: Unknown error {e}", ["999"], UT, line=176, version=H,
      kinds={0: "int"}, groups={0: "cuda_error_code"}, cond="CUDA_DRIVER_CALL failed and cuGetErrorString failed",
      causes={"no-driver": 0.5, "driver-library-mismatch": 0.3, "unknown": 0.2},
      why="the driver could not even describe the error"),
    T("mxnet.cuda.driver_error", "CUDA Driver: {e} {msg}", ["209", "no kernel image is available for execution on the device"],
      UT, line=178, version=H, kinds={0: "int"}, groups={0: "cuda_error_code", 1: "cuda_error_desc"},
      cond="CUDA_DRIVER_CALL: a driver API call returned != CUDA_SUCCESS", causes={"unknown": 1.0},
      why="the CUresult code and description (captured) decide: see cuda_errors.json"),
    T("mxnet.gpu.not_enabled", "GPU is not enabled.", [], "src/c_api/c_api.cc", line=3976, version=H,
      cond="a GPU API was called in a build without USE_CUDA", causes={"cpu-only-build": 1.0},
      why="MXNet was built without CUDA"),
    T("mxnet.rtc.not_enabled", "Compile with USE_CUDA=1 to have CUDA runtime compilation.", [], "src/c_api/c_api.cc",
      line=3658, version=H, cond="CUDA RTC requested in a CPU build", causes={"cpu-only-build": 1.0},
      why="MXNet was built without CUDA"),
]
