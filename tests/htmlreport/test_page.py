"""The page is well-formed and self-contained, and no text from an input can change its markup."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from reportdata import BENCH_FP32_FPROP, OPT_RESNET, cand, env_report, optimize_payload, tuned

from convdoctor.htmlreport.build import Request, gather
from convdoctor.htmlreport.model import EnvDoc, Inputs
from convdoctor.htmlreport.optdata import run_of_cli
from convdoctor.htmlreport.page import render_page

VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source",
        "track", "wbr"}


class _Balance(HTMLParser):
    """Fails on a closing tag that does not close the innermost open element."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-6:])
        self.stack.pop()


def check_page(html: str) -> _Balance:
    """Well-formed (as XML and as balanced HTML) and self-contained: no script, no external
    resource, nothing to fetch."""
    body = html.split("\n", 1)[1] if html.startswith("<!DOCTYPE html>") else html
    ET.fromstring(body)                                      # raises on malformed markup
    p = _Balance()
    p.feed(html)
    p.close()
    assert p.stack == [], p.stack
    assert "script" not in p.tags and "link" not in p.tags and "iframe" not in p.tags
    for name, value in p.attrs:
        assert name not in ("src", "srcset", "action", "formaction", "background"), name
        assert not name.startswith("on"), name
        if name in ("href", "xlink:href"):
            assert value and (value.startswith("#") or value.startswith("https://")), value
    assert "url(" not in html and "@import" not in html
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    html.encode("utf-8")                                     # strict: no lone surrogate
    return p


def test_full_page_from_real_results_is_well_formed_and_self_contained(tmp_path: Path) -> None:
    env = tmp_path / "env.json"
    (tmp_path / "m").mkdir()
    env.write_text(json.dumps(env_report(tmp_path / "m", broken=True)))
    opt = tmp_path / "opt.json"
    opt.write_text(json.dumps(optimize_payload(4)))
    inp = gather(Request(envs=(str(env),), benches=(str(BENCH_FP32_FPROP),),
                         optimize=(str(OPT_RESNET), str(opt))))
    page = render_page(inp)
    assert page.sections == ("machine", "tuning", "roofline", "bench", "optimize")
    p = check_page(page.html)
    assert p.tags.count("svg") > 100


HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "\x1b[2J\x1b]0;pwn\x07",
           "right\u202eto-left", "lone \ud800 surrogate", "nul\x00byte", "&amp; </text></svg>",
           "\ufffe\uffff"]


def test_hostile_text_from_every_input_is_escaped(tmp_path: Path) -> None:
    bad = " ".join(HOSTILE)
    doc = {"kind": "env", "facts": {"host": {"value": {"os": bad}}, "libraries": {"value": {
        "copies": [{"name": bad, "dir": bad, "path": bad + "/x", "version": bad}],
        "search_dirs": [{"dir": bad, "via": bad}]}}},
        "findings": [{"id": bad, "severity": "error", "title": bad, "message": bad,
                      "evidence": [bad], "fix": bad + "\n" + bad, "sources": [bad],
                      "layer": bad}]}
    tp = tuned([cand(bad, samples=(1e-4,), reason=bad), cand("x", "failed", reason=bad)],
               chosen=bad, chosen_s=1e-4, label=bad)
    payload = optimize_payload(2)
    payload["model"] = bad
    payload["report"]["layers"][0]["layer"] = bad
    payload["report"]["routing_reason"] = bad
    run = run_of_cli(payload, bad)
    inp = Inputs(envs=(EnvDoc(bad, doc), EnvDoc("other", doc)), tuned=(tp,), runs=(run,),
                 notes=(bad,), sources=(bad,), title=bad)
    html = render_page(inp).html
    check_page(html)
    assert "<script" not in html and "<img" not in html and "\x1b" not in html
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff\u202e]", html)
    assert "\\x1b[2J" in html and "\\u202e" in html and "\\ud800" in html  # shown, not obeyed
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.parametrize("field,value", [("speedup_vs_benchmark", "fast"),
                                         ("tuned_s", float("nan")), ("winners", "cudnn:eng1"),
                                         ("tune_candidates", [[["k", "ok", "12", None]]]),
                                         ("referee_runs_s", {"a": 1})])
def test_odd_values_inside_a_bench_row_are_left_out_not_fatal(tmp_path: Path, field: str,
                                                               value: object) -> None:
    import gzip

    with gzip.open(BENCH_FP32_FPROP, "rt") as fh:
        doc = json.load(fh)
    doc["rows"] = doc["rows"][:3]
    doc["rows"][0][field] = value
    p = tmp_path / "b.json"
    p.write_text(json.dumps(doc))
    page = render_page(gather(Request(benches=(str(p),))))
    check_page(page.html)
    assert "bench" in page.sections
