"""From candidate lines to a ranked, calibrated Diagnosis.

1. normalise (normalise.py): logical lines without terminal control, decoration, log prefixes or
   wrapping, each with its log level and origin;
2. match (kb.py): a line that a `noise` pattern matches is log noise and votes for nothing else;
   `failure` and `context` patterns that match vote for their causes. Patterns that match the same
   lines form one message family, which votes once per cause with its strongest weight (a message
   repeated, or matched by a curated pattern and a source template, is one piece of evidence);
3. weigh: in long logs failures long before the last one count less (`EARLY_FACTOR`); a failure
   message printed at warning/info level, which the program went on from, counts less
   (`LEVEL_FACTOR`) unless that is its normal level;
4. facts from the whole log (facts.py, envfacts.py) vote through the rules in data/rules.json;
5. rank by score; the top cause's evidence share becomes a probability through the calibration map
   (calibrate.py); `harmless-warning` only counts when no failure cause has votes;
6. live checks (live.py) confirm or refute causes on this machine: a refuted cause drops below the
   causes that were not refuted unless the log states it outright (a decisive fact);
7. `decide` says what observation would separate the leading causes, and when the log may come
   from another machine.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import facts as factmod
from . import rules as rulemod
from .calibrate import CalibrationMap, confidences, raw_share, shipped, top_share
from .envfacts import derive, extract_env
from .kb import CAUSE_IDS, Pattern, index, line_grams, noise_variant, pattern_by_id
from .kb import causes as cause_table
from .live import LiveChecks
from .model import NON_FAILURE, Cause, Diagnosis, Evidence
from .normalise import LogicalLine, normalise

__all__ = ["LiveChecks", "analyze", "Diagnosis"]

_ORDER = {c: i for i, c in enumerate(CAUSE_IDS)}
EVIDENCE_PER_CAUSE = 6
FULL_LIMIT = 3000    # up to this many lines every pattern is tried on every line
LAST_LINES = 40      # the log's last lines are always tried (the scanner always keeps them)
RECENT_LINES = 200   # failure lines this close to the last one form the final failure
EARLY_FACTOR = 0.6   # weight of failure patterns seen only earlier in the log
LEVEL_FACTOR = {"I": 0.5, "W": 0.75}   # failure messages seen only in info/warning lines
FACT_WINDOW = 15     # lines around fired lines that facts are read from, in large logs
MAX_CAUSES = 5
KEEP_SHARE = 0.2     # causes under this fraction of the top score are not listed
CONFIRM_BONUS = 3.0  # a cause confirmed on this machine, when it already scores >= 40 % of the top
REFUTED_FACTOR = 0.5


@dataclass
class _Matches:
    fired: dict[str, list[Evidence]] = field(default_factory=dict)
    noise: list[Evidence] = field(default_factory=list)
    noise_lines: set[int] = field(default_factory=set)
    hit_lines: set[int] = field(default_factory=set)
    captures: dict[str, str] = field(default_factory=dict)   # named groups of the regexes that matched
    families: list[set[str]] = field(default_factory=list)
    levels: dict[str, int] = field(default_factory=dict)


BACKOFF_REASON = ("no known message matched; the failure's own words name this cause "
                  "(a weaker answer: check the fix against the log)")
_EXCEPTION_HEAD = re.compile(r"\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b:")


def _primary(logical: list[LogicalLine], full: bool) -> list[int]:
    if full:
        return list(range(len(logical)))
    from .scan import ANCHORS

    anchor_rx = re.compile("|".join(re.escape(a.decode()) for a in ANCHORS), re.IGNORECASE)
    hit = [i for i, ln in enumerate(logical) if anchor_rx.search(ln.text)]
    last_no = logical[-1].line if logical else 0
    tail = [i for i in range(max(0, len(logical) - LAST_LINES), len(logical))
            if logical[i].line > last_no - LAST_LINES]
    return sorted({j for i in hit for j in (i, i + 1, i + 2) if j < len(logical)} | set(tail))


def _match(logical: list[LogicalLine], full: bool) -> _Matches:
    m = _Matches()
    noise_idx = index(frozenset({"noise"}))
    main_idx = index(frozenset({"failure", "backoff", "context"} if full
                               else {"failure", "backoff"}))
    for ln in logical:
        if ln.level:
            m.levels[ln.level] = m.levels.get(ln.level, 0) + 1

    gram_cache: list[Any] = [None, set()]   # (line index, text) -> its 4-character pieces

    def try_line(i: int, idx: Any, record_noise: bool, text: str | None = None) -> list[str]:
        ln = logical[i]
        text = ln.text if text is None else text
        low = text.lower()
        if gram_cache[0] != (i, text):
            gram_cache[0], gram_cache[1] = (i, text), line_grams(low)
        hits: list[str] = []
        for p in idx.candidates(low, gram_cache[1]):
            if not p.may_match(low):
                continue
            found = p.regex.search(text)
            if found is None:
                continue
            caps = {k: v for k, v in found.groupdict().items() if v}
            if caps and p.role != "noise" and rulemod.reclassified(caps):
                p = noise_variant(p)   # e.g. a backend for another platform failed to start
            ev = Evidence(ln.line, text.strip()[:500], p.id, ln.level)
            m.fired.setdefault(p.id, []).append(ev)
            for k, v in caps.items():
                m.captures[k] = v.strip()
            if p.role == "noise" and not record_noise:
                m.noise_lines.add(i)
                if len(m.noise) < 50:
                    m.noise.append(ev)
                continue
            hits.append(p.id)
            if record_noise and len(m.noise) < 50 and len(hits) == 1:
                m.noise.append(ev)
        return hits

    def visit(i: int, idx: Any) -> None:
        if not logical[i].text or i in m.noise_lines:
            return
        # an exception line is the program failing: it is never noise, whatever it shares with a warning
        if not _EXCEPTION_HEAD.match(logical[i].text) and try_line(i, noise_idx, True):
            m.noise_lines.add(i)
            return
        hits = try_line(i, idx, False)
        if hits:
            m.hit_lines.add(i)
            m.families.append(set(hits))

    for i in _primary(logical, full):
        visit(i, main_idx)
    if full:
        _match_broken_lines(logical, m, try_line, noise_idx, main_idx)
    if not full:  # context patterns only near the failure lines
        ctx_idx = index(frozenset({"context"}))
        by_id = pattern_by_id()
        hot = sorted({ev.line for pid, evs in m.fired.items() for ev in evs if by_id[pid].role == "failure"})
        pos = {ln.line: i for i, ln in enumerate(logical)}
        near = sorted({pos[h + d] for h in hot for d in range(-FACT_WINDOW, FACT_WINDOW + 1) if h + d in pos})
        for i in near[:20000]:
            if logical[i].text and i not in m.noise_lines:
                hits = try_line(i, ctx_idx, False)
                if hits:
                    m.families.append(set(hits))
    return m


def _match_broken_lines(logical: list[LogicalLine], m: _Matches, try_line: Any, noise_idx: Any,
                        main_idx: Any) -> None:
    """A message cut in two without a fixed width ("Loaded runtime CuD" / "NN library: ..."): where a
    line ends inside a word and the next line goes on with one, and neither matched anything, the
    two are tried joined."""
    for i in range(len(logical) - 1):
        a, b = logical[i], logical[i + 1]
        if (i in m.hit_lines or i + 1 in m.hit_lines or i in m.noise_lines or i + 1 in m.noise_lines
                or not a.text or not b.text or b.line != a.line + a.span):
            continue
        if not (a.text[-1].isalnum() and b.text[0].isalnum()):
            continue
        joined = a.text + b.text
        if try_line(i, noise_idx, True, joined):
            m.noise_lines.update((i, i + 1))
            continue
        hits = try_line(i, main_idx, False, joined)
        if hits:
            m.hit_lines.update((i, i + 1))
            m.families.append(set(hits))


def _families(groups: list[set[str]]) -> list[set[str]]:
    """Union of pattern sets that share a pattern (patterns matched on the same lines)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for g in groups:
        first = next(iter(g))
        for other in g:
            parent[find(other)] = find(first)
    out: dict[str, set[str]] = {}
    for x in list(parent):
        out.setdefault(find(x), set()).add(x)
    return sorted(out.values(), key=min)


