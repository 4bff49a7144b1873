"""Train a TLP or MTL-TLP cost model on the catalog's datasets, with held-out networks.

Usage:
    python scripts/train_tlp.py --holdout resnet18
    python scripts/train_tlp.py --holdout resnet18 --mtl --target-platform HOST --platform-fraction 0.07

Rows of every task that occurs in a ``--holdout`` network are left out of training and
scored at the end (pairwise ranking accuracy within each task, and TLP's top-1 / top-5 score
of each held-out network). The other rows are split at random into training and validation
rows (``--val-fraction``, TLP's 9:1). ``--platform-fraction F`` keeps a random fraction F of
the target platform's training rows (MTL-TLP's setting: little data on the target machine,
all of it on the others); ``--mtl`` gives each platform of the training data its own head.

Writes to ``--out`` (default ``agents/checkpoints``): ``NAME.pt`` (weights), ``NAME.json``
(the model config, the exact command, the dataset files and their checksums, seed, epochs,
losses per epoch, seconds per epoch and the held-out scores) and ``NAME.png`` (training and
validation loss per epoch). See :mod:`agents.models.tlp` and :mod:`agents.models.rank_data`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from training_common import (
    catalog_files,
    holdout_parser,
    load_unchanged,
    network_scores,
    plot_losses,
    print_scores,
    split_holdout,
    split_validation,
    start,
    write_outputs,
)

from agents.models import metrics
from agents.models.rank_data import RankingData, load_ranking_data, thin_platform
from agents.models.tlp import DEFAULT_PLATFORM, TLPModel


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = holdout_parser(__doc__, "encoded sequences (default ~/.cache/tune_gym/tlp)")
    p.add_argument("--mtl", action="store_true", help="MTL-TLP: one head per platform of the training data")
    p.add_argument("--target-platform", metavar="HOST",
                   help="the platform that --platform-fraction thins and the held-out scores use "
                        "(default: the only platform; required when there are several)")
    p.add_argument("--platform-fraction", type=float, default=1.0, metavar="F",
                   help="keep this random fraction of the target platform's training rows (default 1)")
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--lists", choices=("task", "batch"), default="task",
                   help="LambdaRank lists: each task's rows of a batch (default) or the whole batch (TLP's code)")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--lr", type=float, default=7e-4)
    p.add_argument("--weight-decay", type=float, default=1e-6)
    p.add_argument("--clip", type=float, default=0.5)
    args = p.parse_args(argv)
    if not 0 < args.platform_fraction <= 1:
        p.error(f"--platform-fraction must be in (0, 1], got {args.platform_fraction}")
    return args


def choose_target(data: RankingData, requested: str | None, needed: bool) -> str | None:
    platforms = data.platforms
    if requested is not None:
        if requested not in platforms:
            raise SystemExit(f"unknown --target-platform {requested!r}; the data's platforms: {platforms}")
        return requested
    if len(platforms) == 1:
        return platforms[0]
    if needed:
        raise SystemExit(f"the data has several platforms {platforms}: name one with --target-platform")
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = start("train_tlp.py", argv, args.threads)
    files = catalog_files(args.files)
    data, checksums, load_secs = load_unchanged(
        files, lambda: load_ranking_data(files, cache_dir=args.cache_dir, progress=not args.quiet))
    pool, test, weights = split_holdout(data, args.holdout)
    target = choose_target(pool, args.target_platform, needed=args.platform_fraction < 1)
    rng = np.random.default_rng(args.seed)
    if target is not None and args.platform_fraction < 1:  # choose_target gave one: it was needed
        pool = thin_platform(pool, target, args.platform_fraction, rng)
    train, val = split_validation(pool, args.val_fraction, rng)
    platforms = train.platforms if args.mtl else [DEFAULT_PLATFORM]
    model = TLPModel(platforms, data.shape, seed=args.seed, epochs=args.epochs, batch=args.batch, lr=args.lr,
                     weight_decay=args.weight_decay, clip=args.clip, lists=args.lists)
    print(f"{len(train)} training, {len(val)} validation, {len(test)} held-out rows; heads {platforms}; "
          f"{load_secs:.1f} s to load and encode {len(data)} rows")
    history = model.fit(train, val, progress=not args.quiet)
    head = target if args.mtl else None
    scores: dict[str, Any] = {"val_pairwise_accuracy": metrics.grouped_pairwise_accuracy(
        model.predict(val.x, head), val.cost, val.task + "\0" + val.platform)}
    if len(test):
        test = test.subset(test.platform == target) if target is not None else test
        s = model.predict(test.x, head)
        scores["holdout_pairwise_accuracy"] = metrics.grouped_pairwise_accuracy(
            s, test.cost, test.task + "\0" + test.platform)
        scores.update(network_scores(s, test.task, test.cost, weights, args.seed))
    name = args.name or "_".join(["mtl-tlp" if args.mtl else "tlp",
                                  *(["holdout-" + "-".join(args.holdout)] if args.holdout else []),
                                  *([f"frac{args.platform_fraction:g}"] if args.platform_fraction < 1 else []),
                                  *(["batchlists"] if args.lists == "batch" else []),
                                  f"seed{args.seed}"])
    metadata = {
        "command": command, "files": checksums, "seed": args.seed, "epochs": args.epochs,
        "holdout": args.holdout, "target_platform": target, "platform_fraction": args.platform_fraction,
        "val_fraction": args.val_fraction,
        "rows": {"train": len(train), "val": len(val), "holdout": len(test)},
        "train_tasks": sorted(set(pool.task.tolist())),
        "final_train_loss": history["train_loss"][-1] if history["train_loss"] else None,
        "final_val_loss": history["val_loss"][-1] if history["val_loss"] else None,
        "history": history, "secs_per_epoch": float(np.mean(history["epoch_secs"])) if args.epochs else None,
        "load_secs": load_secs, "scores": scores,
    }
    write_outputs(model, args.out, name, metadata, lambda png: plot_losses(
        history, f"{name}: {len(train)} training rows", png, "LambdaRank loss per list"))
    print_scores(scores)
    return 0


if __name__ == "__main__":
    sys.exit(main())
