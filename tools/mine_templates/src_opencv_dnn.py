"""OpenCV DNN templates (opencv/opencv modules/dnn): the CUDA backend's start-up checks (device, compute
capability, cuDNN version, build without CUDA), the cuda4dnn CUDA/cuDNN/cuBLAS exception, and the
convolution layer's input checks.

cv::Exception prints "OpenCV(<ver>) <file>:<line>: error: (<code>:<cvErrorStr(code)>) <msg> in function '<func>'"
(modules/core/src/system.cpp); templates keep <msg>, and the code where it is fixed.

The opencv/opencv snapshot is over the fetch size limit, so the sources were read from the
opencv-python-headless 4.10.0.84 sdist, which vendors OpenCV at tag 4.10.0 (CV_VERSION 4.10.0).
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

V = "4.10.0"
SRC = Source(framework="opencv_dnn", repo="opencv/opencv", version=f"{V} (tag)", url="https://github.com/opencv/opencv",
             note="read from the opencv/ tree of the opencv-python-headless 4.10.0.84 sdist (OpenCV tag 4.10.0); "
                  "the repository snapshot is over the fetch size limit")
OC = "modules/dnn/src/op_cuda.cpp"
NI = "modules/dnn/src/net_impl.cpp"
CONV = "modules/dnn/src/layers/convolution_layer.cpp"
CMK = "modules/dnn/CMakeLists.txt"

TEMPLATES = [
    # --- CUDA backend start-up ---------------------------------------------------------------------------
    T("ocv.dnn.not_built_with_cuda", "DNN module was not built with CUDA backend; switching to CPU", [], NI, line=178,
      version=V,
      cond="setUpNet: preferable backend DNN_BACKEND_CUDA requested in a build without HAVE_CUDA (e.g. the pip "
           "opencv-python wheels); OpenCV logs a warning and runs on the CPU",
      causes={"cpu-only-build": 1.0}, why="only printed by an OpenCV built without the CUDA DNN backend"),
    T("ocv.dnn.built_without_cuda", "This OpenCV version is built without support of CUDA/CUDNN", [],
      "modules/dnn/src/net_impl_backend.cpp", line=143, version=V,
      cond="initBackend: DNN_BACKEND_CUDA reached in a build without HAVE_CUDA (StsNotImplemented)",
      causes={"cpu-only-build": 1.0}, why="the OpenCV in use has no CUDA/cuDNN support compiled in"),
    T("ocv.dnn.no_cuda_device", "No CUDA capable device found.", [], OC, line=24, version=V,
      cond="initCUDABackend: cv::cuda::getCudaEnabledDeviceCount() <= 0 (0: no device; -1: the driver is not "
           "installed or is incompatible with the CUDA runtime)",
      causes={"no-driver": 0.6, "driver-too-old": 0.4},
      why="no GPU is visible, or the driver cannot run OpenCV's CUDA runtime"),
    T("ocv.dnn.device_not_compatible",
      "OpenCV was not built to work with the selected device. Please check CUDA_ARCH_PTX or CUDA_ARCH_BIN in your "
      "build configuration.", [], OC, line=30, version=V,
      cond="initCUDABackend: isDeviceCompatible() is false: no CUDA_ARCH_BIN for the device's major with minor <= "
           "its own and no PTX <= its compute capability (GpuNotSupported, -216)",
      causes={"arch-unsupported": 1.0}, why="the OpenCV build has no kernels for this GPU's compute capability"),
    T("ocv.dnn.no_fp16",
      "The selected CUDA device does not support FP16 target; switching to FP32 target.", [], OC, line=34, version=V,
      role="noise", cond="initCUDABackend: DNN_TARGET_CUDA_FP16 on a device with compute capability < 5.3",
      causes={"harmless-warning": 1.0}, why="OpenCV falls back to FP32 and continues"),
    T("ocv.dnn.cudnn_version",
      "cuDNN reports version {major}.{minor} which is not compatible with the version {cmajor}.{cminor} with which "
      "OpenCV was built", ["8", "2", "8", "9"], "modules/dnn/src/cuda4dnn/init.hpp", line=31, version=V,
      kinds={0: "int", 1: "int", 2: "int", 3: "int"},
      groups={0: "cudnn_major", 1: "cudnn_minor", 2: "compiled_cudnn_major", 3: "compiled_cudnn_minor"},
      cond="checkVersions: the loaded cuDNN's major differs from CUDNN_MAJOR, or its minor is older than CUDNN_MINOR",
      causes={"cudnn-version-mismatch": 1.0}, why="the loaded cuDNN is not binary-compatible with the build's"),
    T("ocv.dnn.layer_cpu_fallback",
      "CUDA backend will fallback to the CPU implementation for the layer \"{name}\" of type {type}",
      ["detection_out", "DetectionOutput"], OC, line=78, version=V, kinds={1: "word"}, groups={1: "layer"},
      role="noise", cond="initCUDABackend: a layer whose supportBackend(DNN_BACKEND_CUDA) is false (CV_LOG_INFO)",
      causes={"harmless-warning": 1.0}, why="that layer runs on the CPU; the network still runs"),
    T("ocv.dnn.gpu_api_call", "(-217:Gpu API call) {msg} in function '{func}'",
      ["out of memory", "ManagedPtr"], "modules/dnn/src/cuda4dnn/csl/error.hpp", line=25, version=V,
      groups={0: "cuda_error_desc"},
      cond="CUDA4DNN_CHECK_CUDA / _CUDNN / _CUBLAS: a CUDA runtime, cuDNN or cuBLAS call returned an error; the "
           "exception (GpuApiCallError, -217) carries cudaGetErrorString, cudnnGetErrorString or the CUBLAS_STATUS "
           "name",
      causes={"unknown": 1.0},
      why="the carried description or CUDNN_/CUBLAS_STATUS name decides: see cuda_errors.json"),
    # --- convolution layer input checks ----------------------------------------------------------------
    T("ocv.dnn.conv.input_channels", "Number of input channels should be multiple of %d but got %d", ["3", "1"],
      CONV, line=395, version=V, groups={0: "expected_channels", 1: "got_channels"},
      cond="ConvolutionLayer::getMemoryShapes: input channels are not a multiple of the weights' per-group channels",
      causes={"channel-mismatch": 1.0}, why="the input's channel count does not match the convolution weights"),
    T("ocv.dnn.conv.input_dims_type",
      "(-215:Assertion failed) ((input.dims == 3 && kernel_size.size() == 1) || input.dims == 4 || input.dims == 5) "
      "&& (input.type() == CV_32F || input.type() == CV_16F) in function '{func}'", ["finalize"], CONV, line=143,
      version=V,
      cond="ConvolutionLayer::finalize: the input blob is not 4-D/5-D (3-D for 1-D convolution) or not CV_32F/CV_16F",
      causes={"channel-mismatch": 0.4, "unsupported-dtype": 0.4, "unknown": 0.2},
      why="an input of the wrong rank (an image not passed through blobFromImage) or type (CV_8U, CV_64F)"),
    # --- build configuration (CMake) ----------------------------------------------------------------
    T("ocv.cmake.needs_cudnn",
      "DNN: CUDA backend requires cuDNN. Please resolve dependency or disable OPENCV_DNN_CUDA=OFF", [], CMK, line=53,
      version=V, cond="OPENCV_DNN_CUDA=ON but cuDNN was not found at configure time (SEND_ERROR)",
      causes={"cudnn-not-found": 0.85, "cudnn-version-mismatch": 0.15},
      why="the build cannot find cuDNN (or only one older than OpenCV's minimum, which FindCUDNN rejects)"),
    T("ocv.cmake.needs_cublas",
      "DNN: CUDA backend requires cuBLAS. Please resolve dependency or disable OPENCV_DNN_CUDA=OFF", [], CMK, line=51,
      version=V, cond="OPENCV_DNN_CUDA=ON but cuBLAS was not found at configure time",
      causes={"missing-dependency-lib": 1.0}, why="the build cannot find cuBLAS"),
    T("ocv.cmake.needs_cuda",
      "DNN: CUDA backend requires CUDA Toolkit. Please resolve dependency or disable OPENCV_DNN_CUDA=OFF", [], CMK,
      line=49, version=V, cond="OPENCV_DNN_CUDA=ON but the CUDA toolkit was not found at configure time",
      causes={"missing-dependency-lib": 1.0}, why="the build cannot find the CUDA toolkit"),
    T("ocv.cmake.min_cc",
      "CUDA backend for DNN module requires CC 3.0 or higher. Please remove unsupported architectures from "
      "CUDA_ARCH_BIN option or disable OPENCV_DNN_CUDA=OFF.", [], CMK, line=163, version=V,
      cond="OPENCV_DNN_CUDA=ON with a CUDA_ARCH_BIN entry below 3.0 (FATAL_ERROR)",
      causes={"arch-unsupported": 1.0}, why="an architecture the CUDA DNN backend cannot target"),
]
