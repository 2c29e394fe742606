"""Which convdoctor code produced a result: the package version and, in a git checkout, the commit.

Bench results joined across sessions (`bench --merge`) are honest only if each part names the code
that measured it; the docs had to reconstruct that from logs by hand until session 25.
Best effort: no git, no checkout, or a slow git gives `commit: None`, never an error.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

GIT_TIMEOUT_S = 2.0
COMMIT_ENV = "CONVDOCTOR_CODE_COMMIT"   # names the commit where git cannot


def _git(args: list[str], cwd: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                             timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_identity(package_dir: str | None = None) -> dict[str, Any]:
    """{"version", "commit", "dirty"}: `dirty` says whether the package's source differs from the
    commit (uncommitted changes under the package directory); both None outside a git checkout."""
    from .._version import __version__

    # a copy of the tree without its .git (the GPU machine gets one) is named by the caller
    named = os.environ.get(COMMIT_ENV, "").strip()
    if named:
        return {"version": __version__, "commit": named, "dirty": None}
    here = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # a package installed inside someone else's repository (a venv in a project) must not report
    # that project's commit: the package's own __init__.py must be tracked by the checkout
    tracked = _git(["ls-files", "--error-unmatch", "__init__.py"], here)
    commit = _git(["rev-parse", "--short=12", "HEAD"], here) if tracked else None
    dirty: bool | None = None
    if commit:
        status = _git(["status", "--porcelain", "--", "."], here)
        dirty = None if status is None else bool(status)
    return {"version": __version__, "commit": commit, "dirty": dirty}
