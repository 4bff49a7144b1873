"""P(t) of Kernel Tuner runs by tune_gym's metrics and by the ``autotuning_methodology`` package.

The traces are real Kernel Tuner 1.5 runs (:mod:`benchmarks.external.kernel_tuner_runs`). The
package's side uses its own code: ``SearchspaceStatistics`` on the space's T4 file (optimum,
median, cutoff point, time per evaluation), ``runner.write_results`` on the run (its
best-so-far and cumulative time per evaluation), ``StochasticOptimizationAlgorithm`` for the
run's curve over time and ``RandomSearchCalculatedBaseline`` (its default baseline: failed
configurations left out, ``mean_per_feval``) for ``B`` and for ``P = (F - B) / (S_opt - B)``.
tune_gym's side uses :mod:`benchmarks.leaderboard.metrics`.

**Tolerance.** Where the two define a quantity the same way they agree to floating point: P
within ``1e-12 * (1 + |P|)`` (both evaluate ``(B - F) / (B - S_opt)`` in float64 from the
same inputs; a few roundings of relative size 1e-16, amplified at most by ``|P|``; the
largest difference seen is 6e-15, on 50 runs on the A100 convolution), everything else
(optimum, median, time per draw, draws at a time, budgets, best-so-far) within ``1e-12``
relative or exactly. Where they define it
differently, the test compares what is comparable and pins each definition down:

1. **Random baseline B.** tune_gym: the exact expected best of ``t`` draws without
   replacement (checked here against the combinatorial sum). The package: the cost at the
   expected *rank* of the best draw, ``dist_worst_first[min(N - 1, round(t (N + 1) / (t + 1)))]``,
   whose index counts one draw too many (tune_gym's docstring explains the off-by-one), then a
   monotone cubic (PCHIP) smoothing, which on the trials axis returns its knots. At ``t = 1`` it
   is near the median where tune_gym's is the mean (A100 convolution: 1.83 ms against 2.29
   ms; at its budget of 1157 draws 0.615 ms against 0.605 ms). P is therefore compared with
   one baseline plugged into both formulas. How far the two full scores are apart is
   measured, not asserted: on the A100 convolution (10 strategies x 5 seeds, tune_gym's
   budgets) the package's mean P over the budget was higher by 0.002 to 0.24 on the trials
   axis (0.06 on average) and by 0.002 to 0.28 on the time axis (0.09 on average, its
   interpolated curve adding to the baseline's effect); single points differ by up to 3.8
   (trials) and 18 (time) early in the budget, where a run's first configuration is slow and
   mean and median baselines are far apart. (These figures compare the package's score with
   tune_gym's calculated baseline, :func:`~benchmarks.leaderboard.metrics.expected_random_best_at_time`,
   on both axes; see 8.)
2. **Budget.** Both use random search's expected draws to reach 95% of the way from the
   median to the optimum; tune_gym's count is the package's ``cutoff_point`` + 1 (the same
   off-by-one), and tune_gym scores up to the budget with its 10% margin where the package
   scores up to the cutoff (its margin only lengthens the runs) from its 1% cutoff point.
   When only the optimum lies within the target the package moves the cutoff to the second
   best ("Scaled down cutoff point"); tune_gym keeps it. The time budget is the trials budget
   times the median evaluation seconds in both. The test pins these relations; the
   comparisons run on tune_gym's grid, given to both.
3. **The run's curve over time.** tune_gym: a step function (the best of the evaluations
   finished by ``t``). The package: an isotonic regression through the run's (time, best)
   points, linear between them (``use_bagging=False``, one run; its reports default to a
   bootstrap over repeats, which is random). They agree at the evaluations' clocks, where
   the test compares them; between two evaluations the package's curve anticipates the next.
4. **Before the first valid evaluation** F is undefined; tune_gym scores it as the worst
   valid cost, the package drops those evaluations (a single run starting with a failure
   then fails its shape check). Compared from the first valid evaluation on.
5. **Repeats.** The package, fed Kernel Tuner's own results, counts a configuration served
   again from the cache as an evaluation (with its live framework time); tune_gym's trials
   are the distinct configurations. Both are given the trials.
6. **Seconds per evaluation.** The package sums its ``objective_time_keys`` ("all":
   compilation, runtimes, framework, search_algorithm, validation); tune_gym charges compile +
   verification + benchmark + framework. The Benchmark Hub's T4 files hold the sum of the 32
   runtimes where the caches hold ``benchmark_time`` (about 2% more on the A100 convolution),
   and no runtimes for failed configurations. The test's T4 file stores the benchmark time as
   one runtime, so both sides charge the same seconds; the slow test gives both sides the
   Benchmark Hub's T4 timings.
7. **Over seeds** tune_gym averages each run's P; the package takes P of the median curve.
   Compared per run.
8. **Random baseline over time on the leaderboards.** The package's calculated baseline counts
   ``round(t / s)`` draws as done at time ``t``, finished or not; the leaderboards score the time
   axis against random search on the runs' own clock instead
   (:func:`~benchmarks.leaderboard.metrics.expected_random_best_on_clock`), against which a random
   search scores 0. Both are tested in ``tests/test_leaderboard_metrics.py``; here P over time is
   compared with the package's baseline plugged into both formulas, as on trials.
"""

