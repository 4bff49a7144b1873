"""The agent commands of ``tune-gym``: ``agents``, ``tune``, ``collect`` and ``network``.

Registered with the core command through the ``tune_gym.cli`` entry-point group
(pyproject.toml), so ``tune_gym`` itself never imports ``agents``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tune_gym.measure import Backend

__all__ = ["register"]


def cmd_agents(args: argparse.Namespace) -> int:
    from agents.base import list_agents, options_of, unavailable_agents
    from tune_gym.options import table_lines

    if args.agent:
        rows = options_of(args.agent)
        print(f"{args.agent}: {len(rows)} option{'s' if len(rows) != 1 else ''} (-o KEY=VALUE)")
        print("\n".join(table_lines(rows)))
        return 0
    for agent_id, description in list_agents().items():
        print(f"  {agent_id:<18} {description}")
    for agent_id, why in unavailable_agents().items():
        print(f"  {agent_id:<18} unavailable: {why}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from agents.driver import print_summary, tune
    from tune_gym.cli import parse_options, parse_task
    from tune_gym.errors import TuneGymError

    for flag, given in (("--resume", args.resume), ("--export", args.export)):
        if given and args.log is None:
            raise TuneGymError(f"{flag} works on the records of --log FILE; give --log")
    backend_options = parse_options(args.backend_option)
    if args.adaptive:
        backend_options.setdefault("adaptive", {})
    summary = tune(
        parse_task(args.task), agent=args.agent, agent_options=parse_options(args.option), trials=args.trials,
        batch=args.batch, log=args.log, resume=args.resume, seed=args.seed, preset=args.preset,
        plot=args.plot, export=args.export, progress=not args.quiet, backend=args.backend,
        backend_options=backend_options, reward_norm=args.reward_norm,
        allow_suspect_reference=args.allow_suspect_reference,
    )
    print_summary(summary)
    return 0


def _reward_norm(text: str) -> str | float:
    """``--reward-norm``: ``torch``, ``none`` or a number of GFLOPS."""
    if text in ("torch", "none"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not torch, none or a number of GFLOPS") from None


def cmd_network(args: argparse.Namespace) -> int:
    import json

    from agents.network import network_report, print_network_report, tune_network
    from tune_gym.cli import parse_options
    from tune_gym.networks import import_network

    net = import_network(args.model, args.target, seed=args.seed, weights=args.weights, layout=args.layout)
    if args.kernels:
        print_kernels(net)
        return 0
    if args.out is None:
        raise ValueError("give --out DIR (where the records, database and summary go), or --kernels")
    result = tune_network(net, agent=args.agent, trials=args.trials, batch=args.batch, scheduler=args.scheduler,
                          agent_options=parse_options(args.option), out_dir=args.out, resume=args.resume,
                          seed=args.seed, backend=args.backend, backend_options=parse_options(args.backend_option),
                          preset=args.preset, progress=not args.quiet, shared_model=args.shared_model,
                          transfer=args.transfer, confirm=args.confirm)
    threads = int(net.target.resolved().get("num-cores", 1))
    compare = tuple(c for c in args.compare.split(",") if c)
    report = network_report(result, threads, compare, timing_repeats=args.timing_repeats)
    print_network_report(report)
    path = args.out / "summary.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"summary   {path}")
    return 0


def print_kernels(net: Any) -> None:
    """The network's kernels: weight, GFLOP, space size, anchor op task and its suite id."""
    from tune_gym.networks import suite_mapping
    from tune_gym.space import KnobSpace
    from tune_gym.tasks.suites import suite_names

    ids: dict[str, str] = {}
    if net.name in suite_names():
        rows = suite_mapping(net)
        ids = {r["anchor"]: f"{net.name}:{r['suite_index']}" for r in rows if r["suite_index"] is not None}
    print(f"{net.name}: {len(net.tasks)} kernels, target {net.target}")
    print(f"{'x':>2} {'GFLOP':>8} {'space':>9}  {'suite':<16} kernel")
    for t in net.tasks:
        size = KnobSpace.for_task(t.task).size
        suite = ids.get(t.anchor.uri, "-") if t.anchor is not None else "-"
        print(f"{t.weight:>2} {t.task.flops / 1e9:>8.4f} {size:>9.3g}  {suite:<16} {t.task.uri}")


def dataset_name(text: str, preset: str) -> str:
    """A dataset file name for a task id or URI: ``resnet18:1`` -> ``resnet18_1_full.parquet``."""
    import hashlib
    import re

    if "://" in text:
        from tune_gym import kinds
        from tune_gym.tasks import PrimFuncTask, Task

        task = Task.parse(text)
        kind = kinds.get_kind(task.target.kind)
        if kind is not None and kind.dataset_slug is not None:  # the kind names its own files
            slug = str(kinds.load(kind.dataset_slug)(task))
        elif isinstance(task, PrimFuncTask):  # a network's kernel (op "prim_func"): named by its content digest
            slug = f"tir_{task.digest}"
        else:
            slug = f"{task.op}_{hashlib.sha256(task.uri.encode()).hexdigest()[:8]}"
    else:
        slug = re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")
    return f"{slug}_{preset}.parquet"


