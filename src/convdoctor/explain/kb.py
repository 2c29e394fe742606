"""The knowledge base, one list of message patterns loaded from data/:

- `patterns.json`: patterns written from real messages (each with examples and their public URL);
- `templates/*.json`: message templates read in the frameworks' and libraries' sources (each with
  its source file and version), and the CUDA runtime/driver error tables (`cuda_errors.json`).

Every entry becomes a `Pattern`: a case-insensitive regex, a role (`failure`, `context`, `noise`),
vote weights per cause and the share of its meaning left open (`unknown`). Template causes are
probabilities; they become weights on the same scale as patterns.json (`ROLE_SCALE`).

Matching stays fast on big logs through required literals: each pattern's regex parse tree gives
the literal runs one of which any match must contain (`required_literals`), and `PatternIndex`
files each pattern under one 4-character piece of its rarest literal, so a line is only tried
against patterns whose pieces it contains.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

CAUSE_IDS: tuple[str, ...] = (
    "driver-too-old", "driver-library-mismatch", "no-driver", "forward-compat-unsupported",
    "cudnn-not-found", "cudnn-version-mismatch", "arch-unsupported", "cpu-only-build",
    "missing-dependency-lib", "gpu-out-of-memory", "input-too-small", "unsupported-dtype",
    "dtype-mismatch", "device-mismatch", "channel-mismatch", "tensor-too-large",
    "non-contiguous-input", "empty-tensor", "unsupported-config", "illegal-memory-access",
    "hardware-fault", "harmless-warning", "unknown",
)
# vote weight of a template cause with probability 1, by role (patterns.json's specific messages
# vote 10-12; its context lines 1-6; its noise 3-6)
ROLE_SCALE = {"failure": 12.0, "context": 5.0, "noise": 6.0}
GENERIC_SHARE = 0.6   # a failure pattern whose strongest cause has less than this share is generic
GRAM = 4


@dataclass(frozen=True)
class Pattern:
    id: str
    regex: re.Pattern[str]
    causes: dict[str, float]
    role: str
    examples: tuple[dict[str, str], ...] = ()
    note: str = ""
    keys: tuple[str, ...] | None = None  # lower-case literals, one of which any match contains
    source: str = ""                     # where the pattern comes from (URL, or file@version)
    unknown: float = 0.0                 # weight left to causes the pattern does not name
    levels: tuple[str, ...] = ()         # log levels the message is normally printed at (W: a warning)
    origin: str = "patterns"             # patterns | template | cuda-errors
    generic: bool = False                # failure message whose causes are spread (a status, not a cause)

    def may_match(self, low: str) -> bool:
        """Cheap gate on the lower-cased line before the regex runs."""
        return self.keys is None or any(k in low for k in self.keys)


def required_literals(pattern: str) -> tuple[str, ...] | None:
    """For each top-level alternative of `pattern`, its longest run of literal characters (>= 3).

    A line can only match if it contains one of them; None when some alternative has no such run.
    Derived from the regex parse tree, so it cannot drift from the pattern. Zero-width assertions
    the parser hoists out of the alternatives (a `\\b` they all start with) are looked through, and
    so are groups in a sequence (a run inside one counts, not joined with its neighbours).
    """
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_parse  # type: ignore[no-redef]
    tree = [(op, av) for op, av in sre_parse.parse(pattern) if str(op) != "AT"]
    branches: list[list] = [tree]  # type: ignore[type-arg]
    if len(tree) == 1:
        op, av = tree[0]
        if str(op) == "BRANCH":
            branches = [list(b) for b in av[1]]
        elif str(op) == "SUBPATTERN" and len(list(av[-1])) == 1 and str(list(av[-1])[0][0]) == "BRANCH":
            branches = [list(b) for b in list(av[-1])[0][1][1]]
    keys: list[str] = []
    for seq in branches:
        best = _longest_run(seq)
        if len(best) < 3:
            return None
        keys.append(best.lower())
    return tuple(dict.fromkeys(keys))


def _longest_run(seq: Any) -> str:
    """The longest run of consecutive literal characters in a parsed sequence, looking into groups
    (a group's own runs count alone; an alternation inside one gives nothing certain)."""
    best, run = "", ""
    for op, av in seq:
        if str(op) == "LITERAL":
            run += chr(av)
            continue
        best = max(best, run, key=len)
        run = ""
        if str(op) == "SUBPATTERN":
            body = list(av[-1])
            if not any(str(o) == "BRANCH" for o, _ in body):
                best = max(best, _longest_run(body), key=len)
    return max(best, run, key=len)


def _load(name: str) -> Any:
    text = resources.files("convdoctor.explain").joinpath("data", name).read_text(encoding="utf-8")
    return json.loads(text)


def _is_generic(causes: dict[str, float], unknown: float, role: str) -> bool:
    total = sum(v for v in causes.values() if v > 0) + unknown
    return role == "failure" and bool(causes) and max(causes.values()) < GENERIC_SHARE * total


def _make(pid: str, regex: str, causes: dict[str, float], role: str, **kw: Any) -> Pattern:
    unknown = float(kw.pop("unknown", 0.0))
    causes = {k: float(v) for k, v in causes.items() if k != "unknown" and k in CAUSE_IDS}
    return Pattern(id=pid, regex=re.compile(regex, re.IGNORECASE), causes=causes, role=role,
                   keys=required_literals(regex), unknown=unknown,
                   generic=_is_generic(causes, unknown, role), **kw)


def _curated() -> Iterator[Pattern]:
    for p in _load("patterns.json")["patterns"]:
        ex = tuple(p.get("examples", ()))
        yield _make(p["id"], p["regex"], p["causes"], p["role"], examples=ex, note=p.get("note", ""),
                    source=ex[0]["source"] if ex else "", levels=tuple(p.get("levels", ())))


def _scaled(causes: dict[str, float], role: str) -> tuple[dict[str, float], float]:
    scale = ROLE_SCALE.get(role, 5.0)
    return ({k: v * scale for k, v in causes.items() if k != "unknown"},
            float(causes.get("unknown", 0.0)) * scale)


def _template_files() -> list[str]:
    folder = resources.files("convdoctor.explain").joinpath("data", "templates")
    try:
        return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _templates() -> Iterator[Pattern]:
    for name in _template_files():
        data = _load(f"templates/{name}")
        if "templates" in data:
            yield from _source_templates(name, data)
        else:
            yield from _cuda_errors(data)


def _source_templates(name: str, data: dict[str, Any]) -> Iterator[Pattern]:
    src = data.get("source", {})
    for t in data["templates"]:
        role = t.get("role", "failure")
        causes, unknown = _scaled(t.get("causes", {}), role)
        where = _where(t.get("repo") or src.get("repo", ""), t.get("file", ""), t.get("version") or src.get("version", ""))
        ex = ({"text": t["example"], "source": where},) if t.get("example") else ()
        pid = f"{name[:-5]}:{t['id']}"
        try:
            own = _make(pid, t["regex"], causes, role, unknown=unknown, examples=ex,
                        note=t.get("rationale", ""), source=where, levels=tuple(t.get("levels", ())),
                        origin="template")
        except re.error:
            continue
        yield own
        loose = loose_regex(t.get("text", ""), own.regex.groupindex)
        if loose:
            yield _make(pid + "#loose", loose, causes, role, unknown=unknown, examples=ex,
                        note=t.get("rationale", "") or "a pasted variant of " + pid, source=where,
                        levels=tuple(t.get("levels", ())), origin="template")
        head = template_head(t.get("text", ""))
        if head:
            yield _make(pid + "#head", _literal_regex(head), causes, role, unknown=unknown,
                        examples=({"text": head, "source": where},), note="the first sentence of " + pid,
                        source=where, levels=tuple(t.get("levels", ())), origin="template")


_PLACEHOLDER = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|ll|I64|I32|[hlLqjzt])?[a-zA-Z]"
                          r"|\{[^{}]*\}|\$\d")
