"""Milliseconds per config of each feature set of ``xgb-sa``, on a dataset's configs.

Usage:
    python -m benchmarks.feature_cost [--dataset PATH ...] [--configs 64] [--seed 0]

For each dataset (default: ``resnet18_1_full`` and ``resnet18_7_compact`` of
``benchmarks/datasets``), ``--configs`` of its recorded configs per feature set, drawn without
replacement with ``--seed`` and disjoint between sets, are featurized in one call by ``xgb-sa``'s
featurizer of that set (:meth:`agents.xgb_sa.XGBSAAgent.make_featurizer`): ``knob``,
``itervar`` (AutoTVM's loop features) and ``loop`` (MetaSchedule's per-store features, the
input of the ``metaschedule`` agent's XGBoost model, summed over stores). No row comes from a
cache: the sets' draws are disjoint and the loop-nest cache is emptied after the featurizers are
built. ``loop`` is also timed in its two parts, on one more draw: ``space.apply`` (the config's
schedule with the target's postprocs) and TVM's ``PerStoreFeature`` extraction from those
schedules, which is what ``metaschedule``'s model pays per program it scores (its search scores
``population_size`` x (``genetic_num_iters`` + 1) programs per batch).

Reported per row: milliseconds per config of wall time and of this process's CPU time (a hint when
the machine is busy), with the host (:func:`tune_gym.host.host_id`), LLVM's name of its CPU and
the command.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_DATASETS = ("benchmarks/datasets/resnet18_1_full.parquet", "benchmarks/datasets/resnet18_7_compact.parquet")
FEATURE_SETS = ("knob", "itervar", "loop")


def _timed(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    """Milliseconds per config (wall, CPU) of one call of ``fn`` over ``n`` configs."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return 1e3 * (time.perf_counter() - wall) / n, 1e3 * (time.process_time() - cpu) / n


def dataset_costs(path: Path, n: int, seed: int) -> list[tuple[str, float, float]]:
    """``(row, wall ms/config, CPU ms/config)`` of each feature set and of ``loop``'s parts."""
    from agents.xgb_sa import XGBSAAgent
    from tune_gym.datasets import load_dataset
    from tune_gym.features.loops import NEST_CACHE
    from tune_gym.tvm_support import ms

    ds = load_dataset(path)
    space = ds.space
    configs = np.unique(ds.configs.astype(np.int64), axis=0)
    draws = np.random.default_rng(seed).permutation(len(configs))
    parts = len(FEATURE_SETS) + 1
    if len(configs) < parts * n:
        raise SystemExit(f"{path}: {len(configs)} configs, fewer than {parts} draws of --configs {n}")
    draw = [configs[draws[i * n:(i + 1) * n]] for i in range(parts)]
    featurizers = {f: XGBSAAgent(features=f).make_featurizer(space) for f in FEATURE_SETS}
    NEST_CACHE.clear()  # the itervar layout probe's nests
    rows = []
    for featurizer, configs_i, name in zip(featurizers.values(), draw, FEATURE_SETS):
        rows.append((name, *_timed(functools.partial(featurizer, configs_i), n)))

    m = ms()
    schedules: list[Any] = []
    rows.append(("  loop: space.apply", *_timed(
        lambda: schedules.extend(space.apply(tuple(int(v) for v in c))[0] for c in draw[-1]), n)))
    candidates = [m.MeasureCandidate(s, m.arg_info.ArgInfo.from_entry_func(s.mod, remove_preproc=True))
                  for s in schedules if s is not None]
    context = m.TuneContext(mod=space.mod, target=space.target, num_threads=1)
    extractor = m.feature_extractor.PerStoreFeature()
    rows.append(("  loop: PerStoreFeature", *_timed(lambda: extractor.extract_from(context, candidates),
                                                    len(candidates))))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", nargs="+", default=list(DEFAULT_DATASETS), help="dataset files (.parquet)")
    ap.add_argument("--configs", type=int, default=64, help="configs per feature set (default 64)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    args = ap.parse_args(argv)
    if args.configs < 1:
        ap.error(f"--configs must be >= 1, got {args.configs}")

    from tune_gym.host import host_id
    from tune_gym.tvm_support import tvm

    print(f"host {host_id()}, LLVM cpu {tvm().target.codegen.llvm_get_system_cpu()}")
    print(f"command: python -m benchmarks.feature_cost {shlex.join(sys.argv[1:] if argv is None else argv)}")
    for path in args.dataset:
        print(f"\n{path} ({args.configs} configs per row)")
        print("| features | wall ms/config | CPU ms/config |\n|---|---|---|")
        for name, wall, cpu in dataset_costs(Path(path), args.configs, args.seed):
            print(f"| {name} | {wall:.3f} | {cpu:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
