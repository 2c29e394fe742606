"""Every switch is declared once (`convdoctor.settings`), typed, documented, and read nowhere else."""

from __future__ import annotations

import ast
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


def _environment_reads(tree: ast.AST) -> list[ast.expr | None]:
    """The key of every read of os.environ / os.getenv in a module (None: no single key)."""
    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ")
    keys: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if (f.attr in ("get", "pop", "setdefault") and is_environ(f.value)) or (
                    f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os"):
                keys.append(node.args[0] if node.args else None)
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            keys.append(node.slice)
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            keys.append(node.left)
    return keys


def _offending(keys: list[ast.expr | None]) -> list[str]:
    """Reads of a CONVDOCTOR_* variable, or of a key that is not a literal (it could be one)."""
    out = []
    for key in keys:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            out.append(ast.unparse(key) if key is not None else "<no key>")
        elif key.value.startswith("CONVDOCTOR_"):
            out.append(key.value)
    return out


def test_the_environment_read_finder_finds_reads() -> None:
    tree = ast.parse("import os\nfrom os import environ\nos.environ.get('CONVDOCTOR_A')\n"
                     "os.getenv('HOME')\nenviron['CONVDOCTOR_B']\n'CONVDOCTOR_C' in os.environ\n"
                     "NAME = 'CONVDOCTOR_D'\nos.environ.get(NAME)\n")
    assert _offending(_environment_reads(tree)) == ["CONVDOCTOR_A", "CONVDOCTOR_B", "CONVDOCTOR_C",
                                                    "NAME"]


def test_nothing_else_reads_a_convdoctor_variable() -> None:
    """Code receives settings; only settings.py reads CONVDOCTOR_* from the environment, and
    every other environment read names its variable literally."""
    offenders = {}
    for path in (ROOT / "src" / "convdoctor").rglob("*.py"):
        if path.name == "settings.py" and path.parent.name == "convdoctor":
            continue
        bad = _offending(_environment_reads(ast.parse(path.read_text("utf-8"))))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}
