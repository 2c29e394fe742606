"""Every switch is declared once (`convdoctor.settings`), typed, documented, and read nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from convdoctor.errors import UsageError
from convdoctor.settings import Settings, declared

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_and_parsing() -> None:
    s = Settings.from_env({})
    assert s == Settings() and s.result_key() == "default" and s.to_env() == {}
    s = Settings.from_env({"CONVDOCTOR_TRITON": "off", "CONVDOCTOR_CUDNN_ENUM_EXTRA": "4",
                           "CONVDOCTOR_CUDNN_REFINE_BUDGET_S": "1.5", "CONVDOCTOR_DB": "x.db",
                           "CONVDOCTOR_WS_GUARD": ""})
    assert (s.triton, s.cudnn_enum_extra, s.cudnn_refine_budget_s, s.db) == (False, 4, 1.5, "x.db")
    assert s.ws_guard is True  # empty means the default
    # only result-changing settings enter the database key, in declaration order
    assert s.result_key() == "triton=0;cudnn_enum_extra=4;cudnn_refine_budget_s=1.5"
    assert Settings.from_env(s.to_env()) == s


@pytest.mark.parametrize("env, words", [
    ({"CONVDOCTOR_TRITON": "maybe"}, "not a switch"),
    ({"CONVDOCTOR_CUDNN_ENUM_EXTRA": "many"}, "not a whole number"),
    ({"CONVDOCTOR_CUDNN_ENUM_EXTRA": "2.5"}, "not a whole number"),
    ({"CONVDOCTOR_CUDNN_ENUM_BUDGET_S": "-1"}, "out of range"),
    ({"CONVDOCTOR_CUDNN_REFINE_BUDGET_S": "nan"}, "out of range"),
    ({"CONVDOCTOR_CUDNN_REFINE_BUDGET_S": "inf"}, "out of range"),
    ({"CONVDOCTOR_CPU_MIN_SHARE": "1.5"}, "out of range"),
])
def test_a_malformed_value_is_one_clear_error(env: dict[str, str], words: str) -> None:
    with pytest.raises(UsageError, match=words) as info:
        Settings.from_env(env)
    assert next(iter(env)) in str(info.value)


def test_the_reference_page_lists_every_setting() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(CONVDOCTOR_\w+)` \|.*$", page,
                                                         re.M)}
    assert set(rows) == {d["env"] for d in declared()}
    for d in declared():
        assert d["meaning"] in rows[d["env"]], d["env"]
        assert ("| yes |" in rows[d["env"]]) == d["result"], d["env"]


def test_nothing_else_reads_a_convdoctor_variable() -> None:
    """Code receives settings; only settings.py reads CONVDOCTOR_* from the environment."""
    pattern = re.compile(r"(environ|getenv)[^\n]{0,40}CONVDOCTOR_|CONVDOCTOR_\w+[\"']\s*\)?\s*"
                         r"(in|not in)\s+os\.environ")
    offenders = []
    for path in (ROOT / "src" / "convdoctor").rglob("*.py"):
        if path.name == "settings.py":
            continue
        text = path.read_text("utf-8")
        if pattern.search(text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
