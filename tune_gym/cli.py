"""The ``tune-gym`` command.

    tune-gym tasks [--suite NAME] [--sizes] [--preset full|compact]
    tune-gym space TASK [--preset full|compact]
    tune-gym best LOG [--export DIR]
    tune-gym agents                                             (from the agents package)
    tune-gym tune TASK --trials N --batch B --log FILE [--resume] [--agent ID] [-o KEY=VALUE]
                  [-b KEY=VALUE] [--adaptive] [--seed S]        (from the agents package)

TASK is a suite task id (``resnet18:1``, ``resnet18:1@cuda``) or a task URI
(``op://dense-v1/m128_n768_k768?target=llvm``).

``tune_gym`` knows nothing of agents: packages add subcommands through the entry-point group
``tune_gym.cli``, each entry a function ``register(subparsers)`` that adds its commands
(``agents.cli:register`` adds ``agents`` and ``tune``; see pyproject.toml).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from tune_gym.errors import TuneGymError

__all__ = ["build_parser", "main", "parse_options", "parse_task"]


def parse_task(text: str) -> Any:
    """A :class:`Task` from a suite task id or a URI."""
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

    space = KnobSpace.for_task(parse_task(args.task), args.preset)
    print(f"{space.task.uri}  preset={space.preset}  sketches={space.n_sketches}  size={space.size}")
    for knob in space.knobs:
        preview = ", ".join(str(c) for c in knob.choices[:4]) + (", ..." if len(knob) > 4 else "")
        print(f"  {knob.name:<28} {knob.kind:<11} {len(knob):>6} choices  [{preview}]")
    return 0


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["a=1", "b-c=x"]`` -> ``{"a": 1, "b_c": "x"}`` (values parsed as JSON when they are)."""
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

    p = sub.add_parser("best", help="best config of each task in a record file")
    p.add_argument("log", type=Path)
    p.add_argument("--export", type=Path, help="write a MetaSchedule JSON database of the best configs")
    p.set_defaults(fn=cmd_best)
    for entry in entry_points(group="tune_gym.cli"):
        entry.load()(sub)
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
