"""XGBoost cost model with AutoTVM's settings, early stopping and transfer base model.

Follows TVM's ``python/tvm/autotvm/tuner/xgboost_cost_model.py`` (``XGBoostCostModel``):

* parameters: max_depth 3, gamma 1e-4, min_child_weight 1, subsample 1, eta 0.3, lambda 1,
  alpha 0; objective ``rank:pairwise`` (``loss="rank"``, AutoTVM's default) or squared error;
* labels: throughput divided by its maximum, rows shuffled, one ranking group;
* ``fit``: up to 8000 boosting rounds, stopped when the *training set's* average
  recall@plan_size (:func:`average_recall`, ``xgb_average_recalln_curve_score``) has not
  improved for 20 rounds; the trees after the best round are kept, as AutoTVM's callback did;
* ``fit_log`` (the transfer base model): up to 400 rounds, stopping after 100, on the average
  recall@(2 * plan_size);
* transfer: the base model's margin, scaled by ``1 / 2 ** (n / 64)`` (``n`` = rows of the
  latest fit), is the base margin of training and prediction; the base model is dropped once
  the scale falls below 0.05 (``_base_model_discount`` and ``fit``).

XGBoost >= 2 builds ranking pairs differently from the XGBoost that AutoTVM was written for;
``lambdarank_pair_method="mean"`` with one pair per sample restores its sampling (one random
pair per row).
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np

from tune_gym.options import Choice, Int, checked_options

__all__ = ["AUTOTVM_PARAMS", "LOSS", "LOSSES", "MAX_ROUNDS", "NTHREAD", "NUM_ROUNDS", "STOPPING_ROUNDS", "XGBModel",
           "average_recall", "recall_curve"]

#: AutoTVM's XGBoost parameters (xgboost_cost_model.py, ``XGBoostCostModel.__init__``).
AUTOTVM_PARAMS: dict[str, Any] = {
    "max_depth": 3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
    "lambda": 1.0, "alpha": 0.0,
}
#: ``XGBoostCostModel.fit``: ``num_boost_round=8000``, ``stopping_rounds=20``.
FIT_MAX_ROUNDS, FIT_STOPPING_ROUNDS = 8000, 20
#: ``XGBoostCostModel.fit_log``: ``num_boost_round=400``, ``stopping_rounds=100``, ``plan_size * 2``.
LOG_MAX_ROUNDS, LOG_STOPPING_ROUNDS = 400, 100
#: The training objectives: ``rank:pairwise`` (AutoTVM's default) or squared error.
LOSSES = ("rank", "reg")
#: ``_base_model_discount``: ``1 / 2 ** (n / 64)``; the base model is discarded below 0.05.
DISCOUNT_HALF_LIFE, DISCOUNT_MIN = 64.0, 0.05

# The model's options, declared once for it and for the agents that pass them on.
LOSS = Choice(LOSSES, help="'rank' (rank:pairwise, AutoTVM's default) or 'reg' (squared error)")
NUM_ROUNDS = Int(1, none=True, help="fixed boosting rounds without early stopping (None: up to max_rounds with "
                                    "early stopping, as AutoTVM)")
NTHREAD = Int(1, none=True, help="XGBoost threads (None: all cores); 1 trains faster on a few hundred rows")
MAX_ROUNDS = Int(1, help="most boosting rounds with early stopping (AutoTVM: 8000)")
STOPPING_ROUNDS = Int(1, help="rounds without a better training average recall before stopping (AutoTVM: 20)")


def recall_curve(ranks: np.ndarray, n: int | None = None) -> np.ndarray:
    """AutoTVM's ``recall_curve(trial_ranks)`` (tuner/metric.py), its first ``n`` values.

    ``curve[i] = #{j < i : ranks[j] <= i} / (i + 1)`` where ``ranks[j]`` is the true rank
    (0 = best) of the j-th config in predicted order. (AutoTVM's ``trial_ranks[:i]`` leaves
    out position ``i`` itself; kept as written.)
    """
    ranks = np.asarray(ranks)
    m = len(ranks) if n is None else min(n, len(ranks))
    i = np.arange(m)
    hits = (ranks[None, :m] <= i[:, None]) & (i[None, :] < i[:, None])
    return hits.sum(axis=1) / (i + 1.0)


def average_recall(preds: np.ndarray, labels: np.ndarray, n: int) -> float:
    """AutoTVM's ``xgb_average_recalln_curve_score(N)``: ``sum(recall_curve[:N]) / N``."""
    order = np.argsort(preds, kind="stable")[::-1]
    ranked = np.asarray(labels)[order]
    ranks = np.empty(len(ranked), dtype=np.int64)
    ranks[np.argsort(-ranked, kind="stable")] = np.arange(len(ranked))
    return float(recall_curve(ranks, n).sum() / n)


