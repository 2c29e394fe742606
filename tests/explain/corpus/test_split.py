"""The corpus split rule (split.py) and that every development message is on its dev side."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import split

HERE = Path(__file__).parent
DEV_FILES = ("dev_existing.jsonl", "dev.jsonl")


@pytest.mark.parametrize(
    "repo",
    ["pytorch/pytorch", "tensorflow/tensorflow", "keras-team/keras", "jax-ml/jax", "google/jax"],
)
def test_framework_repos_split_by_opening_date(repo: str) -> None:
    url = f"https://github.com/{repo}/issues/999999"
    assert split.side(url, "2016-05-01") == "dev"
    assert split.side(url, "2023-12-31") == "dev"
    assert split.side(url, "2024-01-01") == "blind"
    assert split.side(url, "2025-07-09") == "blind"
    # the name alone never decides a framework repository, whatever it hashes to
    assert split.side(url.replace(repo, repo.upper()), "2023-12-31") == "dev"


def test_framework_thread_without_date_is_refused() -> None:
    with pytest.raises(ValueError):
        split.side("https://github.com/tensorflow/tensorflow/issues/999999", None)


@pytest.mark.parametrize("opened", ["2023/01/01", "23-01-01", "yesterday"])
def test_malformed_dates_are_refused(opened: str) -> None:
    with pytest.raises(ValueError):
        split.side("https://github.com/jax-ml/jax/issues/999999", opened)


@pytest.mark.parametrize(
    ("repo", "expected"),
    [
        ("stackoverflow.com", "dev"),
        ("discuss.pytorch.org", "dev"),
        ("PaddlePaddle/Paddle", "dev"),
        ("NVIDIA/nvidia-docker", "dev"),
        ("forums.developer.nvidia.com", "blind"),
        ("NVIDIA/TensorRT", "blind"),
        ("pjreddie/darknet", "blind"),
        ("nvidia/tensorrt", "blind"),
    ],
)
def test_other_names_split_by_hash(repo: str, expected: str) -> None:
    assert split.name_side(repo) == expected
    digit = hashlib.sha256(repo.lower().encode()).hexdigest()[0]
    assert (digit in "01234") == (expected == "blind")
    url = (
        f"https://github.com/{repo}/issues/12"
        if "/" in repo
        else f"https://{repo}/questions/12/some-title"
    )
    assert split.side(url, None) == expected
    assert split.side(url, "2025-01-01") == expected  # the date does not matter outside rule 1


def test_repositories_of_the_earlier_corpus_stay_dev() -> None:
    # OpenNMT/CTranslate2 hashes to the blind side but has a thread in the earlier corpus
    assert split.name_side("OpenNMT/CTranslate2") == "blind"
    assert split.side("https://github.com/OpenNMT/CTranslate2/issues/1", "2025-01-01") == "dev"
    # a framework thread of the earlier corpus opened after the cutoff stays dev ...
    assert split.side("https://github.com/jax-ml/jax/issues/28376", "2025-05-01") == "dev"
    assert split.side("https://github.com/jax-ml/jax/issues/28376#issuecomment-1", None) == "dev"
    # ... but the rest of that repository is still split by date
    assert split.side("https://github.com/jax-ml/jax/issues/28377", "2025-05-01") == "blind"


def test_existing_list_matches_the_earlier_files() -> None:
    old = HERE.parent
    urls: set[str] = set()
    if (old / "corpus.json").exists():
        urls |= {e["source"] for e in json.loads((old / "corpus.json").read_text())["entries"]}
    if (old / "fresh.json").exists():
        fresh = json.loads((old / "fresh.json").read_text())
        urls |= {e["source"] for e in fresh["entries"] + fresh["second_set"]}
    threads, _ = split.existing_dev()
    assert {split.thread_of(u) for u in urls} <= threads
    assert len(threads) >= 162


@pytest.mark.parametrize(
    ("url", "repo", "thread"),
    [
        ("https://github.com/jax-ml/jax/issues/16901", "jax-ml/jax", "jax-ml/jax#16901"),
        (
            "https://github.com/NVIDIA/TensorRT-LLM/pull/1806#issuecomment-5",
            "NVIDIA/TensorRT-LLM",
            "nvidia/tensorrt-llm#1806",
        ),
        ("https://github.com/google/flax/discussions/3/", "google/flax", "google/flax#3"),
        (
            "https://stackoverflow.com/questions/61467751/unable-to-find?noredirect=1",
            "stackoverflow.com",
            "stackoverflow.com/61467751",
        ),
        (
            "https://discuss.pytorch.org/t/cudnn-status-not-supported/6410/4",
            "discuss.pytorch.org",
            "discuss.pytorch.org/6410",
        ),
    ],
)
def test_repo_and_thread_of(url: str, repo: str, thread: str) -> None:
    assert split.repo_of(url) == repo
    assert split.thread_of(url) == thread


@pytest.mark.parametrize(
    "url", ["github.com/a/b/issues/1", "ftp://x.org/a", "https://github.com/a"]
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        split.side(url, "2020-01-01")


def _dev_entries() -> list[dict]:
    rows: list[dict] = []
    for name in DEV_FILES:
        path = HERE / name
        if path.exists():
            rows += [
                json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line
            ]
    return rows


def test_every_dev_message_is_on_the_dev_side() -> None:
    rows = _dev_entries()
    if not rows:
        pytest.skip("no development corpus file yet")
    wrong = [r["id"] for r in rows if split.side(r["url"], r.get("opened")) != "dev"]
    assert not wrong, f"on the blind side: {wrong}"
