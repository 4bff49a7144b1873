"""Collect a measurement dataset live: the same as ``tune-gym collect`` (see its ``--help``).

Usage:
    python scripts/collect_dataset.py TASK [TASK ...] --preset compact --plan exhaustive
    python scripts/collect_dataset.py resnet18:1 --preset full --plan random:2000 --plan explore:1000

Each task's dataset goes to ``benchmarks/datasets/<task>_<preset>.parquet`` (``--out-dir``),
with a crash-safe journal beside it; run the same command again to resume after a kill.
See :mod:`tune_gym.datasets.collect`.
"""

from __future__ import annotations

import sys

from tune_gym.cli import main

if __name__ == "__main__":
    sys.exit(main(["collect", *sys.argv[1:]]))
