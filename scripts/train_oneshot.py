"""Train One-Shot Tuner's predictor (:mod:`agents.models.oneshot`) and write a checkpoint.

Data: the sampled-task datasets of ``scripts/collect_pgs.py`` (default every ``*.parquet`` in
``benchmarks/datasets/pgs``), after the exploration-based-sampling filter (rows more than 20x
slower than their task's best are dropped). A fraction of the *tasks* is held out for validation
(whole tasks, so the validation loss measures transfer to unseen tasks, which is what the agent
needs). The checkpoint's sidecar lists the files with their checksums, the training tasks and ops
(so ``one-shot`` never tunes a task the model was trained on, and refuses ops it never saw), the
loss history and the command; a plot of the training and validation loss goes beside it.

Usage:
    python scripts/train_oneshot.py --epochs 60 --threads 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from training_common import REPO, load_unchanged, plot_losses, print_scores, start, write_outputs

from agents.models import metrics
from agents.models.oneshot import OneShotModel, ebs_filter, load_oneshot_data


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", nargs="+", type=Path, help="dataset files (default: those of --data-dir)")
    p.add_argument("--data-dir", type=Path, default=REPO / "benchmarks" / "datasets" / "pgs",
                   help="a scripts/collect_pgs.py output folder: its datasets, in the order of its tasks.txt")
    p.add_argument("--first-tasks", type=int, help="only the datasets of the first N tasks of --data-dir's tasks.txt")
    p.add_argument("--epochs", type=int, default=200, help="training epochs (the paper's 200)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--ff", type=int, default=1024, help="feed-forward width (the paper's 1024)")
    p.add_argument("--no-oversample", action="store_true", help="shuffle instead of inverse-frequency draws")
    p.add_argument("--ebs-factor", type=float, default=20.0, help="drop rows this many times slower than the best")
    p.add_argument("--val-fraction", type=float, default=0.1, help="fraction of tasks held out for validation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / "agents" / "checkpoints")
    p.add_argument("--name", help="file stem (default oneshot_pgs_seed<seed>)")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if not 0 <= args.val_fraction < 1:
        p.error(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    if args.files and args.first_tasks is not None:
        p.error("--first-tasks selects from --data-dir; it does not combine with --files")
    return args


def data_dir_files(folder: Path, first: int | None = None) -> list[Path]:
    """The collected datasets of ``folder`` (a ``collect_pgs.py`` output), in ``tasks.txt`` order;
    with ``first``, those of its first ``first`` tasks, all of which must be collected."""
    from agents.cli import dataset_name

    listing = folder / "tasks.txt"
    if not listing.exists():
        if first is not None:
            raise SystemExit(f"--first-tasks needs {listing}, which does not exist")
        return sorted(folder.glob("*.parquet"))
    uris = [line for line in listing.read_text().splitlines() if line and not line.startswith("#")]
    files = [folder / dataset_name(uri, "full") for uri in (uris if first is None else uris[:first])]
    if first is not None:
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise SystemExit(f"{len(missing)} of the first {first} tasks of {listing} are not collected yet "
                             f"({missing[0]}, ...)")
    return [f for f in files if f.exists()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = start("train_oneshot.py", argv, args.threads)
    files = list(args.files) if args.files else data_dir_files(args.data_dir, args.first_tasks)
    if not files:
        raise SystemExit("no dataset files: collect some with scripts/collect_pgs.py, or pass --files")
    data, checksums, load_secs = load_unchanged(files, lambda: load_oneshot_data(files, progress=not args.quiet))
    keep = ebs_filter(data.label, args.ebs_factor)
    data = data.subset(keep)
    tasks = np.array(sorted(set(data.task.tolist())), dtype=object)
    rng = np.random.default_rng(args.seed)
    val_tasks = set(rng.permutation(tasks)[: round(args.val_fraction * len(tasks))].tolist())
    is_val = np.isin(data.task, list(val_tasks))
    train, val = data.subset(~is_val), data.subset(is_val)
    model = OneShotModel(seed=args.seed, epochs=args.epochs, batch=args.batch, lr=args.lr, d_model=args.d_model,
                         ff=args.ff, oversample=not args.no_oversample)
    print(f"{len(train)} training rows ({len(tasks) - len(val_tasks)} tasks), {len(val)} validation rows "
          f"({len(val_tasks)} tasks); {int((~keep).sum())} rows dropped by the EBS filter; {load_secs:.1f} s to load")
    history = model.fit(train, val if len(val) else None, progress=not args.quiet)
    scores = {}
    if len(val):
        s = model.predict_data(val)
        scores["val_pairwise_accuracy"] = metrics.grouped_pairwise_accuracy(s, val.cost, val.task)
        scores["val_mse"] = float(np.mean((s - val.label) ** 2))
    name = args.name or f"oneshot_pgs_seed{args.seed}"
    ops = sorted({uri.split("://")[1].split("-v")[0] for uri in tasks.tolist()})
    metadata = {
        "command": command, "files": checksums, "seed": args.seed, "ebs_factor": args.ebs_factor,
        "val_fraction": args.val_fraction, "rows": {"train": len(train), "val": len(val),
                                                    "dropped_by_ebs_filter": int((~keep).sum())},
        "train_tasks": sorted(tasks.tolist()), "val_tasks": sorted(val_tasks), "ops": ops,
        "presets": sorted({f["preset"] for f in checksums}),
        "history": history, "secs_per_epoch": float(np.mean(history["epoch_secs"])) if args.epochs else None,
        "load_secs": load_secs, "scores": scores,
    }
    write_outputs(model, args.out, name, metadata, lambda png: plot_losses(
        history, f"{name}: {len(train)} training rows", png,
        "MSE (training: oversampled rows; validation: unseen tasks)"))
    print_scores(scores)
    return 0


if __name__ == "__main__":
    sys.exit(main())
