"""MTL-TLP's platform study: how little data of a new machine a cost model needs when another
machine's data is plentiful.

    python -m benchmarks.platform_study --target HOST --holdout resnet18 --threads 1
    python -m benchmarks.platform_study --target HOST --cells mtl-tlp@0.05 tlp-pooled@0.05   # some cells only
    python -m benchmarks.platform_study --target HOST --report                               # table only

Data: every dataset of the catalog (:func:`tune_gym.datasets.catalog.data_dirs`) plus the target
platform's own datasets (``benchmarks/datasets/platforms/HOST/`` by default, outside the catalog
so that replay and the leaderboard keep one host). A platform is a measuring host
(:func:`tune_gym.host.host_id`). The rows of the ``--holdout`` network's tasks are left out of
training on every platform; the target platform's rows of those tasks are the test set.

Cells, each one model trained with TLP's settings (:class:`agents.models.tlp.TLPModel`) and one
seed, and ``random`` (the held-out configs in random order: the floor); ``@F`` keeps a random
fraction F of the target platform's training rows (:func:`agents.models.rank_data.thin_platform`,
the same rows for every model of one F):

* ``tlp-source``: TLP on the other platforms' rows only: a model trained elsewhere, used as is;
* ``tlp-target@F``: TLP on the target's F rows only;
* ``tlp-pooled@F``: one head on the other platforms' rows plus the target's F (each row's label
  is normalised on its own platform, so the lists never mix machines);
* ``mtl-tlp@F``: MTL-TLP, the backbone shared and one head per platform, scored with the target's head.

Every model gets at least ``--min-steps`` optimiser steps (epochs are raised for small training
sets: 5% of the target's rows is a few hundred rows, one batch per epoch). Scores on the held-out
target rows: the network's top-1 and top-5 score (TLP's definition, tasks weighted by their
occurrences) and the pairwise ranking accuracy within each task.

Results: ``benchmarks/results/platform_study/HOST-holdout-NETWORK.json`` gains one entry per cell
as it finishes (a killed study resumes with the cells it has not done), and ``.md`` the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cell_names", "main", "train_cell"]

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "benchmarks" / "results" / "platform_study"
KINDS = ("tlp-target", "tlp-pooled", "mtl-tlp")


def cell_names(fractions: list[float]) -> list[str]:
    """``random`` and ``tlp-source``, then, per fraction, the three kinds of :data:`KINDS`."""
    return ["random", "tlp-source", *(f"{kind}@{f:g}" for f in fractions for kind in KINDS)]


def _parse_cell(name: str) -> tuple[str, float]:
    kind, _, frac = name.partition("@")
    if name in ("random", "tlp-source"):
        return kind, 0.0
    if kind not in KINDS or not frac:
        raise SystemExit(f"unknown cell {name!r}: give tlp-source or KIND@FRACTION with KIND one of {', '.join(KINDS)}")
    fraction = float(frac)
    if not 0 < fraction <= 1:
        raise SystemExit(f"cell {name!r}: the fraction must be in (0, 1]")
    return kind, fraction


def train_cell(name: str, pool: Any, test: Any, weights: dict[str, int], target: str, args: argparse.Namespace
               ) -> dict[str, Any]:
    """Train the model of one cell on ``pool`` (the training rows of every platform) and score it on
    ``test`` (the target's held-out rows)."""
    from agents.models.rank_data import thin_platform
    from agents.models.tlp import DEFAULT_PLATFORM, TLPModel

    kind, fraction = _parse_cell(name)
    rng = np.random.default_rng(args.seed)
    if kind == "random":  # the reference a ranking must beat: the held-out configs in random order
        return _scores(name, kind, fraction, rng.random(len(test)), test, weights, args.seed,
                       rows={"train": 0, "val": 0, "target_train": 0, "test": len(test)},
                       platforms=[], epochs=0, train_secs=0.0, final_val_loss=None)
    data = pool.subset(pool.platform != target) if kind == "tlp-source" else thin_platform(pool, target, fraction, rng)
    if kind == "tlp-target":
        data = data.subset(data.platform == target)
    if kind != "tlp-source" and not (data.platform == target).any():
        raise SystemExit(f"{name}: the target platform has no training rows (datasets of tasks outside the "
                         "held-out network) at this fraction")
    is_val = np.zeros(len(data), dtype=bool)
    is_val[rng.permutation(len(data))[:round(args.val_fraction * len(data))]] = True
    train, val = data.subset(~is_val), data.subset(is_val)
    steps_per_epoch = math.ceil(len(train) / args.batch)
    epochs = max(args.epochs, math.ceil(args.min_steps / steps_per_epoch))
    platforms = train.platforms if kind == "mtl-tlp" else [DEFAULT_PLATFORM]
    model = TLPModel(platforms, pool.shape, seed=args.seed, epochs=epochs, batch=args.batch)
    tic = time.perf_counter()
    history = model.fit(train, val if len(val) else None, progress=not args.quiet)
    secs = time.perf_counter() - tic
    s = model.predict(test.x, target if kind == "mtl-tlp" else None)
    return _scores(name, kind, fraction, s, test, weights, args.seed,
                   rows={"train": len(train), "val": len(val), "target_train": int((train.platform == target).sum()),
                         "test": len(test)},
                   platforms=platforms, epochs=epochs, train_secs=round(secs, 1),
                   final_val_loss=history["val_loss"][-1] if history["val_loss"] else None)


def _scores(name: str, kind: str, fraction: float, s: np.ndarray, test: Any, weights: dict[str, int], seed: int,
            **info: Any) -> dict[str, Any]:
    """One cell's entry: what it was trained on (``info``) and how its scores ``s`` rank ``test``."""
    from agents.models import metrics

    ranked = [(s[test.task == uri], test.cost[test.task == uri]) for uri in weights]
    return {
        "cell": name, "kind": kind, "fraction": fraction, **info,
        "top1": metrics.top_k_score(ranked, list(weights.values()), 1, seed),
        "top5": metrics.top_k_score(ranked, list(weights.values()), 5, seed),
        "pairwise": metrics.grouped_pairwise_accuracy(s, test.cost, test.task),
    }


def _cpu(host: Any) -> str:
    """``AMD EPYC, znver5`` from a dataset footer's host fingerprint (or its plain name)."""
    if isinstance(host, dict):
        return ", ".join(str(host[k]) for k in ("cpu", "llvm_cpu") if host.get(k))
    return str(host or "")


def markdown(doc: dict[str, Any]) -> str:
    cells = doc["cells"]
    lines = [
        f"Target platform `{doc['target']}` ({_cpu(doc['target_cpu'])}), other platforms "
        f"{', '.join(f'`{p}`' for p in doc['sources'])}; "
        f"held-out network **{doc['holdout']}** ({doc['test_tasks']} tasks, {doc['test_rows']} rows measured on the "
        f"target); {doc['target_train_rows']} target training rows at fraction 1, {doc['source_rows']} other-platform "
        f"rows; seed {doc['seed']}, at least {doc['min_steps']} optimiser steps per model. Made by "
        + ", ".join(f"`{c}`" for c in doc.get("commands", [doc.get("command")])) + ".", "",
        "| model | target rows | other-platform rows | epochs | top-1 | top-5 | pairwise acc. | train s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = {n: i for i, n in enumerate(cell_names(sorted({c["fraction"] for c in cells.values() if c["fraction"]})))}
    for c in sorted(cells.values(), key=lambda c: order.get(c["cell"], 99)):
        other = c["rows"]["train"] - c["rows"]["target_train"]
        lines.append(f"| {c['cell']} | {c['rows']['target_train']} | {other} | {c['epochs']} | {c['top1']:.3f} | "
                     f"{c['top5']:.3f} | {c['pairwise']:.3f} | {c['train_secs']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, metavar="HOST", help="the target platform's host id")
    p.add_argument("--target-dir", type=Path, help="its datasets (default benchmarks/datasets/platforms/HOST)")
    p.add_argument("--holdout", default="resnet18", metavar="NETWORK")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1, 0.5, 1.0])
    p.add_argument("--cells", nargs="+", help="train only these cells (default: every cell not done yet)")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--min-steps", type=int, default=400, help="fewest optimiser steps of any model (400)")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--out-dir", type=Path, default=OUT_DIR)
    p.add_argument("--report", action="store_true", help="write the table from the results so far; train nothing")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    out = args.out_dir / f"{args.target}-holdout-{args.holdout}.json"
    doc: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"cells": {}}
    if not args.report:
        import torch

        from agents.models.rank_data import held_out_mask, load_ranking_data
        from tune_gym.datasets.catalog import catalog, read_entry

        if args.threads:
            torch.set_num_threads(args.threads)
        target_dir = args.target_dir or REPO / "benchmarks" / "datasets" / "platforms" / args.target
        target_files = sorted(target_dir.glob("*.parquet"))
        if not target_files:
            raise SystemExit(f"no datasets of the target platform in {target_dir}")
        files = [e.path for e in catalog()] + target_files
        data = load_ranking_data(files, progress=not args.quiet)
        if args.target not in data.platforms:
            raise SystemExit(f"the target {args.target!r} measured none of the rows; platforms: {data.platforms}")
        held, weights = held_out_mask(data, [args.holdout])
        pool = data.subset(~held)
        test = data.subset(held & (data.platform == args.target))
        w = {uri: n for uri, n in weights[args.holdout].items() if (test.task == uri).any()}
        if not w:
            raise SystemExit(f"the target platform has no dataset of a {args.holdout} task")
        doc.update({
            "target": args.target,
            "target_cpu": _cpu(read_entry(target_files[0]).meta.get("hosts", {}).get(args.target)),
            "sources": [p for p in data.platforms if p != args.target], "holdout": args.holdout,
            "test_tasks": len(w), "test_rows": len(test), "seed": args.seed, "min_steps": args.min_steps,
            "target_train_rows": int((pool.platform == args.target).sum()),
            "source_rows": int((pool.platform != args.target).sum()),
            "files": [str(Path(f).resolve().relative_to(REPO)) for f in files],
        })
        command = "python -m benchmarks.platform_study " + " ".join(sys.argv[1:] if argv is None else argv)
        doc["commands"] = [*(c for c in doc.get("commands", [doc.get("command")]) if c and c != command), command]
        doc.pop("command", None)
        todo = args.cells or [c for c in cell_names(args.fractions) if c not in doc["cells"]]
        for name in todo:
            print(f"{name}: training", flush=True)
            doc["cells"][name] = train_cell(name, pool, test, w, args.target, args)
            c = doc["cells"][name]
            print(f"{name}: top-1 {c['top1']:.3f}, top-5 {c['top5']:.3f}, pairwise {c['pairwise']:.3f} "
                  f"({c['train_secs']:.0f} s)", flush=True)
            args.out_dir.mkdir(parents=True, exist_ok=True)
            fresh = json.loads(out.read_text())["cells"] if out.exists() else {}  # cells a parallel run finished
            doc["cells"] = {**fresh, **doc["cells"]}
            tmp = out.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            tmp.replace(out)
    if not doc["cells"]:
        raise SystemExit(f"no results in {out} yet")
    table = markdown(doc)
    out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
