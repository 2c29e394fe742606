"""CTranslate2 templates: CUDA/cuBLAS/cuDNN checks, the cuBLAS stub loader, compute-type resolution,
device and dtype dispatch, Conv1D checks."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "0d8bcd362ac75ef860ef161d6f0efad0ae439ff0"
SRC = Source(framework="ctranslate2", repo="OpenNMT/CTranslate2", version=f"{H} (v4.8.1)",
             url="https://github.com/OpenNMT/CTranslate2",
             note="THROW_RUNTIME_ERROR prefixes '<file>:<line>: ' in debug builds only (include/ctranslate2/utils.h)")
UTILS_H = "src/cuda/utils.h"
STUB = "src/cuda/cublas_stub.cc"
DESC = {"unknown": 1.0}

TEMPLATES = [
    T("ct2.cuda.error", "CUDA failed with error {desc}", ["out of memory"], UTILS_H, line=72, version=H,
      groups={0: "cuda_error_desc"},
      cond="CUDA_CHECK: a CUDA runtime call (cudaGetDevice, cudaSetDevice, cudaMallocAsync, the CUB caching "
           "allocator's DeviceAllocate, cudaGetDeviceProperties, ...) returned != cudaSuccess; text is "
           "cudaGetErrorString(code)",
      causes=DESC, why="the runtime description (captured) decides: see cuda_errors.json"),
    T("ct2.cublas.error", "cuBLAS failed with status {status}", ["CUBLAS_STATUS_NOT_INITIALIZED"], UTILS_H, line=80,
      version=H, kinds={0: "word"}, groups={0: "cublas_status"},
      cond="CUBLAS_CHECK: a cuBLAS call (cublasCreate/cublasSetStream in the per-thread handle, the GEMM calls) "
           "returned != CUBLAS_STATUS_SUCCESS; text is the CUBLAS_STATUS_* name",
      causes={"gpu-out-of-memory": 0.4, "arch-unsupported": 0.2, "illegal-memory-access": 0.2,
              "driver-library-mismatch": 0.1, "unknown": 0.1},
      why="cublasCreate fails with NOT_INITIALIZED/ALLOC_FAILED mostly when no device memory is left, ARCH_MISMATCH "
          "or EXECUTION_FAILED on an unsupported GPU or after a fault; the captured status decides"),
    T("ct2.cudnn.error", "cuDNN failed with status {status}", ["CUDNN_STATUS_NOT_SUPPORTED"], UTILS_H, line=88,
      version=H, kinds={0: "word"}, groups={0: "cudnn_status"},
      cond="CUDNN_CHECK: a cuDNN call (cudnnCreate in the per-thread handle, the Conv1D descriptors, "
           "cudnnConvolutionForward / BiasActivationForward) returned != CUDNN_STATUS_SUCCESS; text is "
           "cudnnGetErrorString(status)",
      causes={"gpu-out-of-memory": 0.25, "unsupported-config": 0.25, "cudnn-version-mismatch": 0.2,
              "arch-unsupported": 0.15, "illegal-memory-access": 0.15},
      why="cudnnCreate fails when memory is short or cuDNN does not match CUDA; descriptor and forward calls fail on "
          "unsupported configurations; the captured status decides"),
    T("ct2.cublas.not_found", "Library {library} is not found or cannot be loaded", ["libcublas.so.12"], STUB,
      line=66, version=H, kinds={0: "path"}, groups={0: "library"},
      cond="the cuBLAS stub's dlopen(\"libcublas.so.<CUBLAS_VER_MAJOR>\") (LoadLibraryA(\"cublas64_<major>.dll\") on "
           "Windows, after SetDllDirectory(%CUDA_PATH%\\bin)) returned NULL; the same text for libnccl.so.<major> "
           "(src/cuda/nccl_stub.cc) and the MPI stub",
      causes={"missing-dependency-lib": 1.0},
      why="the cuBLAS (or NCCL/MPI) shared library of the major CTranslate2 was built for is not on the loader path"),
    T("ct2.cublas.symbol", "Cannot load symbol {name} from library {library}", ["cublasGemmEx", "libcublas.so.12"],
      STUB, line=30, version=H, kinds={0: "word", 1: "path"}, groups={0: "symbol", 1: "library"},
      cond="dlsym/GetProcAddress found no such symbol in the cuBLAS (or NCCL/MPI) library that was loaded",
      causes={"missing-dependency-lib": 0.8, "unknown": 0.2},
      why="the library that was found is not the cuBLAS build CTranslate2 expects (another copy of the same major)"),
    T("ct2.cublas.loaded", "Loaded cuBLAS library version {}.{}.{}", ["12", "4", "5"], STUB, line=49, version=H,
      kinds={0: "int", 1: "int", 2: "int"}, groups={0: "cublas_major", 1: "cublas_minor"}, role="noise",
      cond="spdlog::info after the cuBLAS library was opened", causes={"harmless-warning": 1.0},
      why="start-up information; carries the loaded cuBLAS version"),
    T("ct2.device.cpu_only_build", "This CTranslate2 package was not compiled with CUDA support", [], "src/devices.cc",
      line=20, version=H, cond="device='cuda' requested in a build without CT2_WITH_CUDA",
      causes={"cpu-only-build": 1.0}, why="the installed package is a CPU-only build"),
    T("ct2.compute_type.unsupported",
      "Requested {compute_type} compute type, but the target device or backend do not support efficient "
      "{compute_type} computation.", ["float16", "float16"], "src/types.cc", line=152, version=H,
      kinds={0: "word", 1: "word"}, groups={0: "compute_type"},
      cond="resolve_compute_type without fallback: float16 needs CUDA with FP16 tensor cores (cc >= 7.0) unless "
           "CT2_CUDA_ALLOW_FP16; bfloat16 needs cc >= 8.0; int8 needs cc 6.1 or >= 7.0 on CUDA or an int8 GEMM "
           "backend on the CPU; int16 only on the CPU with MKL; float16/bfloat16 never on the CPU",
      causes={"unsupported-dtype": 0.6, "arch-unsupported": 0.4},
      why="the requested compute type is not implemented on this device: on the CPU a dtype problem, on the GPU "
          "the compute capability is too low for it"),
    T("ct2.compute_type.converted",
      "The compute type inferred from the saved model is {}, but the target device or backend do not support "
      "efficient {} computation. The model weights have been automatically converted to use the {} compute type "
      "instead.", ["float16", "float16", "float32"], "src/models/model.cc", line=886, version=H,
      kinds={0: "word", 1: "word", 2: "word"}, groups={0: "saved_compute_type", 2: "effective_compute_type"},
      role="noise", upto="do not support efficient",
      cond="compute_type='default' and the saved type is not supported on the device; the weights are converted",
      causes={"harmless-warning": 1.0}, why="a warning: the model still loads, in another compute type"),
    T("ct2.flash_attention.arch", "FlashAttention only supports Ampere GPUs or newer.", [], "src/models/model.cc",
      line=857, version=H, cond="flash_attention=True and the device's compute capability major < 8",
      causes={"arch-unsupported": 1.0}, why="the GPU is older than Ampere (cc < 8.0)"),
    T("ct2.awq.arch", "AWQ Gemm does not support for cuda arch < 7.5", [], "src/ops/awq/gemm.cc", line=17, version=H,
      cond="AWQ GEMM compiled for __CUDA_ARCH__ < 750 (the running GPU is older than Turing)",
      causes={"arch-unsupported": 1.0}, why="AWQ kernels need compute capability >= 7.5"),
    T("ct2.allocator.async_unsupported", "The asynchronous CUDA allocator requires CUDA >= 11.2", [],
      "src/cuda/allocator.cc", line=157, version=H,
      cond="CT2_CUDA_ALLOCATOR=cuda_malloc_async while a visible device reports no memory-pool support "
           "(cudaDevAttrMemoryPoolsSupported == 0), or the build has no async allocator (CUDA < 11.2)",
      causes={"driver-too-old": 0.5, "unknown": 0.5},
      why="memory pools need a driver/runtime >= 11.2; some platforms lack them even then"),
    T("ct2.allocator.using", "Using CUDA allocator: {}", ["cuda_malloc_async"], "src/cuda/allocator.cc", line=165,
      version=H, kinds={0: "word"}, groups={0: "allocator"}, role="noise",
      cond="spdlog::info once, when the CUDA allocator is chosen", causes={"harmless-warning": 1.0},
      why="start-up information"),
    T("ct2.cudnn.no_dtype", "No cuDNN data type for type {dtype}", ["int16"], "src/cuda/utils.cc", line=170,
      version=H, kinds={0: "word"}, groups={0: "dtype"},
      cond="get_cudnn_data_type: the Conv1D input dtype is not float32/float16/bfloat16/int32/int8",
      causes={"unsupported-dtype": 1.0}, why="cuDNN has no data type for this tensor dtype"),
    T("ct2.dispatch.fp16_cpu", "FP16 {op} is only supported on GPU", ["Conv1D"], "src/dispatch.h", line=30,
      version=H, kinds={0: "word"}, groups={0: "op"},
      cond="DEVICE_AND_FLOAT_DISPATCH: a float16 tensor reached an op on a device other than CUDA",
      causes={"unsupported-dtype": 1.0}, why="float16 ops are implemented only on the GPU"),
    T("ct2.dispatch.bf16_cpu", "BF16 {op} is only supported on GPU", ["Conv1D"], "src/dispatch.h", line=36,
      version=H, kinds={0: "word"}, groups={0: "op"},
      cond="DEVICE_AND_FLOAT_DISPATCH: a bfloat16 tensor reached an op on a device other than CUDA",
      causes={"unsupported-dtype": 1.0}, why="bfloat16 ops are implemented only on the GPU"),
    T("ct2.dispatch.non_float", "{op} only supports float types", ["Conv1D"], "src/dispatch.h", line=12,
      version=H, kinds={0: "word"}, groups={0: "op"},
      cond="DEVICE_AND_FLOAT_DISPATCH: the input dtype is not float32/float16/bfloat16 (e.g. int8 or int32)",
      causes={"unsupported-dtype": 1.0}, why="the op (Conv1D among them) is implemented for float types only"),
    T("ct2.conv1d.quantization", "Quantization is not supported in this Conv1D implementation", [],
      "src/ops/conv1d_cudnn_gpu.cu", line=15, version=H,
      cond="Conv1D::compute called with a qscale (int8-quantized convolution weights) in the cuDNN (and CPU) "
           "implementation",
      causes={"unsupported-dtype": 0.6, "unsupported-config": 0.4},
      why="this Conv1D backend cannot run quantized weights"),
    T("ct2.conv1d.dilation", "Dilation is not supported in this Conv1D implementation", [],
      "src/ops/conv1d_cpu.cc", line=134, version=H, cond="the CPU Conv1D (im2col path) with dilation != 1",
      causes={"unsupported-config": 1.0}, why="this Conv1D backend cannot run dilated convolutions"),
    T("ct2.storage.dtype", "expected storage to be of type {expected}, but is of type {got}", ["float32", "float16"],
      "include/ctranslate2/storage_view.h", line=14, version=H, kinds={0: "word", 1: "word"},
      groups={0: "expected_dtype", 1: "got_dtype"},
      cond="ASSERT_DTYPE: a StorageView is read as a dtype other than the one it holds",
      causes={"dtype-mismatch": 1.0}, why="two tensors (or a tensor and an op) disagree on the dtype"),
    T("ct2.storage.non_contiguous", "StorageView does not support arrays with non contiguous memory", [],
      "python/cpp/storage_view.cc", line=71, version=H,
      cond="StorageView.from_array: the array interface (__array_interface__/__cuda_array_interface__) has strides",
      causes={"non-contiguous-input": 1.0}, why="the input array is a strided view; make it contiguous"),
]
