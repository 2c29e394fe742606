"""Machine: the doctor's findings, the library search order as a picture, machines side by side.

The picture is a grid: one row per library (soname), one column per directory that holds a copy,
in the order the doctor searched them. A cell is a copy (its version inside); the copy that wins
is filled, with the rule that made it win (`resolution.predicted`: the ld.so(8) order from
libtorch_cuda.so's RPATH/RUNPATH, LD_LIBRARY_PATH, the cache and the default directories) in the
table below; a dashed ring marks the copy a torch process really mapped, a red cell a mapped copy
that is not the predicted one. Libraries the prediction does not cover (cuBLAS, the CUDA runtime)
show the first copy in the search order. Several env reports: every compared fact side by side,
the rows that differ highlighted.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from ..env.compare import KEYS
from .model import EnvDoc, Inputs, Section
from .svg import esc, esc_block, num, short, svg, text

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
FAMILY_ORDER = {"cudnn": 0, "cudnn-sub": 1, "cudart": 2, "cublas": 3, "cublasLt": 4, "nvrtc": 5}
DIFF = ' class="diff"'
_URL = re.compile(r"https?://[^\s\"'<>]{1,500}")


def _get(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


# ------------------------------------------------------------------- library search order
@dataclass(frozen=True)
class Cell:
    col: int
    path: str
    version: str
    win: bool
    loaded: bool
    same_as: str = ""


@dataclass(frozen=True)
class LibRow:
    name: str
    cells: tuple[Cell, ...]
    winner: str                  # path of the winning copy ("" when none)
    rule: str
    predicted: bool              # the rule is the ld.so prediction (else: first in search order)
    loaded: tuple[str, ...]      # paths a torch process mapped for this soname
    mismatch: bool               # mapped, and not the predicted copy


@dataclass(frozen=True)
class LibGrid:
    dirs: tuple[tuple[str, str], ...]    # (directory, how it was found), search order
    rows: tuple[LibRow, ...]
    empty_dirs: int                      # searched directories that hold no copy


def _real(path: str, copies: list[dict[str, Any]]) -> set[str]:
    out = {path}
    for c in copies:
        if c.get("path") == path and isinstance(c.get("realpath"), str):
            out.add(c["realpath"])
    return out


def library_grid(doc: dict[str, Any]) -> LibGrid | None:
    """The picture's data for one env report, or None when it lists no library copy."""
    facts = doc.get("facts", {})
    copies = [c for c in _dicts(_get(facts, "libraries", "value", "copies"))
              if isinstance(c.get("name"), str) and isinstance(c.get("dir"), str)]
    if not copies:
        return None
    order = [(str(d.get("dir")), str(d.get("via") or "")) for d in
             _dicts(_get(facts, "libraries", "value", "search_dirs"))]
    held = {c["dir"] for c in copies}
    dirs = [(d, v) for d, v in dict(order).items() if d in held]
    for c in copies:
        if c["dir"] not in {d for d, _ in dirs}:
            dirs.append((c["dir"], str(c.get("via") or "")))
    col = {d: i for i, (d, _) in enumerate(dirs)}
    pred = _get(facts, "resolution", "value", "predicted")
    pred = pred if isinstance(pred, dict) else {}
    loaded = _get(facts, "resolution", "value", "loaded")
    loaded_all = [p for p in loaded if isinstance(p, str)] if isinstance(loaded, list) else []
    names = sorted({c["name"] for c in copies},
                   key=lambda n: (min(FAMILY_ORDER.get(str(c.get("family")), 9)
                                      for c in copies if c["name"] == n), n))
    rows = []
    for name in names:
        mine = sorted((c for c in copies if c["name"] == name), key=lambda c: col[c["dir"]])
        p = pred.get(name) if isinstance(pred.get(name), dict) else None
        first = next((c for c in mine if not c.get("same_file_as")), mine[0])
        winner = str(p.get("path")) if p else str(first.get("path") or "")
        rule = str(p.get("rule") or p.get("via") or "") if p else \
            f"first copy in the search order ({first.get('via') or 'search order'})"
        files = {name} | {os.path.basename(r) for c in mine
                          for r in _real(str(c.get("path")), copies)}
        loaded = tuple(lp for lp in loaded_all if os.path.basename(lp) in files)
        loaded_set = set(loaded)
        cells = tuple(Cell(col[c["dir"]], str(c.get("path")), str(c.get("version") or "?"),
                           str(c.get("path")) == winner,
                           bool(_real(str(c.get("path")), copies) & loaded_set),
                           str(c.get("same_file_as") or "")) for c in mine)
        mism = bool(p and loaded and not (_real(winner, copies) & loaded_set))
        rows.append(LibRow(name, cells, winner, rule, p is not None, loaded, mism))
    empty = sum(1 for d, _ in order if d not in held)
    return LibGrid(tuple(dirs), tuple(rows), empty)


