"""Live checks on this machine: the environment doctor's findings and check_conv on the shapes parsed
from the message mark each cause `confirmed`, `refuted` or `not checkable` (with the detail).

Both providers are injectable (`LiveChecks(env=..., check_conv=...)`); any exception inside a provider
(an ImportError while a module is missing included) makes the check `not checkable`. How a result
moves a cause in the ranking is the engine's business (engine.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from . import facts as factmod
from .kb import causes as cause_table
from .kb import live_map
from .model import Confirmation, Diagnosis

EnvProvider = Callable[[], Any]
CheckConv = Callable[..., Any]


class LiveChecks:
    """Confirm or refute causes on this machine. Both providers are injectable (tests feed fakes)."""

    def __init__(self, env: EnvProvider | None = None, check_conv: CheckConv | None = None) -> None:
        self.env = env if env is not None else _default_env
        self.check_conv = check_conv if check_conv is not None else _default_check_conv

    def apply(self, diag: Diagnosis, f: factmod.Facts) -> None:
        """Set each cause's confirmation."""
        lmap = live_map()
        env_report, env_err = None, ""
        need_env = any(cause_table()[c.id].get("live") == "env" for c in diag.causes)
        if need_env:
            try:
                env_report = self.env()
            except Exception as exc:  # noqa: BLE001 - a live check never breaks explain
                env_err = f"{type(exc).__name__}: {exc}"
        env_causes: dict[str, list[str]] = {}
        env_ids = {getattr(fd, "id", "") for fd in getattr(env_report, "findings", []) or []}
        no_gpu = bool(env_ids & {"no-nvidia-driver", "no-visible-gpu"})
        if env_report is not None:
            for fd in getattr(env_report, "findings", []) or []:
                cid = lmap["map"].get(getattr(fd, "id", ""))
                if cid:
                    env_causes.setdefault(cid, []).append(f"{fd.id}: {getattr(fd, 'title', '')}".strip())
        conv_result = self._run_check_conv(diag, f)
        for c in diag.causes:
            kind = cause_table()[c.id].get("live")
            if kind == "env":
                if env_report is None:
                    c.confirmation = Confirmation("not checkable", "environment report unavailable"
                                                  + (f" ({env_err})" if env_err else ""))
                elif c.id in env_causes:
                    c.confirmation = Confirmation("confirmed", "on this machine: " + "; ".join(env_causes[c.id][:2]))
                elif no_gpu and c.id in _NEEDS_GPU:
                    c.confirmation = Confirmation("not checkable", "no NVIDIA driver/GPU is visible on this "
                                                  "machine, so this cannot be checked here")
                elif getattr(env_report, "facts", None) and c.id in _ENV_REFUTABLE:
                    c.confirmation = Confirmation("refuted", "the environment doctor found no such problem on "
                                                  "this machine (if the log came from another machine, ignore this)")
                else:
                    c.confirmation = Confirmation("not checkable", "the environment doctor cannot check this")
            elif kind == "check_conv":
                status, detail, ids = conv_result
                if status == "ran":
                    c.confirmation = Confirmation("confirmed" if c.id in ids else "refuted", detail)
                else:
                    c.confirmation = Confirmation("not checkable", detail)
            else:
                c.confirmation = Confirmation("not checkable", "no live check exists for this cause")

    def _run_check_conv(self, diag: Diagnosis, f: factmod.Facts) -> tuple[str, str, set[str]]:
        kwargs = conv_kwargs(f)
        if kwargs is None:
            return "skipped", "no convolution shapes in the message", set()
        try:
            report = self.check_conv(**kwargs)
        except TypeError:
            kwargs.pop("weight_device", None)
            try:
                report = self.check_conv(**kwargs)
            except Exception as exc:  # noqa: BLE001
                return "error", f"check_conv failed: {type(exc).__name__}: {exc}", set()
        except Exception as exc:  # noqa: BLE001
            return "error", f"check_conv failed: {type(exc).__name__}: {exc}", set()
        cmap = live_map()["check_map"]
        ids = {cmap.get(getattr(fd, "id", ""), "") for fd in getattr(report, "findings", []) or []
               if getattr(fd, "severity", "error") == "error"}
        ids.discard("")
        shown = {k: v for k, v in kwargs.items() if k in ("x_shape", "w_shape", "stride", "padding",
                                                           "dilation", "groups", "dtype", "weight_dtype",
                                                           "transposed", "weight_device")}
        found = ", ".join(sorted(ids)) or "no error"
        return "ran", f"check_conv({shown}) -> {found}", ids


_NEEDS_GPU = {"driver-too-old", "driver-library-mismatch", "arch-unsupported", "forward-compat-unsupported",
              "hardware-fault"}
_ENV_REFUTABLE = {"driver-too-old", "driver-library-mismatch", "cpu-only-build", "cudnn-not-found",
                  "cudnn-version-mismatch", "arch-unsupported"}


def conv_kwargs(f: factmod.Facts) -> dict[str, Any] | None:
    """check_conv arguments from parsed facts (a placeholder shape where the message gives none).

    The dtypes/devices named by a type-mismatch message are always applied, also on shapes parsed
    from the code (the code line rarely shows the .half()/.cuda() that caused the mismatch).
    """
    kw: dict[str, Any] | None = None
    if f.conv and f.conv.get("x_shape") and f.conv.get("w_shape"):
        c = f.conv
        kw = {"x_shape": list(c["x_shape"]), "w_shape": list(c["w_shape"])}
        for k in ("stride", "padding", "dilation", "groups"):
            if k in c:
                kw[k] = c[k]
        if c.get("transposed"):
            kw["transposed"] = True
        if c.get("dtype"):
            kw["dtype"] = c["dtype"]
        if c.get("memory_format"):
            kw["memory_format"] = c["memory_format"]
    elif f.padded_vs_kernel:
        padded, kernel = f.padded_vs_kernel["padded_input"], f.padded_vs_kernel["kernel"]
        if padded and len(padded) == len(kernel):
            kw = {"x_shape": [1, 1, *padded], "w_shape": [1, 1, *kernel]}
    if f.type_pair:
        a, b = f.type_pair
        dt = {"half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16"}
        if kw is None:
            kw = {"x_shape": [1, 1, 8, 8], "w_shape": [1, 1, 3, 3]}
        if a.get("dtype") in dt and b.get("dtype") in dt:
            # cast: both dtypes were just found among dt's (str) keys, so neither is None
            kw["dtype"], kw["weight_dtype"] = dt[cast(str, a["dtype"])], dt[cast(str, b["dtype"])]
        if a.get("device") and b.get("device"):
            kw["device"], kw["weight_device"] = a["device"], b["device"]
    return kw


_ENV_CACHE: list[Any] = []


def _default_env() -> Any:
    """This machine's environment report, probed once per process (it takes seconds on a GPU box)."""
    if _ENV_CACHE:
        cached = _ENV_CACHE[0]
        if isinstance(cached, BaseException):
            raise cached
        return cached
    try:
        import convdoctor

        diagnose = convdoctor.diagnose  # AttributeError/ImportError while env is not there yet
        report = diagnose(smoke=False)
    except Exception as exc:
        _ENV_CACHE.append(exc)
        raise
    _ENV_CACHE.append(report)
    return report


def _default_check_conv(**kw: Any) -> Any:
    try:
        import convdoctor

        fn = convdoctor.check_conv
    except (AttributeError, ImportError):
        from convdoctor.check.checker import check_conv as fn  # type: ignore[no-redef]
    return fn(**kw)
