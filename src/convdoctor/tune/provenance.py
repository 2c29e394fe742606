"""Which convdoctor code produced a result.

Bench results joined from several runs (`bench --merge`) are honest only if each part names the
code that measured it. The identity:
- `source`: a hash of the package's own files (`.py` and data files, not caches), so it needs no
  git and is the same for a tree copied to another machine (a copy for a GPU machine has no
  `.git`) and unchanged by commits that touch only docs - the code that ran, nothing else;
- `version`: the package version;
- `commit`/`dirty`/`commit_from`: the commit named by `CONVDOCTOR_CODE_COMMIT` when set, else the
  git commit when the package is tracked by a checkout (best effort: no git, no checkout or a
  slow git gives None); `commit_from` says which. The name wins over git because a copied tree
  can carry a stale `.git`, which names the commit it was copied from ("dirty") while another
  one runs (the source hash is right either way). What git said is kept as `git_commit` /
  `git_dirty` when it disagrees.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from typing import Any

from ..settings import Settings, current

GIT_TIMEOUT_S = 2.0
COMMIT_ENV = "CONVDOCTOR_CODE_COMMIT"   # names the commit where git cannot (`Settings.code_commit`)
SOURCE_SUFFIXES = (".py", ".json", ".toml", ".yaml", ".yml", ".txt", ".csv", ".typed")
SOURCE_HASH_LEN = 12


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_hash(package_dir: str | None = None) -> str:
    """sha256 (first 12 hex digits) over the package's files: relative path and content each."""
    root = package_dir or _package_dir()
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                data = b"<unreadable>"
            h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:SOURCE_HASH_LEN]


def _git(args: list[str], cwd: str) -> str | None:
    # a hook or `rebase -x` exports GIT_DIR/GIT_WORK_TREE: they would point git at another repo
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        out = subprocess.run(["git", "--no-optional-locks", *args], cwd=cwd, capture_output=True,
                             text=True, errors="replace", timeout=GIT_TIMEOUT_S, check=False,
                             env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _git_identity(here: str) -> tuple[str | None, bool | None]:
    # a package installed inside someone else's repository (a venv in a project) must not report
    # that project's commit: the package's own __init__.py must be tracked by the checkout
    if _git(["ls-files", "--error-unmatch", "__init__.py"], here) is None:
        return None, None
    commit = _git(["rev-parse", "--short=12", "HEAD"], here)
    if not commit:
        return None, None
    status = _git(["status", "--porcelain", "--", "."], here)
    return commit, (None if status is None else bool(status))


def code_identity(package_dir: str | None = None,
                  settings: Settings | None = None) -> dict[str, Any]:
    """{"version", "source", "commit", "dirty", "commit_from"} (see the module docstring);
    `settings` (default: this process's environment's) may name the commit (`code_commit`)."""
    from .._version import __version__

    here = package_dir or _package_dir()
    commit, dirty = _git_identity(here)
    commit_from: str | None = "git" if commit else None
    named = (settings if settings is not None else current()).code_commit.strip()
    extra: dict[str, Any] = {}
    if named:
        agrees = (commit is not None and len(named) >= 7
                  and (commit.startswith(named) or named.startswith(commit)))
        if commit and not agrees:
            extra = {"git_commit": commit, "git_dirty": dirty}
        # git's local-changes flag still holds where git names the same commit
        commit, dirty, commit_from = named, dirty if agrees else None, "env"
    return {"version": __version__, "source": source_hash(here), "commit": commit,
            "dirty": dirty, "commit_from": commit_from, **extra}


def code_label(code: Any) -> str:
    """A short human name for a `code` record; "code not recorded" for none."""
    if not isinstance(code, dict) or not (code.get("source") or code.get("commit")):
        return "code not recorded"
    parts = [f"convdoctor {code.get('version', '?')}"]
    if code.get("source"):
        parts.append(f"source {code['source']}")
    if code.get("commit"):
        dirty = code.get("dirty")
        parts.append(f"commit {code['commit']}" + (" with local changes" if dirty else "" if
                                                    dirty is False else " (changes unknown)"))
    return ", ".join(parts)


def same_code(a: Any, b: Any) -> bool:
    """Whether two `code` records name the same code: by source hash where both have one, else by
    commit (without local changes); unknown (a record missing) is never the same."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    if a.get("source") and b.get("source"):
        return bool(a["source"] == b["source"])
    return bool(a.get("commit")) and a.get("commit") == b.get("commit") and \
        a.get("dirty") is False and b.get("dirty") is False
