"""A child process per problem, shared by the kernel probes in this folder (`wg_probe.py`,
`sc_probe.py`, `fp_probe.py`): a kernel fault or a hang costs that problem only.

A probe calls `main(script, one, specs, out_name, report, ...)` from its own `main()`: with
`--one SPEC` the process is the child (it prints "ROW <json>" of `one(SPEC)`, or the traceback as
the row's error); otherwise it runs itself once per spec as a child until PROBE_TIME_S (the
seconds the probe may run; unset: no limit) is near, calls `report(row)` for each row that has a
"triton_best_us", and rewrites $OUT/<out_name> after each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from probe_timing import deadline as _deadline


def main(script: str, one: Callable[[str], dict[str, Any]], specs: Sequence[str], out_name: str,
         report: Callable[[dict[str, Any]], None], *, per_s: float = 150.0,
         margin_s: float = 20.0) -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        try:
            print("ROW " + json.dumps(one(sys.argv[2])), flush=True)
        except Exception:  # noqa: BLE001
            print("ROW " + json.dumps({"name": sys.argv[2],
                                       "error": traceback.format_exc()[-1500:]}))
        return 0
    out = os.environ.get("OUT", ".")
    deadline = _deadline(10.0)
    rows = []
    for spec in specs:
        left = deadline - time.time()
        if left < margin_s:
            print("deadline: stopping before", spec, flush=True)
            break
        try:
            cp = subprocess.run([sys.executable, script, "--one", spec], capture_output=True,
                                text=True, timeout=min(left, per_s))
            line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("ROW ")), None)
            row = json.loads(line[4:]) if line else {"name": spec, "error": cp.stderr[-1500:],
                                                       "rc": cp.returncode}
        except subprocess.TimeoutExpired:
            row = {"name": spec, "error": "timeout"}
        rows.append(row)
        if "triton_best_us" in row:
            report(row)
        else:
            print(f"{spec}: ERROR {str(row.get('error'))[-400:]}", flush=True)
        with open(os.path.join(out, out_name), "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0