from __future__ import annotations

import gzip
import json
import math
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kt_toy_space import ToySpace, write_toy_space

from benchmarks.external.kernel_tuner_runs import KernelTunerSimulation, StrategyTrace
from benchmarks.leaderboard import metrics
from tune_gym.external.kernel_tuner_io import MeasuredSpace, read_cache, read_problem, read_t4

HUB = Path(__file__).resolve().parents[2] / "shared" / "external" / "benchmark_hub"
#: The package's "all" objective time keys.
TIME_KEYS = ["compilation", "runtimes", "framework", "search_algorithm", "validation"]
STRATEGIES = ("random_sample", "genetic_algorithm", "greedy_ils", "simulated_annealing", "pso")
SEEDS = (0, 1, 2)


def close(a: Any, b: Any) -> bool:
    """Agreement to floating point: ``|a - b| <= 1e-12 * (1 + |b|)`` everywhere (NaN where both are)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    both_nan = np.isnan(a) & np.isnan(b)
    return a.shape == b.shape and bool(np.all(both_nan | (np.abs(a - b) <= 1e-12 * (1 + np.abs(b)))))


class Space:
    """One measured space, seen by both sides: tune_gym's costs and charges (from ``measured``)
    and the package's statistics and baseline (from the T4 file). ``scale``: the package's
    performance unit per second (its performance values are not converted)."""

    def __init__(self, measured: MeasuredSpace, t4_path: Path, scale: float) -> None:
        from autotuning_methodology.baseline import RandomSearchCalculatedBaseline
        from autotuning_methodology.searchspace_statistics import SearchspaceStatistics

        self.measured = measured
        self.costs = np.array([math.nan if r is None or r.time_secs is None else r.time_secs
                               for r in measured.records])
        self.eval_secs = np.array([r.charge_secs if r is not None else math.nan for r in measured.records])
        self.stats = SearchspaceStatistics("kernel", "device", True, TIME_KEYS, ["time"], t4_path)
        self.baseline = RandomSearchCalculatedBaseline(self.stats)
        self.scale = scale
        self.optimum = float(np.nanmin(self.costs))
        data = json.loads(t4_path.read_text())
        per_sec = 1e3 if data["metadata"]["timeunit"].startswith("mil") else 1.0
        names = measured.space.names
        self.t4 = {tuple(r["configuration"][n] for n in names): _in_seconds(r, per_sec) for r in data["results"]}

    def trial_times_and_clocks(self, trace: StrategyTrace) -> tuple[np.ndarray, np.ndarray]:
        """The trials' kernel seconds and the clock, charged with this space's seconds."""
        return trace.times(), np.cumsum([self.eval_secs[e.index] for e in trace.trials])

    def package_run(self, trace: StrategyTrace, folder: Path) -> Any:
        """The package's record of the run (``write_results`` on the trials' T4 results)."""
        from autotuning_methodology.caching import ResultsDescription
        from autotuning_methodology.runner import write_results

        name = f"{trace.strategy}_{trace.seed}"
        description = ResultsDescription(folder / name, "kernel", "device", name, name, True, TIME_KEYS, ["time"], True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            write_results([[self.t4[e.config] for e in trace.trials]], description, compressed=False)
        return description


def _in_seconds(result: dict[str, Any], per_sec: float) -> dict[str, Any]:
    """A T4 result with its times in seconds, as the package's runner converts them before
    ``write_results``; a failed configuration without runtimes gets an empty list (the runner
    requires every objective time key)."""
    times = {k: [x / per_sec for x in v] if isinstance(v, list) else v / per_sec for k, v in result["times"].items()}
    return {**result, "times": {"runtimes": [], **times}}


def run_traces(cache: Path, problem: Path, max_fevals: int, time_limit: float) -> list[StrategyTrace]:
    with KernelTunerSimulation(cache, problem) as sim:
        return [sim.run(s, seed=seed, max_fevals=max_fevals, time_limit=time_limit)
                for s in STRATEGIES for seed in SEEDS]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> ToySpace:
    return write_toy_space(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="module")
def space(toy: ToySpace) -> Space:
    return Space(read_cache(toy.cache, read_problem(toy.problem)), toy.t4, scale=1.0)


@pytest.fixture(scope="module")
def traces(toy: ToySpace, space: Space) -> list[StrategyTrace]:
    return run_traces(toy.cache, toy.problem, metrics.random_budget(space.costs),
                      metrics.random_time_budget(space.costs, space.eval_secs))


# ---------------------------------------------------------------------------------------------
# The checks, on any space


def check_space_rules(space: Space) -> None:
    """Optimum, budgets, median and seconds per draw, by both."""
    stats = space.stats
    assert space.optimum * space.scale == pytest.approx(stats.total_performance_absolute_optimum(), rel=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cutoff = stats.cutoff_point(0.95)[1]
    valid = np.sort(space.costs[np.isfinite(space.costs)])
    n, within = valid.size, int(np.sum(valid <= valid[0] + (np.median(valid) - valid[0]) * 0.05))
    if within > 1:  # definition 2: tune_gym counts one draw more
        assert metrics.random_budget(space.costs, margin=0.0) == cutoff + 1
        assert metrics.random_budget(space.costs) == min(n, math.ceil((cutoff + 1) * 1.1 - 1e-9))
        assert metrics.random_time_budget(space.costs, space.eval_secs, margin=0.0) == pytest.approx(
            stats.cutoff_point_time_from_fevals(cutoff + 1), rel=1e-12)
    else:  # only the optimum: the package counts the draws to the second best (and one fewer)
        assert metrics.random_budget(space.costs, margin=0.0) == math.ceil((n + 1) / 2)
        assert cutoff == math.ceil((n - 2) / 3)
    assert float(np.median(space.eval_secs)) == pytest.approx(stats.total_time_median(), rel=1e-12)
    per_draw = metrics.random_time_per_trial(space.costs, space.eval_secs)
    assert per_draw == pytest.approx(stats.get_time_per_feval("mean_per_feval"), rel=1e-12)
    grid = np.linspace(0.0, metrics.random_time_budget(space.costs, space.eval_secs), 997)
    draws = np.clip(np.round(grid / per_draw), 1, len(stats.objective_performances_total_sorted))
    assert np.array_equal(draws, space.baseline.time_to_fevals(grid))


def check_baselines(space: Space, budget: int) -> None:
    """Definition 1: tune_gym's B is the exact expectation, the package's the cost at the expected rank."""
    valid = np.sort(space.costs[np.isfinite(space.costs)])
    n = valid.size
    b_tune_gym = metrics.expected_random_best(space.costs, budget)
    b_package = space.baseline.get_curve(np.arange(1, budget + 1), "fevals") / space.scale
    worst_first = valid[::-1]
    for t in range(1, budget + 1):
        exact = sum(Fraction(float(valid[i])) * Fraction(math.comb(n - 1 - i, t - 1), math.comb(n, t))
                    for i in range(n - t + 1))
        assert b_tune_gym[t - 1] == pytest.approx(float(exact), rel=1e-12)
        assert b_package[t - 1] == pytest.approx(worst_first[min(n - 1, round(t * (n + 1) / (t + 1)))], rel=1e-12)


def check_trials_axis(space: Space, trace: StrategyTrace, folder: Path) -> None:
    """The run's best-so-far by both, and P given the package's baseline, on tune_gym's budget."""
    budget = metrics.random_budget(space.costs)
    times, _ = space.trial_times_and_clocks(trace)
    results = space.package_run(trace, folder).get_results()
    f_package = results.objective_performance_best_results[:, 0] / space.scale
    f_tune_gym = metrics.best_time_so_far(times)
    assert close(f_package, f_tune_gym)
    grid = np.arange(1, budget + 1)
    last = np.minimum(grid, times.size) - 1  # a run shorter than the budget keeps its last best (both)
    f = f_tune_gym[last]
    defined = ~np.isnan(f)  # definition 4
    b_package = space.baseline.get_curve(grid, "fevals")
    p_package = space.baseline.get_standardised_curve(grid, f_package[last] * space.scale, "fevals")
    p_tune_gym = metrics.random_relative_score(f, b_package / space.scale, space.optimum)
    assert close(p_package[defined], p_tune_gym[defined])
    # tune_gym's own P differs from that only by its baseline (definition 1)
    _, p_own = metrics.score_curve(times, space.costs, budget=budget)
    b_own = metrics.expected_random_best(space.costs, budget)
    assert close(p_own[defined], metrics.random_relative_score(f, b_own, space.optimum)[defined])


