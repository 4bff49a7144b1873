"""The leaderboard commands of ``tune-gym``: ``bench``, ``leaderboard``, ``validate`` and ``results``.

    tune-gym bench --suite quick [--jobs N] [--seeds S] [--agents a,b] [--out FILE] [--ray ADDRESS] [--reuse OTHER]
    tune-gym leaderboard [RESULTS] [--out LEADERBOARD.md]
    tune-gym validate RESULTS [--rerun N] [--jobs N] [--log FILE]
    tune-gym results pack RESULTS...          move the journals' runs into the packed files (a new segment)
    tune-gym results pack --compact RESULTS   ... and merge the segments into one packed file (a release)
    tune-gym results unpack RESULTS OUT.jsonl  every line, as one JSON Lines file
    tune-gym results drop RESULTS KEYS.txt     remove runs (one key per line): the next bench runs them again

RESULTS names results by their packed file ``X.parquet`` or their journal ``X.jsonl``
(:mod:`benchmarks.leaderboard.results`).

Registered through the ``tune_gym.cli`` entry-point group (pyproject.toml).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]

RESULTS_DIR = Path("benchmarks/results/leaderboard")


def _default_results(suite: str) -> Path:
    return RESULTS_DIR / f"{Path(suite).stem}.parquet"


def _default_leaderboard(results: Path) -> Path:
    """``LEADERBOARD.md`` for the standard suite's results, else the results file's name with ``.md``
    (so a study's suite does not overwrite the project's leaderboard)."""
    from benchmarks.leaderboard.results import read_results

    header, _ = read_results(results)
    return Path("LEADERBOARD.md") if header["suite"]["name"] == "standard" else Path(results).with_suffix(".md")


def _command() -> str:
    return shlex.join(["tune-gym", *sys.argv[1:]])


def cmd_bench(args: argparse.Namespace) -> int:
    from benchmarks.leaderboard.report import write_leaderboard
    from benchmarks.leaderboard.runner import run_suite
    from benchmarks.leaderboard.suite import load_suite

    seeds = None if args.seeds is None else _seed_count(args.seeds)
    if args.jobs < 1:
        raise ValueError(f"--jobs: {args.jobs} is not a number of worker processes (1 or more)")
    suite = load_suite(args.suite)
    out = args.out or _default_results(args.suite)
    agents = args.agents.split(",") if args.agents else None
    results = run_suite(suite, out, jobs=args.jobs, agents=agents, seeds=seeds, ray_address=args.ray,
                        progress=not args.quiet, reuse=args.reuse)
    print(f"{len(results.runs)} runs in {out}")
    if not args.no_leaderboard:
        path = write_leaderboard(out, args.leaderboard or _default_leaderboard(out), command=_command())
        print(path.read_text(encoding="utf-8").split("\n## Per task")[0])
    return 0


def _seed_count(text: str) -> int:
    """``--seeds``: a positive int (the first seeds of the suite); ValueError otherwise."""
    try:
        seeds = int(text)
    except ValueError:
        seeds = 0
    if seeds < 1 or text.strip() != str(seeds):
        raise ValueError(f"--seeds: {text!r} is not a number of seeds (an int, 1 or more)")
    return seeds


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from benchmarks.leaderboard.report import write_leaderboard

    path = write_leaderboard(args.results, args.out or _default_leaderboard(args.results), command=_command())
    print(path.read_text(encoding="utf-8").split("\n## Per task")[0])
    print(f"wrote {path}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from benchmarks.leaderboard.validate import WorkerDied, validate

    if args.rerun < 0:
        raise ValueError(f"--rerun: {args.rerun} is not a number of runs (0 or more)")
    if args.jobs < 1:
        raise ValueError(f"--jobs: {args.jobs} is not a number of worker processes (1 or more)")
    try:
        report = validate(args.results, rerun=args.rerun, jobs=args.jobs, log=args.log)
    except WorkerDied as err:
        print(f"tune-gym validate: error: {err}", file=sys.stderr)
        return 2
    for problem in report.problems:
        print(f"FAIL {problem}")
    if report.rerun_keys:
        print(f"re-run from their seeds: {'; '.join(report.rerun_keys)}")
    stale = f" ({report.stale} runs of an earlier version of the suite not checked)" if report.stale else ""
    resumed = f" ({report.resumed} of them answered by {args.log})" if report.resumed else ""
    print(f"{args.results}: {report.checked} runs replayed, {report.rerun} re-run from their seeds{resumed}{stale}: "
          + ("every number confirmed" if report.ok else f"{len(report.problems)} problems"))
    return 0 if report.ok else 1


def cmd_results(args: argparse.Namespace) -> int:
    from benchmarks.leaderboard import results as R

    if args.action == "drop":
        text = args.keys.read_text(encoding="utf-8")
        keys = [k.strip() for k in text.splitlines() if k.strip() and not k.lstrip().startswith("#")]
        dropped = R.drop_runs(args.results[0], keys)
        print(f"{R.results_paths(args.results[0])[0]}: {dropped} runs dropped; `tune-gym bench` runs them again")
        return 0
    if args.action == "pack":
        for path in args.results:
            moved = R.pack_results(path)
            print(f"{R.results_paths(path)[0]}: {moved} runs moved from the journal")
            if args.compact:
                merged = R.compact_results(path)
                print(f"{R.results_paths(path)[0]}: {merged} segment{'' if merged == 1 else 's'} merged into it")
        return 0
    runs = R.unpack_results(args.results[0], args.out)
    print(f"{args.out}: {runs} runs")
    return 0


def register(sub: Any) -> None:
    from benchmarks.leaderboard.suite import list_suites

    p = sub.add_parser("bench", help="run a benchmark suite (resumable) and write the leaderboard")
    p.add_argument("--suite", default="quick", help=f"suite name ({', '.join(list_suites())}) or a .toml file")
    p.add_argument("--jobs", type=int, default=1, help="parallel worker processes")
    p.add_argument("--seeds", metavar="N", help="run the first N seeds of the suite (default: all of them)")
    p.add_argument("--agents", help="comma-separated agent ids (default: the suite's)")
    p.add_argument("--out", type=Path, help="results: X.parquet, or its journal X.jsonl "
                                            "(default benchmarks/results/leaderboard/SUITE.parquet)")
    p.add_argument("--ray", metavar="ADDRESS", help="dispatch runs to a Ray cluster ('auto', 'local', ray://...)")
    p.add_argument("--leaderboard", type=Path,
                   help="markdown file to write (default: LEADERBOARD.md for the standard suite, else RESULTS.md)")
    p.add_argument("--no-leaderboard", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--reuse", type=Path, action="append", default=[], metavar="RESULTS",
                   help="take over the runs of these results (another suite's) that are runs of this one "
                        "(same key, same data) instead of running them; repeatable")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("leaderboard", help="write LEADERBOARD.md (table and plots) from a results file")
    p.add_argument("results", type=Path, nargs="?", default=_default_results("standard"))
    p.add_argument("--out", type=Path,
                   help="markdown file (default: LEADERBOARD.md for the standard suite, else RESULTS.md); the "
                        "plots go beside the results, into RESULTS without its suffix, whatever --out is")
    p.set_defaults(fn=cmd_leaderboard)

    p = sub.add_parser("validate", help="replay a results file and confirm every number")
    p.add_argument("results", type=Path)
    p.add_argument("--rerun", type=int, default=3,
                   help="runs re-executed from their seeds, drawn at random with the file's content as seed "
                        "(runs its agent ended early are re-run besides)")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes checking and re-running the runs (the report is the same as with one)")
    p.add_argument("--log", type=Path, metavar="FILE",
                   help="append each re-run's answer to FILE; given again, take the answers it holds for unchanged "
                        "runs re-run on this host with this code (resumes a killed validation)")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("results", help="pack results (their journal into the Parquet file) or unpack them to JSONL")
    rsub = p.add_subparsers(dest="action", required=True)
    q = rsub.add_parser("pack", help="move the runs of the results' journals (X.jsonl) into their packed files "
                                     "(the next segment of X.parquet, X.parquet.d/NNNN.parquet)")
    q.add_argument("results", type=Path, nargs="+")
    q.add_argument("--compact", action="store_true",
                   help="then merge X.parquet and its segments into one new X.parquet (for a release)")
    q.set_defaults(fn=cmd_results)
    q = rsub.add_parser("drop", help="remove runs from the results (the next bench runs them again), e.g. runs "
                                     "recorded on another host that validate cannot confirm here")
    q.add_argument("results", type=Path, nargs=1)
    q.add_argument("keys", type=Path, help="text file: the keys of the runs to drop, one per line")
    q.set_defaults(fn=cmd_results)
    q = rsub.add_parser("unpack", help="write every line of the results, in order, to a new JSON Lines file")
    q.add_argument("results", type=Path, nargs=1)
    q.add_argument("out", type=Path)
    q.set_defaults(fn=cmd_results)
