"""Write the knob-space descriptions of the committed datasets (``benchmarks/datasets/spaces/``).

Usage:
    python scripts/describe_spaces.py [--check]

For every dataset of the catalog's repository directory (:func:`tune_gym.datasets.catalog.catalog`)
whose space is a MetaSchedule space, build the space with TVM and, when its fingerprint is the
one the dataset was recorded under, write its description as ``<fingerprint>.json``
(:mod:`tune_gym.datasets.spaces`), so that replay with ``spaces="recorded"`` needs no TVM. A
dataset whose space changed since it was collected is reported and skipped. ``--check`` writes
nothing and fails when a description is missing, differs, or names no committed dataset.
"""

from __future__ import annotations

import argparse
import json
import sys

from tune_gym import kinds
from tune_gym.datasets.catalog import catalog, repo_datasets
from tune_gym.datasets.dataset import space_fingerprint
from tune_gym.datasets.spaces import repo_spaces, write_space
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    problems, wanted = [], set()
    spaces = repo_spaces()
    for entry in catalog([repo_datasets()]):
        task = Task.from_uri(entry.task)
        if kinds.get_kind(task.target.kind) is not None:
            continue  # a registered kind's space needs no TVM
        space = KnobSpace.for_task(task, entry.preset)
        recorded = entry.meta["fingerprint"]
        if space_fingerprint(space) != recorded:
            problems.append(f"{entry.path.name}: recorded under {recorded}, the space is now "
                            f"{space_fingerprint(space)}: skipped")
            continue
        wanted.add(f"{recorded}.json")
        path = spaces / f"{recorded}.json"
        if not args.check:
            write_space(space, spaces)
            print(f"{entry.path.name}: {path}")
        elif not path.is_file() or json.loads(path.read_text()) != space.to_json():
            problems.append(f"{entry.path.name}: {path} is missing or differs")
    extra = sorted(p.name for p in spaces.glob("*.json") if p.name not in wanted) if spaces.is_dir() else []
    problems += [f"{name}: describes no committed dataset's space" for name in extra]
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    sys.exit(main())
