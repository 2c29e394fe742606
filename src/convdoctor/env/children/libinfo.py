"""Child: load libraries given as argv and print one JSON line per library, flushed at once.

For cuDNN it calls cudnnGetVersion and cudnnGetCudartVersion (both return size_t and need no GPU).
If a library segfaults the parent sees which one was last started and retries the rest.
"""

import ctypes
import json
import os
import sys

RTLD = os.RTLD_NOW | os.RTLD_LOCAL


def info(path):
    out = {"path": path}
    print(json.dumps({"start": path}), flush=True)
    try:
        lib = ctypes.CDLL(path, mode=RTLD)
    except OSError as exc:
        out["load_error"] = str(exc)
        return out
    for sym, key in (("cudnnGetVersion", "cudnn_version"), ("cudnnGetCudartVersion", "cudart_version")):
        try:
            fn = getattr(lib, sym)
        except AttributeError:
            continue
        fn.restype = ctypes.c_size_t
        fn.argtypes = []
        out[key] = int(fn())
    try:
        fn = lib.cudaRuntimeGetVersion
        v = ctypes.c_int(0)
        if fn(ctypes.byref(v)) == 0:
            out["cudart_runtime_version"] = v.value
    except AttributeError:
        pass
    mapped = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(p)
                if base.startswith("libcudnn") and p not in mapped:
                    mapped.append(p)
    except OSError:
        pass
    out["mapped_cudnn"] = mapped
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps({"result": info(p)}), flush=True)