@dataclass
class _Votes:
    score: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)
    reasons: dict[str, list[str]] = field(default_factory=dict)
    unknown: float = 0.0
    noise: dict[str, float] = field(default_factory=dict)
    # backoff patterns: the words of a cause, not a known message; they count only when no
    # failure pattern or rule voted (`explain`)
    backoff: dict[str, float] = field(default_factory=dict)

    def add(self, cause: str, weight: float, reason: str | None = None) -> None:
        self.score[cause] = self.score.get(cause, 0.0) + weight
        if reason and reason not in self.reasons.get(cause, []):
            self.reasons.setdefault(cause, []).append(reason)

    def cite(self, cause: str, ev: Evidence) -> None:
        lst = self.evidence.setdefault(cause, [])
        if len(lst) < EVIDENCE_PER_CAUSE and all(e.line != ev.line for e in lst):
            lst.append(ev)


def _factor(p: Pattern, evs: list[Evidence], last_fail: int) -> float:
    if p.role != "failure":
        return 1.0
    recent = any(ev.line >= last_fail - RECENT_LINES for ev in evs)
    level = max((1.0 if (ev.level in (None, "E", "F") or ev.level in p.levels)
                 else LEVEL_FACTOR.get(ev.level or "", 1.0)) for ev in evs)
    return (1.0 if recent else EARLY_FACTOR) * level


