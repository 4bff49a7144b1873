"""The ``tune-gym`` command.

    tune-gym tasks [--suite NAME] [--sizes] [--preset full|compact]
    tune-gym space TASK [--preset full|compact]
    tune-gym agents
    tune-gym tune TASK --trials N --batch B --log FILE [--resume] [--agent ID] [-o KEY=VALUE]
                  [-b KEY=VALUE] [--adaptive] [--seed S]
    tune-gym best LOG [--export DIR]

TASK is a suite task id (``resnet18:1``, ``resnet18:1@cuda``) or a task URI
(``op://dense-v1/m128_n768_k768?target=llvm``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tune_gym.errors import TuneGymError

__all__ = ["main"]


def _task(text: str) -> Any:
    from tune_gym.tasks import Task

    return Task.parse(text)


def cmd_tasks(args: argparse.Namespace) -> int:
    from tune_gym.tasks.suites import SUITES, get_suite

    names = [args.suite] if args.suite else list(SUITES)
    for name in names:
        suite = get_suite(name)
        print(f"{name}: {suite.description} ({len(suite)} tasks)")
        for i, st in enumerate(suite.tasks):
            size = ""
            if args.sizes:
                from tune_gym.space import KnobSpace

                size = f"  space {KnobSpace.for_task(st.task, args.preset).size:.3g}"
            print(f"  {name}:{i:<3} x{st.weight:<3} {st.task.flops / 1e9:7.3f} GFLOP  {st.task.uri}{size}")
    return 0


def cmd_space(args: argparse.Namespace) -> int:
    from tune_gym.space import KnobSpace

    space = KnobSpace.for_task(_task(args.task), args.preset)
    print(f"{space.task.uri}  preset={space.preset}  sketches={space.n_sketches}  size={space.size}")
    for knob in space.knobs:
        preview = ", ".join(str(c) for c in knob.choices[:4]) + (", ..." if len(knob) > 4 else "")
        print(f"  {knob.name:<28} {knob.kind:<11} {len(knob):>6} choices  [{preview}]")
    return 0


def cmd_agents(args: argparse.Namespace) -> int:
    from agents.base import _UNAVAILABLE, list_agents

    for agent_id, description in list_agents().items():
        print(f"  {agent_id:<18} {description}")
    for agent_id, why in _UNAVAILABLE.items():
        print(f"  {agent_id:<18} unavailable: {why}")
    return 0


def _parse_options(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise TuneGymError(f"option {pair!r} must be KEY=VALUE")
        try:
            out[key.replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            out[key.replace("-", "_")] = value
    return out


def cmd_tune(args: argparse.Namespace) -> int:
    from tune_gym.tuning import print_summary, tune

    backend_options = _parse_options(args.backend_option)
    if args.adaptive:
        backend_options.setdefault("adaptive", {})
    summary = tune(
        _task(args.task), agent=args.agent, agent_options=_parse_options(args.option), trials=args.trials,
        batch=args.batch, log=args.log, resume=args.resume, seed=args.seed, preset=args.preset,
        plot=args.plot, export=args.export, progress=not args.quiet, backend_options=backend_options,
    )
    print_summary(summary)
    return 0


def cmd_best(args: argparse.Namespace) -> int:
    from tune_gym.records import best_records, export_database, load_records

    records = load_records(args.log)
    if not records:
        raise TuneGymError(f"{args.log}: no records")
    counts: dict[str, int] = {}
    for rec in records:
        counts[rec.task] = counts.get(rec.task, 0) + 1
    for uri, rec in best_records(records).items():
        print(f"{uri}\n  {rec.result.gflops:.2f} GFLOPS  ({counts[uri]} records, preset {rec.preset})")
        print(f"  config {list(rec.config)}  {json.dumps(rec.knobs)}")
    if args.export:
        path = export_database(records, args.export)
        print(f"exported the best config of each task as a MetaSchedule database: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tune-gym", description="Tensor-program auto-tuning as Gymnasium envs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tasks", help="list suites and their tasks")
    p.add_argument("--suite", help="only this suite")
    p.add_argument("--sizes", action="store_true", help="also build each knob space and print its size")
    p.add_argument("--preset", default="full", choices=["full", "compact"])
    p.set_defaults(fn=cmd_tasks)

    p = sub.add_parser("space", help="show a task's knobs and their choice counts")
    p.add_argument("task")
    p.add_argument("--preset", default="full", choices=["full", "compact"])
    p.set_defaults(fn=cmd_space)

    p = sub.add_parser("agents", help="list search agents")
    p.set_defaults(fn=cmd_agents)

    p = sub.add_parser("tune", help="tune one task live on this machine")
    p.add_argument("task")
    p.add_argument("--trials", type=int, default=64, help="budget of unique measured configs")
    p.add_argument("--batch", type=int, default=8, help="configs per step")
    p.add_argument("--log", type=Path, help="JSONL record file (appended)")
    p.add_argument("--resume", action="store_true", help="skip configs already in --log")
    p.add_argument("--agent", default="random", help="agent id (see `tune-gym agents`)")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE", help="agent option")
    p.add_argument("--backend-option", "-b", action="append", default=[], metavar="KEY=VALUE",
                   help="live backend option (LiveConfig field: repeat, number, min_repeat_ms, flush_cache, ...)")
    p.add_argument("--adaptive", action="store_true",
                   help="AdaTune's adaptive evaluator (micro-batches of 50 runs, stop at CV < 0.1, at most 500 runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default="full", choices=["full", "compact"])
    p.add_argument("--plot", type=Path, help="write a best-so-far plot (PNG)")
    p.add_argument("--export", type=Path, help="export the best config as a MetaSchedule database here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_tune)

    p = sub.add_parser("best", help="best config of each task in a record file")
    p.add_argument("log", type=Path)
    p.add_argument("--export", type=Path, help="write a MetaSchedule JSON database of the best configs")
    p.set_defaults(fn=cmd_best)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (TuneGymError, ValueError, FileNotFoundError) as err:
        print(f"tune-gym {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
