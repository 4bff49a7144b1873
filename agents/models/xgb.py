"""XGBoost cost model with AutoTVM's settings (pairwise rank objective by default)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["AUTOTVM_PARAMS", "XGBModel"]

#: AutoTVM's XGBoost parameters (python/tvm/autotvm/tuner/xgboost_cost_model.py).
AUTOTVM_PARAMS: dict[str, Any] = {
    "max_depth": 3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
    "lambda": 1.0, "alpha": 0.0,
}


class XGBModel:
    """Gradient-boosted trees on features -> throughput normalized by its maximum.

    Args:
        loss: ``"rank"`` (objective ``rank:pairwise``, AutoTVM's default) or ``"reg"``
            (squared error, Chameleon's choice).
        num_rounds: boosting rounds (AutoTVM trains up to 8000 with early stopping on a
            training-set recall@plan_size; a fixed count keeps fits fast and deterministic).
        seed: XGBoost's seed.
        nthread: threads for training and prediction.
    """

    def __init__(self, loss: str = "rank", num_rounds: int = 150, seed: int = 0, nthread: int | None = None) -> None:
        if loss not in ("rank", "reg"):
            raise ValueError(f"loss must be 'rank' or 'reg', not {loss!r}")
        self.loss = loss
        self.num_rounds = num_rounds
        self.seed = seed
        self.nthread = nthread
        self.booster: Any = None
        self.base: XGBModel | None = None  # a transferred model whose output is the base margin

    def _params(self) -> dict[str, Any]:
        params = dict(AUTOTVM_PARAMS, objective="rank:pairwise" if self.loss == "rank" else "reg:squarederror",
                      seed=self.seed, verbosity=0)
        if self.nthread:
            params["nthread"] = self.nthread
        return params

    def fit(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> XGBModel:
        """Fit on features ``x`` (n x d) and throughputs ``y`` (n,).

        ``y`` is divided by its maximum (per group when ``groups`` gives a task id per row, so
        tasks of different speeds share one scale).
        """
        import xgboost as xgb

        y = np.asarray(y, dtype=np.float64)
        label = np.zeros_like(y)
        groups = np.zeros(len(y), dtype=np.int64) if groups is None else np.asarray(groups)
        order = np.argsort(groups, kind="stable")  # rank objectives need contiguous groups
        x, y, groups = x[order], y[order], groups[order]
        for g in np.unique(groups):
            rows = groups == g
            label[rows] = y[rows] / max(float(y[rows].max()), 1e-9)
        dtrain = xgb.DMatrix(x, label=label)
        if self.loss == "rank":
            dtrain.set_group(np.unique(groups, return_counts=True)[1])
        if self.base is not None:
            dtrain.set_base_margin(self.base.predict(x))
        self.booster = xgb.train(self._params(), dtrain, num_boost_round=self.num_rounds)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predictions for ``x`` (in place on the booster: no DMatrix, cheap for small batches)."""
        if self.booster is None:
            raise RuntimeError("XGBModel.predict before fit")
        margin = self.base.predict(x) if self.base is not None else None
        return np.asarray(self.booster.inplace_predict(np.asarray(x, dtype=np.float32), base_margin=margin))
