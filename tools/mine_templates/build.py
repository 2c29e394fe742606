"""Write every templates/<framework>.json from the src_*.py modules.

Usage: python tools/mine_templates/build.py
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tpl import write  # noqa: E402

MODULES = {
    "pytorch": "src_pytorch",
    "tensorflow": "src_tensorflow",
    "xla": "src_xla",
    "keras": "src_keras",
    "jax": "src_jax",
    "cudnn_frontend": "src_cudnn_frontend",
    "onnxruntime": "src_onnxruntime",
    "paddle": "src_paddle",
    "mxnet": "src_mxnet",
    "darknet": "src_darknet",
    "nvidia_container": "src_nvidia_container",
    "cupy": "src_cupy",
    "ctranslate2": "src_ctranslate2",
    "ggml": "src_ggml",
    "ollama": "src_ollama",
    "numba": "src_numba",
    "cudajl": "src_cudajl",
    "nvrtc_nvml": "src_nvrtc_nvml",
    "caffe": "src_caffe",
    "dlib": "src_dlib",
    "tensorrt": "src_tensorrt",
    "opencv_dnn": "src_opencv_dnn",
}


def main() -> None:
    total = 0
    for name, mod_name in MODULES.items():
        mod = importlib.import_module(mod_name)
        n = write(name, mod.SRC, mod.TEMPLATES)
        print(f"{name}.json: {n} templates")
        total += n
    print(f"total: {total}")


if __name__ == "__main__":
    main()
