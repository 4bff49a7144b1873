"""One-Shot Tuner's data ablations: how the training data's tasks and configs shape the predictor.

    python -m benchmarks.oneshot_ablation --model "PGS + EBS=agents/checkpoints/oneshot_pgs40_seed0.pt" \\
        --model "uniform tasks + EBS=..." --model "PGS + random configs=..."

Each ``--model NAME=CHECKPOINT`` is a One-Shot predictor trained by ``scripts/train_oneshot.py`` on one
kind of data (``scripts/collect_pgs.py --sampler pgs|uniform``, ``--plan explore:64|random:64``).
For each, on the networks ``one-shot`` is evaluated on (tasks no predictor was trained on):

* **dataset metrics** on every committed dataset of those networks' tasks whose op the predictor
  covers (:mod:`benchmarks.model_eval.run`'s definitions): top-1 and top-5 score, pairwise
  accuracy, nDCG@10, MSE;
* **tuning**: the ``one-shot`` agent with that checkpoint on the replay backend (exhaustively
  measured spaces, so the best known is the optimum): best throughput after its 64 measurements
  over the optimum, mean over seeds per task, and the geometric mean over tasks.

Output: ``benchmarks/results/oneshot_ablation/ablation.json`` and ``.md``. Everything follows
``--seed``; the agent runs are exact replays, so they reproduce on any machine.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TASKS", "evaluate", "main"]

OUT_DIR = Path(__file__).resolve().parent / "results" / "oneshot_ablation"
NETWORKS = ("resnet18", "mobilenet_v2")
#: The standard suite's exhaustively measured conv tasks of those networks.
TASKS = ("resnet18:0", "resnet18:5", "resnet18:6", "resnet18:7", "resnet18:8", "resnet18:9", "resnet18:10",
         "mobilenet_v2:17")


def dataset_metrics(path: Path, shared: dict[str, Any]) -> dict[str, float]:
    """The predictor's ranking metrics on the held-out networks' datasets (all groups together)."""
    from agents.models.rank_data import held_out_mask, load_ranking_data
    from benchmarks.model_eval.run import _groups, _metrics, _transfer_oneshot

    if "data" not in shared:
        shared["data"] = load_ranking_data(progress=False)
    data = shared["data"]
    in_holdout, weights = held_out_mask(data, list(NETWORKS))
    rows = np.flatnonzero(in_holdout)
    w = {t: sum(weights[n].get(t, 0) for n in NETWORKS) for t in set(data.task[rows])}
    groups = [g for g in _groups(data, rows, w) if np.isfinite(data.cost[g.rows]).any()]
    from agents.models.oneshot import OneShotModel
    from tune_gym.tasks.task import Task

    ops = set(OneShotModel.load(path).metadata.get("ops", []))
    groups = [g for g in groups if Task.parse(g.task).op in ops]
    scored = _transfer_oneshot(data, groups, lambda _: None, path)
    assert scored is not None  # every group's op is covered
    cost = {f"{g.task}|{g.preset}": data.cost[g.rows] for g in groups}
    out = _metrics(groups, scored[0], cost, True, 0)
    out["datasets"] = len(groups)
    return {k: float(v) for k, v in out.items()}


def tuning(path: Path, seeds: int, tasks: tuple[str, ...] = TASKS) -> dict[str, Any]:
    """``one-shot`` with the checkpoint on replay: best / optimum per task (mean over seeds)."""
    from benchmarks.leaderboard.runner import run_one
    from benchmarks.leaderboard.suite import RunSpec
    from tune_gym.datasets import load_dataset
    from tune_gym.datasets.catalog import find_dataset
    from tune_gym.tasks.task import Task

    per_task: dict[str, dict[str, Any]] = {}
    for tid in tasks:
        entry = find_dataset(Task.parse(tid).uri, "compact")
        if entry is None:
            raise FileNotFoundError(f"no committed compact dataset of {tid}")
        best = load_dataset(entry.path).best_gflops
        quality, secs = [], []
        for seed in range(seeds):
            line = run_one(RunSpec("one-shot", tid, "compact", "replay", seed, budget=64, batch=8,
                                   options={"checkpoint": str(path)}))
            quality.append(line["best_gflops"] / best)
            secs.append(line["agent_secs"])
        per_task[tid] = {"quality": float(np.mean(quality)), "min": float(np.min(quality)),
                         "agent_secs": float(np.mean(secs))}
    q = [t["quality"] for t in per_task.values()]
    return {"tasks": per_task, "geomean": float(np.exp(np.mean(np.log(q)))), "seeds": seeds}


def evaluate(models: dict[str, Path], seeds: int = 3) -> dict[str, Any]:
    from agents.models.oneshot import OneShotModel

    shared: dict[str, Any] = {}
    doc: dict[str, Any] = {"networks": list(NETWORKS), "seeds": seeds, "models": {}}
    for name, path in models.items():
        t0 = time.perf_counter()
        meta = OneShotModel.load(path).metadata
        print(f"{name}: {path.name}", flush=True)
        doc["models"][name] = {
            "checkpoint": path.name, "command": meta.get("command"),
            "train_tasks": len(meta.get("train_tasks", ())), "rows": meta.get("rows"),
            "dataset": dataset_metrics(path, shared), "tuning": tuning(path, seeds),
            "seconds": round(time.perf_counter() - t0, 1),
        }
    return doc


def markdown(doc: dict[str, Any]) -> str:
    names = list(doc["models"])
    tasks = list(next(iter(doc["models"].values()))["tuning"]["tasks"]) if names else []
    lines = [f"Held-out networks: {', '.join(doc['networks'])}. Dataset metrics over their committed datasets; "
             f"tuning: `one-shot` on replay, best of its 64 measurements over the optimum, mean of "
             f"{doc['seeds']} seeds.", "",
             "| training data | tasks | top-1 | top-5 | pairwise acc. | nDCG@10 | MSE | tuning (geomean) | "
             + " | ".join(tasks) + " |",
             "|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(tasks)]
    for name in names:
        d = doc["models"][name]
        ds, tu = d["dataset"], d["tuning"]
        lines.append(f"| {name} | {d['train_tasks']} | {ds['top1']:.3f} | {ds['top5']:.3f} | {ds['pairwise']:.3f} | "
                     f"{ds['ndcg10']:.3f} | {ds['mse']:.3f} | {tu['geomean']:.3f} | "
                     + " | ".join(f"{tu['tasks'][t]['quality']:.3f}" for t in tasks) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=CHECKPOINT",
                        help="a predictor and the name of its training data (repeat)")
    parser.add_argument("--seeds", type=int, default=3, help="one-shot runs per task")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    models = {}
    for item in args.model:
        name, sep, path = item.partition("=")
        if not sep or not Path(path).exists():
            parser.error(f"--model {item!r}: expected NAME=CHECKPOINT with an existing checkpoint file")
        models[name] = Path(path)
    doc = evaluate(models, args.seeds)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "ablation.json").write_text(json.dumps(doc, indent=1) + "\n")
    table = markdown(doc)
    (args.out_dir / "ablation.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
