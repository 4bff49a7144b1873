"""One-Shot Tuner's data ablations: how the training data's tasks and configs shape the predictor.

    tune-gym bench --suite oneshot_ablation --leaderboard benchmarks/results/oneshot_ablation/LEADERBOARD.md
    python -m benchmarks.oneshot_ablation benchmarks/results/leaderboard/oneshot_ablation.parquet

The suite ``benchmarks/suites/oneshot_ablation.toml`` runs ``one-shot`` with predictors trained on
different data (its variants' ``checkpoint`` options: ``scripts/collect_pgs.py --sampler pgs|uniform``
and ``--plan explore:64|random:64``, then ``scripts/train_oneshot.py``) on the replay backend. This
script adds, for each of those predictors, its **dataset metrics** on the committed datasets of the
networks ``one-shot`` is evaluated on (tasks no predictor was trained on; the ops it covers), with
:mod:`benchmarks.model_eval.run`'s definitions: top-1 and top-5 score, pairwise accuracy, nDCG@10,
MSE; and its **tuning** result from the results file: the best of its 64 measurements over the
optimum (the spaces are exhaustive), mean over seeds per task and geometric mean over tasks.

Output: ``benchmarks/results/oneshot_ablation/ablation.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["evaluate", "main"]

OUT_DIR = Path(__file__).resolve().parent / "results" / "oneshot_ablation"
NETWORKS = ("resnet18", "mobilenet_v2")


def dataset_metrics(path: Path, shared: dict[str, Any]) -> dict[str, float]:
    """The predictor's ranking metrics on the held-out networks' datasets (all groups together)."""
    from agents.models.rank_data import held_out_mask, load_ranking_data
    from benchmarks.model_eval.run import ranking_metrics, task_groups, transfer_oneshot

    if "data" not in shared:
        shared["data"] = load_ranking_data(progress=False)
    data = shared["data"]
    in_holdout, weights = held_out_mask(data, list(NETWORKS))
    rows = np.flatnonzero(in_holdout)
    w = {t: sum(weights[n].get(t, 0) for n in NETWORKS) for t in set(data.task[rows])}
    groups = [g for g in task_groups(data, rows, w) if np.isfinite(data.cost[g.rows]).any()]
    from agents.models.oneshot import OneShotModel
    from tune_gym.tasks.task import Task

    model = OneShotModel.load(path)
    groups = [g for g in groups if model.not_covered(Task.parse(g.task).op) is None]
    scored = transfer_oneshot(data, groups, lambda _: None, path)
    assert scored is not None  # every group is covered
    cost = {f"{g.task}|{g.preset}": data.cost[g.rows] for g in groups}
    out = ranking_metrics(groups, scored[0], cost, True, 0)
    out["datasets"] = len(groups)
    return {k: float(v) for k, v in out.items()}


def tuning(results: Path) -> dict[str, dict[str, Any]]:
    """Per agent of the results file: best / optimum per task (mean over seeds) and the geomean."""
    from benchmarks.leaderboard.report import compute

    lb = compute(results)
    out: dict[str, dict[str, Any]] = {}
    for (agent, task), cell in lb.cells.items():
        out.setdefault(agent, {"tasks": {}})["tasks"][task] = {
            "quality": float(np.mean(cell.vs_best)), "min": float(np.min(cell.vs_best)), "seeds": cell.seeds,
            "agent_secs": float(np.mean(cell.agent_secs))}
    for doc in out.values():
        q = [t["quality"] for t in doc["tasks"].values()]
        doc["geomean"] = float(np.exp(np.mean(np.log(q))))
    return out


def evaluate(results: Path) -> dict[str, Any]:
    from agents.models.oneshot import OneShotModel
    from agents.one_shot import pick_oneshot_checkpoint
    from agents.pretrained import checkpoint_path
    from benchmarks.leaderboard.results import read_results
    from benchmarks.leaderboard.suite import Suite, base_agent
    from tune_gym.datasets.pgs import held_out_tasks

    header, _ = read_results(results)
    suite = Suite.from_dict(header["suite"])
    tuned = tuning(results)
    shared: dict[str, Any] = {}
    doc: dict[str, Any] = {"results": str(results), "networks": list(NETWORKS), "seeds": suite.seeds, "models": {}}
    for agent in suite.agents:
        entry: dict[str, Any] = {"tuning": tuned.get(agent)}
        if base_agent(agent) == "one-shot":
            option = suite.agent_options.get(agent, {}).get("checkpoint", "auto")
            path = checkpoint_path(option, "", lambda _: pick_oneshot_checkpoint(held_out_tasks(NETWORKS)),
                                   "One-Shot")
            meta = OneShotModel.load(path).metadata
            print(f"{agent}: {path.name}", flush=True)
            entry.update(checkpoint=path.name, command=meta.get("command"),
                         train_tasks=len(meta.get("train_tasks", ())), dataset=dataset_metrics(path, shared))
        doc["models"][agent] = entry
    return doc


def markdown(doc: dict[str, Any]) -> str:
    tasks = sorted({t for d in doc["models"].values() if d["tuning"] for t in d["tuning"]["tasks"]})
    lines = [f"Held-out networks: {', '.join(doc['networks'])}. Dataset metrics over their committed datasets; "
             f"tuning: best of 64 measurements over the optimum (replay), mean of {doc['seeds']} seeds "
             f"(`{doc['results']}`).", "",
             "| agent | predictor's training tasks | top-1 | top-5 | pairwise acc. | nDCG@10 | MSE "
             "| tuning (geomean) | " + " | ".join(tasks) + " |",
             "|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(tasks)]
    for name, d in doc["models"].items():
        ds, tu = d.get("dataset") or {}, d["tuning"] or {"tasks": {}}
        metrics = [f"{ds[k]:.3f}" if k in ds else "-" for k in ("top1", "top5", "pairwise", "ndcg10", "mse")]
        quality = [f"{tu['tasks'][t]['quality']:.3f}" if t in tu["tasks"] else "-" for t in tasks]
        geomean = f"{tu['geomean']:.3f}" if "geomean" in tu else "-"
        lines.append(f"| {name} | {d.get('train_tasks', '-')} | " + " | ".join(metrics) + f" | {geomean} | "
                     + " | ".join(quality) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="results file of the oneshot_ablation suite")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    doc = evaluate(args.results)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "ablation.json").write_text(json.dumps(doc, indent=1) + "\n")
    table = markdown(doc)
    (args.out_dir / "ablation.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