def _vote_patterns(m: _Matches) -> _Votes:
    votes = _Votes()
    by_id = pattern_by_id()
    fail_lines = [ev.line for pid, evs in m.fired.items() if by_id[pid].role == "failure" for ev in evs]
    last_fail = max(fail_lines, default=0)
    factors = {pid: _factor(by_id[pid], evs, last_fail) for pid, evs in m.fired.items()
               if by_id[pid].role != "noise"}
    for fam in _families(m.families):
        best: dict[str, float] = {}
        unknown = 0.0
        for pid in sorted(fam):
            p = by_id[pid]
            if p.role == "backoff":   # from failure lines only: not a warning's or a note's words
                evs = [ev for ev in m.fired[pid] if ev.level not in ("W", "I")]
                for cause, w in p.causes.items() if evs else ():
                    votes.backoff[cause] = max(votes.backoff.get(cause, 0.0), w)
                    for ev in evs[:2]:
                        votes.cite(cause, ev)
                continue
            for cause, w in p.causes.items():
                best[cause] = max(best.get(cause, 0.0), w * factors[pid])
            unknown = max(unknown, p.unknown * factors[pid])
            for ev in m.fired[pid][:3] + m.fired[pid][-2:]:
                for cause in p.causes:
                    votes.cite(cause, ev)
        for cause, w in best.items():
            votes.add(cause, w)
        votes.unknown += unknown
    # noise: one vote per noise pattern, kept apart (they count only when nothing failed)
    for pid, evs in m.fired.items():
        p = by_id[pid]
        if p.role == "noise":
            for cause, w in p.causes.items():
                votes.noise[cause] = votes.noise.get(cause, 0.0) + w
                for ev in evs[:2]:
                    votes.cite(cause, ev)
    return votes


def _fact_text(logical: list[LogicalLine], m: _Matches, full: bool) -> tuple[str, str]:
    """The text facts are read from: all of a small input, else the neighbourhood of fired lines;
    and the same without the noise lines (for the statuses that vote)."""
    if full:
        keep = list(range(len(logical)))
    else:
        hot = sorted({ev.line for pid, evs in m.fired.items() for ev in evs})
        keep = []
        j = 0
        for i, ln in enumerate(logical):
            while j < len(hot) and hot[j] < ln.line - FACT_WINDOW:
                j += 1
            if j < len(hot) and abs(hot[j] - ln.line) <= FACT_WINDOW:
                keep.append(i)
            if len(keep) > 20000:
                break
    return ("\n".join(logical[i].text for i in keep),
            "\n".join(logical[i].text for i in keep if i not in m.noise_lines))


def _flat_facts(f: factmod.Facts, env: Any, captures: dict[str, str]) -> dict[str, Any]:
    flat: dict[str, Any] = {**asdict(f), **asdict(env)}
    flat.update({f"cap_{k}": v.lower() for k, v in captures.items()})
    flat["cudnn_lib_dir_count"] = len(f.cudnn_lib_dirs)
    flat["cudnn_lib_dirs"] = ", ".join(f.cudnn_lib_dirs[:3])
    named = sorted(f.frameworks)
    flat["frameworks_named"] = ", ".join(named)
    flat["gpu_frameworks"] = len(named) if {"tensorflow", "jax"} & set(named) else min(1, len(named))
    if f.type_pair:
        a, b = f.type_pair
        flat.update(input_device=a.get("device"), weight_device=b.get("device"),
                    input_dtype=a.get("dtype"), weight_dtype=b.get("dtype"))
    if f.padded_vs_kernel:
        flat.update(padded_input=f.padded_vs_kernel["padded_input"], kernel=f.padded_vs_kernel["kernel"])
    if f.channels:
        flat.update(expected_channels=f.channels["expected"], got_channels=f.channels["got"])
    return flat


