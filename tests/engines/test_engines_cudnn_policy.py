"""The cuDNN engine's pure rules (`convdoctor.engines.cudnn_policy`): plan names and keys, dedupe,
and the bounded knob values and combinations of the enumeration."""

from __future__ import annotations

import pytest

from convdoctor.engines import cudnn_policy as policy


def test_plan_name_parse_and_keys() -> None:
    assert policy.parse_plan_name("eng0_k2=1_k3=0") == (0, {2: 1, 3: 0})
    assert policy.parse_plan_name("eng42") == (42, {})
    assert policy.parse_plan_name("eng7_k17=-1") == (7, {17: -1})
    for bad in ("", "eng", "engx_k1=2", "eng1_k=2", "cudnn:eng1", "eng1 _k2=3"):
        with pytest.raises(ValueError):
            policy.parse_plan_name(bad)
    assert policy.plan_name_of(policy.cudnn_key("eng3_k2=1")) == "eng3_k2=1"
    assert policy.plan_name_of("torch:benchmark") is None


def test_dedupe_keeps_first_occurrence_order() -> None:
    assert policy.dedupe(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]


def test_knob_values_bounded_and_include_ends() -> None:
    assert policy.knob_values(0, 1, 1) == [0, 1]
    assert policy.knob_values(0, 100, 1, limit=3) == [0, 50, 100]
    assert policy.knob_values(4, 4, 1) == [4]
    assert policy.knob_values(0, 10, 0) == [0]
    v = policy.knob_values(0, 1000, 8, limit=4)
    assert len(v) == 4 and v[0] == 0 and v[-1] == 1000 and all(x % 8 == 0 for x in v)


def test_knob_combinations_limit_and_first_is_all_minimum() -> None:
    combos = policy.knob_combinations([("a", 0, 5, 1), ("b", 1, 3, 1)], per_knob=3, limit=4)
    assert len(combos) == 4 and combos[0] == {"a": 0, "b": 1}
    assert policy.knob_combinations([]) == [{}]
