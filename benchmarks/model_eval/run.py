"""Evaluate cost models on the committed datasets, with whole networks held out.

``python -m benchmarks.model_eval.run --holdout resnet18 [NETWORK ...]`` trains every model on the datasets of
tasks that do not occur in the held-out network, then scores how each ranks the measured configs
of the held-out network's tasks (:mod:`agents.models.metrics`). The transfer TLP model is the
committed checkpoint that ``tlp-sa`` would use (trained without those tasks, checked against its
sidecar's ``train_tasks``) when there is one (``--checkpoint``), so the table scores the model
the agent runs with. Two protocols:

* ``transfer`` (zero-shot): the model never saw a row of the held-out tasks. Rows: TLP, MTL-TLP,
  XGBoost and random forest on MetaSchedule's per-store loop features (the TenSet baseline,
  :func:`agents.models.features.loop_features`), XGBoost on the flattened primitive sequence,
  One-Shot Tuner's predictor (the committed checkpoint ``one-shot`` would use, trained only on
  sampled tasks, when it covers the network's ops), MetaTune's meta-learned GCN (the checkpoint
  ``meta-bo`` would use) before any fine-tuning, and random ranking.
* ``in-task`` (``--shots`` rows of each held-out task measured, the rest to rank): what a tuning
  agent's model faces after its first plan. Rows: XGBoost on knob features (AutoTVM's ``xgb-sa``
  model), the random forest on knob features (AdaTune's), TLP fine-tuned on the shots, the
  transfer TLP without fine-tuning (same rows), MetaTune's model after ``meta-bo``'s online
  fine-tuning of its regressor on the shots, and random ranking.

Each (task, preset) dataset is one group, weighted by the task's occurrences in the held-out
network. Scores are rankings, so MSE and MSE(D) are reported only for the models that regress the
normalised throughput ``label = min cost / cost`` (the XGBoost and forest regressors, One-Shot's
predictor, MetaTune); TLP is
trained with LambdaRank and its scores have no scale.

Output: ``benchmarks/results/model_eval/<holdout>.json`` and ``.md`` (the table). Every random
choice follows ``--seed``.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.models import metrics as m

__all__ = ["evaluate", "main"]

OUT_DIR = Path(__file__).resolve().parents[1] / "results" / "model_eval"
Scorer = Callable[[Any, np.ndarray], np.ndarray]  # (data subset, row indices) -> scores


@dataclass
class Group:
    """The measured rows of one (task, preset, platform) dataset of the held-out network."""

    task: str
    preset: str
    rows: np.ndarray  # indices into the evaluation data
    weight: float


def task_groups(data: Any, rows: np.ndarray, weights: dict[str, int]) -> list[Group]:
    """``rows`` of ``data`` grouped by (task, preset, platform), sorted; each group weighted by its task's
    weight in ``weights``."""
    keys: dict[tuple[str, str, str], list[int]] = {}
    for i in rows:
        keys.setdefault((data.task[i], data.preset[i], data.platform[i]), []).append(int(i))
    return [Group(t, p, np.asarray(r), float(weights[t])) for (t, p, _), r in sorted(keys.items())]


def ranking_metrics(groups: list[Group], score: dict[str, np.ndarray], cost: dict[str, np.ndarray], regress: bool,
                    seed: int) -> dict[str, float]:
    """The table's columns for one model; ``score``/``cost`` keyed by ``task|preset``."""
    names = [f"{g.task}|{g.preset}" for g in groups]
    weights = {n: g.weight for n, g in zip(names, groups)}
    ranked = [(score[n], cost[n]) for n in names]
    out = {
        "top1": m.top_k_score(ranked, list(weights.values()), 1, seed),
        "top5": m.top_k_score(ranked, list(weights.values()), 5, seed),
        "pairwise": m.weighted_mean({n: m.pairwise_accuracy(score[n], cost[n], seed=seed) for n in names}, weights),
        "ndcg10": m.weighted_mean({n: m.ndcg_at_k(score[n], cost[n], 10, seed) for n in names}, weights),
        "valid10": m.weighted_mean({n: m.precision_valid_at_k(score[n], cost[n], 10, seed) for n in names}, weights),
    }
    if regress:
        out["mse"] = m.weighted_mean({n: m.mse(score[n], cost[n]) for n in names}, weights)
        out["mse_top25"] = m.weighted_mean({n: m.mse_top(score[n], cost[n]) for n in names}, weights)
    return out


