"""``make demo``: the quick leaderboard suite with every agent on replayed data, then a short
live tuning run of a ResNet-18 conv2d on this CPU compared with PyTorch (timed only on a quiet
host: on a busy one the run goes on without the comparison and says why).

1. ``tune-gym bench --suite quick`` (every registered agent, two exhaustively measured
   ResNet-18 layers, 3 seeds, replay): results in ``runs/demo/quick.parquet``, the leaderboard
   in ``runs/demo/LEADERBOARD.md`` (printed), plots beside the results.
2. A live run of AutoTVM's method (``xgb-sa``) on ``resnet18:1``: records in
   ``runs/demo/records.jsonl``, ``runs/demo/best_so_far.png`` and a MetaSchedule database of
   the best config in ``runs/demo/database``.

Both resume: running it again measures and runs nothing twice (``--fresh`` starts over).
``--live-only`` skips the suite; ``--trials 256`` tunes longer.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from agents.driver import print_summary, tune
from tune_gym.measure.quiet import BusyHostError
from tune_gym.tasks import Task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="resnet18:1",
                        help="live task: suite task id or URI (default: ResNet-18 3x3 conv, 64 ch, 56x56)")
    parser.add_argument("--agent", default="xgb-sa", help="live agent id (AutoTVM's XGBoost + SA by default)")
    parser.add_argument("--trials", type=int, default=64, help="live trials")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the suite")
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--live-only", action="store_true", help="only the live tuning run")
    parser.add_argument("--fresh", action="store_true", help="start over instead of resuming")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.fresh and out.exists():
        shutil.rmtree(out)

    if not args.live_only:
        from benchmarks.leaderboard.report import write_leaderboard
        from benchmarks.leaderboard.runner import run_suite
        from benchmarks.leaderboard.suite import load_suite

        suite = load_suite("quick")
        print(f"== quick suite: {len(suite.agents)} agents x {len(suite.tasks)} tasks x {suite.seeds} seeds on "
              f"replayed measurements ({args.jobs} processes)", flush=True)
        start = time.perf_counter()
        run_suite(suite, out / "quick.parquet", jobs=args.jobs)
        board = write_leaderboard(out / "quick.parquet", out / "LEADERBOARD.md", command="make demo")
        text = board.read_text(encoding="utf-8")
        table = [ln for ln in text.splitlines() if ln.startswith("|")]
        print("\n".join(table[: 2 + len(suite.agents)]))
        print(f"({time.perf_counter() - start:.0f} s; full leaderboard with per-task results and plots: {board})\n")

    task = Task.parse(args.task)
    print(f"== live: tuning {task.uri}\n  {task.flops / 1e9:.3f} GFLOP per call; agent {args.agent}; "
          f"{args.trials} trials in batches of {args.batch}; target {task.target.resolved()}", flush=True)
    kwargs = dict(agent=args.agent, trials=args.trials, batch=args.batch, log=out / "records.jsonl", resume=True,
                  plot=out / "best_so_far.png", export=out / "database")
    try:
        summary = tune(task, **kwargs)  # type: ignore[arg-type]
    except BusyHostError as err:  # PyTorch cannot be timed on a busy host; the tuning itself still means something
        print(f"  no PyTorch reference: {err}\n  tuning without one (rewards are raw GFLOPS)", flush=True)
        summary = tune(task, reward_norm="none", **kwargs)  # type: ignore[arg-type]
    print_summary(summary)


if __name__ == "__main__":
    main()
