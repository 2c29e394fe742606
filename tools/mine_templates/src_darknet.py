"""darknet templates (AlexeyAB/darknet src/dark_cuda.c; pjreddie/darknet src/cuda.c)."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

AB = "59596d7880f6504768df41d6daa586f5cb2b932f"
PJ = "pjreddie/darknet@f6afaabcdf85f77e7aff2ec55c020c0e297c77f9"
SRC = Source(framework="darknet", repo="AlexeyAB/darknet", version=f"{AB} (yolov4-77)",
             url="https://github.com/AlexeyAB/darknet", note=f"'CUDA Error' wording also in {PJ} src/cuda.c")
DC = "src/dark_cuda.c"
DESC = {"unknown": 1.0}

TEMPLATES = [
    T("darknet.cuda.error", "CUDA Error: %s", ["out of memory"], DC, line=65, version=AB,
      groups={0: "cuda_error_desc"}, cond="check_error: a CUDA runtime call returned != cudaSuccess",
      causes=DESC, why="the runtime description (captured) decides: see cuda_errors.json"),
    T("darknet.cuda.error_prev", "CUDA Error Prev: %s", ["an illegal memory access was encountered"], DC, line=73,
      version=AB, groups={0: "cuda_error_desc"}, cond="cudaGetLastError() reports an earlier asynchronous error",
      causes=DESC, why="an earlier kernel failed; the description decides"),
    T("darknet.cuda.status_location", "CUDA status Error: file: %s: func: %s() line: %d",
      ["./src/dark_cuda.c", "cuda_make_array", "492"], DC, line=81, version=AB, kinds={2: "int"}, role="context",
      cond="check_error_extended prints the call site before check_error", causes=DESC,
      why="a location line; the next 'CUDA Error' line decides"),
    T("darknet.cudnn.error", "cuDNN Error: %s", ["CUDNN_STATUS_BAD_PARAM"], DC, line=193, version=AB,
      kinds={0: "word"}, groups={0: "cudnn_status"}, cond="cudnn_check_error: status != CUDNN_STATUS_SUCCESS",
      causes={"unsupported-config": 0.3, "gpu-out-of-memory": 0.2, "arch-unsupported": 0.2,
              "cudnn-version-mismatch": 0.2, "illegal-memory-access": 0.1},
      why="the CUDNN_STATUS name (captured) decides"),
    T("darknet.cudnn.status_location", "cuDNN status Error in: file: %s function: %s() line: %d",
      ["./src/convolutional_kernels.cu", "forward_convolutional_layer_gpu", "553"], DC, line=210, version=AB,
      kinds={2: "int"}, role="context", cond="cudnn_check_error_extended prints the call site", causes=DESC,
      why="a location line; the 'cuDNN Error' line decides"),
    T("darknet.error.location", "Darknet error location: %s, %s(), line #%d",
      ["./src/dark_cuda.c", "cuda_make_array", "492"], "src/utils.c", line=363, version=AB, kinds={2: "int"},
      role="context", cond="error() prints where the fatal error was raised", causes=DESC,
      why="a location line; the preceding error line decides"),
]