HEAD_MIN = 20


def template_head(text: str) -> str | None:
    """The first sentence of a template, when it is literal text of at least HEAD_MIN characters and
    not the whole message: other versions of a framework (and truncated pastes) keep the head of a
    message and change its tail."""
    m = re.search(r"[.!?;](?=\s)", text)
    if m is None:
        return None
    head = text[: m.end()].strip()
    if len(head) < HEAD_MIN or _PLACEHOLDER.search(head) or head == text.strip():
        return None
    return head


LOOSE_TOKENS = 4          # a pasted variant keeps at least this many words of a template ...
LOOSE_SHARE = 0.6        # ... and this share of them
LOOSE_VALUES = 4         # templates with more values than this get no pasted variant
_ELIDED = r"[^\n]{1,120}?"   # a value: as printed, or elided by the poster ("...", "<path>")


def loose_regex(text: str, names: Iterable[str] = ()) -> str | None:
    """A template's text as people paste it: every value may be anything on the line (a poster's
    "..." included), the closing full stop may be missing, and the message may stop at the end of
    a line once it has kept LOOSE_SHARE of the template's words (at least LOOSE_TOKENS) and
    HEAD_MIN literal characters. A value named `{x}` with x in `names` (the template regex's
    groups) is captured under that name, once. None for templates too short or too vague."""
    words = text.split()
    if len(words) < LOOSE_TOKENS or "\n" in text.strip():
        return None  # short, or several lines (patterns run on one line)
    if len(_PLACEHOLDER.findall(text)) > LOOSE_VALUES:
        return None  # every value a lazy wildcard: a line that nearly matches backtracks long
    wanted = set(names)
    parts: list[str] = []
    literal = [0]
    for i, w in enumerate(words):
        if i == len(words) - 1 and len(w) > 1 and w[-1] in ".!?;:":
            w, end = w[:-1], "(?:" + re.escape(w[-1]) + ")?"
        else:
            end = ""
        out, pos = [], 0
        for m in _PLACEHOLDER.finditer(w):
            out.append(re.escape(w[pos:m.start()].replace("%%", "%")))
            name = m.group(0)[1:-1]
            if name in wanted:
                wanted.discard(name)
                out.append(f"(?P<{name}>{_ELIDED})")
            else:
                out.append(_ELIDED)
            pos = m.end()
        out.append(re.escape(w[pos:].replace("%%", "%")))
        literal.append(literal[-1] + len(_PLACEHOLDER.sub("", w)))
        parts.append("".join(out) + end)
    need = max(LOOSE_TOKENS, math.ceil(LOOSE_SHARE * len(words)))
    while need < len(words) and literal[need] < HEAD_MIN:
        need += 1
    if literal[need] < HEAD_MIN:
        return None
    if need >= len(words):
        return None  # no cut kept: the template's own regex and head cover it
    # a cut message ends its line; the whole one goes on as it likes (`_full` marks it). It is
    # cut only after a word that ends in literal text: a value there would take the rest of the
    # line for itself.
    tail = "(?P<_full>)"
    for i in range(len(parts) - 1, need - 1, -1):
        cut_before = not parts[i - 1].endswith(_ELIDED) and not parts[i - 1].endswith(_ELIDED + ")")
        tail = r"(?:\s+" + parts[i] + tail + (")?" if cut_before else ")")
    return r"\s+".join(parts[:need]) + tail + r"(?(_full)|(?=[ \t]*(?:\n|\Z)))"


