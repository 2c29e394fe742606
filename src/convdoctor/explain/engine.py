"""From candidate lines to a ranked Diagnosis.

1. every pattern of the knowledge base is tried on every candidate line; a pattern that fires votes
   for its causes with its weights (once per pattern, whatever the number of lines);
2. facts parsed from the text refine the votes on meaning: version relations, the library that was
   really missing, which side of a type pair differs, tensor sizes against 2^31, free memory;
3. log noise (harmless-warning) only wins when nothing else fired;
4. live checks (this machine's environment report, check_conv on parsed shapes) mark causes
   confirmed / refuted / not checkable and move them a little.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from . import facts as factmod
from .kb import causes as cause_table
from .kb import patterns, status_table

EVIDENCE_PER_CAUSE = 6
NON_FAILURE = ("harmless-warning", "unknown")


@dataclass
class Evidence:
    line: int
    text: str
    pattern: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text, "pattern": self.pattern}


@dataclass
class Confirmation:
    status: str   # confirmed | refuted | not checkable
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail}


@dataclass
class Cause:
    id: str
    confidence: float
    score: float
    title: str
    fix: str
    evidence: list[Evidence] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    confirmation: Confirmation | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "confidence": self.confidence, "score": round(self.score, 2),
            "title": self.title, "fix": self.fix,
            "evidence": [e.to_dict() for e in self.evidence], "reasons": self.reasons,
            "sources": self.sources,
            "confirmation": self.confirmation.to_dict() if self.confirmation else None,
        }


@dataclass
class Diagnosis:
    causes: list[Cause]
    facts: dict[str, Any]
    looked_at: dict[str, Any]
    decide: str = ""
    noise: list[Evidence] = field(default_factory=list)

    @property
    def top(self) -> Cause:
        return self.causes[0]

    @property
    def cause_id(self) -> str:
        return self.causes[0].id

    def ids(self) -> list[str]:
        return [c.id for c in self.causes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "explain", "cause": self.cause_id,
            "causes": [c.to_dict() for c in self.causes], "decide": self.decide,
            "facts": self.facts, "noise": [e.to_dict() for e in self.noise[:5]],
            "looked_at": self.looked_at,
        }

    def render(self) -> str:
        from .render import render

        return render(self)


# -- scoring -----------------------------------------------------------------------------------

class _Votes:
    def __init__(self) -> None:
        self.score: dict[str, float] = {}
        self.evidence: dict[str, list[Evidence]] = {}
        self.reasons: dict[str, list[str]] = {}

    def add(self, cause: str, weight: float, reason: str | None = None) -> None:
        self.score[cause] = self.score.get(cause, 0.0) + weight
        if reason:
            self.reasons.setdefault(cause, []).append(reason)

    def cite(self, cause: str, ev: Evidence) -> None:
        lst = self.evidence.setdefault(cause, [])
        if len(lst) < EVIDENCE_PER_CAUSE and all(e.line != ev.line for e in lst):
            lst.append(ev)


FULL_LIMIT = 3000
LAST_LINES = 40      # the log's last lines are always tried (the scanner always keeps them)
RECENT_LINES = 200   # failure lines this close to the last one form the final failure
EARLY_FACTOR = 0.6   # weight of failure patterns seen only earlier in the log


def by_role(pid: str) -> str:
    for p in patterns():
        if p.id == pid:
            return p.role
    return ""


def analyze(lines: Iterable[tuple[int, str]], *, looked_at: dict[str, Any] | None = None,
            live: LiveChecks | None = None, full: bool | None = None) -> Diagnosis:
    """Rank the causes for `lines` ((line number, text) pairs).

    full=True tries every pattern on every line; False (large pre-filtered logs) tries failure
    patterns on anchor lines and context patterns near the failures; None decides by size.
    """
    t0 = time.perf_counter()
    lines = list(lines)
    votes = _Votes()
    fired: dict[str, list[Evidence]] = {}
    noise: list[Evidence] = []
    pats = patterns()
    if full is None:
        full = len(lines) <= FULL_LIMIT
    lows = [t.lower() for _, t in lines]
    primary: Iterable[int]
    if full:
        primary = range(len(lines))
    else:
        # large pre-filtered logs: failure/noise patterns on anchor lines and their next two lines
        from .scan import ANCHORS

        anchors = tuple(a.decode() for a in ANCHORS)
        hit = [i for i, low in enumerate(lows) if any(a in low for a in anchors)]
        last_no = lines[-1][0] if lines else 0
        tail = [i for i in range(max(0, len(lines) - LAST_LINES), len(lines))
                if lines[i][0] > last_no - LAST_LINES]
        primary = sorted({j for i in hit for j in (i, i + 1, i + 2) if j < len(lines)} | set(tail))

    def match(i: int, pset: tuple) -> None:  # type: ignore[type-arg]
        lineno, text = lines[i]
        if not text:
            return
        low = lows[i]
        for p in pset:
            if p.may_match(low) and p.regex.search(text):
                ev = Evidence(lineno, text.strip()[:500], p.id)
                fired.setdefault(p.id, []).append(ev)
                if p.role == "noise" and len(noise) < 50:
                    noise.append(ev)

    main_pats = tuple(p for p in pats if full or p.role != "context")
    for i in primary:
        match(i, main_pats)
    if not full:
        # context patterns only near the failure lines
        ctx_pats = tuple(p for p in pats if p.role == "context")
        hot = sorted({ev.line for pid, evs in fired.items() for ev in evs
                      if by_role(pid) == "failure"})
        idx = {ln: i for i, (ln, _) in enumerate(lines)}
        near = sorted({idx[h + d] for h in hot for d in range(-FACT_WINDOW, FACT_WINDOW + 1)
                       if h + d in idx})
        for i in near[:20000]:
            match(i, ctx_pats)
    by_id = {p.id: p for p in pats}
    # in long logs the last failure counts fully; failures long before it count less (they are often
    # recovered-from warnings, or the specific early cause of a generic final error: still kept)
    fail_lines = [ev.line for pid, evs in fired.items() if by_id[pid].role == "failure" for ev in evs]
    last_fail = max(fail_lines) if fail_lines else 0
    factors: dict[str, float] = {}
    for pid, evs in fired.items():
        p = by_id[pid]
        recent = any(ev.line >= last_fail - RECENT_LINES for ev in evs) or p.role != "failure"
        factor = factors[pid] = 1.0 if recent else EARLY_FACTOR
        for cause, w in p.causes.items():
            votes.add(cause, w * factor)
            for ev in evs[:3] + evs[-2:]:
                votes.cite(cause, ev)

    f = factmod.extract(_fact_text(lines, fired))
    _refine(votes, f, fired, factors)

    real = {c: s for c, s in votes.score.items() if s > 0 and c not in NON_FAILURE}
    if real:
        votes.score.pop("harmless-warning", None)
    ranked = sorted(((c, s) for c, s in votes.score.items() if s > 0), key=lambda cs: -cs[1])
    table = cause_table()
    out: list[Cause] = []
    total = sum(s for _, s in ranked)
    for cid, s in ranked[:5]:
        if out and s < 0.2 * ranked[0][1]:
            break
        info = table[cid]
        conf = s / (total + 2.0)
        out.append(Cause(id=cid, confidence=round(min(0.99, max(0.05, conf)), 2), score=s,
                         title=info["title"], fix=info["fix"],
                         evidence=sorted(votes.evidence.get(cid, []), key=lambda e: e.line),
                         reasons=votes.reasons.get(cid, []), sources=list(info["sources"])))

    looked = dict(looked_at or {})
    looked.setdefault("lines", len(lines))
    looked["candidate_lines"] = len(lines)
    looked["patterns_fired"] = sorted(fired)
    if not out:
        info = table["unknown"]
        why = _unknown_reason(looked, lines)
        out = [Cause(id="unknown", confidence=0.0, score=0.0, title=info["title"], fix=info["fix"],
                     reasons=[why], sources=[])]

    diag = Diagnosis(causes=out, facts=f.to_dict(), looked_at=looked, noise=noise)
    if live is not None and out[0].id not in NON_FAILURE:
        live.apply(diag, f)
        diag.causes.sort(key=lambda c: -c.score)
        _renormalise(diag)
    diag.decide = _decide(diag)
    looked["analysis_s"] = round(time.perf_counter() - t0, 4)
    return diag


FACT_WINDOW = 15


def _fact_text(lines: list[tuple[int, str]], fired: dict[str, list[Evidence]]) -> str:
    """The text facts are parsed from: all of a small input, else the neighbourhood of fired lines."""
    if len(lines) <= FULL_LIMIT:
        return "\n".join(t for _, t in lines)
    hot = sorted({ev.line for evs in fired.values() for ev in evs})
    if not hot:
        return ""
    keep: list[str] = []
    j = 0
    for lineno, text in lines:
        while j < len(hot) and hot[j] < lineno - FACT_WINDOW:
            j += 1
        if j < len(hot) and abs(hot[j] - lineno) <= FACT_WINDOW:
            keep.append(text)
        if len(keep) > 20000:
            break
    return "\n".join(keep)


def _renormalise(diag: Diagnosis) -> None:
    total = sum(max(c.score, 0.0) for c in diag.causes)
    for c in diag.causes:
        c.confidence = round(min(0.99, max(0.05, max(c.score, 0.0) / (total + 2.0))), 2)


def _unknown_reason(looked: dict[str, Any], lines: list[tuple[int, str]]) -> str:
    total = looked.get("total_lines", looked.get("lines", 0))
    size = looked.get("bytes")
    parts = [f"looked at {total} lines" + (f" ({size} bytes)" if size is not None else "")]
    if looked.get("binary_fraction", 0) > 0.1:
        parts.append(f"the input looks binary ({looked['binary_fraction']:.0%} control bytes in the sample)")
    if not total:
        parts.append("the input is empty")
    else:
        parts.append(f"{len(lines)} lines mentioned CUDA/cuDNN/errors/memory/driver, none matched a known "
                     "failure pattern")
    return "; ".join(parts)


def _refine(votes: _Votes, f: factmod.Facts, fired: dict[str, list[Evidence]],
            factors: dict[str, float] | None = None) -> None:
    factors = factors or {}
    # cuDNN status names parsed from numbers ((6 vs. 0), cuDNN 9 codes) or long names
    st = status_table()["status_causes"]
    for s in f.statuses:
        for cause, w in st.get(s, {}).items():
            votes.add(cause, w, f"cuDNN status {s}")
    if "type-mismatch" in fired and f.type_pair:
        a, b = f.type_pair
        votes.score["device-mismatch"] = votes.score.get("device-mismatch", 0) - 6
        votes.score["dtype-mismatch"] = votes.score.get("dtype-mismatch", 0) - 6
        if a.get("device") and b.get("device") and a["device"] != b["device"]:
            votes.add("device-mismatch", 12, f"input on {a['device']}, weight on {b['device']}")
        if a.get("dtype") and b.get("dtype") and a["dtype"] != b["dtype"]:
            votes.add("dtype-mismatch", 12 if votes.score.get("device-mismatch", 0) <= 0 else 6,
                      f"input {a['dtype']}, weight {b['dtype']}")
    # which library was really missing
    missing = f.missing_libs
    if missing:
        cudnn = [m for m in missing if m.lower().startswith(("libcudnn", "cudnn"))]
        other = [m for m in missing if m not in cudnn]
        k = max((factors.get(pid, 0.0) for pid in ("cuda-lib-missing", "cudnn-missing", "no-driver")),
                default=0.0) or 1.0
        if other and not cudnn:
            if any(m.startswith("libcuda.so.1") for m in other):
                votes.add("no-driver", 8 * k, "libcuda.so.1 (the driver's library) cannot be opened")
            else:
                votes.add("missing-dependency-lib", 6 * k, f"the library that failed to open is {other[0]}, not cuDNN")
            if "cudnn-missing" in fired:
                votes.add("cudnn-not-found", -8, f"cuDNN itself was found; its dependency {other[0]} was not")
        elif cudnn:
            votes.add("cudnn-not-found", 2, f"{cudnn[0]} cannot be opened")
    if f.cudnn_relation:
        for cid in ("cudnn-version-mismatch",):
            votes.add(cid, 2, f"cuDNN {f.cudnn_relation}")
    if len(f.cudnn_lib_dirs) >= 2:
        votes.add("cudnn-version-mismatch", 4, "cuDNN libraries loaded from several directories: "
                  + ", ".join(f.cudnn_lib_dirs[:3]))
    if f.driver_found_cuda:
        votes.add("driver-too-old", 1, f"the driver supports CUDA up to {f.driver_found_cuda}")
    if "possibly-insufficient-driver" in fired and f.driver_max_cuda_major is not None:
        # cast: the first _major(c) call was truthy, so the second (same input) is an int
        newer = [c for c in f.cuda_mentioned if _major(c) and cast(int, _major(c)) > f.driver_max_cuda_major]
        if newer:
            votes.add("driver-too-old", 4, f"driver {f.driver_version} supports CUDA {f.driver_max_cuda_major}.x "
                      f"but CUDA {newer[0]} is in use")
        elif f.driver_max_cuda_major < 12:
            votes.add("driver-too-old", 2, f"driver {f.driver_version} predates CUDA 12 (current wheels need >= 525)")
    if f.memory_free_fraction is not None:
        if f.memory_free_fraction < 0.15:
            votes.add("gpu-out-of-memory", 5, f"only {f.memory_free_fraction:.0%} of GPU memory was free")
        elif f.memory_free_fraction > 0.5:
            votes.add("gpu-out-of-memory", -4, f"{f.memory_free_fraction:.0%} of GPU memory was free: not out of memory")
    if f.zero_size:
        votes.add("empty-tensor", 8, "a tensor with a zero-size dimension appears in the message")
    numel = max(f.max_numel or 0, f.est_output_numel or 0)
    if numel > factmod.INT32_MAX:
        votes.add("tensor-too-large", 8, f"{numel:,} elements > 2^31-1 (int32 indexing limit)")
    if f.gpu_sm and f.arch_list and f.gpu_sm not in f.arch_list:
        votes.add("arch-unsupported", 2, f"GPU {f.gpu_sm} not in the build's list {' '.join(f.arch_list)}")
    if f.padded_vs_kernel:
        pk = f.padded_vs_kernel
        votes.add("input-too-small", 1, f"padded input {pk['padded_input']} smaller than kernel {pk['kernel']}")
    if f.channels:
        votes.add("channel-mismatch", 1, f"layer expects {f.channels['expected']} input channels, got {f.channels['got']}")
    if f.cudnn_channel_check:
        votes.add("channel-mismatch", 6, "cuDNN rejected the input/filter channel counts "
                  "(its check: input channels must be a non-zero multiple of the filter's)")


def _major(v: str) -> int | None:
    try:
        return int(str(v).split(".")[0])
    except ValueError:
        return None


def _decide(diag: Diagnosis) -> str:
    cs = [c for c in diag.causes if c.id not in NON_FAILURE]
    if len(cs) < 2:
        return ""
    a, b = cs[0], cs[1]
    if b.score < 0.35 * a.score:
        return ""
    table = cause_table()
    return (f"{a.id} and {b.id} both fit this message. To decide: {table[a.id].get('decide') or a.title}; "
            f"versus {table[b.id].get('decide') or b.title}.")


# -- live checks -------------------------------------------------------------------------------

EnvProvider = Callable[[], Any]
CheckConv = Callable[..., Any]


class LiveChecks:
    """Confirm or refute causes on this machine. Both providers are injectable (tests feed fakes)."""

    def __init__(self, env: EnvProvider | None = None, check_conv: CheckConv | None = None) -> None:
        self.env = env if env is not None else _default_env
        self.check_conv = check_conv if check_conv is not None else _default_check_conv

    def apply(self, diag: Diagnosis, f: factmod.Facts) -> None:
        from .kb import live_map

        lmap = live_map()
        top = diag.causes[0].score if diag.causes else 0.0
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
                    if c.score >= 0.4 * top:
                        c.score += 3
                elif no_gpu and c.id in _NEEDS_GPU:
                    c.confirmation = Confirmation("not checkable", "no NVIDIA driver/GPU is visible on this "
                                                  "machine, so this cannot be checked here")
                elif getattr(env_report, "facts", None) and c.id in _ENV_REFUTABLE:
                    c.confirmation = Confirmation("refuted", "the environment doctor found no such problem on "
                                                  "this machine (if the log came from another machine, ignore this)")
                    c.score -= 1
                else:
                    c.confirmation = Confirmation("not checkable", "the environment doctor cannot check this")
            elif kind == "check_conv":
                status, detail, ids = conv_result
                if status == "ran":
                    if c.id in ids:
                        c.confirmation = Confirmation("confirmed", detail)
                        c.score += 3
                    else:
                        c.confirmation = Confirmation("refuted", detail)
                        c.score -= 1
                else:
                    c.confirmation = Confirmation("not checkable", detail)
            else:
                c.confirmation = Confirmation("not checkable", "no live check exists for this cause")

    def _run_check_conv(self, diag: Diagnosis, f: factmod.Facts) -> tuple[str, str, set[str]]:
        from .kb import live_map

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
