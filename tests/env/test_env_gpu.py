"""On a real GPU machine: the doctor's facts agree with torch itself, and the smoke test passes."""

from __future__ import annotations

import sys

from convdoctor.env import diagnose

try:
    import pytest
except ImportError:  # the GPU machine may lack pytest: `python tests/env/test_env_gpu.py` runs these too
    pytest = None

if pytest is not None:
    pytestmark = pytest.mark.gpu

    @pytest.fixture(scope="module")
    def report():
        return diagnose(smoke=True)


def test_facts_match_torch(report) -> None:
    import torch

    facts = report.facts
    gpus = facts["gpus"]["value"]
    assert gpus["count"] >= torch.cuda.device_count() >= 1
    cc = "{}.{}".format(*torch.cuda.get_device_capability(0))
    assert gpus["devices"][0]["cc"] == cc
    t = facts["torch"]["value"]
    assert t["version"] == torch.__version__
    assert t["cuda"] == torch.version.cuda
    v = torch.backends.cudnn.version()
    want = f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    assert t["cudnn_runtime"] == want
    assert facts["driver"]["value"]["version"]
    # the libcudnn torch maps is among the copies we found, with the version torch reports
    loaded = facts["resolution"]["value"]["loaded"]
    assert any(p.endswith(".so.9") or ".so.9." in p for p in loaded), loaded
    copies = facts["libraries"]["value"]["copies"]
    mains = [c for c in copies if c["family"] == "cudnn" and c.get("version") == want]
    assert mains, [(c["path"], c.get("version")) for c in copies if c["family"] == "cudnn"]
    assert mains[0]["cuda_major"] == int(torch.version.cuda.split(".")[0])


def test_smoke_runs_and_is_correct(report) -> None:
    sm = report.facts["smoke"]["value"]
    assert sm["ran"], sm
    ran = [c for c in sm["cases"] if not c.get("skipped")]
    assert len(ran) >= 3
    bad = [c for c in ran if not c.get("ok")]
    assert not bad, bad


def test_healthy_gpu_machine_has_no_errors(report) -> None:
    assert not report.errors, [f.to_dict() for f in report.errors]


if __name__ == "__main__":
    rep = diagnose(smoke=True)
    failed = 0
    for fn in (test_facts_match_torch, test_smoke_runs_and_is_correct, test_healthy_gpu_machine_has_no_errors):
        try:
            fn(rep)
            print(f"PASSED {fn.__name__}")
        except AssertionError as exc:
            failed += 1
            print(f"FAILED {fn.__name__}: {exc!r}"[:2000])
    print(f"{3 - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
