"""Measure every config of a task's compact space (or a seeded random sample of a large space) live.

Usage:
    python scripts/collect_dataset.py TASK [TASK ...] --preset compact --out FILE [--limit N]

Writes tuning records (JSONL) that the replay backend serves, each with the PyTorch reference
of its task (measured once, in a separate process). Resumable: the measurements go through a
:class:`tune_gym.session.TuningSession` resumed from FILE, so configs already in FILE are never
measured again and a killed collection continues where it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tune_gym.measure.live import LiveBackend
from tune_gym.measure.reference import measure_reference
from tune_gym.records import host_id, recorded_reference
from tune_gym.session import TuningSession
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="+", help="suite task ids or URIs")
    parser.add_argument("--preset", default="compact", choices=["full", "compact"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, help="measure a seeded random sample of this many configs per task")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    with LiveBackend(repeat=args.repeat) as backend:
        for text in args.tasks:
            task = Task.parse(text)
            space = KnobSpace.for_task(task, args.preset)
            if args.limit and args.limit < space.size:
                configs = space.sample_unique(np.random.default_rng(args.seed), args.limit)
            else:
                configs = list(space)
            with TuningSession(task, space, backend, log=args.out, resume=True) as session:
                session.reference = (recorded_reference(session.resumed, task, host=host_id())
                                     or measure_reference(task))
                todo = [c for c in configs if c not in session.measured]
                print(f"{task.uri}: {space.size} configs, {len(configs)} selected, {len(todo)} to measure "
                      f"(PyTorch {session.reference.gflops:.2f} GFLOPS)", flush=True)
                start = time.perf_counter()
                for i in range(0, len(todo), args.batch):
                    ev = session.evaluate(todo[i : i + args.batch])
                    best = max((t.gflops for t in ev.new), default=0.0)
                    print(f"  {i + len(ev.new)}/{len(todo)}  batch best {best:.2f} GFLOPS  "
                          f"{time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
