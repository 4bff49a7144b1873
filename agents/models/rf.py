"""Random-forest surrogate with uncertainty and the expected-improvement acquisition (AdaTune).

AdaTune (Li et al., "AdaTune: Adaptive Tensor Program Compilation Made Efficient", NeurIPS
2020) replaces AutoTVM's XGBoost ranker with a random forest whose trees, each grown on a
bootstrap sample of the measurements, form an ensemble: the mean of their predictions is
the estimate and their spread is its uncertainty. Defaults follow the authors' code: 10
trees, ``max_features=10`` (capped here at the feature count, which scikit-learn requires).
The standard deviation is the population one (``ddof=0``) across the trees, as in the
authors' code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import ndtr

__all__ = ["RandomForestModel", "expected_improvement"]


class RandomForestModel:
    """A scikit-learn ``RandomForestRegressor`` that predicts a mean and a std per row.

    Args:
        n_trees: trees in the forest (10, the authors' value).
        max_features: features tried at each split (10, the authors' value), capped at
            the number of feature columns.
        seed: the forest's ``random_state`` (bootstrap samples and split candidates).

    Example:
        >>> model = RandomForestModel(seed=0).fit(x, y)
        >>> mean, std = model.predict(x_new)
    """

    def __init__(self, n_trees: int = 10, max_features: int = 10, seed: int = 0) -> None:
        if n_trees < 1 or max_features < 1:
            raise ValueError(f"n_trees and max_features must be >= 1, got {n_trees}, {max_features}")
        self.n_trees = n_trees
        self.max_features = max_features
        self.seed = seed
        self.forest: Any = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> RandomForestModel:
        """Fit the forest on features ``x`` (n x d) and targets ``y`` (n,)."""
        from sklearn.ensemble import RandomForestRegressor

        x = np.asarray(x, dtype=np.float32)
        forest = RandomForestRegressor(
            n_estimators=self.n_trees, max_features=min(self.max_features, x.shape[1]),
            random_state=self.seed, n_jobs=1,
        )
        forest.fit(x, np.asarray(y, dtype=np.float64))
        self.forest = forest
        return self

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` across the trees' predictions for each row of ``x`` (n x d)."""
        if self.forest is None:
            raise RuntimeError("RandomForestModel.predict before fit")
        x = np.ascontiguousarray(x, dtype=np.float32)
        # check_input=False skips scikit-learn's per-call validation: the simulated
        # annealing calls this hundreds of times per plan on small batches.
        per_tree = np.stack([tree.predict(x, check_input=False) for tree in self.forest.estimators_])
        return per_tree.mean(axis=0), per_tree.std(axis=0)


def expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    """Expected improvement over ``best`` of a Gaussian with mean ``mu`` and std ``sigma``.

    ``EI = (mu - best) * Phi(Z) + sigma * phi(Z)`` with ``Z = (mu - best) / sigma``, and
    ``EI = max(0, mu - best)`` where ``sigma == 0`` (the authors' code skips that branch by
    a typo; this implements the formula). ``Phi``/``phi`` are the standard normal CDF/PDF.
    Vectorized; never divides by zero, and tiny negative rounding errors are clipped to 0
    (EI is non-negative by definition).
    """
    mu = np.asarray(mu, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    gap = mu - best
    positive = sigma > 0
    z = np.divide(gap, sigma, out=np.zeros(np.broadcast(gap, sigma).shape), where=positive)
    pdf = np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)
    ei = np.where(positive, gap * ndtr(z) + sigma * pdf, gap)
    return np.maximum(ei, 0.0)