def _literal_regex(text: str) -> str:
    return "".join(r"\s+" if p.isspace() else re.escape(p) for p in re.split(r"(\s+)", text) if p)


def _where(repo: str, path: str, version: str) -> str:
    """A link to the source file at the version read, where the version is a commit or a tag."""
    if repo and path and re.fullmatch(r"[0-9a-f]{7,40}|v?\d+(?:\.\d+)+[\w.-]*", version or ""):
        return f"https://github.com/{repo}/blob/{version}/{path}"
    return f"{repo}/{path}@{version}" if version else f"{repo}/{path}"


# how CUDA error names and descriptions appear in logs: the name itself (cudaErrorX, CUDA_ERROR_X),
# or the description after the framework's prefix ("CUDA error: out of memory", "Status: ...")
_DESC_PREFIX = (r"(?:cuda(?:\s+runtime)?\s+(?:error|failure)\s*(?:\(\d+\)|\d+)?\s*:?\s*(?:\d+\s+)?|Status:\s*"
                r"|cuda\w*Error\w*\s*[:(]\s*|CUDA_ERROR_\w+:\s*|CUresult\W+\w+:\s*|cuInit: \w+:\s*)")


# operating-system error texts that CUDA descriptions share
_ERRNO_LIKE = frozenset({"operation not supported", "operation not permitted", "out of memory", "invalid argument",
                         "unknown error", "device or resource busy", "file not found", "not supported"})


def _distinctive(desc: str) -> bool:
    return len(desc.split()) >= 3 and len(desc) >= 18 and desc.lower() not in _ERRNO_LIKE