def _loop_features(data: Any, rows: np.ndarray) -> np.ndarray:
    """MetaSchedule per-store features of the given rows (cached per config in-process)."""
    from agents.models.features import loop_features
    from tune_gym.space import KnobSpace
    from tune_gym.tasks.task import Task

    out = None
    by_space: dict[tuple[str, str], list[int]] = {}
    for j, i in enumerate(rows):
        by_space.setdefault((data.task[i], data.preset[i]), []).append(j)
    for (task, preset), js in by_space.items():
        space = KnobSpace.for_task(Task.parse(task), preset)
        feats = loop_features(space, [tuple(int(v) for v in data.config[rows[j]]) for j in js])
        if out is None:
            out = np.zeros((len(rows), feats.shape[1]), dtype=np.float32)
        out[js] = feats
    assert out is not None
    return out


def _knob_features(data: Any, rows: np.ndarray) -> np.ndarray:
    from agents.models.features import KnobFeaturizer
    from tune_gym.space import KnobSpace
    from tune_gym.tasks.task import Task

    space = KnobSpace.for_task(Task.parse(data.task[rows[0]]), data.preset[rows[0]])
    return KnobFeaturizer(space)(np.stack([np.asarray(data.config[i], dtype=np.int64) for i in rows]))


def _xgb_reg(seed: int) -> Any:
    import xgboost as xgb

    return xgb.XGBRegressor(n_estimators=300, max_depth=6, learning_rate=0.1, subsample=0.8, random_state=seed,
                            n_jobs=1)


def _rf_reg(seed: int) -> Any:
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=100, min_samples_leaf=2, random_state=seed, n_jobs=1)


def held_out_checkpoint(holdout_tasks: set[str]) -> Path | None:
    """The committed TLP checkpoint ``tlp-sa`` would use for these tasks (trained on none of
    them, the most rows), or ``None``."""
    from agents.tlp_sa import pick_checkpoint

    try:
        return pick_checkpoint(holdout_tasks)
    except FileNotFoundError:
        return None


def _transfer_tlp(checkpoint: str, holdout_tasks: set[str], train: Any, seed: int, epochs: int, progress: bool,
                  log: Callable[[str], None]) -> tuple[Any, str]:
    """The zero-shot TLP model: a committed checkpoint (``"auto"`` or a path) trained without
    the held-out tasks, else (``"auto"`` with none, or ``"none"``) one trained here on ``train``."""
    from agents.models.tlp import TLPModel

    path = held_out_checkpoint(holdout_tasks) if checkpoint == "auto" else None if checkpoint == "none" \
        else Path(checkpoint)
    if path is None:
        log(f"transfer: training TLP ({epochs} epochs)")
        model = TLPModel(seed=seed, epochs=epochs)
        model.fit(train, progress=progress)
        return model, f"trained here, seed {seed}, {epochs} epochs"
    model = TLPModel.load(path)
    leaked = sorted(holdout_tasks & set(model.metadata.get("train_tasks", ())))
    if "train_tasks" not in model.metadata or leaked:
        raise ValueError(f"checkpoint {path} was trained on held-out tasks {leaked} (or does not list its "
                         "train_tasks): it cannot be scored on them")
    log(f"transfer: TLP from checkpoint {path.name}")
    return model, f"checkpoint {path.name}"


def transfer_oneshot(data: Any, groups: list[Group], log: Callable[[str], None], path: Path | None = None
                      ) -> tuple[dict[str, np.ndarray], str] | None:
    """Scores of a One-Shot predictor on every group: the checkpoint at ``path``, by default the
    committed one ``one-shot`` would use (trained on sampled tasks, none of the held-out ones);
    None when there is no such checkpoint or it lacks an op of the groups."""
    from agents.models.oneshot import KnobColumns, OneShotModel
    from agents.one_shot import pick_oneshot_checkpoint
    from tune_gym.features.task import task_features
    from tune_gym.space import KnobSpace
    from tune_gym.tasks.task import Task

    if path is None:
        try:
            path = pick_oneshot_checkpoint({g.task for g in groups})
        except FileNotFoundError as err:
            log(f"transfer: no One-Shot predictor ({err})")
            return None
    model = OneShotModel.load(path)
    leaked = sorted({g.task for g in groups} & set(model.metadata.get("train_tasks", ())))
    if leaked:
        raise ValueError(f"One-Shot checkpoint {path} was trained on held-out tasks {leaked}")
    why = sorted({w for g in groups if (w := model.not_covered(Task.parse(g.task).op)) is not None})
    if why:  # scores on a subset of the groups would not compare with the other rows
        log(f"transfer: no One-Shot row: {path.name} was {'; '.join(why)}")
        return None
    log(f"transfer: One-Shot predictor from checkpoint {path.name}")
    out = {}
    for g in groups:
        space = KnobSpace.for_task(Task.parse(g.task), g.preset)
        knob_x = KnobColumns(space)(np.stack(data.config[g.rows]))
        task_x = np.repeat(task_features(space.task)[None], len(g.rows), axis=0)
        out[f"{g.task}|{g.preset}"] = model.predict(task_x, knob_x, data.x[g.rows])
    return out, f"checkpoint {path.name}"


