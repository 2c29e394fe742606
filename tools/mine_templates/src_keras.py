"""Keras message templates (Keras 3 keras/src, Keras 2 keras/engine, Keras 2.2 base_layer)."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

SRC = Source(
    framework="keras",
    repo="keras-team/keras",
    version="3422977a5e38fb2f7709aaa9a08e47f0c43d0f60 (v3.15.0-143); Keras 2 templates: tags v2.13.1 and 2.2.4",
    url="https://github.com/keras-team/keras",
)
K3 = "3422977a5e38fb2f7709aaa9a08e47f0c43d0f60"
BASE = "keras/src/layers/convolutional/base_conv.py"
OPU = "keras/src/ops/operation_utils.py"
SPEC = "keras/src/layers/input_spec.py"
K2SPEC = "keras/engine/input_spec.py"
K2CONV = "keras/layers/convolutional/base_conv.py"
RANK = {"channel-mismatch": 0.7, "unknown": 0.3}

TEMPLATES = [
    T("keras.conv.filters_positive",
      "Invalid value for argument `filters`. Expected a strictly positive value. Received filters={filters}.",
      ["0"], BASE, line=140, version=K3, kinds={0: "word"}, cond="filters <= 0 in BaseConv.__init__",
      causes={"unsupported-config": 1.0}, why="a conv layer with no filters"),
    T("keras.conv.groups_positive",
      "The number of groups must be a positive integer. Received: groups={groups}.", ["0"], BASE, line=146,
      version=K3, kinds={0: "word"}, cond="groups <= 0", causes={"unsupported-config": 1.0}, why="groups must be >= 1"),
    T("keras.conv.filters_groups",
      "The number of filters must be evenly divisible by the number of groups. Received: groups={groups}, "
      "filters={filters}.", ["4", "6"], BASE, line=152, version=K3, kinds={0: "int", 1: "int"},
      cond="filters % groups != 0", causes={"unsupported-config": 0.5, "channel-mismatch": 0.5},
      why="filters not a multiple of groups"),
    T("keras.conv.kernel_zero", "The argument `kernel_size` cannot contain 0. Received kernel_size={k}.",
      ["(0, 3)"], BASE, line=159, version=K3, cond="a zero in kernel_size", causes={"unsupported-config": 1.0},
      why="a zero-size kernel"),
    T("keras.conv.strides_zero", "The argument `strides` cannot contains 0. Received strides={s}", ["(0, 1)"],
      BASE, line=165, version=K3, cond="a zero in strides", causes={"unsupported-config": 1.0}, why="a zero stride"),
    T("keras.conv.strides_and_dilation",
      "`strides > 1` not supported in conjunction with `dilation_rate > 1`. Received: strides={s} and "
      "dilation_rate={d}", ["(2, 2)", "(2, 2)"], BASE, line=171, version=K3,
      cond="max(strides) > 1 and max(dilation_rate) > 1", causes={"unsupported-config": 1.0},
      why="Keras convolutions do not combine stride and dilation"),
    T("keras.conv.input_channels_groups",
      "The number of input channels must be evenly divisible by the number of groups. Received groups={g}, "
      "but the input has {c} channels (full input shape is {shape}).", ["2", "3", "(None, 32, 32, 3)"], BASE,
      line=188, version=K3, kinds={0: "int", 1: "int", 2: "shape"},
      groups={0: "groups", 1: "got_channels", 2: "input_shape"},
      cond="input_channel % groups != 0 in build()", causes={"channel-mismatch": 0.7, "unsupported-config": 0.3},
      why="the input's channels do not split into the groups (wrong channel axis or data_format)"),
    T("keras.ops.conv_output_nonpositive",
      "Computed output size would be zero or negative. Received `inputs shape={input_shape}`, `kernel "
      "shape={kernel_shape}`, `dilation_rate={d}`, `strides={s}`, `padding={p}`.",
      ["(None, 2, 2, 16)", "(3, 3, 16, 32)", "(1, 1)", "(1, 1)", "valid"], OPU, line=226, version=K3,
      kinds={0: "shape", 1: "shape"}, groups={0: "input_shape", 1: "kernel_shape"},
      cond="a spatial output dim <= 0 in compute_conv_output_shape (padding='valid')",
      causes={"input-too-small": 1.0}, why="the input is smaller than the dilated kernel"),
    T("keras.ops.pool_output_nonpositive",
      "Computed output size would be zero or negative. Received: `inputs.shape={input_shape}`, "
      "`pool_size={pool}`, `strides={s}`, `padding={p}`.", ["(None, 1, 1, 64)", "(2, 2)", "(2, 2)", "valid"],
      OPU, line=141, version=K3, kinds={0: "shape"}, groups={0: "input_shape"},
      cond="a pooled spatial dim <= 0", causes={"input-too-small": 1.0},
      why="the feature map is already smaller than the pooling window"),
    T("keras.ops.kernel_rank",
      "Kernel shape must have the same length as input, but received kernel of shape {k} and input of shape {i}.",
      ["(3, 3, 3, 16)", "(None, 32, 32)"], OPU, version=K3, kinds={0: "shape", 1: "shape"},
      groups={0: "kernel_shape", 1: "input_shape"}, cond="len(kernel_shape) != len(input_shape)",
      causes=RANK, why="the input's rank does not fit the conv"),
    T("keras.spec.ndim",
      "Input {i} with name '{name}' of layer '{layer}' is incompatible with the layer: expected ndim={n}, "
      "found ndim={m}. Full shape received: {shape}", ["0", "keras_tensor", "conv2d", "4", "3", "(None, 28, 28)"],
      SPEC, line=201, version=K3, kinds={0: "int", 1: "name", 2: "name", 3: "int", 4: "int", 5: "shape"},
      groups={2: "layer", 3: "expected_ndim", 4: "found_ndim", 5: "input_shape"},
      cond="InputSpec.ndim != input ndim", causes=RANK, why="a missing (or extra) batch/channel axis"),
    T("keras.spec.min_ndim",
      "Input {i} with name '{name}' of layer '{layer}' is incompatible with the layer: expected "
      "min_ndim={n}, found ndim={m}. Full shape received: {shape}",
      ["0", "keras_tensor", "conv2d", "4", "3", "(None, 28, 28)"], SPEC, line=217, version=K3,
      kinds={0: "int", 1: "name", 2: "name", 3: "int", 4: "int", 5: "shape"},
      groups={2: "layer", 3: "expected_ndim", 4: "found_ndim", 5: "input_shape"},
      cond="input ndim < InputSpec.min_ndim", causes=RANK, why="a missing channel axis (e.g. grayscale HxW)"),
    T("keras.spec.dtype",
      "Input {i} with name '{name}' of layer '{layer}' is incompatible with the layer: expected dtype={d}, "
      "found dtype={f}", ["0", "keras_tensor", "embedding", "int32", "float32"], SPEC, line=228, version=K3,
      kinds={0: "int", 1: "name", 2: "name", 3: "word", 4: "word"}, groups={3: "expected_dtype", 4: "found_dtype"},
      cond="InputSpec.dtype differs", causes={"dtype-mismatch": 1.0}, why="an input of the wrong dtype"),
    T("keras.spec.axis",
      "Input {i} with name '{name}' of layer '{layer}' is incompatible with the layer: expected axis {axis} of "
      "input shape to have value {value}, but received input with shape {shape}",
      ["0", "keras_tensor", "conv2d_1", "-1", "3", "(None, 224, 224, 1)"], SPEC, line=242, version=K3,
      kinds={0: "int", 1: "name", 2: "name", 3: "int", 4: "int", 5: "shape"},
      groups={2: "layer", 3: "axis", 4: "expected_channels", 5: "input_shape"},
      cond="the channel axis does not have the value the layer was built for", causes={"channel-mismatch": 1.0},
      why="the input's channel count differs from the one the layer was built with"),
    T("keras.jax.ampere_required", "Require at least Ampere arch to run", [], "keras/src/backend/jax/nn.py",
      line=1487, version=K3, cond="cuDNN flash attention requested on a GPU below compute capability 8.0",
      causes={"arch-unsupported": 1.0}, why="the cuDNN path needs sm_80+"),
    # ---- Keras 2 (tf.keras) ----------------------------------------------------------------------
    T("keras2.spec.ndim",
      "Input {i} of layer \"{layer}\" is incompatible with the layer: expected ndim={n}, found ndim={m}. "
      "Full shape received: {shape}", ["0", "conv2d", "4", "3", "(None, 28, 28)"], K2SPEC, line=238,
      version="v2.13.1", kinds={0: "int", 1: "name", 2: "int", 3: "int", 4: "shape"},
      groups={1: "layer", 2: "expected_ndim", 3: "found_ndim", 4: "input_shape"},
      cond="InputSpec.ndim != input rank", causes=RANK, why="a missing (or extra) batch/channel axis"),
    T("keras2.spec.min_ndim",
      "Input {i} of layer \"{layer}\" is incompatible with the layer: expected min_ndim={n}, found ndim={m}. "
      "Full shape received: {shape}", ["0", "conv2d", "4", "3", "(None, 28, 28)"], K2SPEC, line=256,
      version="v2.13.1", kinds={0: "int", 1: "name", 2: "int", 3: "int", 4: "shape"},
      groups={1: "layer", 2: "expected_ndim", 3: "found_ndim", 4: "input_shape"},
      cond="input rank < InputSpec.min_ndim", causes=RANK, why="a missing channel axis"),
    T("keras2.spec.axis",
      "Input {i} of layer \"{layer}\" is incompatible with the layer: expected axis {axis} of input shape to "
      "have value {value}, but received input with shape {shape}",
      ["0", "conv2d", "-1", "3", "(None, 224, 224, 1)"], K2SPEC, line=282, version="v2.13.1",
      kinds={0: "int", 1: "name", 2: "int", 3: "int", 4: "shape"},
      groups={1: "layer", 2: "axis", 3: "expected_channels", 4: "input_shape"},
      cond="InputSpec.axes value differs", causes={"channel-mismatch": 1.0},
      why="the channel count differs from the one the layer was built with"),
    T("keras2.conv.output_nonpositive",
      "One of the dimensions in the output is <= 0 due to downsampling in {name}. Consider increasing the "
      "input size. Received input shape {shape} which would produce output shape with a zero or negative "
      "value in a dimension.", ["conv2d_3", "[None, 2, 2, 64]"], K2CONV, line=356, version="v2.13.1",
      kinds={0: "name", 1: "shape"}, groups={0: "layer", 1: "input_shape"}, upto="Consider increasing the input size.",
      cond="compute_output_shape yields a dim <= 0", causes={"input-too-small": 1.0},
      why="downsampling made a spatial dim zero"),
    T("keras2.conv.kernel_zero", "The argument `kernel_size` cannot contain 0(s). Received: %s", ["(0, 3)"],
      K2CONV, line=177, version="v2.13.1", cond="a zero in kernel_size", causes={"unsupported-config": 1.0},
      why="a zero-size kernel"),
    T("keras22.spec.ndim", "Input {i} is incompatible with layer {layer}: expected ndim={n}, found ndim={m}",
      ["0", "conv2d_1", "4", "3"], "keras/engine/base_layer.py", line=308, version="2.2.4",
      kinds={0: "int", 1: "name", 2: "int", 3: "int"}, groups={1: "layer", 2: "expected_ndim", 3: "found_ndim"},
      cond="spec.ndim != K.ndim(x) in assert_input_compatibility", causes=RANK,
      why="a missing (or extra) batch/channel axis"),
    T("keras22.spec.min_ndim", "Input {i} is incompatible with layer {layer}: expected min_ndim={n}, found ndim={m}",
      ["0", "conv2d_1", "4", "3"], "keras/engine/base_layer.py", line=324, version="2.2.4",
      kinds={0: "int", 1: "name", 2: "int", 3: "int"}, groups={1: "layer", 2: "expected_ndim", 3: "found_ndim"},
      cond="K.ndim(x) < spec.min_ndim", causes=RANK, why="a missing channel axis"),
    T("keras22.spec.axis",
      "Input {i} is incompatible with layer {layer}: expected axis {axis} of input shape to have value {value} "
      "but got shape {shape}", ["0", "conv2d_1", "-1", "3", "(None, 224, 224, 1)"], "keras/engine/base_layer.py",
      line=348, version="2.2.4", kinds={0: "int", 1: "name", 2: "int", 3: "int", 4: "shape"},
      groups={1: "layer", 2: "axis", 3: "expected_channels", 4: "input_shape"},
      cond="spec.axes value differs", causes={"channel-mismatch": 1.0},
      why="the channel count differs from the one the layer was built with"),
    T("keras.apps.input_size_min",
      "Input size must be at least {min_size}x{min_size}; Received: input_shape={input_shape}",
      ["32", "32", "(28, 28, 3)"], "keras/src/applications/imagenet_utils.py", line=375, version=K3,
      kinds={0: "int", 1: "int", 2: "shape"}, groups={0: "min_size"}, upto="; ",
      cond="obtain_input_shape: a spatial size of input_shape below the application's minimum "
           "(32 for most, 75 for Inception, 197/221 for some with imagenet weights)",
      causes={"input-too-small": 1.0},
      why="the pretrained application's downsampling needs a larger image"),
    T("keras.apps.three_channels",
      "The input must have 3 channels; Received `input_shape={input_shape}`",
      ["(224, 224, 1)"], "keras/src/applications/imagenet_utils.py", line=367, version=K3,
      kinds={0: "shape"}, cond="weights == 'imagenet' and the channel axis of input_shape is not 3",
      causes={"channel-mismatch": 1.0},
      why="imagenet weights were trained on RGB input"),
]
