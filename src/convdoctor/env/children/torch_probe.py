"""Child: what torch is built with, what it loads at run time, and what a real conv maps.

argv[1] == "conv": run one tiny cuDNN convolution (when CUDA is available) before reading
/proc/self/maps, so the libraries cuDNN loads lazily (sub-libraries, engines) show up too.
Prints one JSON object; import errors are reported, not raised.
"""

import json
import os
import sys
import traceback


def maps():
    libs = {}
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[-1].startswith("/") and ".so" in parts[-1]:
                    libs.setdefault(parts[-1], None)
    except OSError as exc:
        return {"error": str(exc), "libs": []}
    keep = ("libcudnn", "libcudart", "libcublas", "libnvrtc", "libcuda.so", "libnvidia-ml", "libtorch_cuda")
    return {"libs": [p for p in libs if os.path.basename(p).startswith(keep)]}


def main():
    out = {"installed": True}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        out["import_error"] = f"{type(exc).__name__}: {exc}"
        out["import_traceback_tail"] = traceback.format_exc()[-1500:]
        out["maps"] = maps()
        return out
    out["version"] = torch.__version__
    out["file"] = torch.__file__
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    try:
        c = torch._C._cudnn  # compiled and runtime versions, without the checks cudnn.version() does
        out["cudnn_compiled"] = ".".join(str(x) for x in c.getCompileVersion())
        out["cudnn_runtime"] = ".".join(str(x) for x in c.getRuntimeVersion())
    except Exception as exc:  # noqa: BLE001 - CPU build has no _cudnn
        out["cudnn_error"] = f"{type(exc).__name__}: {exc}"
    try:
        out["cudnn_version_check"] = torch.backends.cudnn.version()
    except Exception as exc:  # noqa: BLE001 - raises on a runtime/compiled mismatch: that IS the evidence
        out["cudnn_version_check_error"] = f"{type(exc).__name__}: {exc}"
    out["cudnn_enabled"] = bool(torch.backends.cudnn.enabled)
    out["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    out["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    try:
        out["allow_tf32_conv"] = bool(torch.backends.cudnn.allow_tf32)
    except Exception:  # noqa: BLE001
        pass
    try:
        flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
        out["arch_list"] = flags.split() if flags else []
    except Exception as exc:  # noqa: BLE001
        out["arch_list_error"] = str(exc)
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    except Exception as exc:  # noqa: BLE001
        out["cuda_available"] = False
        out["cuda_error"] = f"{type(exc).__name__}: {exc}"
    out["maps"] = maps()
    # print what we know now: if the conv below kills the process (abort in a mixed cuDNN), the
    # parent still has the versions and the libraries mapped so far
    print(json.dumps({"stage": "import", **out}), flush=True)
    if out.get("cuda_available") and len(sys.argv) > 1 and sys.argv[1] == "conv":
        out["conv_started"] = True
        try:
            x = torch.randn(1, 4, 8, 8, device="cuda")
            w = torch.randn(4, 4, 3, 3, device="cuda")
            torch.nn.functional.conv2d(x, w, padding=1)
            torch.cuda.synchronize()
            out["conv_ok"] = True
        except Exception as exc:  # noqa: BLE001
            out["conv_ok"] = False
            out["conv_error"] = f"{type(exc).__name__}: {exc}"[:1500]
    out["maps"] = maps()
    return out


if __name__ == "__main__":
    print(json.dumps({"stage": "done", **main()}), flush=True)
