"""XLA StreamExecutor (CUDA) templates: cuDNN start-up, driver diagnostics, cuInit, DSO loading.

These files lived in tensorflow/stream_executor/ before moving to openxla/xla; TensorFlow and
JAX logs print them under either path.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

SRC = Source(
    framework="xla",
    repo="openxla/xla",
    version="per template (commit of the file read)",
    url="https://github.com/openxla/xla",
    note="TensorFlow 1.x/2.x logs print the same messages from tensorflow/stream_executor/cuda/.",
)
DNN = "xla/stream_executor/cuda/cuda_dnn.cc"
DNN_V = "a51b0f552430fd60df6680c84e94219a39c0b459"
DIAG = "xla/stream_executor/cuda/cuda_diagnostics.cc"
DIAG_V = "16569562fc04a1d1eadcd6a79f2269c1ccf4c421"
DRV = "xla/stream_executor/cuda/cuda_driver.cc"
IDX = "code-search excerpt of the stored index (same text in TF and XLA versions)"
HANDLE = {"gpu-out-of-memory": 0.35, "cudnn-version-mismatch": 0.2, "arch-unsupported": 0.15,
          "driver-too-old": 0.15, "cudnn-not-found": 0.15}

TEMPLATES = [
    T("xla.dnn.version_mismatch",
      "Loaded runtime CuDNN library: {loaded} but source was compiled with: {source}.  CuDNN library needs to "
      "have matching major version and equal or higher minor version. If using a binary install, upgrade your "
      "CuDNN library.  If building from sources, make sure the library loaded at runtime is compatible with the "
      "version specified during compile configuration.", ["8.5.0", "8.6.0"], DNN, version=DNN_V,
      kinds={0: "ver", 1: "ver"}, groups={0: "cudnn_loaded", 1: "cudnn_compiled"}, upto=".  CuDNN library",
      cond="!IsSourceCompatibleWithCudnnLibrary: loaded major != compiled major or loaded minor < compiled minor",
      causes={"cudnn-version-mismatch": 1.0},
      why="the cuDNN loaded at run time is older (or another major) than the one compiled in"),
    T("xla.dnn.error_before_handle",
      "There was an error before creating cudnn handle ({code}): {name} : {desc}",
      ["209", "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device"],
      DNN, version=DNN_V, kinds={0: "int", 1: "word"},
      groups={0: "cuda_error_code", 1: "cuda_error_name", 2: "cuda_error_desc"},
      cond="cudaPeekAtLastError() != cudaSuccess when CudnnSupport::Init starts",
      causes={"arch-unsupported": 0.4, "driver-too-old": 0.2, "gpu-out-of-memory": 0.2, "unknown": 0.2},
      why="a CUDA error was already pending; its name (captured) decides"),
    T("xla.dnn.loaded_version", "Loaded cuDNN version {version}", ["90300"], DNN, version=DNN_V,
      kinds={0: "int"}, groups={0: "cudnn_version_int"}, role="noise",
      cond="LOG(INFO) after a successful cudnnCreate", causes={"harmless-warning": 1.0},
      why="start-up information; carries the loaded cuDNN version"),
    T("xla.dnn.create_handle_failed", "Could not create cudnn handle: {status}", ["CUDNN_STATUS_INTERNAL_ERROR"],
      DNN, version=DNN_V, kinds={0: "word"}, groups={0: "cudnn_status"},
      cond="cudnnCreate() != CUDNN_STATUS_SUCCESS in CudnnSupport::Init",
      causes=HANDLE,
      why="cuDNN could not start: no memory left for its handle (often TF/XLA preallocation), a cuDNN/driver "
          "too old for the GPU, or a broken cuDNN install; the status and 'Memory usage' line decide"),
    T("xla.dnn.memory_usage", "Memory usage: {free} bytes free, {total} bytes total.", ["0", "8589934592"], DNN,
      version=DNN_V, kinds={0: "int", 1: "int"}, groups={0: "free_bytes", 1: "total_bytes"}, role="context",
      cond="logged right after a failed cudnnCreate", causes={"gpu-out-of-memory": 0.6, "unknown": 0.4},
      why="free memory near zero means the handle failed for lack of memory"),
    T("xla.dnn.insufficient_driver", "Possibly insufficient driver version: {version}", ["410.48.0"], DNN,
      version=DNN_V, kinds={0: "ver"}, groups={0: "driver_version"}, role="context",
      cond="cudnnCreate returned CUDNN_STATUS_NOT_INITIALIZED and the kernel driver version was read",
      causes={"driver-too-old": 0.7, "cudnn-version-mismatch": 0.3},
      why="NOT_INITIALIZED at handle creation with a driver that may be too old for this cuDNN"),
    T("xla.dnn.driver_version_error", "Error retrieving driver version: {status}",
      ["PERMISSION_DENIED: could not open driver version path for reading: /proc/driver/nvidia/version"], DNN,
      version=DNN_V, role="context", cond="NOT_INITIALIZED and FindKernelDriverVersion failed",
      causes={"no-driver": 0.6, "unknown": 0.4}, why="the kernel driver version cannot be read"),
    T("xla.dnn.no_handle", "cudnn library could not create a handle: {status}", ["CUDNN_STATUS_NOT_INITIALIZED"],
      DNN, version=DNN_V, kinds={0: "word"}, groups={0: "cudnn_status"}, cond="CudnnSupport::Init returns error",
      causes=HANDLE, why="the same failure as 'Could not create cudnn handle'"),
    T("xla.dnn.compilation_handle", "Creation of compilation cudnn handle failed.", [], DNN, version=DNN_V,
      cond="the second cudnnCreate (compilation handle) failed", causes=HANDLE,
      why="a second cuDNN handle could not be created"),
    T("xla.dnn.register_factory", "Unable to register cuDNN factory: {msg}",
      ["Attempting to register factory for plugin cuDNN when one has already been registered"], DNN,
      version=DNN_V, role="noise", cond="the cuDNN plugin registered twice (two frameworks in one process)",
      causes={"harmless-warning": 1.0}, why="duplicate registration; the first factory is used"),
    T("xla.dnn.unknown_status", "<unknown cudnn status: {n}>", ["3007"], DNN, version=DNN_V, kinds={0: "int"},
      groups={0: "cudnn_status_number"}, cond="CudnnStatusToString got a status outside the compiled enum",
      causes={"cudnn-version-mismatch": 0.7, "unknown": 0.3},
      why="a status the headers do not know: the loaded cuDNN differs from the compiled one"),
    T("xla.dnn.init_failed",
      "DNN library initialization failed. Look at the errors above for more details.", [],
      "xla/service/gpu/ (GetDnnVersionInfo and the GPU compiler; file not pinned)", version=IDX,
      cond="stream_exec->AsDnn() == nullptr (CudnnSupport::Init failed earlier)",
      causes={"gpu-out-of-memory": 0.3, "cudnn-version-mismatch": 0.25, "cudnn-not-found": 0.15,
              "arch-unsupported": 0.15, "driver-too-old": 0.15},
      why="a generic status: the cuDNN start-up lines above (version mismatch, handle status, memory usage) decide"),
    # ---- cuda_diagnostics.cc ---------------------------------------------------------------------
    T("xla.diag.kernel_dso_mismatch",
      "kernel version {kernel} does not match DSO version {dso} -- cannot find working devices in this "
      "configuration", ["535.104.5", "545.23.8"], DIAG, version=DIAG_V, groups={0: "kernel_driver_version",
                                                                            1: "dso_driver_version"},
      cond="WarnOnDsoKernelMismatch: /proc/driver/nvidia/version != libcuda.so.1 version",
      causes={"driver-library-mismatch": 1.0}, why="the kernel module and the user-space driver differ"),
    T("xla.diag.kernel_dso_match", "kernel version seems to match DSO: {version}", ["535.104.5"], DIAG,
      version=DIAG_V, kinds={0: "ver"}, role="noise", cond="kernel and DSO versions equal",
      causes={"harmless-warning": 1.0}, why="diagnostic information, not a failure"),
    T("xla.diag.libcuda_version", "libcuda reported version is: {version}", ["535.104.5"], DIAG, version=DIAG_V,
      groups={0: "dso_driver_version"}, role="noise", cond="LogDriverVersionInformation",
      causes={"harmless-warning": 1.0}, why="diagnostic information"),
    T("xla.diag.kernel_version", "kernel reported version is: {version}", ["535.104.5"], DIAG, version=DIAG_V,
      groups={0: "kernel_driver_version"}, role="noise", cond="LogDriverVersionInformation",
      causes={"harmless-warning": 1.0}, why="diagnostic information"),
    T("xla.diag.no_kernel_driver",
      "kernel driver does not appear to be running on this host ({host}): /proc/driver/nvidia/version does not "
      "exist", ["a34n10"], DIAG, version=DIAG_V, kinds={0: "any"},
      cond="access('/proc/driver/nvidia/version') fails", causes={"no-driver": 1.0},
      why="no NVIDIA kernel driver on this host or container"),
    T("xla.diag.no_dev_node", "no NVIDIA GPU device is present: {path} does not exist", ["/dev/nvidia0"], DIAG,
      version=DIAG_V, kinds={0: "path"}, cond="access('/dev/nvidia0') fails", causes={"no-driver": 1.0},
      why="no GPU device node (no GPU, or not passed into the container)"),
    T("xla.diag.retrieving", "retrieving CUDA diagnostic information for host: {host}", ["a34n10"], DIAG,
      version=DIAG_V, kinds={0: "word"}, role="context", cond="logged after cuInit failed",
      causes={"no-driver": 0.5, "driver-library-mismatch": 0.3, "unknown": 0.2},
      why="appears only after cuInit failed"),
    T("xla.diag.no_libcuda", "was unable to find libcuda.so DSO loaded into this program", [], DIAG,
      version=DIAG_V, role="context", cond="no libcuda.so.1 among loaded objects",
      causes={"no-driver": 0.6, "missing-dependency-lib": 0.4}, why="libcuda.so.1 was not loaded"),
    T("xla.diag.version_path", "could not open driver version path for reading: {path}",
      ["/proc/driver/nvidia/version"], DIAG, version=DIAG_V, kinds={0: "path"}, role="context",
      cond="fopen('/proc/driver/nvidia/version') failed", causes={"no-driver": 0.7, "unknown": 0.3},
      why="the driver version file is missing (no kernel driver, or a container/WSL without it)"),
    # ---- cuda_driver.cc ------------------------------------------------------------------------------
    T("xla.driver.cuinit_failed", "failed call to cuInit: {status}",
      ["CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"], DRV, version=IDX,
      groups={0: "cuda_status"}, cond="cuInit(0) != CUDA_SUCCESS (InternalInit)",
      causes={"no-driver": 0.5, "driver-library-mismatch": 0.15, "driver-too-old": 0.1,
              "forward-compat-unsupported": 0.1, "hardware-fault": 0.15},
      why="the driver API did not start; the CUDA_ERROR_* name (captured) decides, see cuda_errors.json"),
    # ---- XLA service / PJRT / allocator (printed through JAX and TF) ---------------------------------
    T("xla.pjrt.no_supported_devices", "no supported devices found for platform %s", ["CUDA"],
      "xla/service/platform_util.cc", version=IDX, kinds={0: "word"}, groups={0: "platform"},
      cond="every StreamExecutor for the platform failed to initialise (GetStreamExecutors)",
      causes={"no-driver": 0.35, "gpu-out-of-memory": 0.3, "driver-library-mismatch": 0.15,
              "arch-unsupported": 0.1, "hardware-fault": 0.1},
      why="no device could be opened: not visible, out of memory at context creation (preallocating "
          "processes), driver state, or a GPU the build does not support; earlier lines decide"),
    T("xla.conv.picker_failed",
      "Failed to determine best cudnn convolution algorithm for:\n%s\n\nOriginal error: %s",
      ["%cudnn-conv = (f32[32,64,56,56]{3,2,1,0}, u8[0]{0}) custom-call(...)", "INTERNAL: All algorithms tried for "
       "%cudnn-conv failed. Falling back to default algorithm."],
      "xla/service/gpu/autotuning/conv_algorithm_picker.cc", version=IDX, upto="cudnn convolution algorithm for:",
      cond="PickBestAlgorithm failed for a cuDNN conv custom call (strict mode returns the error)",
      causes={"unsupported-config": 0.3, "gpu-out-of-memory": 0.3, "cudnn-version-mismatch": 0.15,
              "arch-unsupported": 0.15, "unknown": 0.1},
      why="no cuDNN algorithm ran during autotuning; the 'Original error' decides"),
    T("xla.conv.picker_suboptimal",
      "Failed to determine best cudnn convolution algorithm: %s\n\nConvolution performance may be suboptimal.",
      ["INTERNAL: All algorithms tried for %cudnn-conv failed."], "xla/service/gpu/gpu_conv_algorithm_picker.cc",
      version=IDX, role="noise", upto="cudnn convolution algorithm: ",
      cond="older non-strict picker: LOG(WARNING) and keep the default algorithm",
      causes={"harmless-warning": 0.6, "unsupported-config": 0.4},
      why="a warning; XLA keeps a default algorithm and may still fail later"),
    T("xla.alloc.oom", "Out of memory while trying to allocate {size} bytes.", ["8589934592"],
      "xla/stream_executor/integrations/tf_allocator_adapter.cc", version=IDX, kinds={0: "int"},
      groups={0: "alloc_bytes"}, cond="the wrapped allocator returned null (TfAllocatorAdapter::Allocate)",
      causes={"gpu-out-of-memory": 1.0}, why="device memory exhausted"),
]

