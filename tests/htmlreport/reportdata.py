"""Data for the report's tests: the real H100 results in benchmarks/results, fake machines of the
env tests (a healthy H100, and the cu12 cuDNN on LD_LIBRARY_PATH that broke one), and small
hand-made tuning results whose figures are known."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from env_machines import SITE, healthy

from convdoctor.htmlreport.model import Cand, TunedProblem

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
BENCH_FP32_FPROP = RESULTS / "bench" / "cnn-layers_fp32-nchw_fprop.json.gz"
BENCH_FP16_WGRAD = RESULTS / "bench" / "cnn-layers_fp16-nhwc_wgrad.json.gz"
BENCH_H200 = RESULTS / "bench" / "h200_fp32-nchw_fprop_7rows.json.gz"
OPT_RESNET = RESULTS / "optimize" / "resnet50_f962006.json.gz"
H100 = "NVIDIA H100 80GB HBM3"


OWN = f"{SITE}/nvidia/cudnn/lib"
EXTRA = "/repo/.gpu-extra/cudnn-cu12/lib"


def env_report(tmp: Path, broken: bool) -> dict[str, Any]:
    """`convdoctor env --json` of a fake H100; `broken`: cuDNN 9.1.0 for CUDA 12 (graph, cnn and
    engines_runtime_compiled only) first on LD_LIBRARY_PATH, as on a real machine."""
    from convdoctor.env import diagnose

    m = healthy(tmp)
    if broken:
        m.cudnn(EXTRA, "9.1.0", 12, subs=("graph", "cnn", "engines_runtime_compiled"))
        m.env["LD_LIBRARY_PATH"] = EXTRA
        mixed = ("graph", "cnn", "engines_runtime_compiled")
        loaded = [f"{OWN}/libcudnn.so.9"] + [f"{EXTRA}/libcudnn_{s}.so.9" for s in mixed] \
            + [f"{OWN}/libcudnn_{s}.so.9" for s in ("ops", "adv", "heuristic",
                                                    "engines_precompiled")]
        m.torch(runtime="9.1.0", loaded=loaded)
    return diagnose(system=m.system()).to_dict()


def write_env(tmp: Path, name: str, broken: bool) -> Path:
    root = tmp / f"machine-{name}"
    root.mkdir()
    p = tmp / f"{name}.json"
    p.write_text(json.dumps(env_report(root, broken)))
    return p


def cand(key: str, status: str = "ok", samples: tuple[float, ...] = (), reason: str = "",
         discarded: int = 0, clock: float | None = 1980.0) -> Cand:
    med = statistics.median(samples) if samples else None
    return Cand(key, status, reason, samples, med, None, discarded, clock)


def tuned(cands: list[Cand], *, chosen: str, chosen_s: float, heuristic_s: float | None = None,
          benchmark_s: float | None = None, direction: str = "fprop", flops: float = 1e9,
          min_bytes: float = 1e7, device: str = H100, label: str = "p") -> TunedProblem:
    base = [(k, v) for k, v in (("torch:heuristic", heuristic_s), ("torch:benchmark",
                                                                   benchmark_s)) if v]
    return TunedProblem(label=label, key=f"{label}-key", direction=direction, dtype="float32",
                        math="tf32", flops=flops, min_bytes=min_bytes, device=device,
                        backend="cuda", source="test", sample_kind="samples",
                        candidates=tuple(cands), chosen=(chosen,), chosen_s=chosen_s,
                        baselines=tuple(base))


def optimize_payload(layers: int = 3) -> dict[str, Any]:
    """An `optimize --json` payload with known per-layer times (ms): layer i fprop PyTorch 1.0,
    chosen 0.5; dgrad 2.0 -> 2.0; wgrad 1.0 -> 1.5 (a loss); plus one untuned direction."""
    lays = []
    for i in range(layers):
        dirs = [{"direction": "fprop", "key": "cudnn:eng1", "source": "tuned",
                 "problem": f"fprop p{i}", "winner_ms": 0.5, "baseline_ms": 1.0},
                {"direction": "dgrad", "key": "torch:heuristic", "source": "tuned",
                 "problem": f"dgrad p{i}", "winner_ms": 2.0, "baseline_ms": 2.0},
                {"direction": "wgrad", "key": "cudnn:eng2", "source": "db",
                 "problem": f"wgrad p{i}", "winner_ms": 1.5, "baseline_ms": 1.0}]
        lays.append({"layer": f"layer{i}", "x_shape": [8, 16, 32, 32], "dtype": "torch.float32",
                     "memory_format": "contiguous", "directions": dirs})
    lays.append({"layer": "untuned", "x_shape": [8, 16, 32, 32], "directions": [
        {"direction": "fprop", "key": "torch:default", "source": "pytorch", "winner_ms": None,
         "baseline_ms": None}]})
    rep = {"device": "cuda", "train": True, "channels_last": True,
           "channels_last_reason": "measured: channels_last won",
           "layout_ms": {"as_given": 10.0, "channels_last": 9.0, "as_given_graphed": 8.0,
                         "channels_last_graphed": 7.0},
           "routing": False, "routing_reason": "routes not faster",
           "verify_ms": {"routed": 7.2, "unrouted": 7.0, "chosen": 7.0},
           "graphs": True, "graphs_reason": "graphed won",
           "graphs_ms": {"eager": 7.0, "graphed": 6.0, "graphed_routed": 6.1, "chosen": 6.0,
                         "eager_host_cpu": 5.0},
           "margins": {"layout": 0.05, "routing": 0.03, "graphs": 0.02}, "layers": lays,
           "problems": 3 * layers + 1, "notes": []}
    return {"model": "zoo:test", "input_shape": [8, 16, 32, 32], "dtype": "float32",
            "device": "cuda", "train": True, "step_ms": {"pytorch": 10.0, "convdoctor": 6.0},
            "speedup": 10.0 / 6.0, "steps": 20, "report": rep}
