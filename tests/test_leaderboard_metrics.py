"""Leaderboard metrics: exact random-search baseline, random-relative score, trials-to-target, geomean.

The last tests cross-check against the reference implementation of the methodology, the PyPI package
``autotuning-methodology`` (skipped when it is not installed).
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from benchmarks.leaderboard import metrics as M

# ------------------------------------------------------------------------------------- exact baseline B(t)


def test_expected_random_best_hand_computed():
    # min of t of {1, 2, 3, 4}: t=1 the mean; t=2 (1*3 + 2*2 + 3*1) / 6; t=3 (1*3 + 2*1) / 4; t=4 the minimum
    np.testing.assert_allclose(M.expected_random_best([4, 1, 3, 2]), [2.5, 10 / 6, 1.25, 1.0], rtol=1e-15)
    np.testing.assert_allclose(M.expected_random_best([1, 2, 3, 4], max_trials=2), [2.5, 10 / 6], rtol=1e-15)
    # failed configs (NaN, inf, <= 0) are left out of the space, as the package's default baseline does
    np.testing.assert_allclose(M.expected_random_best([np.nan, 4, 1, np.inf, 3, 0, 2]), [2.5, 10 / 6, 1.25, 1.0])
    with pytest.raises(ValueError):
        M.expected_random_best([1, 2, 3, 4], max_trials=5)
    with pytest.raises(ValueError):
        M.expected_random_best([np.nan, np.inf])


@pytest.mark.parametrize("costs", [
    [0.3, 1.7, 0.9, 2.5, 0.1, 4.0, 1.1],          # distinct, N = 7
    [2.0, 1.0, 2.0, 5.0, 1.0, 3.0],               # ties, N = 6
    [1e-6, 1.0, 1e3, 1e-3, 7.0],                  # spread over 9 decades
])
def test_expected_random_best_matches_enumeration(costs):
    n = len(costs)
    brute = np.zeros(n)
    perms = list(itertools.permutations(costs))
    for perm in perms:
        brute += np.minimum.accumulate(perm)
    brute /= len(perms)
    np.testing.assert_allclose(M.expected_random_best(costs), brute, rtol=1e-12)


def _order_statistics_in_log_space(sorted_costs: np.ndarray, t: int) -> float:
    """B(t) = sum_i c_(i) C(N-i, t-1) / C(N, t), every term from log-gamma: independent of the module's method."""
    n = sorted_costs.size
    i = np.arange(1, n - t + 2)
    lgc = lambda a, b: special.gammaln(a + 1) - special.gammaln(b + 1) - special.gammaln(a - b + 1)
    return float(np.sum(sorted_costs[: i.size] * np.exp(lgc(n - i, t - 1) - lgc(n, t))))


def test_expected_random_best_is_stable_for_large_spaces():
    rng = np.random.default_rng(0)
    n = 50_000
    costs = np.round(rng.lognormal(-7, 1.5, size=n), 8)  # kernel seconds, heavy tail, with ties
    costs[rng.choice(n, 500, replace=False)] = np.nan       # failed configs
    valid = np.sort(costs[np.isfinite(costs)])
    b = M.expected_random_best(costs)
    assert b.shape == (valid.size,)
    assert np.all(np.isfinite(b))
    assert np.all(np.diff(b) <= 1e-12 * b[0])               # non-increasing (up to rounding)
    assert b[-1] == valid[0]                                # all drawn: the minimum
    assert b[0] == pytest.approx(valid.mean(), rel=1e-10)   # one draw: the mean
    np.testing.assert_array_equal(M.expected_random_best(costs, 1234), b[:1234])  # a prefix, bit for bit
    for t in (1, 2, 10, 777, 20_000, valid.size - 1):
        assert b[t - 1] == pytest.approx(_order_statistics_in_log_space(valid, t), rel=1e-9), t


# ------------------------------------------------------------------------------------------ score P(t)


