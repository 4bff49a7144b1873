"""Dataset metrics for cost models: how well predicted scores rank measured configs.

Every function takes, for one group of configs (one task on one platform), the model's scores
(higher = predicted faster) and the measured costs (seconds; ``inf`` or ``nan`` = the config
failed). Models may be rankers (TLP: scores on no particular scale) or regressors of the
normalised throughput ``label = min cost / cost`` (in (0, 1], 0 for a failed config).

* :func:`top_k_score`: TLP's metric (Zhai et al., ASPLOS 2023) for one network: with task
  weights ``w`` (occurrences in the network) and ``best_t`` the task's best measured cost,
  ``sum_t w_t * best_t / sum_t w_t * min(cost of the model's top-k picks of t)``. 1 is perfect.
  A top-k pick that failed costs ``inf``; a task whose picks all failed makes the score 0.
* :func:`pairwise_accuracy`: over pairs of valid configs with different costs, the fraction the
  scores order like the costs (ties in score count half).
* :func:`ndcg_at_k`: normalised DCG of the top-k by score, gains ``2^label - 1``, discounts
  ``log2(rank + 1)``; failed configs have gain 0.
* :func:`precision_valid_at_k`: the fraction of the top-k by score that ran (no build or run
  error): how well a model steers away from invalid configs.
* :func:`mse` and :func:`mse_top`: mean squared error of a regressor's prediction of ``label``,
  over all configs and over those whose measured throughput is in the top 25% (MetaTune's MSE(D)).
  Meaningless for a ranker, whose scores have no scale: the evaluation reports them only for
  models that regress the label.

Ties in scores are broken by a seeded permutation (:func:`top_k`), so a constant model scores
like a random one rather than like the row order of the dataset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "grouped_pairwise_accuracy",
    "labels",
    "mse",
    "mse_top",
    "ndcg_at_k",
    "pairwise_accuracy",
    "precision_valid_at_k",
    "top_k",
    "top_k_score",
    "weighted_mean",
]


def _valid(cost: np.ndarray) -> np.ndarray:
    cost = np.asarray(cost, dtype=np.float64)
    return np.isfinite(cost) & (cost > 0)


def labels(cost: np.ndarray) -> np.ndarray:
    """``min cost / cost`` over the valid configs, 0 for failed ones (all 0 when none ran)."""
    cost = np.asarray(cost, dtype=np.float64)
    ok = _valid(cost)
    out = np.zeros(cost.shape, dtype=np.float64)
    if ok.any():
        out[ok] = cost[ok].min() / cost[ok]
    return out


def top_k(scores: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Indices of the ``k`` highest scores, best first; ties broken by a seeded permutation."""
    scores = np.asarray(scores, dtype=np.float64)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    perm = np.random.default_rng(seed).permutation(len(scores))
    s = np.where(np.isnan(scores[perm]), -np.inf, scores[perm])
    order = np.argsort(-s, kind="stable")
    return perm[order[:k]]


def top_k_score(groups: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float], k: int,
                seed: int = 0) -> float:
    """TLP's top-k score of one network.

    Args:
        groups: per task, ``(scores, costs)`` over its measured configs.
        weights: per task, its occurrences in the network.
        k: how many of the model's picks are measured.
        seed: tie-breaking seed (:func:`top_k`).

    Returns:
        ``sum w * best / sum w * best_of_top_k`` in [0, 1].
    """
    if len(groups) != len(weights) or not groups:
        raise ValueError(f"need one weight per task and at least one task, got {len(groups)} groups, "
                         f"{len(weights)} weights")
    num = den = 0.0
    for (scores, cost), w in zip(groups, weights):
        cost = np.asarray(cost, dtype=np.float64)
        ok = _valid(cost)
        if not ok.any():
            raise ValueError("a task with no valid measured config has no best cost; leave it out")
        picked = cost[top_k(scores, min(k, len(cost)), seed)]
        picked = picked[_valid(picked)]
        if picked.size == 0:
            return 0.0
        num += w * cost[ok].min()
        den += w * picked.min()
    return num / den