def grid_svg(g: LibGrid) -> str:
    lab_w, cw, rh, top = 270.0, 74.0, 20.0, 34.0
    width = lab_w + cw * len(g.dirs) + 10
    parts = []
    for i, (d, via) in enumerate(g.dirs):
        x = lab_w + cw * i + cw / 2
        parts.append(text(x, 12, str(i + 1), cls="strong", anchor="middle", title=f"{d} ({via})"))
        parts.append(text(x, 26, short(via.split(" (")[0], 12), cls="dim", anchor="middle",
                          title=via))
    for j, r in enumerate(g.rows):
        y = top + rh * j
        parts.append(text(4, y + rh / 2 + 4, short(r.name, 40), cls="mono",
                          title=f"{r.name}: {r.rule}"))
        for c in r.cells:
            x = lab_w + cw * c.col + 4
            cls = "cell" + (" win" if c.win else "") + (" loaded" if c.loaded else "") \
                + (" miss" if c.loaded and not c.win and r.mismatch else "")
            tip = c.path + (" (winner)" if c.win else "") + (" (mapped by torch)" if c.loaded
                                                            else "") \
                + (f" (same file as {c.same_as})" if c.same_as else "")
            parts.append(f'<rect class="{cls}" x="{num(x)}" y="{num(y + 2)}" width="{num(cw - 8)}"'
                         f' height="{num(rh - 4)}" rx="3"><title>{esc(tip)}</title></rect>')
            parts.append(text(x + (cw - 8) / 2, y + rh / 2 + 4,
                              ("= " if c.same_as else "") + short(c.version, 10), cls="dim",
                              anchor="middle"))
    return svg(width, top + rh * len(g.rows) + 6, "".join(parts),
               label="library copies in search order")


def _grid_block(g: LibGrid) -> str:
    dirs = "".join(f"<li><code>{esc(d)}</code> <span class=\"note\">({esc(v)})</span></li>"
                   for d, v in g.dirs)
    rules = "".join(
        f"<tr{DIFF if r.mismatch else ''}><td><code>{esc(r.name)}</code></td>"
        f"<td><code>{esc(r.winner)}</code></td><td>{esc(r.rule, 600)}</td>"
        f"<td>{esc(', '.join(r.loaded) or '-')}</td></tr>" for r in g.rows)
    legend = ('<p class="legend">Filled: the copy that wins; dashed ring: the copy a torch '
              'process mapped; red: mapped but not the predicted winner; "=": the same file as '
              "another copy. Columns: the directories in search order (hover for the path)"
              + (f"; {g.empty_dirs} other searched directories hold none" if g.empty_dirs
                 else "") + ".</p>")
    return (legend + f'<div class="scroll">{grid_svg(g)}</div><ol class="meta">{dirs}</ol>'
            '<div class="scroll"><table><tr><th>library</th><th>winner</th><th>rule</th>'
            f"<th>mapped by torch</th></tr>{rules}</table></div>")


# ----------------------------------------------------------------------------- findings
def _links(sources: Any) -> str:
    out = []
    for s in sources if isinstance(sources, list) else []:
        s = str(s)
        m = _URL.fullmatch(s)
        out.append(f'<a href="{esc(s)}">{esc(s)}</a>' if m else esc(s))
    return "; ".join(out)


def findings_html(doc: dict[str, Any]) -> str:
    fs = sorted(_dicts(doc.get("findings")),
                key=lambda f: (SEVERITY_ORDER.get(str(f.get("severity")), 3), str(f.get("id"))))
    if not fs:
        return '<p class="good">No findings: nothing stops cuDNN convolutions here.</p>'
    cards = []
    for f in fs:
        sev = str(f.get("severity"))
        sev_cls = sev if sev in SEVERITY_ORDER else "info"
        evidence = f.get("evidence") if isinstance(f.get("evidence"), list) else []
        ev = "".join(f"<li>{esc(e, 1000)}</li>" for e in evidence)
        layer = f" [{esc(f['layer'])}]" if f.get("layer") else ""
        msg = str(f.get("message") or "")
        cards.append(
            f'<div class="finding {sev_cls}"><span class="sev">{esc(sev)}</span>'
            f"<code>{esc(f.get('id') or '?')}</code>{layer}: <b>{esc(f.get('title') or '')}</b>"
            + (f"<p>{esc(msg, 4000)}</p>" if msg and msg != f.get("title") else "")
            + (f"<div class=\"note\">evidence</div><ul>{ev}</ul>" if ev else "")
            + (f"<div class=\"note\">fix</div><pre>{esc_block(f['fix'])}</pre>" if f.get("fix")
               else "")
            + (f"<div class=\"note\">sources: {_links(f.get('sources'))}</div>"
               if f.get("sources") else "") + "</div>")
    return f'<div class="cards">{"".join(cards)}</div>'