def analyze(lines: Iterable[tuple[int, str]], *, looked_at: dict[str, Any] | None = None,
            live: LiveChecks | None = None, full: bool | None = None,
            calibration: CalibrationMap | None = None) -> Diagnosis:
    """Rank the causes for `lines` ((line number, text) pairs).

    full=True tries every pattern on every line; False (large pre-filtered logs) tries failure
    patterns on anchor lines and context patterns near the failures; None decides by size.
    calibration: the map from evidence share to probability (default: data/calibration.json).
    """
    t0 = time.perf_counter()
    lines = list(lines)
    if full is None:
        full = len(lines) <= FULL_LIMIT
    logical = normalise(lines)
    m = _match(logical, full)
    votes = _vote_patterns(m)
    text, failure_text = _fact_text(logical, m, full)
    f = factmod.extract(text, failure_text)
    env = extract_env(text, m.levels)
    if env.gpu_cc is None and f.gpu_sm:
        digits = f.gpu_sm[3:]
        env.gpu_cc = f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else None
    env = derive(env, driver_version=f.driver_version, arch_list=f.arch_list)
    by_id = pattern_by_id()
    failures = [by_id[pid] for pid in m.fired if by_id[pid].role == "failure"]
    candidates = frozenset(c for c, s in votes.score.items() if s > 0 and c not in NON_FAILURE)
    ctx = rulemod.Context(facts=_flat_facts(f, env, m.captures), fired=frozenset(m.fired), candidates=candidates,
                          generic=bool(failures) and all(p.generic for p in failures))
    outcome = rulemod.evaluate(ctx)
    for cause, w, reason in outcome.votes:
        votes.add(cause, w, reason)

    unexplained = None
    backoff = False
    if not any(s > 0 for c, s in votes.score.items() if c not in NON_FAILURE):
        if votes.backoff and not votes.noise:   # no known message: a cause's words, a weaker answer
            backoff = True
            for cause, w in votes.backoff.items():
                votes.add(cause, w, BACKOFF_REASON)
        else:
            unexplained = _unexplained_failure(logical, m)
        if not backoff and unexplained is None:   # only noise in this log: what there is to explain
            for cause, w in votes.noise.items():
                votes.add(cause, w)
    votes.score.pop("unknown", None)
    # equal scores keep the order of data/causes.json, so the answer never depends on hashing order
    ranked = sorted(((c, s) for c, s in votes.score.items() if s > 0), key=lambda cs: (-cs[1], _ORDER[cs[0]]))
    table = cause_table()
    out: list[Cause] = []
    for cid, s in ranked[:MAX_CAUSES]:
        if out and s < KEEP_SHARE * ranked[0][1]:
            break
        info = table[cid]
        out.append(Cause(id=cid, confidence=0.0, score=s, title=info["title"], fix=info["fix"],
                         evidence=sorted(votes.evidence.get(cid, []), key=lambda e: e.line),
                         reasons=votes.reasons.get(cid, []), sources=list(info["sources"]),
                         decisive=cid in outcome.decisive))
    looked = dict(looked_at or {})
    looked.setdefault("lines", len(lines))
    looked["candidate_lines"] = len(lines)
    looked["logical_lines"] = len(logical)
    looked["patterns_fired"] = sorted(m.fired)
    looked["rules_applied"] = outcome.applied
    facts_out = {**f.to_dict(), **env.to_dict()}
    cmap = calibration if calibration is not None else shipped()
    if not out:
        info = table["unknown"]
        why = _unknown_reason(looked, lines)
        if unexplained is not None:
            why = (f"the program failed at line {unexplained.line} ({unexplained.text.strip()[:160]}), which matches "
                   f"no known cause; the {len(m.noise)} warning line(s) before it are harmless")
        out = [Cause(id="unknown", confidence=0.0, score=0.0, title=info["title"], fix=info["fix"],
                     reasons=[why], sources=[])]
        diag = Diagnosis(causes=out, facts=facts_out, looked_at=looked, noise=m.noise)
    else:
        diag = Diagnosis(causes=out, facts=facts_out, looked_at=looked, noise=m.noise)
        total = sum(s for _, s in ranked)
        generic = ctx.generic or backoff
        _calibrate(diag, total, votes.unknown, cmap, generic)
        if live is not None and out[0].id not in NON_FAILURE:
            live.apply(diag, f)
            _rerank_live(diag, total, votes.unknown, cmap, generic)
    diag.decide = _decide(diag, ctx, live is not None, bool(outcome.applied))
    looked["analysis_s"] = round(time.perf_counter() - t0, 4)
    return diag


