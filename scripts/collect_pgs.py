"""One-Shot Tuner's training data: sampled tasks (PGS), each measured along a search trajectory (EBS).

Draws ``--tasks`` conv tasks from the model-zoo prior (:mod:`tune_gym.datasets.pgs`; ``--sampler
uniform`` for the random-task ablation, ``zoo`` for zoo layers by frequency), writes their list to
``<out-dir>/tasks.txt``, then collects one dataset per task into ``<out-dir>`` with
:func:`tune_gym.datasets.collect.collect`: ``--plan explore:N`` is exploration-based sampling
(the configs an ``xgb-sa`` search measures, starting from ``--explore-option`` settings), and
``--plan random:N`` the random-code ablation.

Resumable: the task list is a function of the sampler and seed (checked against ``tasks.txt``), a
finished task is skipped, and a killed one resumes from its journal. A task that fails as a whole
(e.g. its reference cannot be measured) is logged in ``<out-dir>/failures.jsonl`` and the run goes
on. The datasets live outside the default catalog (``benchmarks/datasets`` itself), so they feed
the models that ask for them (``scripts/train_oneshot.py``) and nothing else.

Usage:
    python scripts/collect_pgs.py --tasks 200 --plan explore:64 --out-dir benchmarks/datasets/pgs
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import traceback
from pathlib import Path

import numpy as np


def sample_tasks(sampler: str, n: int, seed: int, target: str, max_gflop: float | None = None) -> list[str]:
    """The first ``n`` tasks the sampler draws with ``seed``; with ``max_gflop``, the first ``n`` of
    at most that many GFLOP (the draw is sequential, so a longer list extends a shorter one)."""
    from tune_gym.datasets.pgs import TaskPrior, uniform_tasks

    rng = np.random.default_rng(seed)
    draw = n if max_gflop is None else 50 * n
    if sampler == "uniform":
        tasks = uniform_tasks(TaskPrior.from_zoo().rows, draw, rng, target)
    else:
        tasks = TaskPrior.from_zoo(parents="chain" if sampler == "zoo" else None).sample(draw, rng, target)
    if max_gflop is not None:
        tasks = [t for t in tasks if t.flops <= max_gflop * 1e9]
        if len(tasks) < n:
            raise SystemExit(f"only {len(tasks)} of {draw} drawn tasks have at most {max_gflop} GFLOP; "
                             f"{n} were asked for")
    return [t.uri for t in tasks[:n]]


def main(argv: list[str] | None = None) -> int:
    from tune_gym.space import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200, help="number of sampled tasks")
    parser.add_argument("--sampler", default="pgs", choices=["pgs", "uniform", "zoo"])
    parser.add_argument("--seed", type=int, default=0, help="seed of the task draw and of each collection")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--max-gflop", type=float,
                        help="skip drawn tasks of more GFLOP (keeps a uniform draw's collection time bounded)")
    parser.add_argument("--preset", default="full", choices=PRESETS)
    parser.add_argument("--plan", action="append", default=None, metavar="MODE",
                        help="collection plan per task (default explore:64); repeat to run several in order")
    parser.add_argument("--explore-agent", default="xgb-sa")
    parser.add_argument("--explore-option", action="append", default=None, metavar="KEY=VALUE",
                        help="exploration agent option (default plan_size=16)")
    parser.add_argument("--batch", type=int, default=16, help="configs per backend call")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/datasets/pgs"))
    parser.add_argument("--first", type=int, default=0, help="start at this task index")
    parser.add_argument("--limit", type=int, help="collect at most this many tasks in this run")
    parser.add_argument("--note", help="a remark kept with each collection step")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    plans_text = args.plan or ["explore:64"]
    options = args.explore_option or ["plan_size=16"]

    from agents.base import make_agent
    from agents.cli import dataset_name
    from tune_gym.cli import parse_options
    from tune_gym.datasets.collect import collect, parse_plan
    from tune_gym.measure.live import LiveBackend
    from tune_gym.tasks.task import Task

    args.out_dir.mkdir(parents=True, exist_ok=True)
    uris = sample_tasks(args.sampler, args.tasks, args.seed, args.target, args.max_gflop)
    listing = args.out_dir / "tasks.txt"
    if listing.exists():
        old = [line for line in listing.read_text().splitlines() if line and not line.startswith("#")]
        if old[: len(uris)] != uris[: len(old)]:
            raise SystemExit(f"{listing} lists other tasks than --sampler {args.sampler} --seed {args.seed} draws; "
                             "use another --out-dir")
    if not listing.exists() or len(uris) > len(old):
        cap = f" --max-gflop {args.max_gflop:g}" if args.max_gflop is not None else ""
        listing.write_text(f"# python scripts/collect_pgs.py --sampler {args.sampler} --seed {args.seed} "
                           f"--tasks {args.tasks} --target {args.target}{cap}\n" + "\n".join(uris) + "\n")
    plans = [parse_plan(text, seed=args.seed, agent=args.explore_agent) for text in plans_text]
    explorer = lambda plan: make_agent(plan.agent, **parse_options(options))
    command = shlex.join(["python", "scripts/collect_pgs.py", *(argv if argv is not None else sys.argv[1:])])
    todo = uris[args.first: None if args.limit is None else args.first + args.limit]
    started = time.time()
    with LiveBackend(repeat=3) as backend:
        for i, uri in enumerate(todo, start=args.first):
            out = args.out_dir / dataset_name(uri, args.preset)
            t0 = time.time()
            try:
                ds = collect(Task.parse(uri), args.preset, out, plans, backend=backend, explorer=explorer,
                             batch=args.batch, save_every=240, progress=not args.quiet, command=command,
                             note=args.note)
            except Exception as err:  # a task that cannot be collected is logged; the others go on
                with open(args.out_dir / "failures.jsonl", "a") as f:
                    f.write(json.dumps({"task": uri, "error": f"{type(err).__name__}: {err}",
                                        "traceback": traceback.format_exc(limit=5), "time": time.time()}) + "\n")
                print(f"[{i}] {uri}: FAILED {type(err).__name__}: {err}", flush=True)
                continue
            s = ds.summary()
            print(f"[{i}] {out.name}: {s['rows']} rows ({s['ok']} ran), best {s['best_gflops']:.2f} GFLOPS, "
                  f"{time.time() - t0:.0f} s; {(time.time() - started) / 3600:.2f} h so far", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
