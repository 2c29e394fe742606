"""ggml CUDA backend templates (as used by llama.cpp, whisper.cpp and Ollama): the CUDA/cuBLAS error
handler, device initialisation, buffer allocation, kernels without code for the GPU's architecture,
backend library loading.

Read in ggml-org/ggml, which carries the same ggml sources as ggml-org/llama.cpp (ggml/src/... there,
src/... here; the two are synced both ways). GGML_CUDA_NAME is written out as "CUDA" (the NVIDIA build;
ROCm/MUSA builds print "ROCm"/"MUSA"); where a message starts with `__func__` and its literal text alone
would be too generic to anchor on, `lead` matches the function name.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "d99724f2b141fed9e1a9f402213506c081433465"      # v0.21.0-2, 2026-08
OLD = "dd92cfd4b188e9202dddb7b85eb8bc1e51cf8288"    # 2023-10, fprintf-based CUDA_CHECK (llama.cpp b14xx era)
MID = "5378ea0d3c2f25bcd330ecb226ad2db454be86d0"    # 2024-06, GGML_CUDA_LOG_* wrappers
SRC = Source(framework="ggml", repo="ggml-org/ggml", version=f"{H} (v0.21.0-2)",
             url="https://github.com/ggml-org/ggml",
             note="same sources as ggml-org/llama.cpp ggml/src/ (synced); older templates name their commit")
CU = "src/ggml-cuda/ggml-cuda.cu"
DESC = {"unknown": 1.0}

TEMPLATES = [
    T("ggml.cuda.error", "CUDA error: %s", ["the provided PTX was compiled with an unsupported toolchain."], CU,
      line=102, version=H, groups={0: "cuda_error_desc"},
      cond="ggml_cuda_error via CUDA_CHECK / CUBLAS_CHECK / CU_CHECK: a CUDA runtime, cuBLAS or driver call "
           "returned != success; text is cudaGetErrorString, cublasGetStatusString (CUDA >= 12) or "
           "cuGetErrorString, then GGML_ABORT",
      causes=DESC, why="the embedded description (captured) decides: see cuda_errors.json"),
    T("ggml.cuda.error_location", "  current device: %d, in function %s at %s:%d",
      ["0", "ggml_cuda_compute_forward", "/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu", "2326"], CU, line=103,
      version=H, kinds={1: "word", 2: "path", 3: "int"}, groups={0: "device", 1: "function"}, role="context",
      cond="second line of ggml_cuda_error: the device and the function whose CUDA call failed",
      causes=DESC, why="a location line; the 'CUDA error:' line before it decides"),
    T("ggml.cuda.init_failed", "%s: failed to initialize CUDA: %s",
      ["ggml_cuda_init", "CUDA driver version is insufficient for CUDA runtime version"], CU, line=222, version=H,
      groups={1: "cuda_error_desc"},
      cond="ggml_cuda_init: cudaGetDeviceCount returned != cudaSuccess; the backend then reports 0 devices and "
           "the program runs on the CPU",
      causes={"no-driver": 0.45, "driver-too-old": 0.3, "driver-library-mismatch": 0.15,
              "forward-compat-unsupported": 0.1},
      why="cudaGetDeviceCount fails for no device/driver (100), a driver older than the runtime (35), a kernel "
          "module/library mismatch (803) or cuda-compat on an unsupported GPU (804); the description decides"),
    T("ggml.cuda.malloc_failed", "%s: allocating %.2f MiB on device %d: cudaMalloc failed: %s",
      ["ggml_backend_cuda_buffer_type_alloc_buffer", "8192.00", "0", "out of memory"], CU, line=894, version=H,
      groups={1: "alloc_mib", 2: "device", 3: "cuda_error_desc"},
      cond="ggml_backend_cuda_buffer_type_alloc_buffer: cudaMalloc (cudaMallocManaged with "
           "GGML_CUDA_ENABLE_UNIFIED_MEMORY) of a weights/KV/compute buffer returned an error",
      causes={"gpu-out-of-memory": 0.9, "unknown": 0.1},
      why="a device buffer could not be allocated, almost always 'out of memory'; the description decides"),
    T("ggml.alloc.buffer_failed", "%s: failed to allocate %s buffer of size %zu",
      ["ggml_gallocr_reserve_n", "CUDA0", "1602224128"], "src/ggml-alloc.c", line=940, version=H,
      kinds={1: "word"}, groups={1: "buffer_type", 2: "alloc_bytes"},
      cond="ggml_gallocr_reserve_n / alloc_tensor_range: ggml_backend_buft_alloc_buffer returned NULL (for a "
           "CUDA<n> buffer type: cudaMalloc failed)",
      causes={"gpu-out-of-memory": 0.8, "unknown": 0.2},
      why="the backend could not allocate the buffer; a CUDA<n> buffer type means device memory, CPU/CUDA_Host "
          "means host memory"),
    T("ggml.cuda.no_device_code",
      "%s:%d: ERROR: CUDA kernel %s has no device code compatible with CUDA arch %d. ggml-cuda.cu was compiled "
      "for: %s", ["/llama.cpp/ggml/src/ggml-cuda/mma.cuh", "580", "ldmatrix", "610", "520,610,700,750"],
      "src/ggml-cuda/common.cuh", line=405, version=H, kinds={2: "word"},
      groups={3: "cuda_arch", 4: "compiled_archs"}, start="ERROR: CUDA kernel",
      cond="no_device_code (NO_DEVICE_CODE): a kernel was compiled for an arch (from __CUDA_ARCH_LIST__) that "
           "lacks the features it needs and ran on this GPU; then __trap()",
      causes={"arch-unsupported": 1.0},
      why="the build has no usable kernel for this GPU's compute capability"),
    T("ggml.cuda.op_failed", "%s: %s failed", ["ggml_cuda_compute_forward", "MUL_MAT"], CU, line=2407, version=H,
      kinds={1: "word"}, groups={1: "op"}, role="context", lead="ggml_cuda_compute_forward",
      cond="cudaGetLastError() != cudaSuccess right after an op's kernels were launched; CUDA_CHECK follows "
           "(the leading '%s' is __func__, matched literally)",
      causes={"arch-unsupported": 0.35, "illegal-memory-access": 0.25, "driver-too-old": 0.2, "unknown": 0.2},
      why="a kernel launch fails for a missing kernel image (209), PTX newer than the driver (222) or an earlier "
          "fault; the 'CUDA error:' line that follows decides"),
    T("ggml.cuda.invalid_device", "%s: invalid device %d", ["ggml_backend_cuda_init", "0"], CU, line=5558, version=H,
      groups={1: "device"}, lead="ggml_backend_cuda_init",
      cond="ggml_backend_cuda_init: device < 0 or >= the number of CUDA devices found (the leading '%s' is "
           "__func__, matched literally)",
      causes={"no-driver": 0.6, "unknown": 0.4},
      why="the requested device does not exist: no GPU is visible (count 0) or the index is out of range"),
    T("ggml.cuda.cublas_error_old", "cuBLAS error %d at %s:%d: %s",
      ["13", "/llama.cpp/ggml-cuda.cu", "6246", "the GPU program failed to execute"], "src/ggml-cuda.cu", line=182,
      version=OLD, kinds={1: "path"}, groups={0: "cublas_status_code"}, upto=" at ",
      cond="CUBLAS_CHECK (2023 sources): a cuBLAS call returned != CUBLAS_STATUS_SUCCESS; the status number (and, "
           "with CUDA >= 12, cublasGetStatusString) is printed, then exit(1)",
      causes={"gpu-out-of-memory": 0.4, "arch-unsupported": 0.2, "illegal-memory-access": 0.2, "unknown": 0.2},
      why="cuBLAS status 1/3 (NOT_INITIALIZED/ALLOC_FAILED) mostly mean no memory left, 8 (ARCH_MISMATCH) an "
          "unsupported GPU, 13/14 a failed kernel; the captured number decides"),
    T("ggml.cuda.error_old", "CUDA error %d at %s:%d: %s",
      ["209", "/llama.cpp/ggml-cuda.cu", "6246", "no kernel image is available for execution on the device"],
      "src/ggml-cuda.cu", line=168, version=OLD, kinds={1: "path"},
      groups={0: "cuda_error_code", 3: "cuda_error_desc"},
      cond="CUDA_CHECK (2023 sources): a CUDA runtime call returned != cudaSuccess; then exit(1)",
      causes=DESC, why="the runtime error number and description (captured) decide: see cuda_errors.json"),
    T("ggml.backend.load_failed", "%s: failed to load %s: %s",
      ["load_backend", "/usr/lib/ollama/libggml-cuda.so",
       "libcudart.so.12: cannot open shared object file: No such file or directory"],
      "src/ggml-backend-reg.cpp", line=224, version=H, kinds={1: "path"}, groups={1: "path", 2: "dlerror"},
      lead="(?:load_backend|ggml_backend_load_best)",
      cond="load_backend / ggml_backend_load_best (line 519): dlopen (LoadLibraryW) of a backend library such as "
           "libggml-cuda.so failed and the load is not silent (explicit ggml_backend_load, or debug builds); the "
           "backend is skipped (the leading '%s' is __func__, matched literally)",
      causes={"missing-dependency-lib": 0.7, "no-driver": 0.2, "unknown": 0.1},
      why="the backend's own dependencies (cudart, cuBLAS, libcuda.so.1) could not be loaded; the dlerror decides"),
    T("ggml.backend.loaded", "%s: loaded %s backend from %s", ["load_backend", "CUDA", "/usr/lib/libggml-cuda.so"],
      "src/ggml-backend-reg.cpp", line=259, version=H, kinds={1: "word", 2: "path"},
      groups={1: "backend", 2: "path"}, role="noise", cond="a backend library was loaded and registered",
      causes={"harmless-warning": 1.0}, why="start-up information"),
    T("ggml.cuda.found_devices", "%s: found %d CUDA devices (Total VRAM: %zu MiB):", ["ggml_cuda_init", "1", "24124"],
      CU, line=263, version=H, groups={1: "device_count"}, upto="devices", role="noise",
      cond="ggml_cuda_init after cudaGetDeviceCount succeeded (older sources print the same head without the "
           "VRAM total)",
      causes={"harmless-warning": 1.0}, why="start-up information; carries the number of CUDA devices"),
    T("ggml.cuda.device_info", "  Device %d: %s, compute capability %d.%d, VMM: %s, VRAM: %zu MiB",
      ["0", "NVIDIA GeForce RTX 3090", "8", "6", "yes", "24124"], CU, line=351, version=H,
      kinds={2: "int", 3: "int"}, groups={1: "gpu_name", 2: "cc_major", 3: "cc_minor"}, upto=", VMM: ",
      role="noise", cond="ggml_cuda_init: one line per device",
      causes={"harmless-warning": 1.0}, why="start-up information; carries the GPU name and compute capability"),
    T("ggml.cuda.pinned_alloc_failed", "%s: failed to allocate %.2f MiB of pinned memory: %s",
      ["ggml_cuda_host_malloc", "512.00", "out of memory"], CU, line=1286, version=H, role="noise",
      cond="cudaMallocHost failed (or GGML_CUDA_NO_PINNED); ggml falls back to pageable host memory (WARN in the "
           f"2024 sources, {MID[:10]}; DEBUG now)",
      causes={"harmless-warning": 1.0}, why="a fallback, not a failure: host buffers are used without pinning"),
    T("ggml.cuda.pinned_alloc_failed_old", "WARNING: failed to allocate %.2f MB of pinned memory: %s",
      ["512.00", "out of memory"], "src/ggml-cuda.cu", line=5739, version=OLD, role="noise", cond="cudaMallocHost failed (2023 sources); a null pointer is returned and host memory is used",
      causes={"harmless-warning": 1.0}, why="a fallback, not a failure (the comment names WSL)"),
]
