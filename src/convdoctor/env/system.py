"""The one view of the machine every probe reads through.

`System` reads a real machine: files under `root`, the process environment, commands and child
Python scripts with timeouts. Tests subclass it (or pass `root`/`environ`) to build broken machines:
a fake filesystem tree, a fake environment, canned child-script answers. Nothing here raises for a
missing file or a crashing child: callers get `None` / a `ChildResult` with `error` set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .elf import ElfDynamic, read_dynamic

CHILDREN = Path(__file__).resolve().parent / "children"


@dataclass
class ChildResult:
    """What a child script printed (parsed JSON lines), or why it printed nothing useful."""

    data: Any = None
    lines: list[Any] = field(default_factory=list)
    error: str | None = None
    returncode: int | None = None
    stderr_tail: str = ""


class System:
    """A real machine (root "/" by default). Subclass and override to fake one."""

    def __init__(self, root: str | os.PathLike[str] = "/", environ: Mapping[str, str] | None = None,
                 python: str | None = None, subprocess_ok: bool = True) -> None:
        self.root = Path(root)
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.python = python or sys.executable
        self.subprocess_ok = subprocess_ok

    # -- files (absolute paths as the machine sees them; mapped under root) --
    def host(self, path: str) -> Path:
        p = Path(path)
        return self.root / p.relative_to("/") if p.is_absolute() else self.root / p

    def read_text(self, path: str, limit: int = 1 << 20) -> str | None:
        try:
            with open(self.host(path), encoding="utf-8", errors="replace") as f:
                return f.read(limit)
        except OSError:
            return None

    def platform_info(self) -> dict[str, str | None]:
        """This machine and this process: OS, distribution, Python, host name, time (UTC) and
        convdoctor's version."""
        import datetime
        import platform
        import socket

        from .._version import __version__

        u = platform.uname()
        distro = None
        for line in (self.read_text("/etc/os-release") or "").splitlines():
            if line.startswith("PRETTY_NAME="):
                distro = line.partition("=")[2].strip().strip('"')
        return {"os": f"{u.system} {u.release}".strip(), "machine": u.machine, "distro": distro,
                "python": platform.python_version(),
                "python_implementation": platform.python_implementation(),
                "hostname": socket.gethostname(),
                "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "convdoctor": __version__}

    def read_error(self, path: str) -> str | None:
        """Why `path` cannot be read (None when it can)."""
        try:
            with open(self.host(path), "rb") as f:
                f.read(1)
            return None
        except OSError as exc:
            return exc.strerror or type(exc).__name__

    def exists(self, path: str) -> bool:
        return os.path.exists(self.host(path))

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self.host(path))

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.host(path)))
        except OSError:
            return []

    def realpath(self, path: str) -> str:
        """Resolve symlinks inside the root; returns a machine path."""
        try:
            real = os.path.realpath(self.host(path))
            rel = os.path.relpath(real, self.root)
            return "/" + rel if not rel.startswith("..") else real
        except (OSError, ValueError):
            return path

    def elf_dynamic(self, path: str) -> ElfDynamic:
        try:
            with open(self.host(path), "rb") as f:
                return read_dynamic(f)
        except OSError as exc:
            return ElfDynamic(error=exc.strerror or type(exc).__name__)

    def site_packages(self) -> list[str]:
        """site-packages / dist-packages directories of this Python (where pip wheels put nvidia/*)."""
        out: list[str] = []
        for p in sys.path:
            if p and (p.endswith("site-packages") or p.endswith("dist-packages")) and p not in out:
                out.append(p)
        return out

    def find_module_dir(self, name: str) -> str | None:
        """Directory of an installed top-level package, found WITHOUT importing it."""
        import importlib.util

        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        return list(spec.submodule_search_locations)[0]

    # -- commands and child scripts --
    def run(self, argv: Sequence[str], *, timeout: float = 10.0,
            env: Mapping[str, str] | None = None) -> ChildResult:
        if not self.subprocess_ok:
            return ChildResult(error="subprocesses disabled (--no-subprocess)")
        try:
            cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                                env=dict(self.environ if env is None else env), errors="replace")
        except FileNotFoundError:
            return ChildResult(error=f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            return ChildResult(error=f"timed out after {timeout:g} s")
        except OSError as exc:
            return ChildResult(error=f"{argv[0]}: {exc}")
        res = ChildResult(returncode=cp.returncode, stderr_tail=cp.stderr[-2000:])
        res.data = cp.stdout
        return res

    def child(self, script: str, args: Sequence[str] = (), *, timeout: float = 20.0,
              env: Mapping[str, str] | None = None) -> ChildResult:
        """Run children/<script>.py with this Python; parse its JSON stdout (object or lines)."""
        res = self.run([self.python, str(CHILDREN / f"{script}.py"), *args], timeout=timeout, env=env)
        if res.error:
            return res
        text = res.data or ""
        res.data = None
        try:
            res.data = json.loads(text)
        except ValueError:
            for line in text.splitlines():
                try:
                    res.lines.append(json.loads(line))
                except ValueError:
                    continue  # a library printed a banner on stdout: skip it
            if res.lines and isinstance(res.lines[-1], dict) and script != "libinfo":
                res.data = res.lines[-1]
        if res.returncode and res.returncode < 0:
            res.error = f"killed by signal {-res.returncode}{_signame(-res.returncode)}"
        elif res.data is None and not res.lines:
            res.error = f"exit code {res.returncode}: {res.stderr_tail.strip().splitlines()[-1:] or 'no output'}"
        return res


def _signame(num: int) -> str:
    import signal

    try:
        return f" ({signal.Signals(num).name})"
    except ValueError:
        return ""
