"""`convdoctor report`: one self-contained HTML page of what convdoctor measured."""

from __future__ import annotations

import argparse

# the ids of `sections.SECTIONS`, in page order (kept here so --help imports no section)
SECTION_IDS = ("machine", "tuning", "roofline", "bench", "optimize")


def _sections(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in SECTION_IDS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: expected section names from "
                                         f"{', '.join(SECTION_IDS)}, comma-separated")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=None, metavar="PATH",
                   help="tuning results: a tuning database, a `db export` file or `tune --json` "
                   "output (with no input at all: the default database)")
    p.add_argument("--env", nargs="+", action="extend", default=[], metavar="FILE.json",
                   help="`convdoctor env --json` reports; several are shown side by side")
    p.add_argument("--bench", nargs="+", action="extend", default=[], metavar="FILE.json",
                   help="`convdoctor bench --json` results (.json or .json.gz)")
    p.add_argument("--optimize", nargs="+", action="extend", default=[], metavar="FILE.json",
                   help="`convdoctor optimize --json` output (or a benchmarks/bench_optimize.py "
                   "result)")
    p.add_argument("--peaks", nargs="+", action="extend", default=[], metavar="FILE.json",
                   help="measured roofline peaks (convdoctor's roofline.json, or `tune --json` "
                   "output) for devices measured elsewhere")
    p.add_argument("--title", default=None, help="the page's title")
    p.add_argument("--sections", type=_sections, default=None, metavar="LIST",
                   help=f"only these sections, comma-separated ({', '.join(SECTION_IDS)})")
    p.add_argument("--out", default=None, metavar="FILE.html",
                   help="where to write the page (default: convdoctor-report.html here, replaced "
                   "only if it is a page this command wrote)")


def run(args: argparse.Namespace) -> int:
    from ..cli import emit
    from .build import Request, gather, summary, write

    req = Request(db=args.db, envs=tuple(args.env), benches=tuple(args.bench),
                  optimize=tuple(args.optimize), peaks=tuple(args.peaks), title=args.title)
    if args.out is not None:   # refuse a bad --out before reading (a diagnosis takes seconds)
        from .writer import check_out

        check_out(args.out, inputs=req.files())
    inputs = gather(req)
    page, path, nbytes = write(inputs, args.out, files=req.files(), only=args.sections)
    info = summary(page, path, nbytes, inputs)
    human = (f"wrote {path} ({nbytes / 1024:.0f} KiB): "
             + (", ".join(page.sections) or "no section") + " section(s)")
    if inputs.notes:
        human += "\n" + "\n".join(f"  not shown: {n}" for n in inputs.notes)
    emit(args, info, human)
    return 0
