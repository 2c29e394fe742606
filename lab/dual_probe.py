"""What does the weight transform of a `cudnn-dual:` candidate cost, and can cuDNN take the dual
weight without it?

On dense stride-1 dgrad layers the dual problem's fprop plans can run faster than the layer's own
dgrad plans alone, yet lose once the per-call weight gather (`convdoctor.tune.xform`) is added.
For each PROBLEM this script times, with CUDA events over
back-to-back calls, (1) the gather (flip + channel swap, int32 index_select), (2) a channel swap
alone (a transposed copy), and tries two ways to avoid work: (3) the dual fprop graph with
`convolution_mode=CONVOLUTION` (cuDNN flips the kernel itself) on the channel-swapped weight, and
(4) the same with the weight handed over as a transposed VIEW of the original (strides, no copy;
groups=1 only). For (3) and (4) it lists which heuristic plans build, checks each against the
float64 reference, and times the fastest few. Plain script, no tuner.

    PYTHONPATH=src python lab/dual_probe.py PROBLEM_KEY [PROBLEM_KEY ...]

Writes $OUT/dual_probe.json and prints a line per finding.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import torch  # before cudnn

CALLS = 50


def _time(fn: Any, calls: int = CALLS) -> float:
    """us per call, back to back (warm L2), best of 3 replays of a CUDA graph of `calls` calls
    (no host launch cost in the figure); plain launches when capture fails."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph: Any = None
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception:  # noqa: BLE001
        graph = None
        torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        if graph is not None:
            graph.replay()
        else:
            for _ in range(calls):
                fn()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / calls)
    return best


def _graph(cudnn: Any, problem: Any, handle: Any, w_dims: list[int], w_strides: list[int],
           mode: Any) -> tuple[Any, dict[str, Any]]:
    from convdoctor.engines import cudnn_policy as policy

    f32 = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=f32, intermediate_data_type=f32, compute_data_type=f32,
                      handle=handle)
    xd, xs = policy.cudnn_dims_strides(problem, "x")
    x = g.tensor(name="x", dim=xd, stride=xs, data_type=f32)
    w = g.tensor(name="w", dim=w_dims, stride=w_strides, data_type=f32)
    params = policy.cudnn_conv_params(problem)
    kw = {} if mode is None else {"convolution_mode": mode}
    y = g.conv_fprop(image=x, weight=w, compute_data_type=f32, **params, **kw)
    yd, ys = policy.cudnn_dims_strides(problem, "y")
    y.set_output(True)
    y.set_data_type(f32)
    y.set_dim(yd)
    y.set_stride(ys)
    g.validate()
    g.build_operation_graph()
    return g, {"x": x, "w": w, "y": y}


def _plans(cudnn: Any, problem: Any, handle: Any, w_dims: list[int], w_strides: list[int],
           mode: Any, x: Any, wt: Any, ref: Any, out: dict[str, Any]) -> None:
    from convdoctor.engines import cudnn_policy as policy

    rows = []
    for hm in ("A", "B", "FALLBACK"):
        try:
            g, t = _graph(cudnn, problem, handle, w_dims, w_strides, mode)
            g.create_execution_plans([getattr(cudnn.heur_mode, hm)])
            notes = [getattr(cudnn.numerical_note, n) for n in
                     policy.note_filter(problem).numeric if hasattr(cudnn.numerical_note, n)]
            if notes:
                g.deselect_numeric_notes(notes)
        except Exception as exc:  # noqa: BLE001
            rows.append({"mode": hm, "error": " ".join(str(exc).split())[:300]})
            continue
        for i in range(int(g.get_execution_plan_count())):
            name = str(g.get_plan_name_at_index(i))
            if any(r.get("name") == name for r in rows):
                continue
            row: dict[str, Any] = {"mode": hm, "name": name}
            rows.append(row)
            try:
                g.build_plan_at_index(i)
            except Exception as exc:  # noqa: BLE001
                row["error"] = " ".join(str(exc).split())[:160]
                continue
            ws = torch.empty(max(1, int(g.get_workspace_size_plan_at_index(i))),
                             dtype=torch.uint8, device="cuda")
            y = torch.empty_strided(problem.y_shape(), policy.logical_strides(problem, "y"),
                                    device="cuda")

            def run(g: Any = g, i: int = i, y: Any = y, ws: Any = ws,
                    t: dict[str, Any] = t) -> None:
                from convdoctor.engines.cudnn_enum import get_handle

                g.execute_plan_at_index({t["x"]: x, t["w"]: wt, t["y"]: y}, ws, i,
                                        handle=get_handle(0, torch.cuda.current_stream()))

            try:
                y.fill_(float("nan"))
                run()
                torch.cuda.synchronize()
                err = float((y.double() - ref).norm() / ref.norm())
                row["rel_err"] = err
                row["us"] = round(_time(run), 2) if err == err and err < 5e-3 else None
            except Exception as exc:  # noqa: BLE001
                row["error"] = " ".join(str(exc).split())[:160]
    out["plans"] = rows
    ok = sorted((r for r in rows if r.get("us")), key=lambda r: r["us"])
    out["fastest"] = ok[:3]