def _out_dir(given: Path | None, task: Any) -> Path:
    """``--out-dir``, or ``benchmarks/datasets`` (``/<subdir>`` for a registered kind with a data subfolder)."""
    from tune_gym import kinds

    if given is not None:
        return given
    kind = kinds.get_kind(task.target.kind)
    base = Path("benchmarks/datasets")
    return base / kind.data_subdir if kind is not None and kind.data_subdir else base


def _kind_backends_help() -> str:
    """``; <id>: <help>`` for each registered kind's backend."""
    from tune_gym import kinds

    found = (kinds.get_kind(name) for name in kinds.kind_names())
    return "".join(f"; {b}: {entry.help}" for kind in found if kind is not None for b, entry in kind.backends.items())


def cmd_collect(args: argparse.Namespace) -> int:
    import contextlib
    import shlex
    import sys

    from agents.base import make_agent
    from tune_gym.cli import parse_options, parse_task
    from tune_gym.datasets.collect import collect, parse_plan

    plans = [parse_plan(text, seed=args.seed, agent=args.explore_agent) for text in args.plan]
    if args.out and len(args.tasks) > 1:
        raise ValueError("--out names one dataset file; give one task, or use --out-dir")
    explorer = lambda plan: make_agent(plan.agent, **parse_options(args.explore_option))
    command = shlex.join(["tune-gym", *sys.argv[1:]]) if sys.argv[1:2] == ["collect"] else None
    backend: Backend
    if args.backend == "live":
        from tune_gym.measure.live import LiveBackend

        backend = LiveBackend(**{"repeat": args.repeat, "build_workers": args.build_workers,
                                 **parse_options(args.backend_option)})
    else:  # a registered kind's backend (a simulator, recorded data): no builds here
        from tune_gym.measure import make_backend

        backend = make_backend(args.backend, **parse_options(args.backend_option))
    with contextlib.closing(backend):
        for text in args.tasks:
            task = parse_task(text)
            out = args.out or _out_dir(args.out_dir, task) / dataset_name(text, args.preset)
            ds = collect(task, args.preset, out, plans, backend=backend, explorer=explorer, batch=args.batch,
                         save_every=args.save_every, progress=not args.quiet, command=command,
                         measure=not args.save_only, note=args.note)
            s = ds.summary()
            ref = "simulated peak" if backend.simulated else "PyTorch"
            print(f"{out}: {s['rows']} rows ({s['ok']} ran) of {task.uri}, best {s['best_gflops']:.2f} GFLOPS, "
                  f"{ref} {s['reference_gflops']} GFLOPS")
    return 0