def summary_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(fact, value) of one machine: the compared facts that it has, and its GPUs."""
    facts = doc.get("facts", {})
    out = [(label, _show(_get(facts, *path))) for label, path in KEYS
           if _get(facts, *path) not in (None, "", [])]
    for dev in _dicts(_get(facts, "gpus", "value", "devices")):
        out.append((f"GPU {dev.get('index')}", f"{dev.get('name')} sm_"
                    f"{str(dev.get('cc', '')).replace('.', '')}, "
                    f"{dev.get('memory_total_mib', '?')} MiB"))
    return out


def _show(v: Any) -> str:
    if v is None:
        return "-"
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def compare_rows(envs: tuple[EnvDoc, ...]) -> list[tuple[str, list[str], bool]]:
    """(fact, value per machine, differs) for every fact any machine has, plus its library copies
    and finding ids (the facts `convdoctor env --compare` compares)."""
    table: dict[str, dict[str, str]] = {}
    for e in envs:
        facts = e.doc.get("facts", {})
        for label, path in KEYS:
            table.setdefault(label, {})[e.name] = _show(_get(facts, *path))
        for dev in _dicts(_get(facts, "gpus", "value", "devices")):
            table.setdefault(f"GPU {dev.get('index')}", {})[e.name] = (
                f"{dev.get('name')} sm_{str(dev.get('cc', '')).replace('.', '')}")
        for c in _dicts(_get(facts, "libraries", "value", "copies")):
            if c.get("family") in ("cudnn", "cudart") and not c.get("same_file_as"):
                table.setdefault(f"{c.get('name')} @ {c.get('dir')}", {})[e.name] = (
                    f"{c.get('version') or '?'} cuda{c.get('cuda_major') or '?'}")
        table.setdefault("findings", {})[e.name] = ", ".join(sorted(
            {str(f.get("id")) for f in _dicts(e.doc.get("findings"))})) or "-"
    out = []
    for label, vals in table.items():
        row = [vals.get(e.name, "-") for e in envs]
        if all(v == "-" for v in row):
            continue
        out.append((label, row, len(set(row)) > 1))
    return out


def _compare_table(envs: tuple[EnvDoc, ...]) -> str:
    rows = compare_rows(envs)
    n = sum(1 for _, _, d in rows if d)
    head = "".join(f"<th>{esc(e.name)}</th>" for e in envs)
    body = "".join(f"<tr{DIFF if d else ''}><td>{esc(label)}</td>"
                   + "".join(f"<td>{esc(v, 300)}</td>" for v in vals) + "</tr>"
                   for label, vals, d in rows)
    return (f"<p>{len(envs)} machines side by side; {n} fact(s) differ (highlighted).</p>"
            f'<div class="scroll"><table><tr><th>fact</th>{head}</tr>{body}</table></div>')


def machine_block(e: EnvDoc, *, heading: bool) -> str:
    out = [f"<h3>{esc(e.name)}</h3>"] if heading else []
    facts = summary_rows(e.doc)
    if facts:
        out.append("<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v, 400)}</td></tr>"
                                       for k, v in facts) + "</table>")
    out.append(findings_html(e.doc))
    g = library_grid(e.doc)
    if g is not None:
        out.append("<h3>Library search order</h3>" + _grid_block(g))
    return "".join(out)


def render(inputs: Inputs) -> str | None:
    if not inputs.envs:
        return None
    if len(inputs.envs) == 1:
        return machine_block(inputs.envs[0], heading=False)
    blocks = "".join(f'<details class="block"><summary>{esc(e.name)}: '
                     f"{len(_dicts(e.doc.get('findings')))} finding(s)</summary>"
                     f"{machine_block(e, heading=False)}</details>" for e in inputs.envs)
    return _compare_table(inputs.envs) + blocks


SECTION = Section("machine", "Machine", render)
