"""Where the host time of one cuDNN plan call goes (GPU machine, standalone probe).

    PYTHONPATH=src python lab/plan_overhead.py [N]

For a small convolution (GPU time far below the host time, so calls are host-bound) it times N
back-to-back calls of: PyTorch's own F.conv2d; `PlanExec.fprop` (the optimize route); `ConvPlan.execute`
alone; the frontend's `execute_plan_at_index` with torch tensors, with int device pointers, and the
pieces around it (current stream, handle lookup, `__dlpack__`). Prints one JSON line per variant:
host microseconds per call (perf_counter until the last call returned) and wall per call (after a
synchronize).
"""

from __future__ import annotations

import json
import sys
import time

import torch  # noqa: I001 - torch before cudnn
import torch.nn.functional as F

from convdoctor.engines.cudnn_enum import build_plan, get_handle
from convdoctor.engines.cudnn_exec import PlanExec, _raw_stream
from convdoctor.problem import ConvProblem


def _bench(fn, n: int) -> dict[str, float]:
    for _ in range(max(50, n // 10)):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return {"host_us": (t1 - t0) / n * 1e6, "wall_us": (t2 - t0) / n * 1e6}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    spec = ("fprop n=1 c=16 h=8 w=8 k=16 r=3 s=3 pad=1 dtype=float32 layout=nchw math=tf32")
    p = ConvProblem.parse(spec)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    x = torch.randn(1, 16, 8, 8, device="cuda")
    w = torch.randn(16, 16, 3, 3, device="cuda")
    y = torch.empty(1, 16, 8, 8, device="cuda")
    plan = build_plan(p)
    ex = PlanExec("cudnn:" + plan.name, p, plan)
    ws = plan.workspace()
    if ws is None or ws.numel() == 0:
        ws = torch.empty(1, dtype=torch.uint8, device="cuda")
    g = plan._g  # noqa: SLF001 - probe
    tx, tw, ty = g.tensors["x"], g.tensors["w"], g.tensors["y"]
    stream = torch.cuda.current_stream()
    h = get_handle(0, stream)
    rows: list[tuple[str, object]] = [
        ("torch F.conv2d", lambda: F.conv2d(x, w, padding=1)),
        ("PlanExec.fprop (optimize route)", lambda: ex.fprop(x, w, None, None)),
        ("ConvPlan.execute check=False, stream=current",
         lambda: plan.execute(x, w, y, workspace=ws, stream=torch.cuda.current_stream(),
                              check=False)),
        ("ConvPlan.execute check=False, default handle",
         lambda: plan.execute(x, w, y, workspace=ws, check=False)),
        ("ConvPlan.launch raw stream (PlanExec's per-call path)",
         lambda: plan.launch(x, w, y, ws, _raw_stream(0))),
        ("raw stream getter", lambda: _raw_stream(0)),
        ("execute_plan_at_index, tensors",
         lambda: g.graph.execute_plan_at_index({tx: x, tw: w, ty: y}, ws, plan.index, handle=h)),
        ("torch.cuda.current_stream()", lambda: torch.cuda.current_stream()),
        ("get_handle(0, stream)", lambda: get_handle(0, stream)),
        ("x.__dlpack__()", lambda: x.__dlpack__()),
        ("torch.empty_strided out", lambda: torch.empty_strided((1, 16, 8, 8), (1024, 64, 8, 1),
                                                                 device="cuda")),
    ]
    ptrs = {tx: x.data_ptr(), tw: w.data_ptr(), ty: y.data_ptr()}
    try:
        g.graph.execute_plan_at_index(ptrs, ws.data_ptr(), plan.index, handle=h)
        torch.cuda.synchronize()
        ok = torch.allclose(y, F.conv2d(x, w, padding=1), atol=1e-2, rtol=1e-2)
        rows.append((f"execute_plan_at_index, int pointers (correct={ok})",
                     lambda: g.graph.execute_plan_at_index(
                         {tx: x.data_ptr(), tw: w.data_ptr(), ty: y.data_ptr()},
                         ws.data_ptr(), plan.index, handle=h)))
    except Exception as exc:  # noqa: BLE001
        print(json.dumps({"variant": "int pointers", "error": str(exc)[:300]}), flush=True)
    try:
        uid = {t.get_uid(): v for t, v in ((tx, x), (tw, w), (ty, y))}
        g.graph.execute_plan_at_index(uid, ws, plan.index, handle=h)
        rows.append(("execute_plan_at_index, uid keys", lambda: g.graph.execute_plan_at_index(
            {tx.get_uid(): x, tw.get_uid(): w, ty.get_uid(): y}, ws, plan.index, handle=h)))
    except Exception as exc:  # noqa: BLE001
        print(json.dumps({"variant": "uid keys", "error": str(exc)[:300]}), flush=True)
    for name, fn in rows:
        r = _bench(fn, n)
        print(json.dumps({"variant": name, **{k: round(v, 2) for k, v in r.items()}}), flush=True)


if __name__ == "__main__":
    main()
