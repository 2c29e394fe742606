#!/usr/bin/env bash
# GPU tests of convdoctor.runtime (same-function on CUDA, cuDNN plans, graph capture, fallback).
# Run from the repo root: OUT=/tmp/out PYTHONPATH=src:/tmp/site bash scripts/gpu/runtime_tests.sh
set -uo pipefail
OUT="${OUT:-runtime_tests_out}"
mkdir -p "$OUT"
python -m pytest -q -m gpu tests/runtime -p no:cacheprovider --junitxml="$OUT/runtime_tests.xml" \
  2>&1 | tee "$OUT/runtime_tests.log" | tail -40
rc=${PIPESTATUS[0]}
echo "runtime gpu tests: exit $rc"
exit $rc
