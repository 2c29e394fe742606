"""`diagnose()`: run the probes, apply the rules, optionally run the GPU smoke test; return a Report."""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor

from ..report import Report
from .facts import Fact
from .probes import run_probes
from .rules import apply_rules, load_data
from .system import System


def _driver_files(system: System) -> bool:
    return system.exists("/proc/driver/nvidia/version") or any(re.fullmatch(r"nvidia\d+", n) for n in system.listdir("/dev"))


def diagnose(*, smoke: bool | None = False, system: System | None = None, run_conv: bool = True,
             progress: bool | None = False) -> Report:
    """Diagnose this machine (or `system`).

    smoke: True runs the GPU smoke test, False skips it, None runs it when a GPU is visible.
    run_conv: let the torch child run one tiny conv so /proc/self/maps shows every cuDNN sub-library.
    progress: draw a progress bar on stderr (None: only when stderr is a terminal).
    """
    from ..progress import Progress
    from .probes import PROBES
    from .smoke import explain_failures, run_smoke, smoke_findings

    system = system or System()
    data = load_data()
    torch_here = system.find_module_dir("torch") is not None
    early: Future[Fact] | None = None
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        # the smoke child imports torch and initialises CUDA: start it now so it overlaps the probes
        if system.subprocess_ok and torch_here and (smoke is True or (smoke is None and _driver_files(system))):
            early = pool.submit(run_smoke, system)
        bar = Progress(len(PROBES) + 1, "convdoctor env", enabled=progress)
        facts = run_probes(system, run_conv=run_conv, on_probe=lambda name: bar.update(1, name))
        findings = apply_rules(facts, data)
        findings = explain_failures(findings, data)
        visible = bool(facts["gpus"].value.get("visible")) if "gpus" in facts else False
        # a CUDA torch build, even one whose probe child crashed: the smoke test shows how it fails
        torch_cuda = bool(facts.get("torch") and (facts["torch"].value.get("cuda_available")
                                                  or facts["torch"].value.get("build") == "cuda"))
        if smoke is None:
            smoke = visible and torch_cuda
        if smoke:
            if not system.subprocess_ok:
                facts["smoke"] = Fact("smoke", value={"ran": False, "error": "subprocesses disabled (--no-subprocess)"})
            elif not torch_here:
                facts["smoke"] = Fact("smoke", value={"ran": False, "error": "torch is not installed"})
            else:
                facts["smoke"] = early.result() if early is not None else run_smoke(system)
            findings += smoke_findings(facts["smoke"], data, [f.id for f in findings])
        elif early is not None:
            early.result()  # not wanted after all (no visible GPU): let the child finish, drop its answer
        bar.update(1, "smoke" if smoke else "done")
        bar.close()
    finally:
        pool.shutdown(wait=True)
    return Report(findings=findings, facts={k: f.to_dict() for k, f in facts.items()}, kind="env")
