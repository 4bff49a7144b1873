"""Cost-model dataset metrics against hand-computed cases."""

import math

import numpy as np
import pytest

from agents.models import metrics as m

INF = float("inf")


def test_labels_min_over_cost_and_failures_zero():
    assert np.allclose(m.labels(np.array([2.0, 1.0, INF, 4.0])), [0.5, 1.0, 0.0, 0.25])
    assert np.allclose(m.labels(np.array([INF, np.nan])), [0.0, 0.0])


def test_top_k_score_by_hand():
    # task A (weight 1): best 1.0; the model's top-1 is the 2.0 config.
    # task B (weight 3): best 4.0; the model's top-1 is the best.
    a = (np.array([0.1, 0.9, 0.5]), np.array([1.0, 2.0, 3.0]))
    b = (np.array([0.7, 0.2]), np.array([4.0, 8.0]))
    assert m.top_k_score([a, b], [1, 3], k=1) == pytest.approx((1 * 1.0 + 3 * 4.0) / (1 * 2.0 + 3 * 4.0))
    # top-2 of A holds 2.0 and 3.0: still 2.0; top-3 finds the best.
    assert m.top_k_score([a, b], [1, 3], k=2) == pytest.approx(13.0 / 14.0)
    assert m.top_k_score([a, b], [1, 3], k=3) == pytest.approx(1.0)


def test_top_k_score_failed_picks():
    a = (np.array([1.0, 0.0]), np.array([INF, 1.0]))
    assert m.top_k_score([a], [1], k=1) == 0.0
    assert m.top_k_score([a], [1], k=2) == 1.0


def test_ties_are_broken_randomly_not_by_row_order():
    cost = np.arange(1.0, 101.0)
    flat = np.zeros(100)
    picks = {int(m.top_k(flat, 1, seed=s)[0]) for s in range(20)}
    assert len(picks) > 5
    # same seed, same pick
    assert m.top_k(flat, 3, seed=4).tolist() == m.top_k(flat, 3, seed=4).tolist()
    assert m.top_k_score([(flat, cost)], [1], k=1, seed=0) < 1.0


def test_pairwise_accuracy_by_hand():
    cost = np.array([1.0, 2.0, 3.0, INF])
    assert m.pairwise_accuracy(np.array([3.0, 2.0, 1.0, 9.0]), cost) == 1.0
    assert m.pairwise_accuracy(np.array([1.0, 2.0, 3.0, 9.0]), cost) == 0.0
    # one of three pairs wrong, one tie (half)
    assert m.pairwise_accuracy(np.array([3.0, 3.0, 0.0, 0.0]), cost) == pytest.approx((2 + 0.5) / 3)
    assert math.isnan(m.pairwise_accuracy(np.array([1.0, 2.0]), np.array([1.0, 1.0])))


def test_ndcg_by_hand():
    cost = np.array([1.0, 2.0, 4.0])  # labels 1, 0.5, 0.25 -> gains 1, sqrt2-1, 2^.25-1
    g = np.exp2([1.0, 0.5, 0.25]) - 1
    d = 1 / np.log2([2, 3, 4])
    assert m.ndcg_at_k(np.array([3.0, 2.0, 1.0]), cost, k=3) == pytest.approx(1.0)
    rev = (g[::-1] * d).sum() / (g * d).sum()
    assert m.ndcg_at_k(np.array([1.0, 2.0, 3.0]), cost, k=3) == pytest.approx(rev)
    assert m.ndcg_at_k(np.array([1.0, 2.0, 3.0]), cost, k=1) == pytest.approx(g[2] / g[0])


def test_precision_valid_and_mse():
    cost = np.array([1.0, INF, 2.0, INF])
    assert m.precision_valid_at_k(np.array([4.0, 3.0, 2.0, 1.0]), cost, k=2) == 0.5
    assert m.precision_valid_at_k(np.array([4.0, 1.0, 2.0, 1.5]), cost, k=2) == 1.0
    y = m.labels(cost)  # 1, 0, .5, 0
    assert m.mse(y, cost) == 0.0
    assert m.mse(np.zeros(4), cost) == pytest.approx((1 + 0.25) / 4)
    # top 25% of the 2 valid configs = the best one only
    assert m.mse_top(np.zeros(4), cost) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="fraction"):
        m.mse_top(y, cost, fraction=0)


def test_weighted_mean_skips_nan():
    assert m.weighted_mean({"a": 1.0, "b": float("nan"), "c": 0.0}, {"a": 3, "b": 1, "c": 1}) == pytest.approx(0.75)
