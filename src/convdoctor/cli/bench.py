"""`convdoctor bench`: its arguments, and which of its three modes runs.

- `bench SUITE` (`convdoctor.bench.run`): PyTorch heuristics vs PyTorch benchmark=True vs convdoctor, in one
  run of fresh processes, with the ratios taken by side-by-side referees;
- `bench --referee-only FILE` (`convdoctor.bench.rerun`): a finished result's choices re-timed;
- `bench --merge FILE...` (`convdoctor.bench.merge`): several results (shards) joined into one, with provenance.
"""

from __future__ import annotations

import argparse

from ..argtypes import bounded_int, positive_seconds
from ..bench.suites import CONFIGS
from ..errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", nargs="?", default=None,
                   help="a built-in suite name (cnn-layers) or a suite JSON file")
    p.add_argument("--config", default="fp32-nchw", choices=sorted(CONFIGS),
                   help="dtype, layout and math mode applied to the suite (default fp32-nchw, "
                   "TF32 allowed)")
    p.add_argument("--direction", default="fprop", choices=["fprop", "dgrad", "wgrad"])
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--limit", type=bounded_int(1), default=None,
                   help="run N problems spread over the suite (default: all on a GPU, 4 on CPU)")
    p.add_argument("--batch", type=bounded_int(1, 1_000_000), default=None,
                   help="override every problem's batch size (default: the suite's on a GPU, 1 "
                   "on CPU)")
    p.add_argument("--budget", type=positive_seconds(), default=None, metavar="S",
                   help="sampling cap per problem and run (default 5 GPU, 1 CPU)")
    p.add_argument("--pytorch-runs", type=bounded_int(1, 100), default=2, help="fresh PyTorch processes")
    p.add_argument("--tune-runs", type=bounded_int(1, 100), default=2, help="fresh convdoctor processes")
    p.add_argument("--referees", type=bounded_int(1, 100), default=3,
                   help="fresh referee processes timing every chosen path side by side; a row's "
                   "ratios are the median of each process's own ratios (default 3)")
    p.add_argument("--referee-only", default=None, metavar="FILE",
                   help="instead of running the arms: time the PyTorch picks and convdoctor "
                   "winners recorded in the bench result FILE again in --referees fresh referee "
                   "processes (same GPU and software stack), and write the result with the new "
                   "ratios (the old ones kept under each row's first_referee); with --out and "
                   "--resume it continues from FILE.partial like a bench run")
    p.add_argument("--timeout", type=positive_seconds(), default=120.0, metavar="S",
                   help="per call into a worker process; a candidate that hangs longer costs "
                   "only itself (default 120)")
    p.add_argument("--match", default=None, metavar="REGEX",
                   help="only problems whose 'group name key' matches REGEX (Python re.search), "
                        "e.g. 'r=1 s=1 \\S+ pad_pre=0,0 pad_post=0,0 .*groups=1' (2D 1x1 layers); applied before --shard")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="run only the K-th of N contiguous parts of the (spread) problem list, "
                   "so a long suite can run as several shorter jobs; join them with --merge")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="also write the JSON result to FILE (written when the run ends)")
    p.add_argument("--resume", action="store_true",
                   help="with --out FILE: continue an interrupted run from FILE.partial (written "
                   "after every problem: the PyTorch and convdoctor processes already finished, "
                   "and the finished problems of the one it stopped in, are not run again; the "
                   "file must come from the same problems, settings, machine and "
                   "convdoctor code)")
    p.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                   help="instead of running: join the JSON results of several bench runs (shards "
                   "of one suite and configuration, measured on one machine and software "
                   "stack) and summarize them as one; a problem in several files counts once, "
                   "from the first; each row names its file and the code that measured it")
    p.add_argument("--report", default=None, metavar="FILE.html",
                   help="also write the result's HTML page (see convdoctor report)")



def run(args: argparse.Namespace) -> int:
    if args.report:  # a page that could not be written is refused before the run
        from ..htmlreport import check_report_path

        check_report_path(args.report)
    if args.merge:
        return _merge(args)
    from ..settings import current

    if args.referee_only:
        from ..bench.rerun import referee_only

        return referee_only(args, current())
    if args.suite is None:
        raise UsageError("bench needs a SUITE (e.g. cnn-layers), or --merge FILE...")
    from ..bench.run import bench

    return bench(args, current())


def _merge(args: argparse.Namespace) -> int:
    from ..bench.merge import load_result, merge_docs
    from ..bench.report import emit
    from ..bench.summary import summarize

    docs = [load_result(path) for path in args.merge]
    return emit(args, merge_docs([str(p) for p in args.merge], docs, summarize))