class XGBModel:
    """Gradient-boosted trees on features -> throughput normalized by its maximum.

    Args (declared in the signature: :data:`LOSS`, :data:`NUM_ROUNDS`, ...):
        seed: XGBoost's seed and the seed of the row shuffle.
        nthread: threads for training and prediction. Default 1, not AutoTVM's ``None`` (all
            cores): the model is the same, and on a few hundred rows one thread is faster
            (measured 1.5 vs 4-20 ms per round on the 2-core dev machine).
        plan_size: ``N`` of the recall@N stopping metric when :meth:`fit` is not given one
            (AutoTVM passes the tuner's plan size, 64).

    Raises:
        OptionError: an option of the wrong type or out of range (naming it).
    """

    @checked_options
    def __init__(self, loss: Annotated[str, LOSS] = "rank", num_rounds: Annotated[int | None, NUM_ROUNDS] = None,
                 seed: int = 0, nthread: Annotated[int | None, NTHREAD] = 1,
                 max_rounds: Annotated[int, MAX_ROUNDS] = FIT_MAX_ROUNDS,
                 stopping_rounds: Annotated[int, STOPPING_ROUNDS] = FIT_STOPPING_ROUNDS,
                 plan_size: Annotated[int, Int(1, help="N of the recall@N stopping metric")] = 64) -> None:
        self.loss = loss
        self.num_rounds = num_rounds
        self.seed = seed
        self.nthread = nthread
        self.max_rounds = max_rounds
        self.stopping_rounds = stopping_rounds
        self.plan_size = plan_size
        self.booster: Any = None
        self.base: XGBModel | None = None  # a transferred model whose margin is the base margin
        self.n_samples = 0  # rows of the latest fit (the discount's n)
        self.rounds = 0  # boosting rounds of the latest fit
        self._rng = np.random.default_rng(seed)

    def _params(self) -> dict[str, Any]:
        params = dict(AUTOTVM_PARAMS, seed=self.seed, verbosity=0, disable_default_eval_metric=1)
        if self.loss == "rank":
            params.update(objective="rank:pairwise", lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=1)
        else:
            params["objective"] = "reg:squarederror"
        if self.nthread:
            params["nthread"] = self.nthread
        return params

    @property
    def discount(self) -> float:
        """Weight of the base model's margin: ``1 / 2 ** (n_samples / 64)`` (AutoTVM)."""
        return float(1.0 / 2.0 ** (self.n_samples / DISCOUNT_HALF_LIFE))

    def _base_margin(self, x: np.ndarray) -> np.ndarray | None:
        if self.base is None:
            return None
        return self.discount * self.base.predict(x)

    def fit(self, x: np.ndarray, y: np.ndarray, plan_size: int | None = None) -> XGBModel:
        """Fit on features ``x`` (n x d) and throughputs ``y`` (n,) as AutoTVM's ``fit``.

        With a base model, its discounted margin is the base margin; the discount uses this
        fit's row count, and a base model whose discount is below 0.05 is dropped for good.
        """
        self.n_samples = len(y)
        if self.base is not None and self.discount < DISCOUNT_MIN:
            self.base = None
        return self._train(x, y, plan_size or self.plan_size, self.max_rounds, self.stopping_rounds,
                           self._base_margin(np.asarray(x, dtype=np.float32)))

    def fit_log(self, x: np.ndarray, y: np.ndarray, plan_size: int | None = None) -> XGBModel:
        """Train a transfer base model on other tasks' rows as AutoTVM's ``fit_log``.

        All rows form one ranking group, normalized by their common maximum; up to 400
        rounds, stopping after 100 without improvement of the average recall@(2 * plan_size).
        """
        return self._train(x, y, 2 * (plan_size or self.plan_size), LOG_MAX_ROUNDS, LOG_STOPPING_ROUNDS, None)

    def _train(self, x: np.ndarray, y: np.ndarray, n: int, max_rounds: int, stopping: int,
               margin: np.ndarray | None) -> XGBModel:
        import xgboost as xgb

        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y, dtype=np.float64)
        label = y / max(float(y.max()), 1e-8)
        order = self._rng.permutation(len(y))
        dtrain = xgb.DMatrix(x[order], label=label[order])
        if self.loss == "rank":
            dtrain.set_group([len(y)])
        if margin is not None:
            dtrain.set_base_margin(margin[order])
        if self.num_rounds is not None:  # fixed rounds, no early stopping
            self.booster = xgb.train(self._params(), dtrain, num_boost_round=self.num_rounds)
        else:
            name = f"a-recall@{n}"

            def metric(preds: np.ndarray, data: Any) -> tuple[str, float]:
                return name, average_recall(preds, data.get_label(), n)

            stop = xgb.callback.EarlyStopping(rounds=stopping, metric_name=name, data_name="tr", maximize=True,
                                              save_best=False)
            self.booster = xgb.train(self._params(), dtrain, num_boost_round=max_rounds, evals=[(dtrain, "tr")],
                                     custom_metric=metric, callbacks=[stop], verbose_eval=False)
        self.rounds = int(self.booster.num_boosted_rounds())
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted scores (margins) of ``x``; in place on the booster (no DMatrix)."""
        x = np.asarray(x, dtype=np.float32)
        if self.booster is None:
            if self.base is not None:
                return self.base.predict(x)
            raise RuntimeError("XGBModel.predict before fit")
        return np.asarray(self.booster.inplace_predict(x, predict_type="margin", base_margin=self._base_margin(x)))
