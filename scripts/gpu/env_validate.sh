#!/usr/bin/env bash
# GPU validation for the env doctor (convdoctor env / doctor). Run from the repo root:
#   OUT=/some/dir bash scripts/gpu/env_validate.sh
# 1) the real `convdoctor env --json` and `convdoctor doctor` (smoke on) on this GPU, timed;
# 2) the REAL fault: an older cu12 cuDNN (.gpu-extra/cudnn-cu12/lib) first on LD_LIBRARY_PATH;
# 3) pytest -m gpu tests/env; 4) the benchmark. Everything is written into $OUT; summary printed last.
set -u
OUT=${OUT:-/tmp/env_validate_out}
mkdir -p "$OUT"
ROOT=$(pwd)
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-$(command -v python || command -v python3)}
CD="$PY -m convdoctor"

now() { date +%s.%N; }
elapsed() { $PY -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }

{
  date -u; hostname; nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.max.sm --format=csv
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
} > "$OUT/machine.txt" 2>&1

# 1) the real machine
t0=$(now); $CD env --json > "$OUT/env.json" 2> "$OUT/env.stderr"; rc_env=$?; t1=$(now)
T_ENV=$(elapsed "$t0" "$t1")
t0=$(now); $CD doctor > "$OUT/doctor.txt" 2> "$OUT/doctor.stderr"; rc_doc=$?; t1=$(now)
T_DOC=$(elapsed "$t0" "$t1")
$CD doctor --json > "$OUT/doctor.json" 2>> "$OUT/doctor.stderr"
$CD env > "$OUT/env.txt" 2>> "$OUT/env.stderr"

# 2) the real fault: the cu12 cuDNN 9.1.0 copy first on LD_LIBRARY_PATH
EXTRA="$ROOT/.gpu-extra/cudnn-cu12/lib"
ls -la "$EXTRA" > "$OUT/fault_dir.txt" 2>&1
if [ -d "$EXTRA" ]; then
  FAULT_LD="$EXTRA${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  t0=$(now); LD_LIBRARY_PATH="$FAULT_LD" $CD doctor > "$OUT/fault_doctor.txt" 2> "$OUT/fault_doctor.stderr"; rc_fault=$?; t1=$(now)
  T_FAULT=$(elapsed "$t0" "$t1")
  LD_LIBRARY_PATH="$FAULT_LD" $CD doctor --json > "$OUT/fault_doctor.json" 2>> "$OUT/fault_doctor.stderr"
  LD_LIBRARY_PATH="$FAULT_LD" $CD env --no-subprocess --json > "$OUT/fault_env_nosubprocess.json" 2>> "$OUT/fault_doctor.stderr"
  # what a plain torch user sees under that fault
  LD_LIBRARY_PATH="$FAULT_LD" timeout 120 $PY - > "$OUT/fault_torch_plain.txt" 2>&1 <<'PYEOF'
import torch
print("torch", torch.__version__, "cudnn.version()", end=" ")
try:
    print(torch.backends.cudnn.version())
except Exception as e:
    print("raised", type(e).__name__, e)
try:
    x = torch.randn(2, 8, 16, 16, device="cuda"); w = torch.randn(8, 8, 3, 3, device="cuda")
    y = torch.nn.functional.conv2d(x, w, padding=1); torch.cuda.synchronize(); print("conv ok", float(y.abs().sum()))
except Exception as e:
    print("conv failed:", type(e).__name__, str(e)[:800])
import os
print("\n".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcudnn" in l})))
PYEOF
else
  rc_fault=NA; T_FAULT=NA
  echo "no $EXTRA: the fault part was not run" > "$OUT/fault_doctor.txt"
fi

# 2b) a second real fault: CUDA_VISIBLE_DEVICES hides the GPU; and --compare healthy vs fault
CUDA_VISIBLE_DEVICES= $CD env --json > "$OUT/cvd_empty.json" 2> "$OUT/cvd_empty.stderr"
CUDA_VISIBLE_DEVICES= $CD env > "$OUT/cvd_empty.txt" 2>> "$OUT/cvd_empty.stderr"
[ -f "$OUT/fault_doctor.json" ] && $CD env --compare "$OUT/doctor.json" "$OUT/fault_doctor.json" > "$OUT/compare.txt" 2>&1

# 3) GPU tests of the env package
if $PY -c "import pytest" 2>/dev/null; then
  timeout 300 $PY -m pytest -q -m gpu tests/env -p no:cacheprovider > "$OUT/pytest_gpu.txt" 2>&1; rc_py=$?
  timeout 150 $PY -m pytest -q tests/env -p no:cacheprovider -k "not compare" > "$OUT/pytest_all_env.txt" 2>&1
else
  echo "(pytest not installed here: running tests/env/test_env_gpu.py directly)" > "$OUT/pytest_gpu.txt"
  timeout 300 $PY tests/env/test_env_gpu.py >> "$OUT/pytest_gpu.txt" 2>&1; rc_py=$?
fi

# 4) benchmark (fresh processes)
timeout 200 $PY benchmarks/bench_env.py --repeat 2 --smoke > "$OUT/bench.txt" 2>&1

# summary (last)
$PY - "$OUT" "$T_ENV" "$T_DOC" "$T_FAULT" "$rc_env" "$rc_doc" "$rc_fault" "$rc_py" <<'PYEOF' | tee "$OUT/summary.txt"
import json, sys, os
out, t_env, t_doc, t_fault, rc_env, rc_doc, rc_fault, rc_py = sys.argv[1:]
def load(n):
    try:
        return json.load(open(os.path.join(out, n)))
    except Exception as e:
        return {"_error": str(e)}
env, doc, fault, cvd = load("env.json"), load("doctor.json"), load("fault_doctor.json"), load("cvd_empty.json")
print(f"env --json: {t_env} s (exit {rc_env}); doctor: {t_doc} s (exit {rc_doc}); fault doctor: {t_fault} s (exit {rc_fault}); pytest -m gpu exit {rc_py}")
for name, rep in (("real", doc), ("fault", fault), ("CUDA_VISIBLE_DEVICES=''", cvd)):
    if "_error" in rep:
        print(f"{name}: no report ({rep['_error']})"); continue
    t = rep["facts"].get("torch", {}).get("value", {})
    sm = rep["facts"].get("smoke", {}).get("value", {})
    ok = sum(1 for c in sm.get("cases", []) if c.get("ok")); n = sum(1 for c in sm.get("cases", []) if not c.get("skipped"))
    print(f"{name}: findings {[f['id'] + ':' + f['severity'] for f in rep['findings']]}; torch {t.get('version')} cuDNN {t.get('cudnn_compiled')}/{t.get('cudnn_runtime')}; smoke {ok}/{n} ok")
    for f in rep["findings"]:
        if f["severity"] != "info":
            print(f"  {f['id']}: {f['title']}\n    fix: {f['fix']}")
            for e in f["evidence"]:
                print(f"    evidence: {e}")
if "_error" not in fault:
    text = json.dumps(fault["findings"])
    checks = {"names the shadowing dir": ".gpu-extra/cudnn-cu12/lib" in text, "version 9.1.0": "9.1.0" in text,
              "CUDA 12": "CUDA 12" in text, "search rule": "LD_LIBRARY_PATH" in text, "fix": "LD_LIBRARY_PATH" in " ".join(f["fix"] for f in fault["findings"])}
    print("fault checks:", checks, "ALL PASS" if all(checks.values()) else "SOME FAIL")
PYEOF