class _MetaTune:
    """The committed MetaTune model ``meta-bo`` would use for the held-out tasks (trained on none of
    them), with each evaluated row's graph embedding computed once; ``None`` from :meth:`load`
    when there is no such checkpoint."""

    def __init__(self, path: Path, data: Any, groups: list[Group]) -> None:
        from agents.meta_bo import MetaBOAgent
        from agents.models.metatune import GraphRows
        from tune_gym.space import KnobSpace
        from tune_gym.tasks.task import Task

        self.model = copy.deepcopy(_load_metatune(str(path)))
        self.source = f"checkpoint {path.name}"
        agent = MetaBOAgent()  # its online fine-tuning settings
        self.steps, self.lr = agent.fine_tune_steps, agent.fine_tune_lr
        self.h: dict[int, np.ndarray] = {}
        for g in groups:
            task = Task.parse(g.task)
            space = KnobSpace.for_task(task, g.preset)
            rows = GraphRows.encode(self.model.template_for(task), space, np.stack(data.config[g.rows]))
            self.h.update(zip(g.rows.tolist(), self.model.embed(rows)))

    @classmethod
    def load(cls, data: Any, groups: list[Group], log: Callable[[str], None]) -> _MetaTune | None:
        from agents.meta_bo import pick_checkpoint

        try:
            path = pick_checkpoint({g.task for g in groups})
        except FileNotFoundError as err:
            log(f"no MetaTune model ({err})")
            return None
        log(f"MetaTune model from checkpoint {path.name}: encoding {sum(len(g.rows) for g in groups)} loop graphs")
        return cls(path, data, groups)

    def embeddings(self, rows: np.ndarray) -> np.ndarray:
        return np.stack([self.h[int(i)] for i in rows])

    def transfer(self, groups: list[Group]) -> dict[str, np.ndarray]:
        """Zero-shot predictions (the meta-learned weights, before any fine-tuning)."""
        self.model.reset()
        return {f"{g.task}|{g.preset}": self.model.predict_embeddings(self.embeddings(g.rows)) for g in groups}

    def fine_tuned(self, groups: list[Group], shots: dict[str, np.ndarray], cost: np.ndarray) -> dict[str, np.ndarray]:
        """Predictions after ``meta-bo``'s online fine-tuning on each task's shots."""
        out = {}
        for g in groups:
            shot = shots[f"{g.task}|{g.preset}"]
            self.model.fine_tune_embeddings(self.embeddings(shot), m.labels(cost[shot]).astype(np.float32),
                                            self.steps, self.lr)
            out[f"{g.task}|{g.preset}"] = self.model.predict_embeddings(self.embeddings(g.rows))
        self.model.reset()
        return out


def _load_metatune(path: str) -> Any:
    from agents.models.metatune import MetaTuneModel

    return MetaTuneModel.load(path)


