"""The agent commands of ``tune-gym``: ``agents`` and ``tune``.

Registered with the core command through the ``tune_gym.cli`` entry-point group
(pyproject.toml), so ``tune_gym`` itself never imports ``agents``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register"]


def cmd_agents(args: argparse.Namespace) -> int:
    from agents.base import list_agents, unavailable_agents

    for agent_id, description in list_agents().items():
        print(f"  {agent_id:<18} {description}")
    for agent_id, why in unavailable_agents().items():
        print(f"  {agent_id:<18} unavailable: {why}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from agents.driver import print_summary, tune
    from tune_gym.cli import parse_options, parse_task

    backend_options = parse_options(args.backend_option)
    if args.adaptive:
        backend_options.setdefault("adaptive", {})
    summary = tune(
        parse_task(args.task), agent=args.agent, agent_options=parse_options(args.option), trials=args.trials,
        batch=args.batch, log=args.log, resume=args.resume, seed=args.seed, preset=args.preset,
        plot=args.plot, export=args.export, progress=not args.quiet, backend_options=backend_options,
    )
    print_summary(summary)
    return 0


def register(sub: Any) -> None:
    """Add ``agents`` and ``tune`` to the ``tune-gym`` subcommands ``sub``."""
    p = sub.add_parser("agents", help="list search agents")
    p.set_defaults(fn=cmd_agents)

    p = sub.add_parser("tune", help="tune one task live on this machine with an agent")
    p.add_argument("task")
    p.add_argument("--trials", type=int, default=64, help="budget of unique measured configs")
    p.add_argument("--batch", type=int, default=8, help="configs per step (an agent's own plan size still holds)")
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