def check_time_axis(space: Space, trace: StrategyTrace, folder: Path) -> int:
    """The run's clock, its curve at its evaluations and P there given the package's baseline;
    returns the number of clocks compared."""
    from autotuning_methodology.curves import StochasticOptimizationAlgorithm

    times, clocks = space.trial_times_and_clocks(trace)
    description = space.package_run(trace, folder)
    results = description.get_results()
    assert close(results.objective_time_results[:, 0], clocks)
    first_valid = int(np.argmax(np.isfinite(times)))
    at = clocks[first_valid:]  # definition 3: the curves agree at the evaluations' clocks
    if at.size < 2:
        return 0  # the package fits a curve through two points at least
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curve = StochasticOptimizationAlgorithm(description).get_curve_over_time(
            at, dist=space.stats.objective_performances_total_sorted, confidence_level=0.95, use_bagging=False)
    f_package = np.concatenate([curve[2], curve[6]])
    f_tune_gym = metrics.best_so_far_at(times, clocks, at, minimize=True)
    assert close(f_package / space.scale, f_tune_gym)
    b_package = space.baseline.get_curve(at, "time")
    p_package = space.baseline.get_standardised_curve(at, f_package, "time")
    assert close(p_package, metrics.random_relative_score(f_tune_gym, b_package / space.scale, space.optimum))
    return int(at.size)


