"""TensorRT open-source parts: the ONNX parser (onnx/onnx-tensorrt, the parsers/onnx submodule of
NVIDIA/TensorRT), the plugins' CUDA/cuDNN/cuBLAS status checks and library loading, and the samples'
(trtexec's) CUDA checks and device messages.

Messages printed by the closed libnvinfer itself (e.g. "Error Code 1: Cuda Runtime (...)") are not in
these sources and are not templated here.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "a892d22267d9cd2dedc1a0893e6892ac901f6d3d"     # NVIDIA/TensorRT, 10.x OSS (2026-07-07)
OLD = "c89bc8368a9d965cb11e6ff2f9ff944772404820"   # NVIDIA/TensorRT, "Update TensorRT to 8.6.1"
OX = "96e781103cfc4adf4a6bb557e94bac8e693f6f4c"    # onnx/onnx-tensorrt, 10.x (2024-06-17)
OX_OLD = "df96128368ef48b25a984f0b21b5166108afd213"  # onnx/onnx-tensorrt before "ONNX-TensorRT 9.1 Update"
ONNX = "onnx/onnx-tensorrt"
SRC = Source(framework="tensorrt", repo="NVIDIA/TensorRT", version=f"{H} (release 10.x OSS, 2026-07-07)",
             url="https://github.com/NVIDIA/TensorRT",
             note=f"ONNX parser templates read in {ONNX} (the parsers/onnx submodule) at {OX}, INT64 warnings at "
                  f"{OX_OLD} (TensorRT <= 9.0); the old samples' 'Cuda failure:' at NVIDIA/TensorRT {OLD} (8.6.1)")
TX = "plugin/vc/checkMacrosPlugin.cpp"
CW = "plugin/common/cudnnWrapper.cpp"
BW = "plugin/common/cublasWrapper.cpp"
SD = "samples/common/sampleDevice.cpp"
IMP = "onnxOpImporters.cpp"

CUDNN_SPREAD = {"gpu-out-of-memory": 0.25, "cudnn-version-mismatch": 0.25, "unsupported-config": 0.2,
                "arch-unsupported": 0.15, "illegal-memory-access": 0.15}
CUBLAS_SPREAD = {"gpu-out-of-memory": 0.3, "arch-unsupported": 0.25, "illegal-memory-access": 0.2,
                 "driver-too-old": 0.15, "unknown": 0.1}

TEMPLATES = [
    # --- plugins: status checks ------------------------------------------------------------------------
    T("trt.plugin.cuda_error", "{file} ({line}) - Cuda Error in {function}: {status} ({message})",
      ["/workspace/TensorRT/plugin/common/kernels/allocator.h", "38", "allocate", "2", "out of memory"], TX, line=117,
      version=H, kinds={1: "int", 2: "word", 3: "int"}, groups={3: "cuda_error_code", 4: "cuda_error_desc"},
      start="Cuda Error in",
      cond="PLUGIN_CUASSERT(status): a CUDA runtime call in a plugin returned != cudaSuccess; CudaError::log "
           "prints '<file> (<line>) - Cuda Error in <function>: <status> (<cudaGetErrorString>)'",
      causes={"unknown": 1.0}, why="any CUDA failure inside a plugin; the code and description decide: see "
                                   "cuda_errors.json"),
    T("trt.plugin.cudnn_error", "{file} ({line}) - Cudnn Error in {function}: {status} ({message})",
      ["/workspace/TensorRT/plugin/common/cudnnWrapper.cpp", "69", "CudnnWrapper", "1",
       "CUDNN_STATUS_NOT_INITIALIZED"], TX, line=117, version=H, kinds={1: "int", 2: "word", 3: "int", 4: "word"},
      groups={3: "cudnn_status_code", 4: "cudnn_status"}, start="Cudnn Error in",
      cond="PLUGIN_CUDNNASSERT(status): a cuDNN call in a plugin (cudnnCreate, batch-norm/instance-norm calls) "
           "returned != CUDNN_STATUS_SUCCESS",
      causes=CUDNN_SPREAD, why="the CUDNN_STATUS name (captured) decides"),
    T("trt.plugin.cublas_error", "{file} ({line}) - cuBLAS Error in {function}: {status} ({message})",
      ["/workspace/TensorRT/plugin/common/bertCommon.h", "191", "cublasGemm", "13",
       "CUBLAS_STATUS_EXECUTION_FAILED"], TX, line=117, version=H, kinds={1: "int", 2: "word", 3: "int", 4: "word"},
      groups={3: "cublas_status_code", 4: "cublas_status"}, start="cuBLAS Error in",
      cond="PLUGIN_CUBLASASSERT(status): a cuBLAS call in a plugin returned != CUBLAS_STATUS_SUCCESS",
      causes=CUBLAS_SPREAD, why="the CUBLAS_STATUS name (captured) decides"),
    # --- plugins: library loading ---------------------------------------------------------------------
    T("trt.plugin.cudnn_load_failed", "Failed to load libcudnn.so.{major}.", ["8"], CW, line=98, version=H,
      kinds={0: "int"}, groups={0: "cudnn_major"},
      cond="getCudnnWrapper: dlopen(\"libcudnn.so.<CUDNN_MAJOR the plugins were built with>\") returned null "
           "(PLUGIN_VALIDATE, printed as 'Validation failed: ...')",
      causes={"cudnn-not-found": 1.0}, why="the cuDNN major the plugins were built against cannot be loaded"),
    T("trt.plugin.cudnn_load_failed_win", "Failed to load cudnn64_{major}.dll.", ["8"], CW, line=98, version=H,
      kinds={0: "int"}, groups={0: "cudnn_major"}, cond="getCudnnWrapper on Windows: LoadLibrary(cudnn64_<major>.dll) "
                                                        "returned null",
      causes={"cudnn-not-found": 1.0}, why="the cuDNN DLL the plugins were built against cannot be loaded"),
    T("trt.plugin.cudnn_symbol", "Fail to load symbol {name} from the cudnn library.", ["cudnnSetTensorNdDescriptorEx"],
      CW, line=49, version=H, kinds={0: "word"}, groups={0: "symbol"},
      cond="CudnnWrapper: dlsym of a cuDNN entry point failed on the library that did load",
      causes={"cudnn-version-mismatch": 1.0},
      why="a libcudnn.so.<major> that lacks an API of the version the plugins were built with"),
    T("trt.plugin.cudnn_blackwell",
      "At least one plugin ({plugin}) that requires cuDNN is being used. TensorRT does not provide cuDNN support for "
      "Blackwell (compute capability: 10.0) and later architectures. Detected compute capability: {major}.{minor}. "
      "Please run on a platform with compute capability < 10.0, or use an alternative to {plugin}.",
      ["InstanceNormalization_TRT", "12", "0", "InstanceNormalization_TRT"], CW, line=94, version=H,
      kinds={1: "int", 2: "int"}, groups={1: "cc_major", 2: "cc_minor"}, upto="and later architectures.",
      cond="getCudnnWrapper: getSmVersion() >= 100 for a plugin that needs cuDNN",
      causes={"arch-unsupported": 1.0}, why="cuDNN-based plugins are not supported on this GPU generation"),
    T("trt.plugin.cublas_load_failed", "Failed to load libcublas.so.{major}.", ["12"], BW, line=98, version=H,
      kinds={0: "int"}, groups={0: "cuda_major"},
      cond="getCublasWrapper: dlopen(\"libcublas.so.<CUDA major>\") returned null",
      causes={"missing-dependency-lib": 1.0}, why="cuBLAS of the CUDA major TensorRT uses cannot be loaded"),
    T("trt.plugin.cublaslt_load_failed", "Failed to load libcublasLt.so.{major}.", ["12"],
      "plugin/common/cublasLtWrapper.cpp", line=98, version=H, kinds={0: "int"}, groups={0: "cuda_major"},
      cond="getCublasLtWrapper: dlopen(\"libcublasLt.so.<CUDA major>\") returned null",
      causes={"missing-dependency-lib": 1.0}, why="cuBLASLt of the CUDA major TensorRT uses cannot be loaded"),
    T("trt.plugin.cublas_handle", "Could not create cublas handle.", [], BW, line=76, version=H,
      cond="CublasWrapper: cublasCreate != CUBLAS_STATUS_SUCCESS",
      causes={"gpu-out-of-memory": 0.45, "driver-too-old": 0.25, "no-driver": 0.15, "driver-library-mismatch": 0.15},
      why="cublasCreate fails on CUDA initialisation (NOT_INITIALIZED) or allocation (ALLOC_FAILED)"),
    # --- samples / trtexec ------------------------------------------------------------------------------
    T("trt.sample.cuda_failure", "Cuda failure at {file}:{line}: {desc}",
      ["/workspace/TensorRT/samples/common/sampleDevice.h", "312", "out of memory"], "samples/common/common.h",
      line=101, version=H, kinds={1: "int"}, groups={2: "cuda_error_desc"},
      cond="CHECK(status) in samples/trtexec: a CUDA runtime call returned != cudaSuccess; the program exits",
      causes={"unknown": 1.0}, why="the cudaGetErrorString text (captured) decides: see cuda_errors.json"),
    T("trt.sample.cuda_failure_old", "Cuda failure: {status}", ["35"], "samples/common/safeCommon.h", line=47,
      version=OLD, groups={0: "cuda_error"},
      cond="CHECK(status) in TensorRT <= 10.9 samples: prints the cudaError_t number (safeCommon.h) or its "
           "description (sampleDevice.h cudaCheck) and aborts",
      causes={"unknown": 1.0}, why="the captured number or description decides: see cuda_errors.json"),
    T("trt.sample.no_devices", "Cannot find any available devices (GPUs)!", [], SD, line=118, version=H,
      cond="setCudaDevice: cudaGetDeviceCount returned <= 0 devices", causes={"no-driver": 1.0},
      why="no GPU is visible to the process"),
    T("trt.sample.no_device_id", "Cannot find device ID {device}!", ["1"], SD, line=145, version=H, kinds={0: "int"},
      groups={0: "device"}, cond="setCudaDevice: the --device index is outside [0, device count)",
      causes={"no-driver": 0.6, "unknown": 0.4},
      why="the requested GPU is not visible (CUDA_VISIBLE_DEVICES, container) or the index is wrong"),
    T("trt.sample.dla_missing", "Trying to use DLA core {core} on a platform that doesn't have any DLA cores",
      ["0"], "samples/common/common.h", line=435, version=H, kinds={0: "int"}, groups={0: "dla_core"},
      cond="enableDLA: --useDLACore given but builder->getNbDLACores() == 0", causes={"arch-unsupported": 1.0},
      why="the device has no DLA hardware"),
    T("trt.sample.pinned_alloc", "cudaMallocHost() call with ptr={ptr} and size={size} returns a cuda error: {desc}",
      ["0x7ffd4c2a9b18", "4194304", "out of memory"], "samples/common/sampleDevice.h", line=375, version=H,
      kinds={0: "hex", 1: "int"}, groups={1: "alloc_bytes", 2: "cuda_error_desc"}, role="noise",
      cond="TrtCudaHostAllocator: cudaMallocHost failed; trtexec falls back to pageable host memory",
      causes={"harmless-warning": 1.0}, why="a warning the sample recovers from (slower copies only)"),
    T("trt.sample.graph_capture", "The CUDA graph capture on the stream has failed.", [],
      "samples/common/sampleDevice.h", line=252, version=H, role="noise",
      cond="TrtCudaGraph::endCaptureOnError: stream capture invalidated; trtexec runs without a CUDA graph",
      causes={"harmless-warning": 1.0}, why="trtexec falls back to running without CUDA graphs"),
    T("trt.python.cuda_call", "CUDA error code={}({})", ["2", "b'cudaErrorMemoryAllocation'"],
      "samples/python/common_runtime.py", line=58, version=H, kinds={0: "int"},
      groups={0: "cuda_error_code", 1: "cuda_error_name"},
      cond="cuda_call(): a cuda-python driver/runtime/NVRTC call returned a non-zero status",
      causes={"unknown": 1.0}, why="the code and error name (captured) decide: see cuda_errors.json"),
    # --- ONNX parser -----------------------------------------------------------------------------------
    T("trt.onnx.no_importer", "No importer registered for op: {op}. Attempting to import as plugin.", ["GridSample"],
      "ModelImporter.cpp", line=166, version=OX, repo=ONNX, kinds={0: "word"}, groups={0: "op"}, role="context",
      cond="parseNode: the node's op_type has no built-in importer; the parser looks for a plugin of that name",
      causes={"unsupported-config": 0.6, "harmless-warning": 0.4},
      why="the op is not natively supported by this TensorRT; harmless when a plugin of that name exists"),
    T("trt.onnx.plugin_not_found", "Plugin not found, are the plugin name, version, and namespace correct?", [],
      IMP, line=6448, version=OX, repo=ONNX,
      cond="FallbackPluginImporter: no plugin creator registered for an op without a built-in importer",
      causes={"unsupported-config": 0.7, "missing-dependency-lib": 0.3},
      why="an ONNX op this TensorRT cannot import, or its plugin library was not loaded"),
    T("trt.onnx.conv_channels", "Kernel weight dimension failed to broadcast to input.", [], IMP, line=837,
      version=OX, repo=ONNX,
      cond="importConv: weight.shape[1] * group != input channels (and the input channels are known)",
      causes={"channel-mismatch": 1.0}, why="the input's channel count does not match the Conv weights"),
    T("trt.onnx.conv_rank",
      "The number of spatial dimensions and the kernel shape doesn't match up for the Conv operator. Number of "
      "spatial dimensions = {n}, number of kernel dimensions = {k}.", ["1", "4"], IMP, line=772, version=OX,
      repo=ONNX, kinds={0: "int", 1: "int"}, groups={0: "found_ndim", 1: "expected_ndim"},
      cond="importConv: input rank - 2 != weight rank - 2",
      causes={"channel-mismatch": 0.7, "unknown": 0.3},
      why="an input of the wrong rank/layout for the Conv weights (same convention as PyTorch's rank checks)"),
    T("trt.onnx.conv_kernel_shape",
      "The size of spatial dimension and the size of kernel shape are not equal for the Conv operator. Size of "
      "spatial dimensions = {a}, size of kernel dimensions = {b}.", ["3", "5"], IMP, line=817, version=OX,
      repo=ONNX, kinds={0: "int", 1: "int"},
      cond="importConv: the kernel_shape attribute disagrees with the weight tensor's spatial size",
      causes={"unsupported-config": 0.7, "unknown": 0.3}, why="an inconsistent Conv node in the model"),
    T("trt.onnx.unsupported_dtype", "Unsupported ONNX data type: {name} ({code})", ["DOUBLE", "11"],
      "importerUtils.cpp", line=330, version=OX, repo=ONNX, kinds={0: "word", 1: "int"}, groups={0: "dtype"},
      cond="convertDtype: an ONNX tensor type with no TensorRT equivalent", causes={"unsupported-dtype": 1.0},
      why="the model uses a data type TensorRT does not implement"),
    T("trt.onnx.initializer_dtype", "Found unsupported datatype ({code}) when importing initializer: {name}",
      ["11", "onnx::Conv_123"], "WeightsContext.cpp", line=406, version=OX, repo=ONNX, kinds={0: "int"},
      groups={0: "onnx_dtype"}, cond="convertOnnxWeights: an initializer of an ONNX type the parser cannot convert",
      causes={"unsupported-dtype": 1.0}, why="a weight tensor in a data type TensorRT does not implement"),
    T("trt.onnx.int64_weights",
      "Your ONNX model has been generated with INT64 weights, while TensorRT does not natively support INT64. "
      "Attempting to cast down to INT32.", [], "onnx2trt_utils.cpp", line=376, version=OX_OLD, repo=ONNX,
      role="noise", cond="convertINT64 (TensorRT <= 9.0): first INT64 initializer; the values are cast to INT32",
      causes={"harmless-warning": 1.0}, why="a warning logged once per model; the parser recovers"),
    T("trt.onnx.int32_clamped", "One or more weights outside the range of INT32 was clamped", [],
      "onnx2trt_utils.cpp", line=403, version=OX_OLD, repo=ONNX, role="noise",
      cond="convertINT64 (TensorRT <= 9.0): an INT64 value outside INT32 was clamped (e.g. INT64_MAX slice ends)",
      causes={"harmless-warning": 1.0}, why="usually slice bounds meaning 'to the end'; the parse continues"),
]
