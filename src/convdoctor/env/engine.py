"""`diagnose()`: run the probes, apply the rules, optionally run the GPU smoke test; return a Report."""

from __future__ import annotations

from ..report import Report
from .probes import run_probes
from .rules import apply_rules, load_data
from .system import System


def diagnose(*, smoke: bool | None = False, system: System | None = None, run_conv: bool = True) -> Report:
    """Diagnose this machine (or `system`).

    smoke: True runs the GPU smoke test, False skips it, None runs it when a GPU is visible.
    run_conv: let the torch child run one tiny conv so /proc/self/maps shows every cuDNN sub-library.
    """
    system = system or System()
    data = load_data()
    facts = run_probes(system, run_conv=run_conv)
    findings = apply_rules(facts, data)
    visible = bool(facts["gpus"].value.get("visible")) if "gpus" in facts else False
    torch_cuda = bool(facts.get("torch") and facts["torch"].value.get("cuda_available"))
    if smoke is None:
        smoke = visible and torch_cuda
    if smoke:
        from .smoke import run_smoke, smoke_findings

        if not system.subprocess_ok:
            facts["smoke"] = _skipped("subprocesses disabled (--no-subprocess)")
        elif not facts.get("torch") or not facts["torch"].value.get("installed"):
            facts["smoke"] = _skipped("torch is not installed")
        else:
            facts["smoke"] = run_smoke(system)
        findings += smoke_findings(facts["smoke"], data, [f.id for f in findings])
    report = Report(findings=findings, facts={k: f.to_dict() for k, f in facts.items()}, kind="env")
    return report


def _skipped(why: str):  # noqa: ANN202
    from .facts import Fact

    return Fact("smoke", value={"ran": False, "error": why})
