"""Format of the message corpus files (tests/explain/corpus/*.jsonl); see README.md."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import split

HERE = Path(__file__).parent
CAUSES = Path(__file__).parents[3] / "src/convdoctor/explain/data/causes.json"
FILES = sorted(HERE.glob("*.jsonl"))
FIELDS = ("id", "split", "group", "framework", "url", "repo", "opened", "cause", "reason", "text")
GROUPS = {"pytorch", "tensorflow", "jax", "other"}
MAX_PER_THREAD = 3
MAX_LINES = 120


def _rows(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        assert line.strip(), f"{path.name}:{n}: blank line"
        row = json.loads(line)
        assert isinstance(row, dict), f"{path.name}:{n}: not an object"
        rows.append(row)
    return rows


ALL = [(p.name, r) for p in FILES for r in _rows(p)]


def test_there_are_corpus_files() -> None:
    assert any(p.name == "dev_existing.jsonl" for p in FILES)
    assert len(ALL) >= 162


def _cause_ids() -> set[str]:
    return set(json.loads(CAUSES.read_text(encoding="utf-8"))["causes"])


SPLITS = ("dev", "blind", *(f"blind{i}" for i in range(2, 25)))
LATER_SPLITS = SPLITS[2:]              # blind2.. : the later test sets


def _entry_problems(name: str, row: dict, causes: set[str]) -> list[str]:
    """What is wrong with one row (empty when nothing)."""
    missing = [f for f in FIELDS if f not in row]
    if missing:
        return [f"missing fields {missing}"]
    out = [f"{f} must be a non-empty string" for f in FIELDS
           if f != "opened" and not (isinstance(row[f], str) and row[f].strip())]
    if out:
        return out
    if name.startswith("dev") and row["split"] != "dev":
        out.append("a dev file's rows have split 'dev'")
    if row["split"] not in SPLITS:
        out.append(f"split {row['split']!r}")
    if row["group"] not in GROUPS:
        out.append(f"group {row['group']!r}")
    if row["cause"] not in causes:
        out.append(f"cause {row['cause']!r}")
    if not (row["opened"] is None or re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["opened"])):
        out.append(f"opened {row['opened']!r}")
    if row["repo"] != split.repo_of(row["url"]):
        out.append(f"repo {row['repo']!r} is not {split.repo_of(row['url'])!r}")
    if row["split"] in LATER_SPLITS:
        if split.side_later(row["url"], row["opened"]) != "later":
            out.append("not on the later side of the split")
    elif split.side(row["url"], row["opened"]) != row["split"]:
        out.append(f"on the {split.side(row['url'], row['opened'])} side of the split")
    if len(row["text"].splitlines()) > MAX_LINES:
        out.append(f"text over {MAX_LINES} lines")
    return out


@pytest.mark.parametrize("name", [p.name for p in FILES])
def test_entries(name: str) -> None:
    causes = _cause_ids()
    bad = [f"{r.get('id', '?')}: {why}" for n, r in ALL if n == name
           for why in _entry_problems(name, r, causes)]
    assert not bad, "\n".join(bad[:30])


def test_a_bad_entry_is_named() -> None:
    row = dict(next(r for n, r in ALL if n == "dev.jsonl"))
    causes = _cause_ids()
    assert _entry_problems("dev.jsonl", row, causes) == []
    assert _entry_problems("dev.jsonl", {**row, "cause": "nope"}, causes) == ["cause 'nope'"]
    assert _entry_problems("dev.jsonl", {**row, "split": "blind"}, causes)[0].startswith("a dev")
    assert _entry_problems("dev.jsonl", {k: v for k, v in row.items() if k != "url"},
                           causes) == ["missing fields ['url']"]
    assert _entry_problems("dev.jsonl", {**row, "text": "x\n" * 121}, causes) == [
        "text over 120 lines"]


def test_ids_are_unique() -> None:
    ids = Counter(r["id"] for _, r in ALL)
    assert not [i for i, n in ids.items() if n > 1]


def test_no_thread_gives_more_than_three_messages() -> None:
    threads = Counter(split.thread_of(r["url"]) for _, r in ALL)
    over = {t: n for t, n in threads.items() if n > MAX_PER_THREAD}
    assert not over, over


def test_no_duplicate_texts_within_a_thread() -> None:
    seen = Counter((split.thread_of(r["url"]), r["text"].strip()) for _, r in ALL)
    assert not [k for k, n in seen.items() if n > 1]


def test_new_messages_come_from_new_threads() -> None:
    old, _ = split.existing_dev()
    new = [
        r["id"]
        for name, r in ALL
        if name != "dev_existing.jsonl" and split.thread_of(r["url"]) in old
    ]
    assert not new, f"threads of the earlier corpus: {new}"


def test_new_dev_messages_meet_the_mix() -> None:
    """dev.jsonl: at least 240 messages from at least 100 threads, with the group shares of the brief."""
    rows = [r for name, r in ALL if name == "dev.jsonl"]
    total = len(rows)
    assert total >= 240
    assert len({split.thread_of(r["url"]) for r in rows}) >= 100
    groups = Counter(r["group"] for r in rows)
    assert groups["tensorflow"] >= 0.30 * total
    assert groups["jax"] >= 0.25 * total
    assert groups["other"] >= 0.20 * total


BLIND = "blind.jsonl"


def _blind_rows() -> list[dict]:
    rows = [r for name, r in ALL if name == BLIND]
    if not rows:
        pytest.skip("no blind.jsonl in this checkout")
    return rows


def test_blind_file_holds_only_blind_rows() -> None:
    """blind.jsonl: every line says split "blind" (test_entry then checks split.side agrees)."""
    bad = [
        r["id"]
        for r in _blind_rows()
        if r["split"] != "blind" or not re.fullmatch(r"b\d{4}", r["id"])
    ]
    assert not bad


def test_blind_shares_no_thread_or_repository_with_dev() -> None:
    """No blind thread is a dev thread; no non-framework blind repository has a dev message."""
    dev = [r for name, r in ALL if name.startswith("dev")]
    old_threads, old_repos = split.existing_dev()
    dev_threads = {split.thread_of(r["url"]) for r in dev} | old_threads
    dev_repos = {r["repo"].lower() for r in dev} | old_repos
    blind = _blind_rows()
    shared_threads = [r["id"] for r in blind if split.thread_of(r["url"]) in dev_threads]
    shared_repos = [
        r["id"]
        for r in blind
        if r["repo"].lower() not in split.FRAMEWORK_REPOS and r["repo"].lower() in dev_repos
    ]
    assert not shared_threads, shared_threads
    assert not shared_repos, shared_repos


# Later held-out sets: file -> (split value, id pattern). Each is gathered after the engine is frozen
# again and shares no thread and no non-framework repository with any other file.
LATER = {"blind2.jsonl": ("blind2", r"e[ptjo]\d{3}"), "blind3.jsonl": ("blind3", r"f[ptjo]\d{3}"),
         "blind4.jsonl": ("blind4", r"g[ptjo]\d{3}"),
         "blind5.jsonl": ("blind5", r"h[ptjo]\d{3}"),
         "blind6.jsonl": ("blind6", r"i[ptjo]\d{3}"),
         "blind7.jsonl": ("blind7", r"j[ptjo]\d{3}"),
         "blind8.jsonl": ("blind8", r"k[ptjo]\d{3}"),
         "blind9.jsonl": ("blind9", r"l[ptjo]\d{3}"),
         "blind10.jsonl": ("blind10", r"m[ptjo]\d{3}"),
         "blind11.jsonl": ("blind11", r"n[ptjo]\d{3}"),
         "blind12.jsonl": ("blind12", r"o[ptjo]\d{3}"),
         "blind13.jsonl": ("blind13", r"p[ptjo]\d{3}"),
         "blind14.jsonl": ("blind14", r"q[ptjo]\d{3}"),
         "blind15.jsonl": ("blind15", r"r[ptjo]\d{3}"),
         "blind16.jsonl": ("blind16", r"s[ptjo]\d{3}"),
         "blind17.jsonl": ("blind17", r"u[ptjo]\d{3}"),
         "blind18.jsonl": ("blind18", r"v[ptjo]\d{3}"),
         "blind19.jsonl": ("blind19", r"w[ptjo]\d{3}"),
         "blind20.jsonl": ("blind20", r"x[ptjo]\d{3}"),
         "blind21.jsonl": ("blind21", r"y[ptjo]\d{3}"),
         "blind22.jsonl": ("blind22", r"z[ptjo]\d{3}"),
         "blind23.jsonl": ("blind23", r"za[ptjo]\d{3}"),
         "blind24.jsonl": ("blind24", r"zb[ptjo]\d{3}")}


def _later_rows(name: str) -> list[dict]:
    rows = [r for n, r in ALL if n == name]
    if not rows:
        pytest.skip(f"no {name} in this checkout")
    return rows


@pytest.mark.parametrize("name", sorted(LATER))
def test_later_blind_file_holds_only_its_rows(name: str) -> None:
    want, pattern = LATER[name]
    bad = [r["id"] for r in _later_rows(name)
           if r["split"] != want or not re.fullmatch(pattern, r["id"])]
    assert not bad


@pytest.mark.parametrize("name", sorted(LATER))
def test_later_blind_file_shares_no_thread_or_repository_with_the_other_files(name: str) -> None:
    """No thread of any other file; no non-framework repository of any other file (dev.jsonl,
    dev_existing.jsonl, the other blind files, the earlier corpus)."""
    others = [r for n, r in ALL if n != name]
    old_threads, old_repos = split.existing_dev()
    threads = {split.thread_of(r["url"]) for r in others} | old_threads
    repos = {r["repo"].lower() for r in others} | old_repos
    rows = _later_rows(name)
    shared_threads = [r["id"] for r in rows if split.thread_of(r["url"]) in threads]
    shared_repos = [r["id"] for r in rows
                    if r["repo"].lower() not in split.FRAMEWORK_REPOS and r["repo"].lower() in repos]
    assert not shared_threads, shared_threads
    assert not shared_repos, shared_repos
