#!/usr/bin/env python
"""Validate convdoctor on a GPU machine: one command, logs and JSON in one folder, a summary last.

    python benchmarks/gpu_validate.py OUT_DIR [--quick] [--only STEPS] [--skip STEPS]
                                      [--cudnn-fault-dir DIR] [--timeout S]

Run it from a checkout on a machine with an NVIDIA GPU, a CUDA build of PyTorch and the `gpu` and
`test` extras installed (`pip install -e ".[gpu,test]"`); it runs this checkout's sources
(`src/` first on PYTHONPATH). Steps, in order (docs/results.md quotes what each measured):

  pytest    python -m pytest -m gpu -q: every GPU-marked test
  env       convdoctor env / doctor on this machine, timed; with CUDA_VISIBLE_DEVICES=''; with
            --cudnn-fault-dir, another cuDNN first on LD_LIBRARY_PATH (a real shadowing fault)
  check     benchmarks/gpu/check_fuzz.py: the checker's verdicts against real cuDNN
  explain   benchmarks/gpu/explain_live.py: real failures provoked and diagnosed
  bench     convdoctor bench cnn-layers: the six 101-layer passes (fp32 NCHW and fp16 NHWC;
            fprop, dgrad, wgrad), as docs/results.md ran them
  optimize  benchmarks/bench_optimize.py: convdoctor.optimize end to end on four models

--quick runs a short version of each step (bench: 8 layers per pass; check: 500 cases;
optimize: ResNet-50 fp32 once); its figures are smoke checks, not results. A full run takes hours
(each bench pass 20-60 minutes on an H100). Run it again with the same OUT_DIR to continue: the
bench passes resume from their `.partial` files. Exit code: 0 when every step ran and passed its
checks, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_PASSES = tuple((cfg, d) for cfg in ("fp32-nchw", "fp16-nhwc") for d in ("fprop", "dgrad", "wgrad"))
OPTIMIZE_RUNS = (  # (name, bench_optimize.py arguments): the commands docs/results.md quotes
    ("resnet50", ["--configs", "resnet50_fp32,resnet50_bf16_cl", "--repeats", "3",
                  "--time-budget", "120", "--variant-timeout", "200"]),
    ("speech_unet3d", ["--configs", "speech_fp32,unet3d_fp32", "--repeats", "3",
                       "--time-budget", "150", "--variant-timeout", "280", "--skip-first-step"]),
)
OPTIMIZE_QUICK = (("resnet50_fp32", ["--configs", "resnet50_fp32", "--repeats", "1",
                                     "--time-budget", "120", "--variant-timeout", "200"]),)


class UsageError(Exception):
    """Bad input: one line, exit 2."""


@dataclass(frozen=True)
class Settings:
    out: Path
    quick: bool
    fault_dir: Path | None
    timeout_s: float | None
    python: str = sys.executable


@dataclass
class StepResult:
    name: str
    ok: bool = True
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def fail(self, line: str) -> None:
        self.ok = False
        self.lines.append("FAILED: " + line)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def run(cmd: list[str], log: Path, s: Settings, extra_env: dict[str, str] | None = None,
        stdout: Path | None = None) -> tuple[int, float]:
    """Run cmd from the repository root; stderr (and stdout unless `stdout`) appended to `log`.
    Returns (exit code, seconds); 124 when it ran past --timeout."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"  $ {shlex.join(cmd)}", flush=True)
    with open(log, "a") as err, open(stdout or log, "a") as out:
        err.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {shlex.join(cmd)}\n")
        err.flush()
        try:
            rc = subprocess.run(cmd, cwd=ROOT, env=_env(extra_env), stdout=out, stderr=err,
                                timeout=s.timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t0


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cd(*args: str, s: Settings) -> list[str]:
    return [s.python, "-m", "convdoctor", *args]


# ------------------------------------------------------------------ steps
def step_pytest(s: Settings, r: StepResult) -> None:
    d = s.out / "pytest"
    rc, _ = run([s.python, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                 f"--junitxml={d / 'junit.xml'}"], d / "pytest.log", s)
    tail = [ln for ln in (d / "pytest.log").read_text().splitlines() if ln.strip()][-1:]
    r.lines += tail
    if rc != 0:
        r.fail(f"pytest exit {rc} (log: {d / 'pytest.log'})")


def _findings(rep: Any) -> list[str]:
    return [f["id"] for f in rep.get("findings", [])] if isinstance(rep, dict) else []


def _smoke(rep: Any) -> str:
    try:
        cases = rep["facts"]["smoke"]["value"]["cases"]
    except (KeyError, TypeError):
        return "smoke: not run"
    ran = [c for c in cases if not c.get("skipped")]
    return f"smoke {sum(1 for c in ran if c.get('ok'))}/{len(ran)} correct"


def step_env(s: Settings, r: StepResult) -> None:
    d = s.out / "env"
    log = d / "env.log"
    _, t_env = run(_cd("env", "--json", s=s), log, s, stdout=d / "env.json")
    rc, t_doc = run(_cd("doctor", "--json", s=s), log, s, stdout=d / "doctor.json")
    run(_cd("doctor", s=s), log, s, stdout=d / "doctor.txt")
    healthy = _json(d / "doctor.json")
    errors = [f["id"] for f in (healthy or {}).get("findings", []) if f.get("severity") == "error"]
    r.lines.append(f"healthy: env --json {t_env:.2f} s, doctor {t_doc:.2f} s (exit {rc}), "
                   f"findings {_findings(healthy)}, {_smoke(healthy)}")
    r.data.update(env_s=round(t_env, 2), doctor_s=round(t_doc, 2), findings=_findings(healthy))
    if healthy is None or errors:
        r.fail(f"doctor on this machine: {errors or 'no report'}")
    run(_cd("env", "--json", s=s), log, s, {"CUDA_VISIBLE_DEVICES": ""}, stdout=d / "hidden.json")
    hidden = _findings(_json(d / "hidden.json"))
    r.lines.append(f"CUDA_VISIBLE_DEVICES='': findings {hidden}")
    if "no-visible-gpu" not in hidden:
        r.fail("CUDA_VISIBLE_DEVICES='' did not give no-visible-gpu")
    if s.fault_dir is None:
        r.lines.append("fault case not run (no --cudnn-fault-dir)")
        return
    ld = os.pathsep.join(p for p in (str(s.fault_dir), os.environ.get("LD_LIBRARY_PATH")) if p)
    rc, t = run(_cd("doctor", "--json", s=s), log, s, {"LD_LIBRARY_PATH": ld},
                stdout=d / "fault_doctor.json")
    fault = _json(d / "fault_doctor.json")
    ids = _findings(fault)
    r.lines.append(f"fault ({s.fault_dir} first): doctor {t:.2f} s, exit {rc}, findings {ids}")
    text = json.dumps((fault or {}).get("findings", []))
    checks = {"cudnn-shadowed": "cudnn-shadowed" in ids, "names the directory": str(s.fault_dir) in text,
              "exit 2": rc == 2}
    if not all(checks.values()):
        r.fail(f"fault checks {checks}")


def step_check(s: Settings, r: StepResult) -> None:
    d = s.out / "check"
    n = "500" if s.quick else "4000"
    rc, _ = run([s.python, "benchmarks/gpu/check_fuzz.py", "--n", n, "--seed", "1"],
                d / "check.log", s, {"OUT": str(d)})
    res = _json(d / "check_fuzz.json") or {}
    fz = res.get("fuzz") or {}
    if not fz:
        r.fail(f"no fuzz result (exit {rc}; log: {d / 'check.log'})")
        return
    dis = len(fz.get("disagreements", []))
    r.lines.append(f"{fz['agree']}/{fz['n']} agree, {dis} unexplained disagreements, "
                   f"{fz.get('known_differences')} known differences, {len(fz.get('crashes', []))} "
                   f"cases crashed the CUDA context, {fz.get('seconds')} s")
    r.data.update({k: fz.get(k) for k in ("n", "agree", "known_differences", "seconds")},
                  disagreements=dis, perf_ms=res.get("perf"))
    if rc != 0 or dis:
        r.fail(f"exit {rc}, {dis} unexplained disagreements")


def step_explain(s: Settings, r: StepResult) -> None:
    d = s.out / "explain"
    extra = {"OUT": str(d)}
    if s.fault_dir is not None:
        extra["CUDNN_FAULT_DIR"] = str(s.fault_dir)
    rc, _ = run([s.python, "benchmarks/gpu/explain_live.py"], d / "explain.log", s, extra)
    summ = (_json(d / "explain_gpu.json") or {}).get("summary") or {}
    r.lines.append(f"{summ.get('matched')}/{summ.get('with_expectation')} provoked failures "
                   f"diagnosed right, {summ.get('cases')} cases, {summ.get('seconds')} s")
    r.data.update(summ)
    if rc != 0:
        r.fail(f"exit {rc} (log: {d / 'explain.log'})")


def _bench_line(cfg: str, direction: str, sm: dict[str, Any]) -> str:
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    return (f"{cfg} {direction}: {sm.get('measured')}/{sm.get('problems')} measured, "
            f"{sm.get('geomean_speedup_vs_benchmark', 0):.4f}x vs benchmark=True, "
            f"{pct(sm.get('share_at_1_10x_vs_benchmark'))} >= 1.10x, "
            f"{sm.get('slower_than_best_pytorch_by_2pct')} rows > 2% slower "
            f"(worst {sm.get('worst_vs_best_pytorch', 0):.3f}x), "
            f"stable {pct(sm.get('stable_within_3pct'))}")


def step_bench(s: Settings, r: StepResult) -> None:
    d = s.out / "bench"
    for cfg, direction in BENCH_PASSES:
        out = d / f"cnn-layers_{cfg}_{direction}.json"
        cmd = _cd("bench", "cnn-layers", "--config", cfg, "--direction", direction, "--budget",
                  "0.5", "--timeout", "30", "--json", "--out", str(out), "--resume", s=s)
        if s.quick:
            cmd += ["--limit", "8"]
        rc, _ = run(cmd, d / f"bench_{cfg}_{direction}.log", s, stdout=Path(os.devnull))
        sm = (_json(out) or {}).get("summary")
        if rc not in (0, 1) or sm is None:
            r.fail(f"{cfg} {direction}: exit {rc}, no result (a re-run resumes it)")
            continue
        r.lines.append(_bench_line(cfg, direction, sm))
        r.data[f"{cfg}_{direction}"] = sm


def step_optimize(s: Settings, r: StepResult) -> None:
    for name, args in OPTIMIZE_QUICK if s.quick else OPTIMIZE_RUNS:
        d = s.out / "optimize" / name
        db = d / f"tuning-{time.strftime('%Y%m%d-%H%M%S')}.sqlite3"  # empty at the start
        rc, _ = run([s.python, "benchmarks/bench_optimize.py", "--device", "cuda", "--out", str(d),
                     "--db", str(db), "--steps", "20", "--budget", "0.2", "--rounds", "5",
                     "--cpus", "4", "--skip-overhead", *args], d / "optimize.log", s)
        res = _json(d / "runtime_bench.json")
        if rc != 0 or res is None:
            r.fail(f"{name}: exit {rc}, no runtime_bench.json (log: {d / 'optimize.log'})")
            continue
        for cfg, modes in res.get("configs", {}).items():
            for mode, slot in modes.items():
                sp = slot.get("speedup_vs_best_eager_fair")
                r.lines.append(f"{cfg} {mode}: {sp:.3f}x vs best eager" if sp else
                               f"{cfg} {mode}: no figure ({slot.get('error', 'see the log')})")
                r.data[f"{cfg}_{mode}"] = sp
        first = res.get("first_step_resnet50_fp32_train") or {}
        if first.get("convdoctor") and first.get("benchmark"):
            r.lines.append(f"first ResNet-50 fp32 training step, warm database: "
                           f"{first['convdoctor']['first_step_s']:.2f} s vs benchmark=True "
                           f"{first['benchmark']['first_step_s']:.2f} s")


STEPS: tuple[tuple[str, Callable[[Settings, StepResult], None]], ...] = (
    ("pytest", step_pytest), ("env", step_env), ("check", step_check), ("explain", step_explain),
    ("bench", step_bench), ("optimize", step_optimize),
)


# ------------------------------------------------------------------ driver
def machine(s: Settings) -> dict[str, Any]:
    """GPU, driver and library versions, and the checkout's commit, into OUT_DIR/machine.json."""
    code = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': "
            "torch.version.cuda, 'cudnn': torch.backends.cudnn.version(), 'gpu': "
            "torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))")
    info: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    probes = {"torch": [s.python, "-c", code],
              "nvidia_smi": ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap",
                             "--format=csv,noheader"],
              "commit": ["git", "rev-parse", "--short", "HEAD"],
              "triton": [s.python, "-c", "import triton; print(triton.__version__)"]}
    for key, cmd in probes.items():
        try:
            cp = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                                timeout=120)
            out = cp.stdout.strip()
            info[key] = json.loads(out) if key == "torch" and cp.returncode == 0 else out or None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            info[key] = None
    return info