def test_random_relative_score_hand_cases():
    b = M.expected_random_best([1, 2, 3, 4])
    np.testing.assert_allclose(M.random_relative_score(b, b, 1.0)[:3], 0.0)        # as random search: 0
    p = M.random_relative_score(np.ones(4), b, 1.0)
    np.testing.assert_allclose(p[:3], 1.0)                                        # the optimum: 1
    assert np.isnan(p[3])                                                         # B == optimum: undefined
    p = M.random_relative_score([4.0, 2.0], b[:2], 1.0)
    np.testing.assert_allclose(p, [(2.5 - 4) / 1.5, (10 / 6 - 2) / (4 / 6)])
    # score_curve on trials: a run that hits the optimum on its first trial scores 1 over the whole budget
    costs = np.arange(1.0, 11.0)
    assert M.random_budget(costs) == 7   # K = 1 config within 5% of median->optimum: ceil(11/2) = 6 draws, +10%
    grid, p = M.score_curve([1.0], costs)
    np.testing.assert_array_equal(grid, np.arange(1, 8))
    np.testing.assert_allclose(p, 1.0)
    assert M.mean_score([1.0, 5.0], costs) == pytest.approx(1.0)
    assert M.mean_score([2.5], [1, 2, 3, 4], budget=1) == pytest.approx(0.0)      # F(1) = B(1)
    # failed trials cost a trial; before the first valid one the run counts as the worst valid config (4)
    _, p = M.score_curve([np.nan, 1.0], [1, 2, 3, 4], budget=2)
    np.testing.assert_allclose(p, [(2.5 - 4) / 1.5, 1.0])


def test_score_curve_on_simulated_time():
    costs = np.arange(1.0, 11.0)
    eval_seconds = np.ones(10)                     # one second per draw: tau seconds = round(tau) draws
    b = M.expected_random_best(costs)
    grid, p = M.score_curve([5.0, 1.0], costs, clocks=[1.0, 2.0], eval_seconds=eval_seconds, budget=4.0, num=4)
    np.testing.assert_allclose(grid, [1, 2, 3, 4])
    np.testing.assert_allclose(p, [(b[0] - 5) / (b[0] - 1), 1, 1, 1])
    assert M.random_time_budget(costs, eval_seconds * 2) == pytest.approx(6 * 2 * 1.1)
    np.testing.assert_allclose(M.expected_random_best_at_time(costs, eval_seconds, [0.1, 1.4, 2.6, 99]),
                               b[[0, 0, 2, 9]])
    # the package's mean_per_feval: mean of valid + fraction failed x mean of failed
    assert M.random_time_per_trial([1, np.nan, 2, np.nan], [1, 3, 2, 5]) == pytest.approx(1.5 + 0.5 * 4)


def test_random_search_scores_zero_over_the_scored_budget_even_when_runs_end_before_the_methodologys():
    # a space whose top is thin: the methodology's budget (random search's draws to 95% of the way
    # from the median to the optimum) is far longer than runs of 32 trials
    costs = np.concatenate([[1.0], np.linspace(10.0, 20.0, 1999)])
    eval_seconds = np.ones_like(costs)
    assert M.random_budget(costs) > 32 * 10
    trials, seconds = M.scored_budgets(costs, eval_seconds, 32)
    assert (trials, seconds) == (32, 32.0)
    assert M.scored_budgets(costs, eval_seconds, 10**6) == (M.random_budget(costs), M.random_time_budget(
        costs, eval_seconds))
    rng = np.random.default_rng(0)
    runs = [costs[rng.permutation(costs.size)[:32]] for _ in range(400)]  # random search without repeats
    scored = np.array([M.mean_score(r, costs, budget=trials) for r in runs])
    held = np.array([M.mean_score(r, costs) for r in runs])  # each run's last best held to the methodology's
    se = scored.std(ddof=1) / np.sqrt(len(runs))
    assert abs(scored.mean()) < 4 * se                     # random search is 0, as P promises
    assert held.mean() < -0.3                              # not so when its curve is held past its end (-0.46)


def _random_best_on_clock_by_enumeration(costs, eval_seconds, grid, max_trials):
    """E[F(tau)] of random search over every permutation of a tiny space, by the scoring rules."""
    costs, eval_seconds = np.asarray(costs, dtype=float), np.asarray(eval_seconds, dtype=float)
    worst = np.nanmax(costs)
    total = np.zeros(len(grid))
    perms = list(itertools.permutations(range(costs.size)))
    for order in perms:
        order = list(order)[:max_trials]
        clock = np.cumsum(eval_seconds[order])
        for j, tau in enumerate(grid):
            done = [costs[i] for i, c in zip(order, clock) if c <= tau and np.isfinite(costs[i])]
            total[j] += min(done) if done else worst
    return total / len(perms)