def _library_statuses() -> Iterator[Pattern]:
    data = _load("library_status.json")
    for lib in data["libraries"]:
        for st in lib["statuses"]:
            causes, unknown = _scaled(st["causes"], st["role"])
            yield _make(f"{lib['library'].lower()}:{st['name']}", rf"\b{st['name']}\b", causes, st["role"],
                        unknown=unknown, examples=({"text": st["name"], "source": lib["source"]},),
                        note=st.get("rationale", ""), source=lib["source"], origin="library-status")
            if "number" in st and lib.get("success"):
                yield _make(f"{lib['library'].lower()}:{st['name']}#number",
                            _numbered(lib["library"], lib["success"], int(st["number"])), causes,
                            st["role"], unknown=unknown, note=st.get("rationale", ""),
                            source=lib["source"], origin="library-status")


def _numbered(library: str, success: str, number: int) -> str:
    """A library status printed as its number: "cuFFT error: 5", "CUFFT error(5)", or a glog
    check against the success status, "== CUFFT_SUCCESS (2 vs. 0)"."""
    return (rf"\b{re.escape(library)}\s*(?:error|status|failure)\s*(?:code\s*)?[:=(#]?\s*{number}\b"
            rf"{_NOT_A_COUNT}|\b{re.escape(success)}\s*\({number} vs\. 0\)")


def _after_call(call: str, number: int) -> str:
    """A status number printed after the API call that returned it: "cudaHostRegister error: 35",
    "cuInit() returned 100", "cudaRuntimeGetVersion() failed with error #35",
    'calling "cudaGetDeviceCount(&n)", code is 35'. `call` is the
    call-name prefix, read case-sensitively (so "CUDA error 36" or "cuDNN error: 3" are not calls).
    A getter's plain "returned N" is its value, not a status ("cuDeviceGetCount returned 2")."""
    tail = rf"\W{{0,3}}{number}\b{_NOT_A_COUNT}"
    args = r"(?:\([^()\n]{0,60}\))?"    # "cudaGetDeviceCount(&n)"
    return (rf"\b(?-i:{call})\w*{args}\W{{1,3}}(?:error|failed(?:\s+with\s+error)?|returned\s+error"
            rf"|code(?:\s+is)?){tail}"
            rf"|\b(?-i:{call})(?!\w*(?:Count|Version|Attribute|Properties)\b)\w*{args}\s+returned{tail}")


# after a status number: not a decimal, nor a count ("returned 3 devices", "failed 2 times")
_NOT_A_COUNT = (r"(?!\.\d)(?!\s*(?:times?|devices?|GPUs?|of|out|handles?|bytes?|[KMG]i?B|%|"
                r"retr|attempt)\b)")


def _pascal_driver_name(name: str) -> str:
    """CUDA_ERROR_ILLEGAL_ADDRESS -> ErrorIllegalAddress (the .NET wrappers' enum member)."""
    return "Error" + "".join(w.capitalize() for w in name[len("CUDA_ERROR_"):].split("_"))


def _cuda_errors(data: dict[str, Any]) -> Iterator[Pattern]:
    src = data.get("source", {})
    for table in ("runtime", "driver"):
        doc = src.get(f"{table}_doc", {})
        where = f"{doc.get('file', table)}@{doc.get('version', '')}"
        for e in data.get(table, []):
            role = e.get("role", "context")
            causes, unknown = _scaled(e.get("causes", {}), role)
            alts = [rf"\b{re.escape(e['name'])}\b"]
            num = e.get("number")
            if table == "runtime" and role == "failure" and num is not None \
                    and e.get("legacy_number", num) == num:
                # a failure status printed as a number after the runtime call that returned it
                # ("cudaHostRegister error: 35"; the call's name read case-sensitively, so not
                # "CUDA error 36")
                alts.append(_after_call("cuda[A-Z]", int(num)))
                # TensorRT's "Cuda Error in allocate: 2 (out of memory)"
                alts.append(rf"\bCuda Error in \w+:\s*{int(num)}\b{_NOT_A_COUNT}")
            if table == "driver" and e["name"].startswith("CUDA_ERROR_"):
                # .NET wrappers (ManagedCuda, CUDAfy) print the enum member, after their CUDA
                # exception's name: "CudaException: 'ErrorIllegalAddress". Alone, names such as
                # ErrorNotFound belong to any program's enums.
                alts.append(rf"(?:cuda|curesult)[^\n]{{0,120}}?\b(?-i:{_pascal_driver_name(e['name'])})\b")
                if role == "failure" and num is not None:
                    # after the driver call that returned it ("cuInit() returned 100"); a driver
                    # call's name has a lower-case letter after "cu" and its capital, so the
                    # libraries' own names (cuDNN, cuBLAS, cuFFT) are not calls
                    alts.append(_after_call("cu[A-Z][a-z]", int(num)))
                    # a CUresult printed as its number: "CUresult error result=2"
                    alts.append(rf"\bCUresult\b[^\n]{{0,24}}?\b(?:result|error|code|status)\s*[=:]\s*"
                                rf"{int(num)}\b{_NOT_A_COUNT}")
            desc = (e.get("description") or "").strip().rstrip(".")
            if len(desc.split()) >= 2:
                lit = _literal_regex(desc)
                # a description distinctive enough stands alone (frameworks embed it in their own words:
                # "operation cudaGetLastError() failed: <description>", "Check failed: ... <description>")
                alts.append(lit if _distinctive(desc) else _DESC_PREFIX + lit)
            yield _make(f"cuda:{e['name']}", "|".join(alts), causes, role, unknown=unknown,
                        examples=({"text": e["name"] + (": " + desc if desc else ""), "source": where},),
                        note=e.get("rationale", ""), source=where, origin="cuda-errors")


