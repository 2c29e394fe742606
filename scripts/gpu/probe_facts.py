# ruff: noqa  -- a one-off fact probe, kept exactly as it was run on the device machine
"""One-off fact probe of the GPU machine: driver, libraries, torch, and the cudnn-frontend 1.16 API.

Run: PYTHONPATH=/tmp/site:src python3 scripts/gpu/probe_facts.py   (writes nothing; prints facts)
"""
import os
import subprocess
import time


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:
        return f"ERR {e}"

print("== machine")
print(sh("nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,compute_cap --format=csv"))
print(sh("cat /proc/driver/nvidia/version"))
print("LD_LIBRARY_PATH=", os.environ.get("LD_LIBRARY_PATH"))
print({k: v for k, v in os.environ.items() if k.startswith(("CUDA", "CUDNN", "NV", "TORCH", "XLA", "TF_"))})
print(sh("ldconfig -p | grep -E 'cudnn|cudart|cublas|nvrtc|libcuda\\.|nvidia-ml' | head -30"))
print("== all libcudnn copies")
print(sh("find / -xdev \\( -name 'libcudnn*.so*' -o -name 'libcudart.so*' -o -name 'libnvrtc.so*' -o -name 'libcublasLt.so*' \\) 2>/dev/null | grep -v '^/proc' | head -60"))
print(sh("python3 -c 'import site,sys; print(site.getsitepackages(), sys.prefix)'"))
print(sh("python3 -m pip list 2>/dev/null | grep -iE 'nvidia|torch|jax|tensorflow|cupy|onnx|numpy|ml-py|platformdirs'"))

import torch

print("== torch", torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
print("arch flags", torch._C._cuda_getArchFlags(), torch.cuda.get_arch_list())
p = torch.cuda.get_device_properties(0)
print("props", p.name, p.major, p.minor, p.multi_processor_count, getattr(p, "L2_cache_size", None), p.total_memory)
print("cudnn flags", torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic)
x = torch.randn(8, 3, 32, 32, device="cuda"); w = torch.randn(16, 3, 3, 3, device="cuda")
torch.nn.functional.conv2d(x, w).sum().item()
maps = open("/proc/self/maps").read().splitlines()
libs = sorted({l.split()[-1] for l in maps if ".so" in l and any(s in l for s in ("cudnn", "cudart", "cublas", "nvrtc", "libcuda", "nvidia"))})
print("mapped:", "\n  ".join(libs))
import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
print("nvml driver", pynvml.nvmlSystemGetDriverVersion(), "cuda drv", pynvml.nvmlSystemGetCudaDriverVersion())
for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
    try:
        print(fn, hex(getattr(pynvml, fn)(h)))
    except Exception as e:
        print(fn, "ERR", e)
print("sm clock", pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM), "max", pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
try:
    print("ecc", pynvml.nvmlDeviceGetTotalEccErrors(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC))
except Exception as e:
    print("ecc ERR", e)

print("== cudnn frontend")
import cudnn

print("cudnn frontend", cudnn.__version__, cudnn.backend_version(), cudnn.__file__)
print("dir:", [n for n in dir(cudnn) if not n.startswith("_")])
handle = cudnn.create_handle()
cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
def conv_graph(direction, n=32, c=64, hw=56, k=64, r=3, dtype=torch.float16, nhwc=True):
    mf = torch.channels_last if nhwc else torch.contiguous_format
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).to(memory_format=mf)
    w = torch.randn(k, c, r, r, device="cuda", dtype=dtype).to(memory_format=mf)
    dy = torch.randn(n, k, hw, hw, device="cuda", dtype=dtype).to(memory_format=mf)
    cdt = {torch.float16: cudnn.data_type.HALF, torch.float32: cudnn.data_type.FLOAT, torch.bfloat16: cudnn.data_type.BFLOAT16}[dtype]
    g = cudnn.pygraph(io_data_type=cdt, intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    pad = [r // 2] * 2
    if direction == "fprop":
        X = g.tensor_like(x); W = g.tensor_like(w)
        Y = g.conv_fprop(image=X, weight=W, padding=pad, stride=[1, 1], dilation=[1, 1])
        Y.set_output(True).set_data_type(cdt)
        io = (X, W, Y); out = None
    elif direction == "dgrad":
        DY = g.tensor_like(dy); W = g.tensor_like(w)
        DX = g.conv_dgrad(loss=DY, filter=W, padding=pad, stride=[1, 1], dilation=[1, 1])
        DX.set_output(True).set_data_type(cdt).set_dim(list(x.shape)).set_stride(list(x.stride()))
        io = (DY, W, DX)
    else:
        X = g.tensor_like(x); DY = g.tensor_like(dy)
        DW = g.conv_wgrad(image=X, loss=DY, padding=pad, stride=[1, 1], dilation=[1, 1])
        DW.set_output(True).set_data_type(cdt).set_dim(list(w.shape)).set_stride(list(w.stride()))
        io = (X, DY, DW)
    g.validate(); g.build_operation_graph()
    names = {}
    for mode in (cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK):
        try:
            g2 = g
            g2.create_execution_plans([mode])
        except Exception as e:
            print(direction, mode, "ERR", e)
    try:
        g.check_support()
    except Exception as e:
        print("check_support ERR", e)
    g.build_plans(cudnn.build_plan_policy.ALL)
    cnt = g.get_execution_plan_count()
    return g, cnt, (x, w, dy)
for d in ("fprop", "dgrad", "wgrad"):
    t0 = time.time()
    try:
        g, cnt, ts = conv_graph(d)
        names = [g.get_plan_name_at_index(i) for i in range(cnt)]
        print(d, "plans", cnt, f"{time.time()-t0:.2f}s", names[:50])
        print(" ws", [g.get_workspace_size_plan_at_index(i) for i in range(min(cnt, 8))])
        try:
            print(" engine_count", g.get_engine_count())
            print(" knobs eng0", g.get_knobs_for_engine(0))
        except Exception as e:
            print(" engine enum ERR", repr(e))
    except Exception:
        import traceback; traceback.print_exc()
print("graph methods:", [n for n in dir(cudnn.pygraph) if not n.startswith("_")])
print("notes:", [n for n in dir(cudnn.numerical_note) if not n.startswith("_")], [n for n in dir(cudnn.behavior_note) if not n.startswith("_")] if hasattr(cudnn, "behavior_note") else "no behavior_note")