@pytest.mark.parametrize("max_trials", [2, 4, None])
def test_random_best_on_the_clock_matches_enumeration(max_trials):
    costs = [4.0, 1.0, np.nan, 2.5, 8.0, 3.0]          # one failed config, which costs its seconds
    eval_seconds = [2.0, 0.5, 1.0, 1.5, 4.0, 0.7]      # slow configs take longer to evaluate
    grid = [0.5, 1.0, 1.6, 2.4, 3.1, 5.0, 9.0, 12.0]
    exact = _random_best_on_clock_by_enumeration(costs, eval_seconds, grid, max_trials or len(costs))
    samples = 20000
    b = M.expected_random_best_on_clock(costs, eval_seconds, grid, max_trials=max_trials, samples=samples)
    # the Monte Carlo part's error: at most (worst - best) / sqrt(samples) per standard error
    np.testing.assert_allclose(b, exact, atol=4 * (8.0 - 1.0) / math.sqrt(samples))
    # deterministic for a seed, and cached without aliasing
    b[:] = 0
    np.testing.assert_array_equal(M.expected_random_best_on_clock(costs, eval_seconds, grid, max_trials=max_trials,
                                                                  samples=samples),
                                  M.expected_random_best_on_clock(costs, eval_seconds, grid, max_trials=max_trials,
                                                                  samples=samples, seed=0))
    assert np.all(M.expected_random_best_on_clock(costs, eval_seconds, grid, max_trials=max_trials,
                                                  samples=samples) > 0)
    assert M.expected_random_best_on_clock(costs, eval_seconds, []).shape == (0,)
    for bad in ({"samples": 0}, {"max_trials": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            M.expected_random_best_on_clock(costs, eval_seconds, grid, **bad)


def test_random_search_scores_zero_on_the_time_axis_where_the_packages_time_baseline_scores_it_below():
    # evaluation seconds spread and growing with the kernel's time (as benchmark repeats make them), a few failures
    rng = np.random.default_rng(3)
    costs = np.exp(rng.normal(0.0, 0.8, 1500))
    costs[rng.choice(costs.size, 60, replace=False)] = np.nan
    eval_seconds = 0.3 + 0.2 * np.nan_to_num(costs, nan=1.0) * rng.uniform(0.5, 1.5, costs.size)
    _, seconds = M.scored_budgets(costs, eval_seconds, 64)
    runs = []
    for _ in range(400):
        order = rng.permutation(costs.size)[:64]
        runs.append((costs[order], np.cumsum(eval_seconds[order])))
    on_clock = np.array([M.mean_score(t, costs, clocks=c, eval_seconds=eval_seconds, budget=seconds, max_trials=64)
                         for t, c in runs])
    grid = np.linspace(np.median(eval_seconds), seconds, 100)
    package_b = M.expected_random_best_at_time(costs, eval_seconds, grid)
    worst, optimum = np.nanmax(costs), np.nanmin(costs)
    package = np.array([np.mean(M.random_relative_score(
        np.nan_to_num(M.best_so_far_at(t, c, grid, minimize=True), nan=worst), package_b, optimum)) for t, c in runs])
    se = on_clock.std(ddof=1) / math.sqrt(len(runs))
    assert abs(on_clock.mean()) < 4 * se                        # random search is 0, as P promises
    assert package.mean() < -4 * package.std(ddof=1) / math.sqrt(len(runs))  # credited with unfinished draws


def test_score_band_is_a_student_t_interval():
    rng = np.random.default_rng(3)
    per_task_seed = rng.normal(0.3, 0.1, size=(4, 10))
    per_seed = per_task_seed.mean(axis=0)
    band = M.score_band(per_seed)
    lo, hi = stats.t.interval(0.95, 9, loc=per_seed.mean(), scale=stats.sem(per_seed))
    assert band["mean"] == pytest.approx(per_seed.mean())
    assert (band["lower"], band["upper"]) == (pytest.approx(lo), pytest.approx(hi))
    assert band["n"] == 10
    curves = M.score_band(per_task_seed.T)         # (seeds, grid): banded per grid point
    assert curves["mean"].shape == (4,) and np.all(curves["lower"] < curves["mean"])
    assert math.isnan(M.score_band([0.5])["lower"])


def _skewed(n: int, seed: int = 0) -> np.ndarray:
    """Per-seed scores shaped like P: at most 1, a long tail below."""
    return 1 - np.random.default_rng(seed).lognormal(0.0, 1.0, n)


def test_bootstrap_band_is_scipys_bca_interval_and_deterministic():
    x = _skewed(25)
    band = M.score_band(x, method="bootstrap", seed=7)
    ci = stats.bootstrap((x,), np.mean, n_resamples=9999, method="BCa", rng=np.random.default_rng(7))
    ci = ci.confidence_interval
    assert (band["lower"], band["upper"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert band["mean"] == pytest.approx(x.mean()) and band["n"] == 25
    assert M.score_band(x, method="bootstrap", seed=7) == band
    assert M.score_band(x, method="bootstrap", seed=np.random.default_rng(7)) == band  # a Generator works too
    assert M.score_band(x, method="bootstrap", seed=8)["lower"] != band["lower"]
    pct = M.score_band(x, method="bootstrap", bootstrap_method="percentile", seed=7)
    assert pct["lower"] != band["lower"] and pct["lower"] < pct["mean"] < pct["upper"]


@pytest.mark.parametrize("how", ["BCa", "percentile"])
@pytest.mark.parametrize("n", [10, 25, 100])
def test_bootstrap_band_contains_the_mean(how, n):
    for seed in range(5):
        band = M.score_band(_skewed(n, seed), method="bootstrap", bootstrap_method=how, seed=seed)
        assert band["lower"] < band["mean"] < band["upper"]


def test_bootstrap_band_narrows_with_more_seeds():
    x = _skewed(400)
    widths = [(b["upper"] - b["lower"]) for b in (M.score_band(x[:k], method="bootstrap") for k in (10, 25, 100, 400))]
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 3


def test_bootstrap_band_skips_nan_and_falls_back_to_the_t_band():
    x = _skewed(20)
    with_nan = np.insert(x, [3, 11], np.nan)
    assert M.score_band(with_nan, method="bootstrap") == pytest.approx(M.score_band(x, method="bootstrap"))
    assert M.score_band(with_nan, method="bootstrap")["n"] == 20
    # fewer than BOOTSTRAP_MIN_SEEDS values: the t-band; one value or none: NaN, as the t-band
    few = x[: M.BOOTSTRAP_MIN_SEEDS - 1]
    assert M.score_band(few, method="bootstrap") == M.score_band(few)
    for short in ([0.5], [np.nan, 0.5], []):
        band = M.score_band(short, method="bootstrap")
        assert math.isnan(band["lower"]) and math.isnan(band["upper"]) and band["n"] == len(short) - short.count(np.nan)
    # curves (seeds, grid): per column; a column with too few seeds keeps its t-band, equal values give [v, v]
    curves = np.column_stack([x, x + 1, np.full(20, 0.25), np.where(np.arange(20) < 5, x, np.nan)])
    curves[2, 1] = np.nan
    band, t_band = M.score_band(curves, method="bootstrap"), M.score_band(curves)
    np.testing.assert_array_equal(band["n"], [20, 19, 20, 5])
    assert band["lower"][0] == pytest.approx(band["lower"][1] - 1, abs=0.05)
    assert (band["lower"][2], band["upper"][2]) == (0.25, 0.25)
    assert (band["lower"][3], band["upper"][3]) == (t_band["lower"][3], t_band["upper"][3])
    assert np.all(band["lower"][:2] < band["mean"][:2]) and np.all(band["mean"][:2] < band["upper"][:2])
    with pytest.raises(ValueError, match="method must be 't' or 'bootstrap'"):
        M.score_band(x, method="normal")
    with pytest.raises(ValueError, match="bootstrap_method must be"):
        M.score_band(x, method="bootstrap", bootstrap_method="basic")


# ------------------------------------------------------------------------ best-so-far, trials-to-target


def test_best_so_far_on_trials_and_time():
    np.testing.assert_array_equal(M.best_so_far([1, np.nan, 3, 0, 2, np.inf, -1]), [1, 1, 3, 3, 3, 3, 3])
    np.testing.assert_array_equal(M.best_time_so_far([np.nan, 2, 3, 1]), [np.nan, 2, 2, 1])
    np.testing.assert_array_equal(M.best_so_far_at([1, 3, 2], [1, 2, 4], [0, 1, 1.5, 2, 10]), [0, 1, 1, 3, 3])
    np.testing.assert_array_equal(M.best_so_far_at([np.nan, 2, 1], [1, 2, 3], [0.5, 1, 2, 3], minimize=True),
                                  [np.nan, np.nan, 2, 1])
    with pytest.raises(ValueError):
        M.best_so_far_at([1, 2], [2, 1], [1])


def test_trials_to_target_and_summary():
    curve = M.best_so_far([1, 5, 3, 9])
    assert M.trials_to_target(curve, 9) == 4
    assert M.trials_to_target(curve, 0.95 * 9) == 4
    assert M.trials_to_target(curve, 5) == 2
    assert M.trials_to_target(curve, 10) is None

    s = M.summarize_trials_to_target([10, 20, None, 30, 40, 50, 60, 70, 80, None])
    assert s == {"median": 55.0, "q25": 32.5, "q75": 77.5, "reached": 8, "runs": 10}
    # three of ten never reach it: q75 lies between a finite value and inf
    s = M.summarize_trials_to_target([1, 2, 3, 4, 5, 6, 7, None, None, float("nan")])
    assert (s["median"], s["q25"], s["q75"], s["reached"]) == (5.5, 3.25, math.inf, 7)
    # more than half never reach it: the median is inf
    s = M.summarize_trials_to_target([1, 2, 3, 4] + [None] * 6)
    assert s["median"] == math.inf and s["q25"] == 3.25
    with pytest.warns(UserWarning, match=">= 10"):
        M.summarize_trials_to_target([1, 2, 3])


# --------------------------------------------------------------------------------------------- throughput


def test_geomean_and_normalized_throughput():
    assert M.geomean([2, 8]) == pytest.approx(4.0)
    assert M.geomean([2, 8], [3, 1]) == pytest.approx(2**1.5)
    assert M.geomean([2, 8, 5], [1, 1, 0]) == pytest.approx(4.0)
    assert M.geomean([0.0, 8], [1, 1]) == 0.0
    for bad in (([-1, 2], None), ([1, 2], [1, -1]), ([1, 2], [0, 0]), ([1, 2], [1])):
        with pytest.raises(ValueError):
            M.geomean(*bad)
    r = M.normalized_throughput(50.0, 100.0, 80.0)
    assert r == {"vs_best": 0.5, "vs_reference": 0.625}
    r = M.normalized_throughput([50.0, 90.0], [100.0, 100.0], [80.0, 60.0])
    np.testing.assert_allclose(r["vs_reference"], [0.625, 1.5])


# ----------------------------------------------------------------- cross-check: autotuning-methodology


def _package_space(tmp_path: Path, costs: np.ndarray, eval_seconds: np.ndarray):
    """The package's SearchspaceStatistics of a synthetic space, through a T4 results file (NaN = failed)."""
    from autotuning_methodology.searchspace_statistics import SearchspaceStatistics

    results = []
    for i, (c, s) in enumerate(zip(costs, eval_seconds)):
        ok = bool(np.isfinite(c))
        results.append({
            "configuration": {"i": i},
            "times": {"compilation": float(s), "runtimes": [0.0]},
            "invalidity": "correct" if ok else "runtime",
            "correctness": 1,
            "measurements": [{"name": "time", "value": float(c) if ok else "RuntimeFailedConfig", "unit": "s"}],
        })
    path = tmp_path / "space_T4.json"
    path.write_text(json.dumps({"schema_version": "1.0.0", "metadata": {"timeunit": "seconds"}, "results": results}))
    return SearchspaceStatistics("synthetic", "cpu", True, ["compilation", "runtimes"], ["time"], path)


@pytest.fixture
def package_space(tmp_path):
    """200 configs costing 1..200 s, every 10th failed; evaluation seconds in [0.5, 2]."""
    pytest.importorskip("autotuning_methodology")
    rng = np.random.default_rng(7)
    costs = np.arange(1.0, 201.0)
    costs[costs % 10 == 0] = np.nan
    perm = rng.permutation(costs.size)
    costs, eval_seconds = costs[perm], rng.uniform(0.5, 2.0, costs.size)
    return costs, eval_seconds, _package_space(tmp_path, costs, eval_seconds)


def test_package_simulated_random_search_matches_exact_expectation(tmp_path):
    pytest.importorskip("autotuning_methodology")
    from autotuning_methodology.baseline import RandomSearchSimulatedBaseline

    rng = np.random.default_rng(11)
    costs = rng.lognormal(0.0, 1.0, size=40)     # no failed configs: the package's simulation draws those too
    ss = _package_space(tmp_path, costs, np.ones(costs.size))
    np.random.seed(0)                            # the package draws with np.random
    sim = RandomSearchSimulatedBaseline(ss, repeats=3000, limit_fevals=costs.size, index=False, flatten=True)
    repeats = sim.y_array                        # (repeats, draws): best value after each draw, per repeat
    exact = M.expected_random_best(costs)
    tol = 5 * repeats.std(axis=0) / math.sqrt(repeats.shape[0]) + 1e-12
    assert np.all(np.abs(sim.performance_at_feval - exact) <= tol)


def test_package_calculated_baseline_is_one_rank_optimistic(tmp_path):
    pytest.importorskip("autotuning_methodology")
    from autotuning_methodology.baseline import RandomSearchCalculatedBaseline

    n = 100
    costs = np.arange(1.0, n + 1)                # cost = rank: the exact B(t) is the expected rank (N+1)/(t+1)
    ss = _package_space(tmp_path, costs, np.ones(n))
    fevals = np.arange(1, n + 1)
    package = RandomSearchCalculatedBaseline(ss).get_curve(fevals, "fevals")
    exact = M.expected_random_best(costs)
    np.testing.assert_allclose(exact, (n + 1) / (fevals + 1), rtol=1e-12)
    # the package looks up the value at index round(t (N+1) / (t+1)) of the worst-first array: one rank better
    assert np.all(np.abs(package - np.maximum(exact - 1, 1)) <= 0.5 + 1e-9)
    assert np.all(package <= exact)


def test_package_budget_time_axis_and_failed_configs(package_space):
    from autotuning_methodology.baseline import RandomSearchCalculatedBaseline

    costs, eval_seconds, ss = package_space
    valid = np.isfinite(costs)
    # failed configs are out of the package's distribution (N = valid configs), as out of ours
    assert ss.objective_performances_total_sorted.size == valid.sum() == M.expected_random_best(costs).size
    assert ss.total_performance_absolute_optimum() == np.nanmin(costs)
    # budget: the package's ceil((N - K) / (K + 1)) is one draw short of the expected (N + 1) / (K + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # not the package's scaled-down special case
        _, package_fevals = ss.cutoff_point(0.95)
    assert M.random_budget(costs, margin=0.0) == package_fevals + 1 == 31
    # time axis: seconds per draw, time budget and seconds -> draws as the package
    assert M.random_time_per_trial(costs, eval_seconds) == pytest.approx(ss.get_time_per_feval("mean_per_feval"))
    assert M.random_time_budget(costs, eval_seconds, margin=0.0) == pytest.approx(
        ss.cutoff_point_time_from_fevals(package_fevals + 1))
    grid = np.linspace(0.1, 60.0, 57)
    fevals = RandomSearchCalculatedBaseline(ss).time_to_fevals(grid)
    np.testing.assert_array_equal(M.expected_random_best_at_time(costs, eval_seconds, grid),
                                  M.expected_random_best(costs)[fevals - 1])


def test_package_standardised_curve_is_the_score(package_space):
    from autotuning_methodology.baseline import RandomSearchCalculatedBaseline

    costs, _, ss = package_space
    baseline = RandomSearchCalculatedBaseline(ss)
    fevals = np.arange(1, M.random_budget(costs) + 1)
    run = M.best_time_so_far(np.where(np.isfinite(costs), costs, np.nan)[: fevals.size][::-1])
    run = np.where(np.isnan(run), np.nanmax(costs), run)
    package_b = baseline.get_curve(fevals, "fevals")
    expected = baseline.get_standardised_curve(fevals, run, "fevals")
    np.testing.assert_allclose(M.random_relative_score(run, package_b, np.nanmin(costs)), expected, rtol=1e-12)


def test_band_coverage_measures_each_band_on_resampled_seeds():
    from benchmarks import band_coverage

    rng = np.random.default_rng(0)
    tasks = [rng.normal(0.2, 0.3, 40), rng.normal(-0.1, 0.5, 40)]
    scores = band_coverage.replicate_scores(tasks, 12, 300, np.random.default_rng(1))
    assert scores.shape == (12, 300) and abs(scores.mean() - np.mean([t.mean() for t in tasks])) < 0.02
    row = band_coverage.measure("toy", "trials", "a", tasks, 12, 300, 499, np.random.default_rng(2))
    assert row.truth == pytest.approx(np.mean([t.mean() for t in tasks]))
    assert set(row.coverage) == set(band_coverage.METHODS) == {"t", "percentile", "BCa"}
    assert 0.9 <= row.coverage["t"] <= 1.0 and row.coverage["percentile"] <= row.coverage["t"]
    assert row.width["percentile"] < row.width["t"]  # the percentile bootstrap's band is the narrower
    line = band_coverage.table_row(row)
    assert line.startswith(f"| toy | trials | a | {row.truth:.3f} | 12 | {row.coverage['t']:.3f} |")
    again = band_coverage.measure("toy", "trials", "a", tasks, 12, 300, 499, np.random.default_rng(2))
    assert again == row