def probe(key: str) -> dict[str, Any]:
    from convdoctor.engines import cudnn_policy as policy
    from convdoctor.engines import xform
    from convdoctor.engines.cudnn_enum import build_plan, get_handle, import_cudnn
    from convdoctor.engines.torch_ops import reference_cuda as reference
    from convdoctor.problem import ConvProblem

    _, cudnn = import_cudnn()
    p = ConvProblem.parse(key)
    d = policy.dual_problem(p)
    assert d is not None and p.direction == "dgrad" and p.dtype == "float32"
    res: dict[str, Any] = {"problem": key, "dual": d.key()}
    dev = "cuda:0"
    h = get_handle(0)
    gen = torch.Generator(device=dev).manual_seed(1)
    dy = torch.empty_strided(p.y_shape(), policy.logical_strides(p, "dy"), device=dev)
    w = torch.empty_strided(p.w_shape(), policy.logical_strides(p, "w"), device=dev)
    dy.uniform_(-1, 1, generator=gen)
    w.uniform_(-1, 1, generator=gen)
    xl = torch.empty(p.x_shape(), device=dev)
    ref = reference(p, dy, w, xl, None)
    wts = policy.logical_strides(d, "w")
    idx = xform.weight_index(p.w_shape(), policy.logical_strides(p, "w"), wts, p.groups, dev)
    wt = torch.empty_strided(d.w_shape(), wts, device=dev)
    res["gather_us"] = round(_time(lambda: xform.transform(w, idx, wt)), 2)
    # channel swap alone (no flip): w (K, C/g, *ks) -> (C, K/g, *ks) within groups
    g_, kg, cg = p.groups, p.k // p.groups, p.c // p.groups
    ks = p.kernel
    sw = torch.empty_strided(d.w_shape(), wts, device=dev)

    def swap() -> None:
        sw.view(g_, cg, kg, *ks).copy_(w.view(g_, kg, cg, *ks).transpose(1, 2))

    res["swap_us"] = round(_time(swap), 2)
    # the channel swap as a channels-last conversion: w viewed (1, K, C, rs) -> (C, rs, K) memory,
    # which is w' (C, K, r, s) in the KRSC layout (groups=1)
    if p.groups == 1:
        rs = 1
        for v in ks:
            rs *= v
        w4 = w.view(1, p.k, p.c, rs)
        cl = torch.empty_like(w4, memory_format=torch.channels_last)
        res["swap_cl_us"] = round(_time(lambda: cl.copy_(w4)), 2)
    res["l2_flush_note"] = "warm L2: back-to-back calls"
    plan = build_plan(d)
    own = build_plan(p)
    y = torch.empty_strided(d.y_shape(), policy.logical_strides(d, "y"), device=dev)
    wsd, wso = plan.workspace(), own.workspace()
    res["dual_default_plan"] = plan.name
    res["dual_plan_us"] = round(_time(lambda: plan.execute(
        dy, wt, y, workspace=wsd, check=False, stream=torch.cuda.current_stream())), 2)
    res["own_default_plan"] = own.name
    res["own_plan_us"] = round(_time(lambda: own.execute(
        dy, w, y, workspace=wso, check=False, stream=torch.cuda.current_stream())), 2)
    # (3) CONVOLUTION mode on the swapped (unflipped) weight
    enum = getattr(cudnn, "convolution_mode", None) or getattr(
        sys.modules.get("cudnn._compiled_module"), "convolution_mode", None)
    mode = getattr(enum, "CONVOLUTION", None)
    res["convolution_mode_enum"] = str(mode)
    swap()
    torch.cuda.synchronize()
    wd, wstr = policy.cudnn_dims_strides(d, "w")
    if mode is not None:
        conv: dict[str, Any] = {}
        try:
            _plans(cudnn, d, h, wd, wstr, mode, dy, sw, ref, conv)
        except Exception:  # noqa: BLE001
            conv["error"] = traceback.format_exc()[-600:]
        res["convolution_mode"] = conv
    # (4) CONVOLUTION mode on a transposed view of w (groups=1, NCHW): no copy at all
    if mode is not None and p.groups == 1 and p.layout == "nchw" and p.ndim == 2:
        view = w.transpose(0, 1)  # (C, K, r, s) with w's memory
        vd = list(view.shape)
        vs = list(view.stride())
        strided: dict[str, Any] = {"strides": vs}
        try:
            _plans(cudnn, d, h, vd, vs, mode, dy, view, ref, strided)
        except Exception:  # noqa: BLE001
            strided["error"] = traceback.format_exc()[-600:]
        res["strided_view"] = strided
    return res


def main(argv: list[str]) -> int:
    out = []
    for key in argv:
        try:
            r = probe(key)
        except Exception:  # noqa: BLE001
            r = {"problem": key, "error": traceback.format_exc()[-1200:]}
        out.append(r)
        brief = {k: v for k, v in r.items() if k not in ("convolution_mode", "strided_view")}
        print(json.dumps(brief))
        for part in ("convolution_mode", "strided_view"):
            if part in r:
                pr = r[part]
                built = [x for x in pr.get("plans", []) if "us" in x]
                print(f"  {part}: {len(pr.get('plans', []))} listed, {len(built)} ran; "
                      f"fastest {pr.get('fastest')}; error {str(pr.get('error', ''))[-300:]}")
    path = os.path.join(os.environ.get("OUT", "."), "dual_probe.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
