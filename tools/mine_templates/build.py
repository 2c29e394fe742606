"""Write every templates/<framework>.json from the src_*.py modules.

Usage: python tools/mine_templates/build.py [--check]

The JSON files are generated: edit the src_*.py module, never the JSON. `--check` writes nothing
and exits 1 naming each file that differs from what its module generates (tests run it).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tpl import OUT_DIR, rendered, write  # noqa: E402

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


def stale() -> list[str]:
    """The template files that differ from what their modules generate."""
    out = []
    for name, mod_name in MODULES.items():
        mod = importlib.import_module(mod_name)
        path = OUT_DIR / f"{name}.json"
        if not path.exists() or path.read_text() != rendered(mod.SRC, mod.TEMPLATES):
            out.append(path.name)
    return out


def main() -> None:
    if "--check" in sys.argv[1:]:
        bad = stale()
        for name in bad:
            print(f"{name}: differs from its generator (edit tools/mine_templates/src_*.py, "
                  "then run build.py)")
        sys.exit(1 if bad else 0)
    total = 0
    for name, mod_name in MODULES.items():
        mod = importlib.import_module(mod_name)
        n = write(name, mod.SRC, mod.TEMPLATES)
        print(f"{name}.json: {n} templates")
        total += n
    print(f"total: {total}")


if __name__ == "__main__":
    main()