@functools.lru_cache(maxsize=1)
def patterns() -> tuple[Pattern, ...]:
    out: list[Pattern] = list(_curated())
    seen = {p.id for p in out}
    for p in (*_library_statuses(), *_templates()):
        if p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return tuple(out)


_VARIANTS: dict[str, Pattern] = {}


def noise_variant(p: Pattern) -> Pattern:
    """`p` read as harmless noise (its captured values showed the failure does not concern this run)."""
    v = _VARIANTS.get(p.id)
    if v is None:
        v = Pattern(id=p.id + "~noise", regex=p.regex, causes={"harmless-warning": ROLE_SCALE["noise"]},
                    role="noise", examples=p.examples, note=p.note, keys=p.keys, source=p.source,
                    origin=p.origin)
        _VARIANTS[p.id] = v
    return v


def pattern_by_id() -> dict[str, Pattern]:
    """Every pattern by id, the noise variants made so far included."""
    table = _by_id()
    if _VARIANTS:
        table = {**table, **{v.id: v for v in _VARIANTS.values()}}
    return table


@functools.lru_cache(maxsize=1)
def _by_id() -> dict[str, Pattern]:
    return {p.id: p for p in patterns()}


@dataclass
class PatternIndex:
    """Patterns filed under one 4-character piece of a required literal (the rarest piece of each
    literal, counted over all literals), plus those without literals (always tried)."""
    by_gram: dict[str, list[int]] = field(default_factory=dict)
    always: list[int] = field(default_factory=list)
    pats: tuple[Pattern, ...] = ()

    def candidates(self, low: str, grams: set[str] | None = None) -> list[Pattern]:
        """The patterns a lower-cased line may match (`grams`: the line's 4-character pieces, when the
        caller has them already)."""
        if grams is None:
            grams = line_grams(low)
        hits: set[int] = set(self.always)
        for g in grams & self.by_gram.keys():
            hits.update(self.by_gram[g])
        return [self.pats[i] for i in sorted(hits)]


def line_grams(low: str) -> set[str]:
    return {low[i:i + GRAM] for i in range(len(low) - GRAM + 1)}


def build_index(pats: tuple[Pattern, ...]) -> PatternIndex:
    freq: Counter[str] = Counter()
    for p in pats:
        for k in p.keys or ():
            freq.update({k[i:i + GRAM] for i in range(len(k) - GRAM + 1)})
    idx = PatternIndex(pats=pats)
    for n, p in enumerate(pats):
        if not p.keys or any(len(k) < GRAM for k in p.keys):
            idx.always.append(n)
            continue
        for k in p.keys:
            grams = [k[i:i + GRAM] for i in range(len(k) - GRAM + 1)]
            best = min(grams, key=lambda g: (freq[g], g))
            idx.by_gram.setdefault(best, []).append(n)
    return idx


@functools.lru_cache(maxsize=4)
def index(role_set: frozenset[str]) -> PatternIndex:
    return build_index(tuple(p for p in patterns() if p.role in role_set))


@functools.lru_cache(maxsize=1)
def causes() -> dict[str, dict[str, Any]]:
    return dict(_load("causes.json")["causes"])


@functools.lru_cache(maxsize=1)
def status_table() -> dict[str, Any]:
    return dict(_load("cudnn_status.json"))


@functools.lru_cache(maxsize=1)
def live_map() -> dict[str, Any]:
    return dict(_load("live_map.json"))
