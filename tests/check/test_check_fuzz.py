"""Differential fuzzing: the checker's verdict (device="cpu") vs what PyTorch really does on the CPU.

2000 random convolutions (valid and invalid; 1D/2D/3D, transposed, groups, dilation, string padding,
padding modes, unbatched inputs, dtypes, mismatches, empty tensors, channels_last) must agree on every
case, except the documented known differences (docs/check.md), which are counted and listed.
"""

from __future__ import annotations

import random
import warnings

from convdoctor.check.fuzz import fuzz, gen_case


def test_generator_covers_the_space() -> None:
    rng = random.Random(0)
    cases = [gen_case(rng) for _ in range(2000)]
    assert {c["nsp"] for c in cases} == {1, 2, 3}
    assert any(c["transposed"] for c in cases) and any(c["groups"] > 1 for c in cases)
    assert {c["padding_mode"] for c in cases} == {"zeros", "reflect", "replicate", "circular"}
    assert {"same", "valid"} <= {c["padding"] for c in cases if isinstance(c["padding"], str)}
    assert any(max(c["dilation"]) > 1 for c in cases)
    assert {"float32", "float16", "bfloat16", "float64", "int64", "bool"} <= {c["dtype"] for c in cases}
    assert any(c["dtype"] != c["weight_dtype"] for c in cases)
    assert any(c["x_shape"] and c["x_shape"][0] == 0 for c in cases)


def test_checker_agrees_with_pytorch_cpu_on_2000_cases() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fuzz(2000, seed=20261122, device="cpu")
    # both verdicts are well represented, so agreement is not trivial
    assert 600 < res.torch_errors < 1600, res.torch_errors
    msg = "\n".join(f"{d['torch_ran']=} {d['torch_error']} {d['checker_errors']} {d['case']}"
                    for d in res.disagreements[:10])
    assert not res.disagreements, f"{len(res.disagreements)} disagreements:\n{msg}"
    assert len(res.known) <= 10  # documented classes only (transposed/string-padding bias dtype, ...)
    assert {k["known_difference"] for k in res.known} <= {
        "transposed-bias-dtype", "transposed-zero-dilation", "string-padding-bias-dtype"}
