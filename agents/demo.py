"""``make demo``: tune a ResNet-18 conv2d live on this CPU with AutoTVM's method (``xgb-sa``,
256 trials) and compare the tuned kernel with PyTorch on the same op.

Writes ``runs/demo/records.jsonl`` (tuning records), ``runs/demo/best_so_far.png`` and a
MetaSchedule database of the best config in ``runs/demo/database``. Re-running resumes from
the records: configs measured before are not measured again.
"""

from __future__ import annotations

import argparse

from agents.driver import print_summary, tune
from tune_gym.tasks import Task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="resnet18:1",
                        help="suite task id or URI (default: ResNet-18 3x3 conv, 64 ch, 56x56)")
    parser.add_argument("--agent", default="xgb-sa", help="agent id (AutoTVM's XGBoost + SA by default)")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--fresh", action="store_true", help="start a new record file instead of resuming")
    args = parser.parse_args(argv)
    task = Task.parse(args.task)
    log = f"{args.out}/records.jsonl"
    if args.fresh:
        import pathlib

        pathlib.Path(log).unlink(missing_ok=True)
    print(f"tuning {task.uri}\n  {task.flops / 1e9:.3f} GFLOP per call; agent {args.agent}; "
          f"{args.trials} trials in batches of {args.batch}; target {task.target.resolved()}")
    summary = tune(task, agent=args.agent, trials=args.trials, batch=args.batch, log=log, resume=True,
                   plot=f"{args.out}/best_so_far.png", export=f"{args.out}/database")
    print_summary(summary)


if __name__ == "__main__":
    main()
