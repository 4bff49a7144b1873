"""``xgb-sa`` and ``xgb-sa-transfer``: AutoTVM's XGBoost tuner (paper: TVM / AutoTVM, 2018).

Defaults (METHODS.md section 1): XGBoost ``rank:pairwise`` with max_depth 3, eta 0.3,
gamma 1e-4, min_child_weight 1, lambda 1 on "knob" features; simulated annealing with 128
persistent parallel points, up to 500 steps, early stop after 50 idle steps, temperature
1 -> 0; batches (plan_size) of 64 whose last 5% are random; invalid configs as throughput 0;
the first plan is random.

Transfer (``xgb-sa-transfer``): the model is first trained on records of *other* tasks with
task-independent loop features (MetaSchedule's PerStoreFeature of the lowered program, each
task's throughput normalized by its best), so even the first batch is model-guided; then
each refit trains a new model on the task's own measurements on top of the transferred one
(its predictions are the base margin, as in AutoTVM). Loop features cost ~30 ms per config,
so the SA of this agent defaults to 64 points x 40 steps (documented deviation).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.base import register
from agents.model_based import ModelGuidedAgent
from agents.models.features import KnobFeaturizer, loop_features
from agents.models.xgb import XGBModel
from agents.optimizers.sa import SimulatedAnnealing
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["XGBSAAgent", "XGBTransferAgent"]


@register("xgb-sa", "AutoTVM: XGBoost rank model on knob features + simulated annealing, 5% random")
class XGBSAAgent(ModelGuidedAgent):
    """AutoTVM's XGBTuner.

    Args:
        plan_size: configs per planning round (64).
        eps: random share of each plan (0.05).
        features: ``"knob"`` (default) or ``"loop"`` (lowered-program features, slower).
        loss: ``"rank"`` or ``"reg"``.
        num_rounds: XGBoost boosting rounds per fit.
        invalid: ``"zero"`` (feed failures as throughput 0) or ``"drop"``.
        sa_points, sa_steps, sa_early_stop: simulated annealing settings (128, 500, 50).
    """

    def __init__(self, plan_size: int = 64, eps: float = 0.05, features: str = "knob", loss: str = "rank",
                 num_rounds: int = 150, invalid: str = "zero", sa_points: int = 128, sa_steps: int = 500,
                 sa_early_stop: int = 50, n_init: int | None = None) -> None:
        super().__init__(plan_size, eps, n_init, invalid,
                         SimulatedAnnealing(n_points=sa_points, max_steps=sa_steps, early_stop=sa_early_stop))
        if features not in ("knob", "loop"):
            raise ValueError(f"features must be 'knob' or 'loop', not {features!r}")
        self.features = features
        self.loss = loss
        self.num_rounds = num_rounds

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.model = XGBModel(self.loss, self.num_rounds, seed=int(self.rng.integers(2**31)))
        self._knob = KnobFeaturizer(space)

    def featurize(self, configs: np.ndarray) -> np.ndarray:
        if self.features == "knob":
            return self._knob(configs)
        return loop_features(self.space, [tuple(int(v) for v in c) for c in configs])

    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        if y.max() <= 0:
            return False
        self.model.fit(self.featurize(configs), y)
        return True

    def score(self, configs: np.ndarray) -> np.ndarray:
        return self.model.predict(self.featurize(configs))


@register("xgb-sa-transfer", "AutoTVM transfer: XGBoost pre-trained on other tasks' records (loop features)")
class XGBTransferAgent(XGBSAAgent):
    """``xgb-sa`` whose model starts from records of other tasks.

    Args:
        records: record files (JSONL, :mod:`tune_gym.records`) of other tasks; records of
            the task being tuned are ignored (that would not be transfer).
        max_records_per_task: cap on the rows taken from each source task (best first).
        Other arguments as :class:`XGBSAAgent`; ``features`` is always ``"loop"``.
    """

    def __init__(self, records: Sequence[str | Path] = (), max_records_per_task: int = 512,
                 sa_points: int = 64, sa_steps: int = 40, **kwargs: object) -> None:
        kwargs.pop("features", None)
        super().__init__(features="loop", sa_points=sa_points, sa_steps=sa_steps, **kwargs)  # type: ignore[arg-type]
        self.record_paths = [Path(p) for p in ([records] if isinstance(records, (str, Path)) else records)]
        self.max_records_per_task = max_records_per_task

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.base = self._pretrain()
        self.fitted = self.base is not None
        self.model.base = self.base

    def _pretrain(self) -> XGBModel | None:
        from tune_gym.records import load_records

        by_task: dict[tuple[str, str], list] = {}
        for path in self.record_paths:
            for rec in load_records(path):
                if rec.task != self.task.uri:
                    by_task.setdefault((rec.task, rec.preset), []).append(rec)
        xs, ys, groups = [], [], []
        for g, ((uri, preset), recs) in enumerate(sorted(by_task.items())):
            recs = sorted(recs, key=lambda r: -r.result.gflops)[: self.max_records_per_task]
            if not any(r.result.ok for r in recs):
                continue
            space = KnobSpace.for_task(Task.from_uri(uri), preset)
            xs.append(loop_features(space, [r.config for r in recs]))
            ys.append([r.result.gflops for r in recs])
            groups.append(np.full(len(recs), g))
        if not xs:
            return None
        base = XGBModel(self.loss, self.num_rounds, seed=self.model.seed)
        return base.fit(np.concatenate(xs), np.concatenate(ys), np.concatenate(groups))

    def score(self, configs: np.ndarray) -> np.ndarray:
        model = self.model if self.model.booster is not None else self.base
        return model.predict(self.featurize(configs))  # type: ignore[union-attr]
