"""Train a MetaTune cost model (GCN + MAML) on the catalog's datasets, with held-out networks.

Usage:
    python scripts/train_metatune.py --holdout resnet18 --threads 1
    python scripts/train_metatune.py --holdout resnet18 --no-augment --threads 1   # ablation
    python scripts/train_metatune.py --holdout resnet18 --no-meta --threads 1      # ablation

Rows of every task that occurs in a ``--holdout`` network are left out of training and scored
at the end. The other rows are split at random into training and validation rows
(``--val-fraction``, 0.1). Training (:mod:`agents.models.metatune`): ``--epochs`` epochs of
supervised pre-training of the whole network, then ``--meta-steps`` MAML meta-updates of the
regressor on few-shot meta-tasks (``--ways`` kernels, ``--shots`` support and ``--query`` query
rows each, ``--meta-batch`` tasks per update, one inner step of ``--inner-lr``, meta step
``--meta-lr``). The encoded graphs are cached (``~/.cache/tune_gym/metatune``); encoding every
catalog row the first time takes minutes.

Held-out scores, per held-out kernel (task, preset, machine): MSE and MSE(D) (the top 25% by
measured throughput) of the predicted normalised throughput, pairwise ranking accuracy, each
network's top-1 / top-5 score; zero-shot (as trained) and after fine-tuning the regressor on
``--shots-eval`` (16) seeded random rows of the kernel (scored on the kernel's other rows, the
same rows for both).

Writes to ``--out`` (default ``agents/checkpoints``): ``NAME.pt`` (weights), ``NAME.json`` (the
model config, its templates, the exact command, the dataset files and their checksums, the
training tasks, row counts, ablation flags, the losses and the held-out scores) and ``NAME.png``
(pre-training MSE per epoch, MAML query MSE per 100 meta-steps).

Defaults and cost: 30 epochs of pre-training (Adam 1e-3, batches of 128 rows of one op family)
and 2000 MAML meta-steps. The committed checkpoints (``--holdout NETWORK --threads 1``, on the
2-core machine while it also ran a measuring job) took, per checkpoint: 11-15 s per epoch on
13,450-19,318 training rows, 72-205 s of MAML, 8.7-12.7 min wall-clock in all (including about
a minute to read the cached encodings and probe the five family templates); final pre-training
MSE 0.014-0.016 on the training rows and 0.016-0.019 on the validation rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from training_common import (
    catalog_files,
    draw_losses,
    holdout_parser,
    load_unchanged,
    network_scores,
    print_scores,
    split_holdout,
    split_validation,
    start,
    write_outputs,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = holdout_parser(__doc__, "encoded graphs (default ~/.cache/tune_gym/metatune)")
    p.add_argument("--epochs", type=int, default=30, help="supervised pre-training epochs (30)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--meta-steps", type=int, default=2000, help="MAML meta-updates (2000)")
    p.add_argument("--ways", type=int, default=3, help="kernels per meta-task (3)")
    p.add_argument("--shots", type=int, default=5, help="support rows per kernel (5)")
    p.add_argument("--query", type=int, default=5, help="query rows per kernel (5)")
    p.add_argument("--inner-lr", type=float, default=2e-3)
    p.add_argument("--meta-lr", type=float, default=1e-3)
    p.add_argument("--meta-batch", type=int, default=16)
    p.add_argument("--first-order", action="store_true", help="first-order MAML")
    p.add_argument("--no-augment", dest="augment", action="store_false",
                   help="ablation: each config's own graph instead of the family's super-graph")
    p.add_argument("--no-meta", dest="meta", action="store_false", help="ablation: pre-training only, no MAML")
    p.add_argument("--shots-eval", type=int, default=16, help="rows per held-out kernel for the fine-tuned scores")
    args = p.parse_args(argv)
    if args.shots_eval < 1:
        p.error(f"--shots-eval must be >= 1, got {args.shots_eval}")
    return args


def plot(history: dict[str, Any], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = history.get("meta")
    fig, axes = plt.subplots(1, 2 if meta else 1, figsize=(10 if meta else 6, 4), squeeze=False)
    draw_losses(axes[0, 0], history["pretrain"], "MSE of the normalised throughput", "supervised pre-training")
    if meta:
        ax = axes[0, 1]
        ax.plot(meta["step"], meta["train_loss"], label="training tasks (query, adapted)")
        if meta["val_loss"]:
            ax.plot(meta["step"], meta["val_loss"], label="validation tasks (query, adapted)")
            ax.plot(meta["step"], meta["val_loss_unadapted"], "--", label="validation tasks (query, unadapted)")
        ax.set_xlabel("meta-step")
        ax.set_ylabel("query MSE")
        ax.set_title("MAML meta-training of the regressor", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def held_out_scores(model: Any, test: Any, weights: dict[str, dict[str, int]], shots: int, seed: int
                    ) -> dict[str, Any]:
    """Zero-shot and fine-tuned scores of the held-out kernels (see the module docstring)."""
    from agents.models import metrics

    pred = model.predict_data(test)
    h = model.embed_data(test)
    rng = np.random.default_rng(seed)
    kernels: dict[str, Any] = {}
    zero_rest: dict[str, np.ndarray] = {}
    tuned_rest: dict[str, np.ndarray] = {}
    for (task, preset, platform), rows in test.groups().items():
        cost = test.cost[rows]
        if not (np.isfinite(cost) & (cost > 0)).any():
            continue
        key = f"{task} {preset} {platform}"
        entry: dict[str, Any] = {"rows": len(rows), "mse": metrics.mse(pred[rows], cost),
                                 "mse_top": metrics.mse_top(pred[rows], cost),
                                 "pairwise_accuracy": metrics.pairwise_accuracy(pred[rows], cost)}
        if len(rows) > shots + 1:
            pick = rng.permutation(len(rows))
            support, rest = rows[pick[:shots]], rows[pick[shots:]]
            label = metrics.labels(test.cost[support])  # what a search knows: labels by its own best
            model.fine_tune_embeddings(h[support], label)
            tuned = model.predict_embeddings(h[rest])
            model.reset()
            entry["fine_tuned"] = {
                "shots": shots, "mse": metrics.mse(tuned, test.cost[rest]),
                "mse_top": metrics.mse_top(tuned, test.cost[rest]),
                "pairwise_accuracy": metrics.pairwise_accuracy(tuned, test.cost[rest]),
                "zero_shot_mse_same_rows": metrics.mse(pred[rest], test.cost[rest]),
                "zero_shot_mse_top_same_rows": metrics.mse_top(pred[rest], test.cost[rest]),
                "zero_shot_pairwise_accuracy_same_rows": metrics.pairwise_accuracy(pred[rest], test.cost[rest])}
            zero_rest[key], tuned_rest[key] = pred[rest], tuned
        kernels[key] = entry
    out: dict[str, Any] = {"kernels": kernels}
    for name in ("mse", "mse_top", "pairwise_accuracy"):
        out[f"mean_{name}"] = float(np.nanmean([k[name] for k in kernels.values()])) if kernels else None
        tuned = [k["fine_tuned"][name] for k in kernels.values() if "fine_tuned" in k]
        out[f"mean_fine_tuned_{name}"] = float(np.nanmean(tuned)) if tuned else None
    out.update(network_scores(pred, test.task, test.cost, weights, seed))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = start("train_metatune.py", argv, args.threads)
    import torch

    from agents.models.metatune import MetaTuneModel, load_graph_data

    files = catalog_files(args.files)
    data, checksums, load_secs = load_unchanged(
        files, lambda: load_graph_data(files, cache_dir=args.cache_dir, progress=not args.quiet))
    pool, test, weights = split_holdout(data, args.holdout)
    train, val = split_validation(pool, args.val_fraction, np.random.default_rng(args.seed))
    try:
        model = MetaTuneModel(data.templates, augment=args.augment, meta=args.meta, seed=args.seed,
                              epochs=args.epochs, batch=args.batch, lr=args.lr, weight_decay=args.weight_decay,
                              meta_steps=args.meta_steps, ways=args.ways, shots=args.shots, query=args.query,
                              inner_lr=args.inner_lr, meta_lr=args.meta_lr, meta_batch=args.meta_batch,
                              first_order=args.first_order)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    print(f"{len(train)} training, {len(val)} validation, {len(test)} held-out rows; "
          f"{len(model.columns)} node features; {load_secs:.1f} s to load and encode {len(data)} rows")
    tic = time.perf_counter()
    history = model.fit(train, val, progress=not args.quiet)
    train_secs = time.perf_counter() - tic
    val_pred = model.predict_data(val)
    scores: dict[str, Any] = {"val_mse": float(np.mean((val_pred - val.label) ** 2))}
    if len(test):
        scores["holdout"] = held_out_scores(model, test, weights, args.shots_eval, args.seed)
    name = args.name or "_".join(["metatune", *(["holdout-" + "-".join(args.holdout)] if args.holdout else []),
                                  *(["noaug"] if not args.augment else []), *(["nometa"] if not args.meta else []),
                                  f"seed{args.seed}"])
    pre, meta = history["pretrain"], history.get("meta")
    metadata = {
        "command": command, "files": checksums, "seed": args.seed, "holdout": args.holdout,
        "ablation": {"augment": args.augment, "meta": args.meta}, "val_fraction": args.val_fraction,
        "rows": {"train": len(train), "val": len(val), "holdout": len(test)},
        "train_tasks": sorted(set(pool.task.tolist())),
        "ops": sorted({t.family for t in train.templates}),
        "final_train_loss": pre["train_loss"][-1] if pre["train_loss"] else None,
        "final_val_loss": pre["val_loss"][-1] if pre["val_loss"] else None,
        "final_meta_query_loss": meta["train_loss"][-1] if meta else None,
        "final_meta_val_query_loss": meta["val_loss"][-1] if meta and meta["val_loss"] else None,
        "history": history, "secs_per_epoch": float(np.mean(pre["epoch_secs"])) if pre["epoch_secs"] else None,
        "meta_secs": meta["secs"][0] if meta else None, "train_secs": train_secs, "load_secs": load_secs,
        "threads": torch.get_num_threads(), "scores": scores,
    }
    write_outputs(model, args.out, name, metadata,
                  lambda png: plot(history, f"{name}: {len(train)} training rows", png))
    print(f"  training: {train_secs:.0f} s; val MSE {scores['val_mse']:.4f}")
    print_scores(scores.get("holdout", {}), "holdout ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