def parse(argv: list[str]) -> tuple[Settings, list[str]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", help="folder for logs and JSON (created; reused to resume)")
    ap.add_argument("--quick", action="store_true", help="a short version of every step")
    ap.add_argument("--only", default=None, help="comma-separated steps to run")
    ap.add_argument("--skip", default="", help="comma-separated steps to leave out")
    ap.add_argument("--cudnn-fault-dir", default=None, metavar="DIR",
                    help="a directory with another cuDNN (e.g. an nvidia-cudnn-cu12 wheel's lib/)")
    ap.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="limit per command (default: none)")
    a = ap.parse_args(argv)
    names = [n for n, _ in STEPS]
    only = [x for x in (a.only or ",".join(names)).split(",") if x]
    skip = [x for x in a.skip.split(",") if x]
    bad = [x for x in only + skip if x not in names]
    if bad:
        raise UsageError(f"unknown step(s) {', '.join(bad)}: choose from {', '.join(names)}")
    out = Path(a.out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder: give a folder for the results")
    fault = Path(a.cudnn_fault_dir).resolve() if a.cudnn_fault_dir else None
    if fault is not None and not fault.is_dir():
        raise UsageError(f"--cudnn-fault-dir {fault} is not a folder")
    if a.timeout is not None and a.timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    chosen = [n for n in names if n in only and n not in skip]
    return Settings(out=out.resolve(), quick=a.quick, fault_dir=fault, timeout_s=a.timeout), chosen


def main(argv: list[str]) -> int:
    try:
        s, chosen = parse(argv)
        s.out.mkdir(parents=True, exist_ok=True)
    except (UsageError, OSError) as exc:
        print(f"gpu_validate: {exc}", file=sys.stderr)
        return 2
    info = machine(s)
    (s.out / "machine.json").write_text(json.dumps(info, indent=1))
    if not (info.get("torch") or {}).get("gpu"):
        print("gpu_validate: no GPU visible to PyTorch here (a CUDA build of torch and an NVIDIA "
              "GPU are needed); see OUT_DIR/machine.json", file=sys.stderr)
        return 2
    results = []
    for name, fn in STEPS:
        if name not in chosen:
            continue
        print(f"== {name}", flush=True)
        r = StepResult(name)
        t0 = time.perf_counter()
        fn(s, r)
        r.seconds = round(time.perf_counter() - t0, 1)
        results.append(r)
        (s.out / "summary.json").write_text(json.dumps(
            {"machine": info, "quick": s.quick, "steps": [r.__dict__ for r in results]}, indent=1))
    t = info.get("torch") or {}
    smi = (info.get("nvidia_smi") or "").splitlines()[:1]
    driver = smi[0].split(", ")[1] if smi and smi[0].count(", ") >= 1 else "?"
    print(f"\nconvdoctor GPU validation ({'quick' if s.quick else 'full'}), {info['date_utc']} UTC, "
          f"{t.get('gpu')}, driver {driver}, torch {t.get('torch')}, cuDNN {t.get('cudnn')}, "
          f"Triton {info.get('triton')}, commit {info.get('commit')}; logs and JSON in {s.out}")
    for r in results:
        print(f"{r.name:9s} {'ok    ' if r.ok else 'FAILED'} {r.seconds:8.1f} s")
        for line in r.lines:
            print(f"          {line}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