def evaluate(holdout: str = "resnet18", seed: int = 0, shots: int = 64, epochs: int = 50,
             progress: bool = True, log: Callable[[str], None] = print, checkpoint: str = "auto",
             shared: dict[str, Any] | None = None, with_metatune: bool = True) -> dict[str, Any]:
    """Train and score every model (see the module docstring); returns the JSON document.

    ``checkpoint``: where the transfer TLP model comes from: ``"auto"`` (a committed checkpoint
    trained without the held-out tasks, else trained here), a checkpoint path, or ``"none"``
    (always trained here, for ``epochs`` epochs). ``shared``: a dict kept between calls for
    several held-out networks; the data and the loop features of every row are computed once.
    ``with_metatune``: score the committed MetaTune model too (encodes every held-out row's loop
    graph: minutes)."""
    import torch

    from agents.models.rank_data import held_out_mask, load_ranking_data
    from agents.models.tlp import TLPModel

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    shared = {} if shared is None else shared
    if "data" not in shared:
        shared["data"] = load_ranking_data(progress=progress)
    data = shared["data"]
    in_holdout, network_weights = held_out_mask(data, [holdout])
    if not in_holdout.any():
        raise ValueError(f"no dataset holds a task of network {holdout!r}")
    train_rows, test_rows = np.flatnonzero(~in_holdout), np.flatnonzero(in_holdout)
    weights = {t: network_weights[holdout][t] for t in set(data.task[test_rows])}
    groups = [g for g in task_groups(data, test_rows, weights) if np.isfinite(data.cost[g.rows]).any()]
    cost = {f"{g.task}|{g.preset}": data.cost[g.rows] for g in groups}
    rng = np.random.default_rng(seed)
    platforms = sorted(set(data.platform))
    log(f"{len(train_rows)} training rows ({len(set(data.task[train_rows]))} tasks), {len(test_rows)} held-out rows "
        f"in {len(groups)} datasets of {holdout}; platforms: {', '.join(platforms)}")

    results: dict[str, dict[str, Any]] = {"transfer": {}, "in-task": {}}
    train = data.subset(train_rows)
    y_train = train.label

    def per_group(fn: Callable[[Group], np.ndarray]) -> dict[str, np.ndarray]:
        return {f"{g.task}|{g.preset}": np.asarray(fn(g), dtype=np.float64) for g in groups}

    # ---------------------------------------------------------------- transfer (zero-shot)
    tlp, tlp_source = _transfer_tlp(checkpoint, set(data.task[test_rows]), train, seed, epochs, progress, log)
    results["transfer"]["TLP"] = ranking_metrics(groups, per_group(lambda g: tlp.predict(data.x[g.rows])), cost, False,
                                                 seed)
    if len(platforms) > 1:
        log("transfer: MTL-TLP")
        mtl = TLPModel(platforms=platforms, seed=seed, epochs=epochs)
        mtl.fit(train, progress=progress)
        results["transfer"]["MTL-TLP"] = ranking_metrics(
            groups, per_group(lambda g: mtl.predict(data.x[g.rows], platform=data.platform[g.rows[0]])), cost, False,
            seed)
    log("transfer: XGBoost / random forest on loop features")
    if "loop" not in shared:
        shared["loop"] = _loop_features(data, np.arange(len(data)))
    x_loop_train = shared["loop"][train_rows]
    loop_test = {f"{g.task}|{g.preset}": shared["loop"][g.rows] for g in groups}
    for name, make in (("XGBoost (loop features)", _xgb_reg), ("Random forest (loop features)", _rf_reg)):
        model = make(seed).fit(x_loop_train, y_train)
        results["transfer"][name] = ranking_metrics(
            groups, {k: model.predict(v) for k, v in loop_test.items()}, cost, True, seed)
    log("transfer: XGBoost on the primitive sequence")
    flat = data.x.reshape(len(data.x), -1)
    model = _xgb_reg(seed).fit(flat[train_rows], y_train)
    results["transfer"]["XGBoost (primitive sequence)"] = ranking_metrics(
        groups, per_group(lambda g: model.predict(flat[g.rows])), cost, True, seed)
    oneshot = transfer_oneshot(data, groups, log)
    if oneshot is not None:
        results["transfer"]["One-Shot predictor"] = ranking_metrics(groups, oneshot[0], cost, True, seed)
    metatune = _MetaTune.load(data, groups, log) if with_metatune else None
    if metatune is not None:
        results["transfer"]["MetaTune (meta-learned, no fine-tuning)"] = ranking_metrics(
            groups, metatune.transfer(groups), cost, True, seed)
    results["transfer"]["Random"] = ranking_metrics(
        groups, per_group(lambda g: rng.random(len(g.rows))), cost, False, seed)

    # ---------------------------------------------------------------- in-task (shots measured)
    log(f"in-task: {shots} measured configs per held-out dataset")
    split = {}
    for g in groups:
        order = rng.permutation(len(g.rows))
        split[f"{g.task}|{g.preset}"] = (g.rows[order[:shots]], g.rows[order[shots:]])
    rest_groups = [Group(g.task, g.preset, split[f"{g.task}|{g.preset}"][1], g.weight) for g in groups]
    rest_groups = [g for g in rest_groups if np.isfinite(data.cost[g.rows]).any()]
    rest_cost = {f"{g.task}|{g.preset}": data.cost[g.rows] for g in rest_groups}

    def fitted(make: Callable[[int], Any], feats: Callable[[Any, np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for g in rest_groups:
            shot = split[f"{g.task}|{g.preset}"][0]
            labels = m.labels(data.cost[shot])
            model = make(seed).fit(feats(data, shot), labels)
            out[f"{g.task}|{g.preset}"] = model.predict(feats(data, g.rows))
        return out

    results["in-task"]["XGBoost (knob features)"] = ranking_metrics(rest_groups, fitted(_xgb_reg, _knob_features),
                                                             rest_cost, True, seed)
    results["in-task"]["Random forest (knob features)"] = ranking_metrics(rest_groups, fitted(_rf_reg, _knob_features),
                                                                   rest_cost, True, seed)
    results["in-task"]["TLP, no fine-tuning"] = ranking_metrics(
        rest_groups, {f"{g.task}|{g.preset}": tlp.predict(data.x[g.rows]) for g in rest_groups}, rest_cost, False,
        seed)
    tuned = {}
    for g in rest_groups:
        shot = split[f"{g.task}|{g.preset}"][0]
        model = copy.deepcopy(tlp)
        model.fine_tune(data.x[shot], m.labels(data.cost[shot]).astype(np.float32))
        tuned[f"{g.task}|{g.preset}"] = model.predict(data.x[g.rows])
    results["in-task"]["TLP, fine-tuned"] = ranking_metrics(rest_groups, tuned, rest_cost, False, seed)
    if metatune is not None:
        shot_rows = {k: v[0] for k, v in split.items()}
        results["in-task"]["MetaTune, fine-tuned"] = ranking_metrics(
            rest_groups, metatune.fine_tuned(rest_groups, shot_rows, data.cost), rest_cost, True, seed)
    results["in-task"]["Random"] = ranking_metrics(
        rest_groups, {f"{g.task}|{g.preset}": rng.random(len(g.rows)) for g in rest_groups}, rest_cost, False, seed)

    return {
        "holdout": holdout, "seed": seed, "shots": shots, "epochs": epochs, "tlp": tlp_source,
        "oneshot": oneshot[1] if oneshot is not None else None,
        "metatune": metatune.source if metatune is not None else None,
        "train_tasks": sorted(set(data.task[train_rows])), "train_rows": len(train_rows),
        "test": [{"task": g.task, "preset": g.preset, "rows": len(g.rows), "weight": g.weight} for g in groups],
        "platforms": platforms, "results": results, "seconds": round(time.perf_counter() - t0, 1),
    }


COLUMNS = (("top1", "top-1"), ("top5", "top-5"), ("pairwise", "pairwise acc."), ("ndcg10", "nDCG@10"),
           ("valid10", "valid@10"), ("mse", "MSE"), ("mse_top25", "MSE top 25%"))


def markdown(doc: dict[str, Any]) -> str:
    """The results table of :func:`evaluate`'s document."""
    lines = [f"Held-out network: **{doc['holdout']}** ({len(doc['test'])} datasets); trained on "
             f"{doc['train_rows']} rows of {len(doc['train_tasks'])} other tasks; platforms: "
             f"{', '.join(doc['platforms'])}; TLP: {doc.get('tlp', 'trained here')}; "
             + (f"One-Shot: {doc['oneshot']} (trained on sampled tasks); " if doc.get("oneshot") else "")
             + (f"MetaTune: {doc['metatune']}; " if doc.get("metatune") else "")
             + f"seed {doc['seed']}, {doc['seconds']:.0f} s.", "",
             "| protocol | model | " + " | ".join(c[1] for c in COLUMNS) + " |",
             "|---|---|" + "---:|" * len(COLUMNS)]
    for protocol, rows in doc["results"].items():
        label = protocol if protocol == "transfer" else f"in-task ({doc['shots']} shots)"
        for model, vals in rows.items():
            cells = [f"{vals[k]:.3f}" if k in vals and np.isfinite(vals[k]) else "n/a" for k, _ in COLUMNS]
            lines.append(f"| {label} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--holdout", nargs="+", default=["resnet18"],
                        help="network(s) whose tasks are held out, each evaluated on its own")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shots", type=int, default=64, help="measured configs per task (in-task protocol)")
    parser.add_argument("--epochs", type=int, default=50, help="TLP training epochs (when trained here)")
    parser.add_argument("--checkpoint", default="auto",
                        help="transfer TLP model: 'auto' (a committed checkpoint trained without the held-out "
                             "tasks, else trained here), a checkpoint path, or 'none' (train here)")
    parser.add_argument("--no-metatune", action="store_true",
                        help="skip the MetaTune rows (they encode every held-out row's loop graph)")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    shared: dict[str, Any] = {}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for holdout in args.holdout:
        doc = evaluate(holdout, args.seed, args.shots, args.epochs, checkpoint=args.checkpoint, shared=shared,
                       with_metatune=not args.no_metatune)
        (args.out_dir / f"{holdout}.json").write_text(json.dumps(doc, indent=1) + "\n")
        table = markdown(doc)
        (args.out_dir / f"{holdout}.md").write_text(table)
        print(table)


if __name__ == "__main__":
    main()
