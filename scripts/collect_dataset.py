"""Measure every config of a task's compact space (or a random sample of a large space) live.

Usage:
    python scripts/collect_dataset.py TASK [TASK ...] --preset compact --out FILE [--limit N]

Writes tuning records (JSONL) that the replay backend serves. Resumable: configs already in
FILE are skipped, so a killed collection continues where it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tune_gym.measure.live import LiveBackend
from tune_gym.records import Record, RecordWriter, load_records
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

    done = {(r.task, r.preset, r.config) for r in load_records(args.out)}
    with LiveBackend(repeat=args.repeat) as backend, RecordWriter(args.out) as writer:
        for text in args.tasks:
            task = Task.parse(text)
            space = KnobSpace.for_task(task, args.preset)
            if args.limit and args.limit < space.size:
                configs = space.sample_unique(np.random.default_rng(args.seed), args.limit)
            else:
                configs = list(space)
            todo = [c for c in configs if (task.uri, args.preset, c) not in done]
            print(f"{task.uri}: {space.size} configs, {len(configs)} selected, {len(todo)} to measure", flush=True)
            start = time.perf_counter()
            for i in range(0, len(todo), args.batch):
                batch = todo[i : i + args.batch]
                results = backend.measure(task, space, batch)
                writer.append([Record.create(space, c, r, backend.name) for c, r in zip(batch, results)])
                best = max((r.gflops for r in results), default=0.0)
                print(f"  {i + len(batch)}/{len(todo)}  batch best {best:.2f} GFLOPS  "
                      f"{time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