def register(sub: Any) -> None:
    """Add ``agents``, ``tune``, ``collect`` and ``network`` to the ``tune-gym`` subcommands ``sub``."""
    from tune_gym import kinds
    from tune_gym.measure import BACKENDS
    from tune_gym.space import PRESETS

    kind_backends = _kind_backends_help()

    p = sub.add_parser("agents", help="list search agents, or one agent's options")
    p.add_argument("agent", nargs="?", help="print this agent's options: default, allowed values, meaning")
    p.set_defaults(fn=cmd_agents)

    p = sub.add_parser("tune", help="tune one task live on this machine with an agent",
                       epilog="`tune-gym agents ID` lists an agent's options (-o), `tune-gym backends ID` a "
                              "backend's (-b).")
    p.add_argument("task")
    p.add_argument("--trials", type=int, default=64, help="budget of unique measured configs")
    p.add_argument("--batch", type=int, default=8, help="configs per step (an agent's own plan size still holds)")
    p.add_argument("--log", type=Path, help="JSONL record file (appended)")
    p.add_argument("--resume", action="store_true", help="skip configs already in --log")
    p.add_argument("--agent", default="random", help="agent id (see `tune-gym agents`)")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="agent option (`tune-gym agents ID` lists them)")
    p.add_argument("--backend", default="live", choices=BACKENDS,
                   help="what measures: live (this machine, the default), replay / surrogate (a dataset), "
                        "rpc (devices of a TVM RPC tracker: -b tracker=HOST:PORT -b key=KEY)" + kind_backends)
    p.add_argument("--backend-option", "-b", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option (`tune-gym backends ID` lists them; live and rpc: LiveConfig fields "
                        "such as repeat, number, min_repeat_ms; rpc: tracker, key, devices)")
    p.add_argument("--adaptive", action="store_true",
                   help="AdaTune's adaptive evaluator (micro-batches of 50 runs, stop at CV < 0.1, at most 500 runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default="full", choices=PRESETS)
    p.add_argument("--plot", type=Path, help="write a best-so-far plot (PNG)")
    p.add_argument("--export", type=Path, help="export the best config as a MetaSchedule database here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--reward-norm", type=_reward_norm, default="torch", metavar="torch|none|GFLOPS",
                   help="what rewards are normalized by: PyTorch on the same op (default; recorded with the data, "
                        "else measured here, which a busy host refuses), none (raw GFLOPS) or a number")
    p.add_argument("--allow-suspect-reference", action="store_true",
                   help="normalize rewards by a recorded PyTorch reference that the reference audit marks suspect")
    p.set_defaults(fn=cmd_tune)

    p = sub.add_parser("network", help="tune every kernel of a network, compile it, time it end to end")
    p.add_argument("model", help="a model of tune_gym.networks.models (resnet18, mobilenet_v2, ..., tiny)")
    p.add_argument("--agent", default="xgb-sa", help="agent id, one instance per kernel (see `tune-gym agents`)")
    p.add_argument("--trials", type=int, default=512, help="budget of unique trials over all kernels")
    p.add_argument("--batch", type=int, default=8, help="configs per step of one kernel")
    p.add_argument("--scheduler", default="gradient", choices=["gradient", "round-robin"])
    p.add_argument("--target", default="llvm", help="target as in a task URI (llvm, llvm&cores=1)")
    p.add_argument("--out", type=Path, help="run directory: records/, database/, summary.json")
    p.add_argument("--weights", default="given", choices=["given", "packed"],
                   help="given: kernels read the weights as passed; packed: re-laid out per schedule, pre-packed "
                        "at compile time (llvm)")
    p.add_argument("--layout", default="NCHW",
                   help="convolutions' data layout: NCHW (PyTorch's), or NCHW<n>c blocked by n channels (llvm)")
    p.add_argument("--kernels", action="store_true",
                   help="list the network's kernels (weights, space sizes, suite tasks) and stop")
    p.add_argument("--resume", action="store_true", help="load the records in --out first")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE", help="agent option")
    p.add_argument("--shared-model", action="store_true",
                   help="the kernels' agents train on every kernel's measurements, not only their own (meta-bo)")
    p.add_argument("--transfer", type=int, default=0, metavar="K",
                   help="configs per batch carried from kernels with the same knobs: their best configs, "
                        "mapped (agents.transfer); 0: none")
    p.add_argument("--confirm", type=int, default=0, metavar="K",
                   help="after the budget, measure each kernel's K fastest configs again, together, and keep the "
                        "fastest of that (against lucky timings on a drifting host); extra measurements, not trials")
    p.add_argument("--backend", default="live", choices=BACKENDS)
    p.add_argument("--backend-option", "-b", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option (live: a LiveConfig field, e.g. -b flush_cache=true)")
    p.add_argument("--preset", default="full", choices=PRESETS)
    p.add_argument("--seed", type=int, default=0, help="model weights, inputs and agents (kernel i: seed + i)")
    p.add_argument("--compare", default="torch,default",
                   help="comma-separated baselines timed end to end: torch, default, metaschedule (slow: "
                        "MetaSchedule's tune_relax at the same budget); empty: none")
    p.add_argument("--timing-repeats", type=int, default=7)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_network)

    p = sub.add_parser("collect", help="measure a dataset live (resumable; see tune_gym.datasets.collect)")
    p.add_argument("tasks", nargs="+", help="suite task ids or URIs")
    p.add_argument("--preset", default="compact", choices=PRESETS)
    p.add_argument("--plan", action="append", required=True, metavar="MODE",
                   help="exhaustive | random:N | explore:N; repeat to run several in order")
    p.add_argument("--out", type=Path, help="dataset file (one task)")
    p.add_argument("--out-dir", type=Path,
                   help="directory of dataset files named after the task (default benchmarks/datasets, or its "
                        "subfolder of the task's target kind where the kind has one)")
    p.add_argument("--seed", type=int, default=0, help="seed of random draws and of the exploration agent")
    p.add_argument("--explore-agent", default="xgb-sa", help="agent that chooses exploration configs")
    p.add_argument("--explore-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--backend", default="live", choices=["live", *kinds.backend_ids()],
                   help="what measures: live (this machine)" + kind_backends)
    p.add_argument("--backend-option", "-b", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option (live: a LiveConfig field; a kind's backend: see --backend)")
    p.add_argument("--repeat", type=int, default=3, help="timed repeats per config")
    p.add_argument("--build-workers", type=int, help="parallel build processes (default: the host's cores)")
    p.add_argument("--batch", type=int, default=32, help="configs per backend call")
    p.add_argument("--save-every", type=float, default=300.0, help="seconds between dataset rewrites")
    p.add_argument("--save-only", action="store_true",
                   help="measure nothing: rewrite the dataset from its journal (after killing a collection)")
    p.add_argument("--note", help="a remark kept with this collection step (e.g. what else ran on the host)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_collect)