# ---------------------------------------------------------------------------------------------
# Tests on a space the tests write


def test_space_rules_agree(space, tmp_path):
    check_space_rules(space)
    only_optimum = write_toy_space(tmp_path, seed=0)
    check_space_rules(Space(read_cache(only_optimum.cache, read_problem(only_optimum.problem)), only_optimum.t4, 1.0))


def test_baselines_are_defined_as_documented(space):
    check_baselines(space, metrics.random_budget(space.costs))


def test_p_on_the_trials_axis(space, traces, tmp_path):
    assert any(np.isnan(t.times()).any() for t in traces)  # runs meet failed configurations
    assert any(t.ended == "max_fevals" for t in traces) and any(t.ended == "strategy" for t in traces)
    for trace in traces:
        check_trials_axis(space, trace, tmp_path)


def test_p_on_the_time_axis(space, traces, tmp_path):
    assert any(t.ended == "time_limit" for t in traces)
    compared = [check_time_axis(space, trace, tmp_path) for trace in traces]
    assert min(compared) >= 10, compared


# ---------------------------------------------------------------------------------------------
# The Benchmark Hub's A100 convolution


@pytest.mark.slow
def test_p_on_the_benchmark_hub_a100_convolution(tmp_path):
    """The package reads the Benchmark Hub's own T4 file; tune_gym's side reads the same T4
    file for the space (costs and seconds) and replays the runs' trials against it."""
    cache = HUB / "cachefiles" / "convolution_milo" / "A100.json.gz"
    t4_gz = HUB / "cachefiles" / "convolution_milo" / "A100_T4.json.gz"
    if not (cache.is_file() and t4_gz.is_file()):
        pytest.skip(f"{cache.parent} is not here")
    problem = HUB / "kernels" / "convolution_milo.json"
    t4 = tmp_path / "A100_T4.json"
    t4.write_bytes(gzip.decompress(t4_gz.read_bytes()))
    space = Space(read_t4(t4_gz, read_problem(problem)), t4, scale=1e3)
    check_space_rules(space)
    check_baselines(space, 40)  # the combinatorial sum is slow for large t; the rule is the same for all t
    cache_space = read_cache(cache, read_problem(problem))
    assert close([r.time_secs or math.nan for r in cache_space.records], space.costs)
    for trace in run_traces(cache, problem, metrics.random_budget(space.costs),
                            metrics.random_time_budget(space.costs, space.eval_secs)):
        check_trials_axis(space, trace, tmp_path)
        assert check_time_axis(space, trace, tmp_path) >= 10
