"""CuPy templates: CUDA runtime/driver error wrappers, memory pool OOM, CUDA path detection."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "6b6d9563c4f7410cd1866a11b2f71a60dd45a68c"
SRC = Source(framework="cupy", repo="cupy/cupy", version=f"{H} (v14.0.0rc1-1244)", url="https://github.com/cupy/cupy")

TEMPLATES = [
    T("cupy.runtime.error", "%s: %s", ["cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"],
      "cupy_backends/cuda/api/runtime.pyx", line=135, version=H, lead=r"cudaError\w+",
      groups={0: "cuda_error_name", 1: "cuda_error_desc"},
      cond="CUDARuntimeError: a runtime call returned != cudaSuccess ('<cudaGetErrorName>: <cudaGetErrorString>')",
      causes={"unknown": 1.0}, why="the cudaError name (captured) decides: see cuda_errors.json"),
    T("cupy.driver.error", "%s: %s", ["CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"],
      "cupy_backends/cuda/api/driver.pyx", line=59, version=H, lead=r"CUDA_ERROR_\w+",
      groups={0: "cuda_error_name", 1: "cuda_error_desc"},
      cond="CUDADriverError: a driver API call returned != CUDA_SUCCESS ('<name>: <string>')",
      causes={"unknown": 1.0}, why="the CUresult name (captured) decides: see cuda_errors.json"),
    T("cupy.memory.oom", "Out of memory allocating {:,} bytes (allocated so far: {:,} bytes).",
      ["1,073,741,824", "7,516,192,768"], "cupy/cuda/memory.pyx", line=70, version=H,
      groups={0: "alloc_bytes", 1: "allocated_bytes"}, upto="bytes",
      cond="OutOfMemoryError from the memory pool (no limit set)", causes={"gpu-out-of-memory": 1.0},
      why="device memory exhausted"),
    T("cupy.memory.oom_limit",
      "Out of memory allocating {:,} bytes (allocated so far: {:,} bytes, limit set to: {:,} bytes).",
      ["1,073,741,824", "2,147,483,648", "2,147,483,648"], "cupy/cuda/memory.pyx", line=75, version=H,
      groups={0: "alloc_bytes", 2: "limit_bytes"}, cond="OutOfMemoryError with a pool limit set",
      causes={"gpu-out-of-memory": 1.0}, why="the pool limit (or the device) is exhausted"),
    T("cupy.env.no_cuda_path",
      "CUDA path could not be detected. Set CUDA_PATH environment variable if CuPy fails to load.", [],
      "cupy/_environment.py", line=286, version=H, role="context",
      cond="no CUDA toolkit found on Windows outside conda", causes={"missing-dependency-lib": 0.7, "harmless-warning": 0.3},
      why="CuPy may not find the CUDA libraries"),
]