def _calibrate(diag: Diagnosis, total: float, unknown: float, cmap: CalibrationMap, generic: bool) -> None:
    shares = [raw_share(c.score, total, unknown) for c in diag.causes]
    shares[0] = top_share([c.score for c in diag.causes], unknown)
    kind = evidence_kind(diag.causes[0], generic)
    diag.looked_at["evidence_share"] = round(shares[0], 4)
    diag.looked_at["evidence_kind"] = kind
    for c, p in zip(diag.causes, confidences(shares, [c.score for c in diag.causes], cmap, kind), strict=True):
        c.confidence = round(min(0.99, max(0.01, p)), 2)


def evidence_kind(top: Cause, generic: bool) -> str:
    """What the first cause rests on: a decisive fact, a message that names a cause, or only generic
    statuses (the calibration has one curve per kind)."""
    if top.id == "harmless-warning":
        return "noise"
    return "decisive" if top.decisive else ("generic" if generic else "specific")


def _rerank_live(diag: Diagnosis, total: float, unknown: float, cmap: CalibrationMap, generic: bool) -> None:
    """Confirmed causes gain; refuted ones lose, and drop below every cause not refuted unless a
    decisive fact of the log names them (then the log probably comes from another machine)."""
    top = diag.causes[0].score
    for c in diag.causes:
        st = c.confirmation.status if c.confirmation else ""
        if st == "confirmed" and c.score >= 0.4 * top:
            c.score += CONFIRM_BONUS
            total += CONFIRM_BONUS
        elif st == "refuted" and not c.decisive:
            total -= c.score * (1 - REFUTED_FACTOR)
            c.score *= REFUTED_FACTOR

    def demoted(c: Cause) -> bool:
        return c.confirmation is not None and c.confirmation.status == "refuted" and not c.decisive

    diag.causes.sort(key=lambda c: (demoted(c), -c.score, _ORDER[c.id]))
    _calibrate(diag, total, unknown, cmap, generic)


_FAILURE_LINE = re.compile(
    r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b(?::|$)|^\s*Traceback \(most recent call last\)|Aborted \(core dumped\)"
    r"|Segmentation fault|^\s*terminate called after")


def _unexplained_failure(logical: list[LogicalLine], m: _Matches) -> LogicalLine | None:
    """The last line that shows the program failing (an exception, a fatal log line, an abort), when
    no pattern explains it and it comes after the noise: the warnings are then not the story."""
    last_noise = max(m.noise_lines, default=-1)
    matched = {ev.line for evs in m.fired.values() for ev in evs}
    for i in range(len(logical) - 1, last_noise, -1):
        ln = logical[i]
        if ln.line in matched:
            return None
        if ln.level == "F" or _FAILURE_LINE.search(ln.text):
            return ln if last_noise >= 0 else None
    return None


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


DECIDE_SHARE = 0.35     # a runner-up at this fraction of the top score is a real alternative
DECIDE_BELOW = 0.6      # a top cause below this confidence gets a "what would decide"


def _decide(diag: Diagnosis, ctx: rulemod.Context, live_ran: bool, deciding_facts: bool = False) -> str:
    table = cause_table()
    cs = [c for c in diag.causes if c.id not in NON_FAILURE]
    parts: list[str] = []
    top = cs[0] if cs else None
    if top is not None and top.decisive and top.confirmation and top.confirmation.status == "refuted":
        parts.append(f"The log states {top.id} outright, but this machine shows no such problem: the log "
                     "probably comes from another machine; run `convdoctor env` there.")
    if len(cs) >= 2 and (cs[1].score >= DECIDE_SHARE * cs[0].score or cs[0].confidence < DECIDE_BELOW):
        a, b = cs[0], cs[1]
        parts.append(f"{a.id} and {b.id} both fit this message. To decide: "
                     f"{table[a.id].get('decide') or a.title}; versus {table[b.id].get('decide') or b.title}.")
        if ctx.generic and not deciding_facts:
            parts.append("The failure message is a generic status; the log gives no GPU model, versions or "
                         "free memory that would settle it.")
        checkable = [c.id for c in cs[:3] if table[c.id].get("live")]
        if not live_ran and checkable:
            parts.append("On the machine that failed, `convdoctor explain` without --no-live checks "
                         + ", ".join(checkable) + " live.")
    return " ".join(parts)