def pairwise_accuracy(scores: np.ndarray, cost: np.ndarray, max_pairs: int = 200_000, seed: int = 0) -> float:
    """Fraction of valid config pairs with different costs that the scores order correctly.

    All pairs when there are at most ``max_pairs`` of them, else ``max_pairs`` seeded random pairs.
    Returns ``nan`` when there is no such pair.
    """
    scores = np.asarray(scores, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    ok = _valid(cost)
    s, c = scores[ok], cost[ok]
    n = len(c)
    if n * (n - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(n, 1)
    else:
        rng = np.random.default_rng(seed)
        i, j = rng.integers(0, n, max_pairs), rng.integers(0, n, max_pairs)
    keep = c[i] != c[j]
    i, j = i[keep], j[keep]
    if i.size == 0:
        return float("nan")
    faster_i = c[i] < c[j]
    ds = s[i] - s[j]
    right = np.where(faster_i, ds > 0, ds < 0)
    return float((right + 0.5 * (ds == 0)).mean())


def ndcg_at_k(scores: np.ndarray, cost: np.ndarray, k: int, seed: int = 0) -> float:
    """nDCG@k with gains ``2^label - 1`` (:func:`labels`) and ``log2(rank + 1)`` discounts."""
    gains = np.exp2(labels(cost)) - 1.0
    k = min(k, len(gains))
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = float((np.sort(gains)[::-1][:k] * discount).sum())
    if ideal == 0.0:
        return float("nan")
    return float((gains[top_k(scores, k, seed)] * discount).sum() / ideal)


def precision_valid_at_k(scores: np.ndarray, cost: np.ndarray, k: int, seed: int = 0) -> float:
    """Fraction of the top-k configs by score that ran without error."""
    picked = np.asarray(cost, dtype=np.float64)[top_k(scores, min(k, len(cost)), seed)]
    return float(_valid(picked).mean())


def mse(pred: np.ndarray, cost: np.ndarray) -> float:
    """Mean squared error of predicted labels against :func:`labels` over all configs."""
    pred = np.asarray(pred, dtype=np.float64)
    return float(np.mean((pred - labels(cost)) ** 2))


def mse_top(pred: np.ndarray, cost: np.ndarray, fraction: float = 0.25) -> float:
    """MSE over the configs whose measured throughput is in the top ``fraction`` (MetaTune's MSE(D))."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    y = labels(cost)
    n_top = max(1, round(fraction * int((y > 0).sum())))
    top = np.argsort(-y, kind="stable")[:n_top]
    return float(np.mean((np.asarray(pred, dtype=np.float64)[top] - y[top]) ** 2))


def weighted_mean(values: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Mean of per-task values weighted by ``weights``, ignoring nan values."""
    v = np.array([values[t] for t in values], dtype=np.float64)
    w = np.array([weights[t] for t in values], dtype=np.float64)
    keep = ~np.isnan(v)
    return float((v[keep] * w[keep]).sum() / w[keep].sum()) if keep.any() else float("nan")


def grouped_pairwise_accuracy(scores: np.ndarray, cost: np.ndarray, groups: np.ndarray, seed: int = 0) -> float:
    """:func:`pairwise_accuracy` within each group (e.g. one task), averaged over groups weighted by
    their number of valid-config pairs (so it equals pooling the pairs of every group)."""
    scores, cost, groups = np.asarray(scores, dtype=np.float64), np.asarray(cost, dtype=np.float64), np.asarray(groups)
    right = total = 0.0
    for g in np.unique(groups):
        rows = groups == g
        n_valid = int(_valid(cost[rows]).sum())
        acc = pairwise_accuracy(scores[rows], cost[rows], seed=seed)
        if not np.isnan(acc):
            weight = n_valid * (n_valid - 1) / 2
            right += acc * weight
            total += weight
    return right / total if total else float("nan")
