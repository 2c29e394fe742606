"""ONNX Runtime templates: CUDA/cuDNN call failures, provider library loading, Conv shape checks."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

SRC = Source(
    framework="onnxruntime",
    repo="microsoft/onnxruntime",
    version="per template (commit of the file read)",
    url="https://github.com/microsoft/onnxruntime",
)
ATTR = "onnxruntime/core/providers/cpu/nn/conv_attributes.h"
ATTR_V = "acb6e5c606894bfb965c2364f6c4ee52307940e2"
BRIDGE = "onnxruntime/core/session/provider_bridge_ort.cc"
BRIDGE_V = "defce5e8a67c23acc49288aae800db0bb14fb72f"

TEMPLATES = [
    T("ort.cuda_call.failure", "%s failure %d: %s ; GPU=%d ; hostname=%s ; expr=%s; %s",
      ["CUDNN", "3", "CUDNN_STATUS_BAD_PARAM", "0", "node-1", "cudnnFindConvolutionForwardAlgorithmEx(...)", ""],
      "onnxruntime/core/providers/cuda/cuda_call.cc", version="58f385d703702233527a4f499be32908cd773425",
      kinds={1: "int", 3: "int", 4: "word"},
      groups={1: "status_code", 2: "status_desc", 3: "gpu", 5: "call"},
      cond="CudaCall: a CUDA/cuBLAS/cuDNN/cuRAND/cuFFT call returned != success (library name precedes 'failure')",
      causes={"gpu-out-of-memory": 0.25, "unsupported-config": 0.2, "arch-unsupported": 0.2, "no-driver": 0.15,
              "illegal-memory-access": 0.1, "cudnn-version-mismatch": 0.1},
      why="the library, code and description (captured) decide: CUDA codes as cuda_errors.json, CUDNN_STATUS names"),
    T("ort.dso.load_failed", "Failed to load library {lib} with error: {err}",
      ["libonnxruntime_providers_cuda.so", "libcublasLt.so.11: cannot open shared object file: No such file or directory"],
      "onnxruntime/core/platform/posix/env.cc", version="1a27a799102c98137c2c71501e189f01d1ff3073",
      kinds={0: "path"}, groups={0: "library", 1: "dlerror"}, cond="dlopen(library_filename) returned NULL",
      causes={"missing-dependency-lib": 0.6, "cudnn-not-found": 0.3, "no-driver": 0.1},
      why="a library the CUDA provider needs is missing; the dlerror names it (libcudnn -> cudnn-not-found, "
          "libcuda.so.1 -> no-driver)"),
    T("ort.provider.cuda_unavailable", "CUDA Provider not available, can't get interface for it", [], BRIDGE,
      version=BRIDGE_V, cond="TryGetProviderInfo_CUDA returned null (the CUDA provider library failed to load)",
      causes={"missing-dependency-lib": 0.6, "cpu-only-build": 0.2, "cudnn-not-found": 0.2},
      why="the CUDA execution provider could not be loaded"),
    T("ort.provider.trt_unavailable", "TensorRT Provider not available, can't get interface for it", [], BRIDGE,
      version=BRIDGE_V, cond="TryGetProviderInfo_TensorRT returned null", causes={"missing-dependency-lib": 1.0},
      why="the TensorRT provider (or TensorRT itself) is not loadable"),
    T("ort.conv.x_w_dims", "X num_dims does not match W num_dims. X: {x} W: {w}",
      ["{1,224,224}", "{64,3,7,7}"], ATTR, version=ATTR_V, kinds={0: "shape", 1: "shape"},
      groups={0: "input_shape", 1: "weight_shape"}, cond="input rank != weight rank (ValidateInputShape)",
      causes={"channel-mismatch": 0.7, "unknown": 0.3}, why="the input's rank does not fit the Conv weight"),
    T("ort.conv.channels",
      "Input channels C is not equal to kernel channels * group. C: {c} kernel channels: {k} group: {g}",
      ["1", "3", "1"], ATTR, version=ATTR_V, kinds={0: "int", 1: "int", 2: "int"},
      groups={0: "got_channels", 1: "expected_channels", 2: "groups"}, cond="C != weight_shape[1] * group",
      causes={"channel-mismatch": 1.0}, why="the input's channels do not match the Conv weight (or NHWC data)"),
    T("ort.conv.m_group", "Output channels M is not divisible by group. M: {m} group: {g}", ["6", "4"], ATTR,
      version=ATTR_V, kinds={0: "int", 1: "int"}, cond="M % group != 0",
      causes={"channel-mismatch": 0.5, "unsupported-config": 0.5}, why="an invalid grouped Conv"),
    T("ort.conv.kernel_shape_dims",
      "kernel_shape num_dims is not compatible with W num_dims. kernel_shape: {k} W: {w}", ["{3,3,3}", "{64,3,3,3}"],
      ATTR, version=ATTR_V, kinds={0: "shape", 1: "shape"}, cond="len(kernel_shape) + 2 != W rank",
      causes={"unsupported-config": 0.6, "channel-mismatch": 0.4}, why="kernel_shape attribute and weight disagree"),
    T("ort.conv.kernel_shape_w", "kernel_shape is not compatible with W shape. kernel_shape: {k} W: {w}",
      ["{5,5}", "{64,3,3,3}"], ATTR, version=ATTR_V, kinds={0: "shape", 1: "shape"},
      cond="kernel_shape[i] != W.shape[i+2]", causes={"unsupported-config": 0.6, "channel-mismatch": 0.4},
      why="kernel_shape attribute and weight disagree"),
    T("ort.conv.invalid_input_shape", "Invalid input shape: {shape}", ["{1,3,2,2}"], ATTR, version=ATTR_V,
      kinds={0: "shape"}, groups={0: "input_shape"}, cond="a computed output dim <= 0 (InferOutputShape)",
      causes={"input-too-small": 0.8, "empty-tensor": 0.2}, why="the input is smaller than the dilated kernel"),
    T("ort.conv.strides_count", "Not enough elements in strides. Expected: {r} Got: {n}", ["2", "1"], ATTR,
      version=ATTR_V, kinds={0: "int", 1: "int"}, cond="rank > len(strides)", causes={"unsupported-config": 1.0},
      why="strides for a different rank"),
    T("ort.conv.pads_count", "Not enough elements in pads. Expected: {r} Got: {n}", ["4", "2"], ATTR, version=ATTR_V,
      kinds={0: "int", 1: "int"}, cond="2*rank > len(pads)", causes={"unsupported-config": 1.0},
      why="pads for a different rank"),
    T("ort.conv.no_valid_algorithm", "Unable to find a valid cuDNN algorithm to run convolution.", [],
      "orttraining/orttraining/training_ops/cuda/nn/conv_shared.cc",
      version="code-search excerpt of the stored index (AlgoIterator::TryAll)",
      cond="every algorithm returned by the search failed when run (ORT_ENFORCE)",
      causes={"unsupported-config": 0.4, "gpu-out-of-memory": 0.4, "arch-unsupported": 0.1,
              "cudnn-version-mismatch": 0.1}, why="no cuDNN algorithm ran for this convolution"),
]
