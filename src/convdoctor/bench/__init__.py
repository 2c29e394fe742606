"""`convdoctor bench`: how convdoctor's choices compare with PyTorch's, measured honestly.

- `suites`: benchmark suites as data (`data/suites/*.json`), configurations, --match, --shard;
- `arms`: the PyTorch and convdoctor processes (`pytorch_arm`, `tune_arm`);
- `referee`: the processes that time every chosen path side by side, and a row's ratios;
- `resume`: the run's state file (FILE.partial) and --resume;
- `summary`: a result's rows and summary figures; `report`: the --out file and the human report;
- `merge`: several results joined into one (--merge), with provenance;
- `run`: a suite run; `rerun`: --referee-only. The command's arguments: `convdoctor.cli.bench`.
"""
