"""Which side of the corpus split a thread belongs to: development ("dev") or blind test ("blind").

The rule is fixed and applies to every message of the corpus, whoever gathers it:

1. Threads in the framework repositories (pytorch/pytorch, tensorflow/tensorflow,
   keras-team/keras, jax-ml/jax, google/jax) are split by the date the thread was opened:
   before 2024-01-01 -> dev, on or after it -> blind.
2. Every other repository or site is split by its name: blind when
   ``hashlib.sha256(repo.lower().encode()).hexdigest()[0] in "01234"``, else dev. ``repo`` is
   "owner/name" for GitHub and the host name (e.g. "stackoverflow.com") otherwise.
3. A repository or site that already appears in the earlier development corpus
   (tests/explain/corpus.json, tests/explain/fresh.json; their thread URLs are frozen in
   existing_dev_threads.txt) is dev. In a framework repository this holds for those threads
   themselves, since rule 1 splits framework repositories by thread, not by name.

The new development corpus (dev.jsonl) takes only messages this function puts on the dev side,
so it adds no repository that rules 1-3 did not already make dev.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

Side = Literal["dev", "blind"]

FRAMEWORK_REPOS = frozenset(
    {"pytorch/pytorch", "tensorflow/tensorflow", "keras-team/keras", "jax-ml/jax", "google/jax"}
)
CUTOFF = "2024-01-01"
BLIND_DIGITS = "01234"
EXISTING = Path(__file__).with_name("existing_dev_threads.txt")

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_GITHUB_HOSTS = frozenset({"github.com", "www.github.com"})
_GITHUB_THREAD = re.compile(r"^/([^/]+)/([^/]+)/(?:issues|pull|discussions)/(\d+)")
_QA_THREAD = re.compile(r"^/(?:questions|q)/(\d+)")
_DISCOURSE_THREAD = re.compile(r"^/t/(?:[^/]+/)?(\d+)")


def _parts(url: str) -> tuple[str, str]:
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return host, parts.path


def repo_of(url: str) -> str:
    """The repository of a URL: "owner/name" on GitHub, the host name for any other site."""
    host, path = _parts(url)
    if host not in _GITHUB_HOSTS:
        return host
    segs = [s for s in path.split("/") if s]
    if len(segs) < 2:
        raise ValueError(f"GitHub URL without owner/name: {url!r}")
    return f"{segs[0]}/{segs[1]}"


def thread_of(url: str) -> str:
    """A canonical key of the thread a URL points into (comment anchors and queries dropped).

    GitHub issues, pull requests and discussions become "owner/name#N" (GitHub serves an issue
    under /pull/N and a pull request under /issues/N alike); Stack Exchange questions and
    Discourse topics become "host/<number>"; any other URL is its host and path.
    """
    host, path = _parts(url)
    if host in _GITHUB_HOSTS:
        m = _GITHUB_THREAD.match(path)
        if m:
            return f"{m.group(1)}/{m.group(2)}#{m.group(3)}".lower()
    else:
        m = _QA_THREAD.match(path) or _DISCOURSE_THREAD.match(path)
        if m:
            return f"{host}/{m.group(1)}"
    return f"{host}{path.rstrip('/')}".lower()


@lru_cache(maxsize=1)
def existing_dev() -> tuple[frozenset[str], frozenset[str]]:
    """(threads, repos) of the earlier development corpus, keys lower-cased."""
    urls = [
        line.strip()
        for line in EXISTING.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return (
        frozenset(thread_of(u) for u in urls),
        frozenset(repo_of(u).lower() for u in urls),
    )


def name_side(repo: str) -> Side:
    """Rule 2 alone: the side a repository or site name hashes to."""
    digit = hashlib.sha256(repo.lower().encode()).hexdigest()[0]
    return "blind" if digit in BLIND_DIGITS else "dev"


def side(url: str, opened: str | None) -> Side:
    """The side of the thread at ``url``, opened on ``opened`` ("YYYY-MM-DD", or None if unknown).

    Raises ValueError for a malformed URL or date, and for a framework-repository thread whose
    opening date is unknown (rule 1 cannot place it).
    """
    if opened is not None and not _DATE.match(opened):
        raise ValueError(f"opened must be YYYY-MM-DD, got {opened!r}")
    repo = repo_of(url).lower()
    threads, repos = existing_dev()
    if repo in FRAMEWORK_REPOS:
        if thread_of(url) in threads:
            return "dev"
        if opened is None:
            raise ValueError(f"framework thread needs its opening date: {url}")
        return "dev" if opened < CUTOFF else "blind"
    if repo in repos:
        return "dev"
    return name_side(repo)


def side_later(url: str, opened: str | None) -> str:
    """The rule of the later test sets (`blind2.jsonl` to `blind24.jsonl`), each gathered after the
    engine was frozen again: a framework-repository thread opened on or after the cutoff, or a
    thread of any other repository the earlier corpus does not hold, is "later"; anything else is
    "dev".
    Sharing no thread and no non-framework repository with the other corpus files is checked
    across the files (test_corpus_format.py), since it depends on them."""
    if opened is not None and not _DATE.match(opened):
        raise ValueError(f"opened must be YYYY-MM-DD, got {opened!r}")
    repo = repo_of(url).lower()
    threads, repos = existing_dev()
    if thread_of(url) in threads:
        return "dev"
    if repo in FRAMEWORK_REPOS:
        if opened is None:
            raise ValueError(f"framework thread needs its opening date: {url}")
        return "dev" if opened < CUTOFF else "later"
    return "dev" if repo in repos else "later"
