"""Ollama templates: NVIDIA GPU discovery (CUDA driver library, cudart and NVML loading, driver and
compute-capability checks), runner start-up failures and out-of-memory.

Two generations are read: the cgo discovery of v0.1-v0.11 (discover/gpu.go with gpu_info_nvcuda.c,
gpu_info_cudart.c, gpu_info_nvml.c; gpu/ before v0.3.x) at tag v0.11.10, the one most logs come from,
and the llama-server based discovery of the current sources. Messages logged through slog appear in
logs as msg="..." with their key=value attributes after them.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "fb30760996871fa9460115c753afd2c60d4ab0f7"      # main, v0.33.0-rc2, 2026-08
V11 = "5994e8e8fdaca3815d5a49f27d3fab33ac9ef51f"    # tag v0.11.10, 2025-09
SRC = Source(framework="ollama", repo="ollama/ollama", version=f"{V11} (v0.11.10) and {H} (v0.33.0-rc2)",
             url="https://github.com/ollama/ollama",
             note="each template names the commit it was read at")
GPU = "discover/gpu.go"
NVCUDA = "discover/gpu_info_nvcuda.c"
CUDART = "discover/gpu_info_cudart.c"

TEMPLATES = [
    T("ollama.discover.no_compatible_gpus", "no compatible GPUs were discovered", [], GPU, line=388, version=V11,
      cond="GetGPUInfo: after probing the CUDA driver library, cudart, ROCm and oneAPI no usable GPU is left "
           "(none found, every library failed to load or initialise, or every GPU was too old); Ollama runs on "
           "the CPU",
      causes={"no-driver": 0.5, "arch-unsupported": 0.2, "driver-too-old": 0.15, "missing-dependency-lib": 0.15},
      why="the summary of a discovery that found nothing; the earlier discovery lines say why"),
    T("ollama.discover.gpu_too_old", "[%d] CUDA GPU is too old. Compute Capability detected: %d.%d", ["0", "3", "5"],
      GPU, line=305, version=V11, groups={1: "cc_major", 2: "cc_minor"},
      cond="the device's compute capability is below CudaComputeMajorMin.CudaComputeMinorMin (5.0 by default); the "
           "GPU is listed as unsupported and skipped",
      causes={"arch-unsupported": 1.0}, why="Ollama's CUDA builds have no kernels for this compute capability"),
    T("ollama.discover.driver_library_mismatch",
      "version mismatch between driver and cuda driver library - reboot or upgrade may be required: library %s",
      ["/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"], GPU, line=609, version=V11, kinds={0: "path"},
      groups={0: "library"},
      cond="cuInit in libcuda returned CUDA_ERROR_INSUFFICIENT_DRIVER (35) or CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)",
      causes={"driver-library-mismatch": 0.7, "driver-too-old": 0.3},
      why="the loaded kernel module and libcuda differ (reboot after an upgrade), or libcuda is newer than the driver"),
    T("ollama.discover.no_nvidia_devices", "no nvidia devices detected by library %s",
      ["/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01"], GPU, line=612, version=V11, kinds={0: "path"},
      groups={0: "library"}, cond="cuInit returned CUDA_ERROR_NO_DEVICE (100)",
      causes={"no-driver": 1.0}, why="the driver sees no GPU in this process (none installed, passed through or visible)"),
    T("ollama.discover.cuda_unknown_error",
      "unknown error initializing cuda driver library %s: %s. see "
      "https://github.com/ollama/ollama/blob/main/docs/troubleshooting.md for more information",
      ["/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07", "cuda driver library init failure: 999"], GPU, line=615,
      version=V11, kinds={0: "path"}, groups={0: "library", 1: "detail"}, upto=". see",
      cond="cuInit returned CUDA_ERROR_UNKNOWN (999)",
      causes={"no-driver": 0.4, "driver-library-mismatch": 0.3, "unknown": 0.3},
      why="the driver is installed but cannot be initialised in this process (nvidia_uvm not loaded, state after "
          "suspend, a half-finished upgrade); the troubleshooting page suggests reloading nvidia_uvm"),
    T("ollama.discover.unable_to_load_cudart", "Unable to load cudart library %s: %s",
      ["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "cuda driver library init failure: 804"], GPU, line=622,
      version=V11, kinds={0: "path"}, groups={0: "library", 1: "detail"},
      cond="cudart_init failed (dlopen, a missing symbol, cudaSetDevice), or cuInit failed with a code other than "
           "35/803/100/999 (the same wording is used for the driver library)",
      causes={"no-driver": 0.3, "missing-dependency-lib": 0.25, "forward-compat-unsupported": 0.15,
              "driver-too-old": 0.15, "unknown": 0.15},
      why="a generic load/initialisation failure; the detail after the path (captured) decides"),
    T("ollama.discover.unable_to_load_nvml", "Unable to load NVML management library %s: %s",
      ["C:\\Windows\\System32\\nvml.dll", "nvml vram init failure: 9"], GPU, line=646, version=V11,
      kinds={0: "path"}, groups={0: "library", 1: "detail"}, role="context",
      cond="nvml_init failed (dlopen or nvmlInit_v2); NVML is only used to refine free VRAM, discovery goes on",
      causes={"harmless-warning": 0.5, "no-driver": 0.25, "driver-library-mismatch": 0.25},
      why="without NVML Ollama still runs; a failing NVML next to a failing libcuda points at the driver"),
    T("ollama.discover.library_load_error", "Unable to load %s library to query for Nvidia GPUs: %s",
      ["/usr/lib/wsl/lib/libcuda.so.1", "libcuda.so.1: cannot open shared object file: No such file or directory"],
      NVCUDA, line=40, version=V11, kinds={0: "path"}, groups={0: "library", 1: "dlerror"},
      cond="dlopen/LoadLibrary of a found libcuda.so*/nvcuda.dll (or libcudart) failed (same text in "
           "gpu_info_cudart.c)",
      causes={"no-driver": 0.4, "missing-dependency-lib": 0.4, "driver-library-mismatch": 0.2},
      why="the driver library (or cudart) found on disk cannot be opened; the dlerror decides"),
    T("ollama.discover.symbol_lookup_failed", "symbol lookup for %s failed: %s",
      ["cuCtxCreate_v3", "/usr/lib/x86_64-linux-gnu/libcuda.so.1: undefined symbol: cuCtxCreate_v3"], NVCUDA,
      line=55, version=V11, kinds={0: "word"}, groups={0: "symbol", 1: "dlerror"},
      cond="dlsym of a required entry point (cuCtxCreate_v3, cuMemGetInfo_v2, cudaGetDeviceCount, nvmlInit_v2, ...) "
           "returned NULL in a library that did load",
      causes={"driver-too-old": 0.8, "unknown": 0.2},
      why="the library predates the entry point Ollama needs, i.e. the driver is too old"),
    T("ollama.discover.cuinit_failure", "cuda driver library init failure: %d", ["804"], NVCUDA, line=71, version=V11,
      groups={0: "cuda_error_code"},
      cond="cuInit(0) returned != CUDA_SUCCESS; the CUresult number is printed",
      causes={"no-driver": 0.4, "driver-library-mismatch": 0.25, "forward-compat-unsupported": 0.15, "unknown": 0.2},
      why="cuInit fails for no device (100), a module/library mismatch (803), cuda-compat on an unsupported GPU (804) "
          "or an unusable driver (999); the captured number decides"),
    T("ollama.discover.cudart_driver_too_old",
      "your nvidia driver is too old or missing.  If you have a CUDA GPU please upgrade to run ollama", [], CUDART,
      line=63, version=V11,
      cond="cudaSetDevice(0) in the bundled cudart returned cudaErrorInsufficientDriver (35)",
      causes={"driver-too-old": 0.6, "no-driver": 0.4},
      why="cudart reports 35 when the driver is older than its CUDA version or when no driver is loaded"),
    T("ollama.discover.cudart_init_failure", "cudart init failure: %d", ["100"], CUDART, line=66, version=V11,
      groups={0: "cuda_error_code"}, cond="cudaSetDevice(0) in cudart returned an error other than 35",
      causes={"no-driver": 0.5, "driver-library-mismatch": 0.2, "forward-compat-unsupported": 0.1, "unknown": 0.2},
      why="the runtime cannot use device 0; the captured cudaError number decides"),
    T("ollama.discover.device_context_failed", "cuda driver library failed to get device context %d", ["2"], NVCUDA,
      line=180, version=V11, groups={0: "cuda_error_code"},
      cond="nvcuda_bootstrap: cuCtxCreate_v3 on the device returned != CUDA_SUCCESS; the GPU is skipped",
      causes={"gpu-out-of-memory": 0.3, "driver-library-mismatch": 0.2, "unknown": 0.5},
      why="a context cannot be created when the GPU's memory is full (2), the device is exclusive/busy (46) or the "
          "driver is broken; the captured number decides"),
    T("ollama.discover.nvidia_memory_lookup", "error looking up nvidia GPU memory", [], GPU, line=274, version=V11,
      role="context", cond="cudart_bootstrap / nvcuda_bootstrap / nvml_get_free set an error for a device",
      causes={"unknown": 1.0}, why="the 'error' attribute after it carries the failing call and its code"),
    T("ollama.discover.old_cuda_driver", "old CUDA driver detected - please upgrade to a newer driver", [],
      "discover/cuda_common.go", line=52, version=V11, role="context",
      cond="cudaVariant: the driver supports CUDA < 12.0 or exactly 12.0; the cuda_v11 runner is used instead",
      causes={"driver-too-old": 1.0}, why="the driver predates CUDA 12.1"),
    T("ollama.discover.nvidia_driver_too_old", "NVIDIA driver too old", [], "discover/cuda_compat.go", line=65,
      version=H,
      cond="filterOldCUDADriver: the bundled CUDA 12.4+ runtime needs driver >= 550 (compressed fatbins), or a GPU "
           "with compute capability < 7 needs driver >= 570 to JIT its PTX; the device is dropped",
      causes={"driver-too-old": 1.0}, why="the installed NVIDIA driver is below the floor of Ollama's CUDA runtime"),
    T("ollama.discover.cc_not_compiled", "skipping CUDA device — compute capability not in compiled architectures", [],
      "discover/llama_server.go", line=299, version=H,
      cond="the device's compute capability is not in the CUDA architectures llama-server reports it was built for",
      causes={"arch-unsupported": 1.0}, why="the CUDA backend has no kernels for this GPU"),
    T("ollama.discover.llama_server_failure", "failure during llama-server GPU discovery", [], "discover/runner.go",
      line=522, version=H,
      cond="bootstrap discovery: running llama-server --list-devices (and the Metal retry) failed; no GPU devices",
      causes={"no-driver": 0.3, "missing-dependency-lib": 0.2, "driver-too-old": 0.1, "unknown": 0.4},
      why="the GPU backend could not start; the 'error' and 'detail' attributes carry the backend's own message"),
    T("ollama.discover.visible_devices_override", "user overrode visible devices", [], "discover/runner.go", line=722,
      version=H, role="context",
      cond="CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, GGML_VK_VISIBLE_DEVICES, "
           "GPU_DEVICE_ORDINAL or HSA_OVERRIDE_GFX_VERSION is set",
      causes={"no-driver": 0.5, "harmless-warning": 0.5},
      why="a visible-devices setting can hide every GPU (empty or -1); harmless when it names real GPUs"),
    T("ollama.llm.runner_terminated", "llama runner process has terminated: %w",
      ["CUDA error: out of memory"], "llm/server.go", line=1260, version=V11, groups={0: "runner_error"},
      cond="WaitUntilRunning: the runner process exited while loading; the error is the runner's last error line "
           "(lines starting with 'error:', 'CUDA error', 'error loading model', ...) or its exit status",
      causes={"gpu-out-of-memory": 0.3, "arch-unsupported": 0.15, "driver-too-old": 0.1,
              "missing-dependency-lib": 0.1, "unknown": 0.35},
      why="the runner died during start-up; the captured error after the colon decides"),
    T("ollama.llm.runner_stopped",
      "model runner has unexpectedly stopped, this may be due to resource limitations or an internal error, check "
      "ollama server logs for details", [], "llm/llama_server.go", line=1644, version=H,
      cond="a completion/embedding request found the runner process gone (v0.11.10 llm/server.go:1459 has the same "
           "text; current sources append the last error line)",
      causes={"gpu-out-of-memory": 0.4, "illegal-memory-access": 0.1, "unknown": 0.5},
      why="the runner crashed mid-request, most often out of memory; the server log holds the real error"),
    T("ollama.llm.startup_oom", "llama-server reported out-of-memory during startup: %s",
      ["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 5120.00 MiB on device 0: cudaMalloc failed: out of memory"],
      "llm/llama_server.go", line=1372, version=H, groups={0: "runner_error"},
      cond="the llama-server's last error line matched an out-of-memory substring ('out of memory', 'cudaMalloc "
           "failed', 'failed to allocate', ...) while loading",
      causes={"gpu-out-of-memory": 0.85, "unknown": 0.15},
      why="the model (or its context) does not fit in GPU memory; 'CPU buffer' in the captured line means host RAM"),
    T("ollama.llm.flash_attention_unsupported", "flash attention enabled but not supported by gpu", [],
      "llm/server.go", line=204, version=V11, role="noise",
      cond="OLLAMA_FLASH_ATTENTION=1 but a GPU (e.g. compute capability < 7.0) does not support it; it is turned off",
      causes={"harmless-warning": 1.0}, why="a warning: the model runs without flash attention"),
    T("ollama.ml.offloaded_layers", "offloaded %d/%d layers to GPU", ["33", "33"], "ml/backend/ggml/ggml.go",
      line=498, version=V11, groups={0: "gpu_layers", 1: "total_layers"}, role="noise",
      cond="slog.Info after the layers were assigned (llama.cpp's llm_load_tensors prints the same text)",
      causes={"harmless-warning": 1.0}, why="start-up information; 0 offloaded layers means the model runs on the CPU"),
]
