"""Caffe templates (BVLC/caffe): the glog CHECK macros around CUDA/cuDNN/cuBLAS/cuRAND calls, device
start-up messages, and the convolution layer's input checks.

glog prints a failed CHECK_EQ(a, b) << msg as "Check failed: a == b (<a> vs. <b>) <msg>"; Caffe's
CUDA_CHECK/CUDNN_CHECK/CUBLAS_CHECK stream " " + the library's error string, hence the two spaces.
"""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "9b891540183ddc834a02b2bd81b31afae71b2153"
SRC = Source(framework="caffe", repo="BVLC/caffe", version=f"{H} (master, 2020-02-13)",
             url="https://github.com/BVLC/caffe")
DA = "include/caffe/util/device_alternate.hpp"
CU = "include/caffe/util/cudnn.hpp"
CM = "src/caffe/common.cpp"
BC = "src/caffe/layers/base_conv_layer.cpp"
TOOL = "tools/caffe.cpp"

CREATE_SPREAD = {"no-driver": 0.35, "driver-too-old": 0.25, "gpu-out-of-memory": 0.2, "harmless-warning": 0.2}
RESHAPE_WHY = "the weights' shape is computed from the bottom blob's channels and the layer's num_output"

TEMPLATES = [
    # --- CUDA / library status checks -------------------------------------------------------------
    T("caffe.cuda.check", "Check failed: error == cudaSuccess ({error} vs. 0)  {desc}", ["2", "out of memory"],
      DA, line=52, version=H, kinds={0: "int"}, groups={0: "cuda_error_code", 1: "cuda_error_desc"},
      cond="CUDA_CHECK(call): a CUDA runtime call (cudaMalloc, cudaGetDevice, cudaMemcpy, ...) returned != cudaSuccess",
      causes={"unknown": 1.0},
      why="any CUDA runtime failure; the cudaGetErrorString text (captured) decides: see cuda_errors.json"),
    T("caffe.cudnn.check", "Check failed: status == CUDNN_STATUS_SUCCESS ({status} vs. 0)  {name}",
      ["4", "CUDNN_STATUS_INTERNAL_ERROR"], CU, line=16, version=H, kinds={0: "int", 1: "word"},
      groups={0: "cudnn_status_code", 1: "cudnn_status"},
      cond="CUDNN_CHECK(call): a cuDNN call (cudnnCreate, descriptor set-up, cudnnConvolutionForward/Backward*) "
           "returned != CUDNN_STATUS_SUCCESS",
      causes={"unknown": 1.0},
      why="every cuDNN call goes through this check; the CUDNN_STATUS name (captured) decides"),
    T("caffe.cublas.check", "Check failed: status == CUBLAS_STATUS_SUCCESS ({status} vs. 0)  {name}",
      ["13", "CUBLAS_STATUS_EXECUTION_FAILED"], DA, line=58, version=H, kinds={0: "int", 1: "word"},
      groups={0: "cublas_status_code", 1: "cublas_status"},
      cond="CUBLAS_CHECK(call): a cuBLAS call (cublasCreate in SetDevice, gemm/gemv in layers) returned != "
           "CUBLAS_STATUS_SUCCESS",
      causes={"unknown": 1.0}, why="the CUBLAS_STATUS name (captured) decides"),
    T("caffe.curand.check", "Check failed: status == CURAND_STATUS_SUCCESS ({status} vs. 0)  {name}",
      ["201", "CURAND_STATUS_LAUNCH_FAILURE"], DA, line=65, version=H, kinds={0: "int", 1: "word"},
      groups={0: "curand_status_code", 1: "curand_status"},
      cond="CURAND_CHECK(call): a cuRAND call (generator creation, seeding, dropout sampling) returned != "
           "CURAND_STATUS_SUCCESS",
      causes={"arch-unsupported": 0.3, "gpu-out-of-memory": 0.3, "driver-too-old": 0.2, "unknown": 0.2},
      why="the CURAND_STATUS name (captured) decides; launch failures are typically kernels not built for the GPU"),
    T("caffe.cpu_only", "Cannot use GPU in CPU-only Caffe: check mode.", [], DA, line=10, version=H,
      cond="NO_GPU: a GPU code path (Forward_gpu, set_mode_gpu, --gpu) was reached in a CPU_ONLY build",
      causes={"cpu-only-build": 1.0}, why="only compiled in when Caffe was built with CPU_ONLY"),
    # --- device start-up ----------------------------------------------------------------------------
    T("caffe.cublas.handle", "Cannot create Cublas handle. Cublas won't be available.", [], CM, line=114,
      version=H, role="context",
      cond="cublasCreate() != CUBLAS_STATUS_SUCCESS in the Caffe singleton's constructor (Caffe keeps running)",
      causes=CREATE_SPREAD,
      why="cublasCreate fails when the CUDA runtime cannot initialise (no GPU/driver, old driver) or cannot "
          "allocate; harmless when the run stays in CPU mode"),
    T("caffe.curand.generator", "Cannot create Curand generator. Curand won't be available.", [], CM, line=121,
      version=H, role="context",
      cond="curandCreateGenerator or curandSetPseudoRandomGeneratorSeed failed in the Caffe constructor",
      causes=CREATE_SPREAD, why="same start-up failure as the cuBLAS handle, for cuRAND"),
    T("caffe.curand.unavailable", "Curand not available. Skipping setting the curand seed.", [], CM, line=142,
      version=H, role="context", cond="set_random_seed() with no cuRAND generator (its creation failed earlier)",
      causes=CREATE_SPREAD, why="follows a failed cuRAND generator creation"),
    T("caffe.device_query.no_device", "No cuda device present.", [], CM, line=174, version=H,
      cond="DeviceQuery(): cudaGetDevice() != cudaSuccess",
      causes={"no-driver": 0.6, "driver-too-old": 0.3, "driver-library-mismatch": 0.1},
      why="cudaGetDevice fails only when the CUDA runtime cannot initialise: no visible GPU or driver, or a driver "
          "too old for the runtime"),
    T("caffe.tool.use_gpu", "Use GPU with device ID {id}", ["0"], TOOL, line=266, version=H, kinds={0: "int"},
      groups={0: "device"}, role="noise", cond="caffe test/time with --gpu", causes={"harmless-warning": 1.0},
      why="start-up information"),
    T("caffe.tool.gpu_name", "GPU device name: {name}", ["NVIDIA GeForce RTX 3090"], TOOL, line=270, version=H,
      groups={0: "gpu_name"}, role="noise", cond="caffe test with --gpu, after cudaGetDeviceProperties",
      causes={"harmless-warning": 1.0}, why="start-up information; names the GPU"),
    # --- convolution layer checks -------------------------------------------------------------------
    T("caffe.conv.input_channels",
      "Check failed: bottom[0]->shape(channel_axis_) == channels_ ({got} vs. {expected}) "
      "Input size incompatible with convolution kernel.", ["1", "3"], BC, line=191, version=H,
      kinds={0: "int", 1: "int"}, groups={0: "got_channels", 1: "expected_channels"},
      cond="BaseConvolutionLayer::Reshape: the bottom blob's channel count differs from the channels the layer "
           "was set up with",
      causes={"channel-mismatch": 1.0}, why="an input-channel check and nothing else"),
    T("caffe.conv.group_channels", "Check failed: channels_ %% group_ == 0 ({rem} vs. 0)", ["1"], BC, line=121,
      version=H, kinds={0: "int"},
      cond="LayerSetUp: the bottom blob's channel count is not divisible by the layer's group",
      causes={"channel-mismatch": 0.7, "unsupported-config": 0.3},
      why="the input channels do not fit the grouping: a wrong input or a wrong group in the prototxt"),
    T("caffe.conv.output_group", "Number of output should be multiples of group.", [], BC, line=123, version=H,
      cond="LayerSetUp: CHECK_EQ(num_output_ % group_, 0)", causes={"unsupported-config": 1.0},
      why="a layer definition the convolution cannot implement"),
    T("caffe.conv.kernel_zero", "Filter dimensions must be nonzero.", [], BC, line=45, version=H,
      cond="LayerSetUp: a kernel dimension <= 0", causes={"unsupported-config": 1.0},
      why="an invalid convolution parameter in the layer definition"),
    T("caffe.conv.num_axes",
      "Check failed: bottom[0]->num_axes() == first_spatial_axis + num_spatial_axes_ ({got} vs. {expected}) "
      "bottom num_axes may not change.", ["3", "4"], BC, line=188, version=H, kinds={0: "int", 1: "int"},
      groups={0: "found_ndim", 1: "expected_ndim"},
      cond="Reshape: the bottom blob's number of axes differs from the one at set-up (e.g. a 3-D image fed "
           "without the batch axis)",
      causes={"channel-mismatch": 0.7, "unknown": 0.3},
      why="an input of the wrong rank/layout; the same convention as PyTorch's rank checks"),
    T("caffe.conv.weight_shape", "Incorrect weight shape: expected shape {expected}; instead, shape was {got}",
      ["64 3 7 7 (9408)", "64 1 7 7 (3136)"], BC, line=147, version=H, groups={0: "weight_shape"},
      upto="; instead, shape was",
      cond="LayerSetUp with preset weight blobs whose shape differs from (num_output, channels/group, kernel...)",
      causes={"channel-mismatch": 0.6, "unknown": 0.4},
      why=RESHAPE_WHY + ": an input with other channels, or another num_output/kernel in the definition"),
    T("caffe.net.copy_param_shape",
      "Cannot copy param {j} weights from layer '{layer}'; shape mismatch.  Source param shape is {src}; "
      "target param shape is {dst}. To learn this layer's parameters from scratch rather than copying from a saved "
      "net, rename the layer.", ["0", "conv1", "64 3 7 7 (9408)", "64 1 7 7 (3136)"], "src/caffe/net.cpp",
      line=759, version=H, kinds={0: "int"}, groups={1: "layer", 2: "weight_shape"},
      upto="shape mismatch.",
      cond="CopyTrainedLayersFrom: a .caffemodel blob's shape differs from the layer's blob in the prototxt",
      causes={"channel-mismatch": 0.5, "unknown": 0.5},
      why=RESHAPE_WHY + "; the prototxt and the weights disagree (input channels, or num_output/kernel)"),
    T("caffe.cudnn_conv.spatial_axes",
      "CuDNNConvolution input must have 2 spatial axes (e.g., height and width). Use 'engine: CAFFE' for general "
      "ND convolution.", [], "src/caffe/layers/cudnn_conv_layer.cpp", line=95, version=H,
      cond="CuDNNConvolutionLayer::Reshape: num_spatial_axes_ != 2", causes={"unsupported-config": 1.0},
      why="Caffe's cuDNN convolution implements only 2-D convolutions"),
    T("caffe.blob.int_max", "blob size exceeds INT_MAX", [], "src/caffe/blob.cpp", line=34, version=H,
      cond="Blob::Reshape: the element count would exceed INT_MAX", causes={"tensor-too-large": 1.0},
      why="a blob over 2^31 elements"),
    T("caffe.blob.negative_dim", "Check failed: shape[i] >= 0 ({dim} vs. 0)", ["-2"], "src/caffe/blob.cpp", line=32,
      version=H, kinds={0: "int"},
      cond="Blob::Reshape: a negative dimension, as computed for a convolution/pooling output from an input smaller "
           "than the kernel",
      causes={"input-too-small": 0.8, "unsupported-config": 0.2},
      why="convolution output size (in + 2*pad - kernel)/stride + 1 goes negative when the input is too small"),
]
