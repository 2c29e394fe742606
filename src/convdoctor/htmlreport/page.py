"""The page: the sections of `sections.SECTIONS`, in order, and the HTML around them.

The page holds no script and fetches nothing: the style sheet
is inline, the plots are inline SVG, and a Content-Security-Policy forbids any other source.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from .model import Inputs, Section
from .sections import SECTIONS
from .svg import esc

CSS_FILE = Path(__file__).resolve().parent / "data" / "report.css"
GENERATOR = "convdoctor report"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


@dataclass(frozen=True)
class Page:
    html: str
    sections: tuple[str, ...]        # ids of the sections written, in order


def render_page(inputs: Inputs, *, now: _dt.datetime | None = None,
                only: tuple[str, ...] | None = None) -> Page:
    """The whole page for `inputs` (`only`: just the sections with these ids)."""
    when = (now or _dt.datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M %Z").strip()
    bodies: list[tuple[Section, str]] = []
    for sec in SECTIONS:
        if only is not None and sec.id not in only:
            continue
        body = sec.render(inputs)
        if body:
            bodies.append((sec, body))
    nav = "".join(f'<a href="#{s.id}">{esc(s.title)}</a>' for s, _ in bodies)
    main = "".join(f'<section id="{s.id}"><h2>{esc(s.title)}</h2>{b}</section>'
                   for s, b in bodies)
    if not bodies:
        main = ('<p class="note">Nothing to show: the inputs hold no diagnosis, tuning result, '
                'bench or optimize result.</p>')
    sources = "".join(f"<li><code>{esc(s)}</code></li>" for s in inputs.sources)
    notes = "".join(f"<li>{esc(n)}</li>" for n in inputs.notes)
    css = CSS_FILE.read_text(encoding="utf-8")
    html = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8"/>'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}"/>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
        '<meta name="color-scheme" content="light dark"/>'
        f'<meta name="generator" content="{GENERATOR} {esc(__version__)}"/>'
        f"<title>{esc(inputs.title)}</title><style>{css}</style></head><body>"
        f"<header><h1>{esc(inputs.title)}</h1>"
        f'<p class="meta">Written {esc(when)} by convdoctor {esc(__version__)}.</p>'
        f"<nav>{nav}</nav></header><main>{main}"
        + (f'<h2 id="notes">Not shown</h2><ul class="note">{notes}</ul>' if notes else "")
        + "</main><footer>"
        + (f'<p class="meta">Made from:</p><ul class="meta">{sources}</ul>' if sources else "")
        + "</footer></body></html>\n")
    return Page(html, tuple(s.id for s, _ in bodies))
