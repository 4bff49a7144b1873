"""Leaderboard metrics for auto-tuning search agents (pure numpy, plus scipy for one quantile).

Four families of metrics, each computed per run (one agent, one task, one seed) and then summarised:

1. **Best-so-far throughput** (GFLOPS, maximised; a failed config counts 0) against trials
   (:func:`best_so_far`) and against simulated tuning time (:func:`best_so_far_at`: the step function of the
   best-so-far sampled on a grid of seconds, given each trial's cumulative simulated clock).
2. **Trials-to-target**: the first trial count at which the best-so-far reaches a target, e.g. 100% and 95% of
   the best known throughput (:func:`trials_to_target`), summarised over seeds as a median and IQR
   (:func:`summarize_trials_to_target`; a run that never reaches the target counts as ``+inf``).
3. **Random-relative score** (Willemsen, van Nieuwpoort and van Werkhoven, "A methodology for comparing
   optimization algorithms for auto-tuning", FGCS 2024; reference implementation: the PyPI package
   ``autotuning-methodology``). On the *minimised* objective (kernel time in seconds)::

       P(t) = (B(t) - F(t)) / (B(t) - S_opt)

   with ``F(t)`` the agent's best-so-far time at budget ``t``, ``S_opt`` the optimum of the exhaustively
   measured space and ``B(t)`` the expected best-so-far of random search without replacement
   (:func:`expected_random_best`). 0 is random search, 1 the optimum, negative worse than random. ``P`` is
   sampled at equal steps over the budget of :func:`random_budget` / :func:`random_time_budget`
   (:func:`score_curve`), averaged over it (:func:`mean_score`), then over tasks, and given a Student-t confidence
   band over seeds (:func:`score_band`, which states the band's measured coverage).
4. **Final throughput** normalised by the best known and by a reference (PyTorch) throughput
   (:func:`normalized_throughput`), combined over a network's tasks by a weighted geometric mean
   (:func:`geomean`, weights = how often each task occurs in the network).

Exact baseline. ``B(t)`` is not simulated: with the ``N`` valid costs sorted ``c_(1) <= ... <= c_(N)``,
``P(min of t draws = c_(i)) = C(N-i, t-1) / C(N, t)``, or equivalently (what is computed, by summation by parts)
``B(t) = c_(1) + sum_i (c_(i+1) - c_(i)) * q_i(t)`` with ``q_i(t) = P(min > c_(i)) = C(N-i, t) / C(N, t)
= prod_{k<i} (N-k-t) / (N-k)``: a running product of factors in [0, 1], so no binomial coefficient, factorial
or exponential is ever formed. Terms with ``q_i(t) < e^-80`` (``i >= 80 N / t`` since ``q_i(t) <= e^(-t i / N)``)
are left out: together they add less than ``2e-35 * (c_(N) - c_(1))``, far below one ulp of ``B(t)``. The cost is about
``80 N ln N`` multiplications for all ``t = 1..N`` (1-2 s for ``N = 10^5``).

Failed configs, matched to ``autotuning-methodology`` 1.1.0:

* In ``B(t)`` they are **left out**: the package's default baseline (``RandomSearchCalculatedBaseline`` with
  ``include_nan=False``, used by its reports) draws from ``objective_performances_total_sorted``, the sorted
  *valid* objective values; ``N`` is the number of valid configs, so random search is modelled as drawing valid
  configs only. The optimum, the median (budget rule) and the worst cost are over valid configs too.
* In ``F(t)`` a failed trial **costs a trial and its clock seconds but never improves the best** (the package's
  runner counts every evaluation as a feval, adds its time to the cumulative time, and takes the best with
  ``nanmin``). Before the agent's first valid trial ``F`` is undefined (NaN); the package never scores such points
  (it drops all-NaN fevals, takes ``nanmedian`` over repeats, and its isotonic fit over time clips to the first
  valid point). Per run that is not defined, so :func:`score_curve` gives those points the *worst* valid cost
  ``c_(N)`` (``P <= 0`` there: finding nothing is no better than the worst config) rather than dropping them.
* Costs that are NaN, infinite or not positive are failed configs.

Time axis. The grid and the budget are the package's; the baseline is random search *on the same clock* as the
runs it scores:

* Time budget: the package's ``cutoff_point_time_from_fevals`` = trials budget x *median* evaluation seconds
  (over every config with a time, failed ones included), times ``1 + margin`` (:func:`random_time_budget`); the
  grid starts at one median evaluation (the package's 1%-cutoff start, one draw).
* ``B(tau)`` (:func:`expected_random_best_on_clock`) is the expected ``F(tau)`` of random search without
  replacement scored exactly as a run is: a draw counts once its own evaluation seconds have passed, a failed
  draw costs its seconds and never improves the best, before the first valid result ``F`` is the worst valid
  cost, and a run of ``max_trials`` trials keeps its best after its last. So a random search scores 0 in
  expectation at every point (``P`` is linear in ``F``). It is computed as the package's calculated baseline
  at ``round(tau / s)`` draws, which is exact, plus a Monte Carlo correction over seeded permutations of the
  space that uses the same permutation's best of ``round(tau / s)`` valid draws as control variate.
* The package's calculated baseline over time (:func:`expected_random_best_at_time`) converts seconds to draws
  as ``max(round(tau / s), 1)`` with ``s = get_time_per_feval("mean_per_feval")`` = mean evaluation seconds of
  the valid configs + (fraction of failed configs) x mean evaluation seconds of the failed ones
  (:func:`random_time_per_trial`). That credits random search with draws it has not finished: one draw at the
  grid's first point, where a run has finished its first evaluation only if that took at most the median,
  and about half a draw more than a run has finished early on. Simulated uniform random searches of 128
  trials on the six medium spaces of the standard suite score -0.13 to +0.01 against it (mean over 200 runs
  each; -0.12 +- 0.01 over 2000 on ``bert_base:0``, of which -0.08 is the grid's first point) and +0.005 +-
  0.011 against :func:`expected_random_best_on_clock`.

Budget rule (the package's ``cutoff_point`` and ``calculate_budget``): the target cost is
``S_opt + (median - S_opt) * (1 - 0.95)``; with ``K`` valid configs at or below it, random search without
replacement needs ``(N + 1) / (K + 1)`` draws in expectation to find one; the budget is that, rounded up, plus
10% (rounded up, at most ``N``). The package computes ``ceil((N - K) / (K + 1))``, one draw fewer (it evaluates
the red-white-balls expected position ``t (N + 1) / (t + 1)``, which is 1-based, as a 0-based index); the same
off-by-one makes its calculated ``B(t)`` one rank too good (the value at index ``round(t (N+1) / (t+1))`` of the
worst-first array). Its curve is also the value at the expected *rank*, not the expected value; here ``B(t)`` is
the exact expected value.

Example:
    >>> costs = np.array([4e-3, 1e-3, np.nan, 2e-3, 3e-3])    # exhaustive space: kernel seconds, NaN = failed
    >>> expected_random_best(costs).round(6).tolist()
    [0.0025, 0.001667, 0.00125, 0.001]
    >>> run = [3e-3, np.nan, 1e-3]                            # one agent run: measured seconds per trial
    >>> score_curve(run, costs, budget=3)[1].round(3).tolist()
    [-0.333, -2.0, 1.0]
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

__all__ = [
    "best_so_far",
    "best_so_far_at",
    "best_time_so_far",
    "expected_random_best",
    "expected_random_best_at_time",
    "expected_random_best_on_clock",
    "geomean",
    "mean_score",
    "normalized_throughput",
    "random_budget",
    "random_relative_score",
    "random_time_budget",
    "random_time_per_trial",
    "score_band",
    "score_curve",
    "scored_budgets",
    "summarize_trials_to_target",
    "time_to_target",
    "trials_to_target",
    "tuning_clock",
]

# q_i(t) < e^-_LOG_CUT is left out of B(t); q_i(t) <= exp(-t i / N), so i < _LOG_CUT * N / t suffices.
_LOG_CUT = 80.0
# B(t) is computed for blocks of t at a time, with at most this many products per block.
_BLOCK = 1 << 20
# B of the spaces scored last, by (digest of the sorted valid costs, max_trials): a leaderboard
# scores every run of a task against the same baseline (the oldest is dropped first).
_BASELINES: dict[tuple[bytes, int], np.ndarray] = {}
_BASELINES_KEPT = 64
# B on the time axis (expected_random_best_on_clock), by (digest of costs, seconds and grid, max_trials, samples, seed).
_CLOCK_BASELINES: dict[tuple[bytes, int, int, int], np.ndarray] = {}
#: Permutations of :func:`expected_random_best_on_clock`'s Monte Carlo correction.
CLOCK_SAMPLES = 4000
#: Fewest seeds for a bootstrap band (:func:`score_band`); with fewer the Student-t band is given (at 5 seeds
#: the bootstrap's 95% band of P holds the mean only 0.78-0.86 of the time, the t-band's 0.90-0.95).
BOOTSTRAP_MIN_SEEDS = 10


# --------------------------------------------------------------------------------------------- best-so-far


def best_so_far(gflops: ArrayLike) -> np.ndarray:
    """Best-so-far throughput per trial (maximised).

    Args:
        gflops: throughput of each trial in order; NaN, infinite or non-positive (a failed config) counts 0.

    Returns:
        ``out[k]`` = the best throughput of trials ``1..k+1`` (float array, same length).
    """
    g = np.asarray(gflops, dtype=float).ravel()
    g = np.where(np.isfinite(g) & (g > 0), g, 0.0)
    return np.maximum.accumulate(g) if g.size else g


def best_time_so_far(times: ArrayLike) -> np.ndarray:
    """Best-so-far kernel time per trial (minimised).

    Args:
        times: kernel seconds of each trial in order; NaN, infinite or non-positive is a failed config.

    Returns:
        ``out[k]`` = the smallest valid time of trials ``1..k+1``; NaN until the first valid trial.
    """
    t = np.asarray(times, dtype=float).ravel()
    t = np.where(np.isfinite(t) & (t > 0), t, np.nan)
    return np.fmin.accumulate(t) if t.size else t


def best_so_far_at(values: ArrayLike, clocks: ArrayLike, grid: ArrayLike, *, minimize: bool = False) -> np.ndarray:
    """Best-so-far against simulated tuning time: the step function sampled on a time grid.

    Args:
        values: per-trial GFLOPS (or kernel seconds with ``minimize=True``); failures as in :func:`best_so_far`
            and :func:`best_time_so_far`.
        clocks: each trial's cumulative simulated clock in seconds when its result is known (non-decreasing).
        grid: times (seconds) at which to sample.
        minimize: the values are kernel times (minimised) instead of GFLOPS (maximised).

    Returns:
        The best of the trials with ``clock <= grid[j]``, per grid point; before the first trial (or, minimised,
        before the first valid trial) 0 when maximising and NaN when minimising.
    """
    curve = best_time_so_far(values) if minimize else best_so_far(values)
    c = np.asarray(clocks, dtype=float).ravel()
    g = np.asarray(grid, dtype=float)
    if c.shape != curve.shape:
        raise ValueError(f"values and clocks differ in length ({curve.size} vs {c.size})")
    if np.any(np.diff(c) < 0):
        raise ValueError("clocks must be non-decreasing")
    fill = np.nan if minimize else 0.0
    if curve.size == 0:
        return np.full(g.shape, fill)
    idx = np.searchsorted(c, g, side="right") - 1
    return np.where(idx >= 0, curve[np.maximum(idx, 0)], fill)


# ----------------------------------------------------------------------------------------- trials-to-target


def trials_to_target(curve: ArrayLike, target: float) -> int | None:
    """First trial count at which a best-so-far throughput curve reaches a target.

    Args:
        curve: best-so-far GFLOPS per trial (:func:`best_so_far`).
        target: the throughput to reach, e.g. ``0.95 * best_known``.

    Returns:
        The 1-based trial count of the first ``curve >= target``, or None when never reached.
    """
    hits = np.flatnonzero(np.asarray(curve, dtype=float) >= target)
    return int(hits[0]) + 1 if hits.size else None


def tuning_clock(clock: ArrayLike, agent_secs: float) -> np.ndarray:
    """Each trial's cumulative tuning seconds: the simulated measuring clock plus the agent's own compute
    seconds, spread over the trials pro rata (a results line records the agent's seconds for the whole run).

    Args:
        clock: each trial's cumulative simulated measuring clock in seconds (non-decreasing).
        agent_secs: the agent's compute seconds over the whole run.

    Returns:
        ``clock[k] + agent_secs * (k + 1) / len(clock)`` (float array, same length).
    """
    c = np.asarray(clock, dtype=float).ravel()
    return c + float(agent_secs) * np.arange(1, c.size + 1) / max(c.size, 1)


def time_to_target(gflops: ArrayLike, clock: ArrayLike, agent_secs: float, target: float) -> tuple[float, int | None]:
    """Tuning seconds (:func:`tuning_clock`) until the best-so-far first reaches ``target``.

    Args:
        gflops: per-trial throughput in order (failures as in :func:`best_so_far`).
        clock: each trial's cumulative simulated measuring clock in seconds.
        agent_secs: the agent's compute seconds over the whole run.
        target: the throughput to reach (a relative tolerance of 1e-9 absorbs float round-off).

    Returns:
        ``(seconds, trials)`` at the first trial that reaches the target; ``(the whole run's seconds, None)``
        when no trial does.
    """
    curve = best_so_far(gflops)
    secs = tuning_clock(clock, agent_secs)
    if curve.size != secs.size:
        raise ValueError(f"gflops and clock differ in length ({curve.size} vs {secs.size})")
    if curve.size == 0:
        return 0.0, None
    n = trials_to_target(curve, target * (1 - 1e-9))
    return (float(secs[n - 1]), n) if n is not None else (float(secs[-1]), None)


def _quantile(sorted_values: np.ndarray, q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of sorted values that may end in +inf."""
    h = (sorted_values.size - 1) * q
    lo, hi = math.floor(h), math.ceil(h)
    a, b = sorted_values[lo], sorted_values[hi]
    if lo == hi or a == b:
        return float(a)
    if math.isinf(b):
        return math.inf
    return float(a + (b - a) * (h - lo))


def summarize_trials_to_target(results: Sequence[int | float | None]) -> dict[str, float | int]:
    """Median and interquartile range of trials-to-target over seeds.

    A run that never reaches the target (None or NaN) counts as ``+inf``: it ranks after every run that does, so
    the median is ``inf`` when more than half the runs never reach the target (and ``q75`` when more than a
    quarter do not). Quantiles interpolate linearly (numpy's default); between a finite value and ``inf`` the
    result is ``inf``.

    Args:
        results: one trials-to-target per seed (:func:`trials_to_target`); at least 10 seeds are expected
            (fewer warns).

    Returns:
        ``{"median", "q25", "q75"}`` (floats, possibly ``inf``), ``"reached"`` (runs that reach the target) and
        ``"runs"``.
    """
    values = np.sort(np.array([math.inf if r is None or math.isnan(r) else float(r) for r in results]))
    if values.size == 0:
        raise ValueError("no runs to summarise")
    if values.size < 10:
        warnings.warn(f"trials-to-target over {values.size} seeds; the methodology asks for >= 10", stacklevel=2)
    return {
        "median": _quantile(values, 0.5),
        "q25": _quantile(values, 0.25),
        "q75": _quantile(values, 0.75),
        "reached": int(np.isfinite(values).sum()),
        "runs": int(values.size),
    }


# ---------------------------------------------------------------------------------------- random baseline


def _valid_sorted(costs: ArrayLike) -> np.ndarray:
    """The valid (finite, positive) costs, sorted ascending."""
    c = np.asarray(costs, dtype=float).ravel()
    c = np.sort(c[np.isfinite(c) & (c > 0)])
    if c.size == 0:
        raise ValueError("the space has no valid config")
    return c


def expected_random_best(costs: ArrayLike, max_trials: int | None = None) -> np.ndarray:
    """Exact expected best-so-far of random search without replacement (minimised).

    Failed configs (NaN, infinite or non-positive costs) are left out, as in the package's default baseline
    (see the module docstring), so ``t`` counts draws among the ``N`` valid configs.

    Args:
        costs: kernel seconds of every config of an exhaustively measured space.
        max_trials: the largest ``t`` (default: ``N``, the number of valid configs; at most ``N``).

    Returns:
        ``B[t - 1]`` = E[min of ``t`` distinct configs drawn uniformly], for ``t = 1..max_trials``; ``B[0]`` is the
        mean and ``B[N - 1]`` the minimum.
    """
    c = _valid_sorted(costs)
    n = c.size
    t_max = n if max_trials is None else int(max_trials)
    if not 1 <= t_max <= n:
        raise ValueError(f"max_trials must be in [1, {n}] (the number of valid configs), got {max_trials}")
    key = (hashlib.blake2b(c.tobytes(), digest_size=16).digest(), t_max)
    if (known := _BASELINES.get(key)) is None:
        known = _BASELINES[key] = _expected_random_best(c, t_max)
        while len(_BASELINES) > _BASELINES_KEPT:
            _BASELINES.pop(next(iter(_BASELINES)))
    return known.copy()


def _expected_random_best(c: np.ndarray, t_max: int) -> np.ndarray:
    """:func:`expected_random_best` of the sorted valid costs ``c`` for ``t = 1..t_max``."""
    n = c.size
    delta = np.diff(c)  # delta[i - 1] = c_(i+1) - c_(i)
    left = n - np.arange(n, dtype=float)  # N - k, k = 0..N-1
    out = np.full(t_max, c[0])
    t = 1
    while t <= min(t_max, n - 1):  # B(N) = c_(1)
        # i runs to m: q_i(t) = 0 for i > N - t and q_i(t) < e^-80 for i >= 80 N / t (smaller for larger t)
        m = min(n - t, math.ceil(_LOG_CUT * n / t))
        # (blocks do not depend on max_trials, so neither do the rounding errors: B(t) is one value per t)
        rows = np.arange(t, min(n - 1, t + max(1, _BLOCK // m) - 1) + 1, dtype=float)
        # q[r, i - 1] = prod_{k < i} (N - k - t_r) / (N - k); factors < 0 only past a 0 factor (k > N - t_r)
        q = np.cumprod(np.maximum(left[:m] - rows[:, None], 0.0) / left[:m], axis=1)
        block = c[0] + q @ delta[:m]
        out[t - 1 : t - 1 + rows.size] = block[: t_max - t + 1]
        t += rows.size
    return out


def random_time_per_trial(costs: ArrayLike, eval_seconds: ArrayLike) -> float:
    """Seconds per random-search draw, as the package's ``get_time_per_feval("mean_per_feval")``.

    Args:
        costs: kernel seconds of every config (failed: NaN, infinite or non-positive).
        eval_seconds: simulated seconds it costs to evaluate each config (build + run), same length.

    Returns:
        mean(``eval_seconds`` of valid configs) + fraction of failed configs x mean(``eval_seconds`` of failed
        ones); without failed configs, the plain mean.
    """
    c = np.asarray(costs, dtype=float).ravel()
    s = np.asarray(eval_seconds, dtype=float).ravel()
    if c.shape != s.shape:
        raise ValueError(f"costs and eval_seconds differ in length ({c.size} vs {s.size})")
    if not np.all(np.isfinite(s) & (s >= 0)):
        raise ValueError("eval_seconds must be finite and non-negative")
    failed = ~(np.isfinite(c) & (c > 0))
    if failed.all():
        raise ValueError("the space has no valid config")
    per_trial = float(s[~failed].mean())
    if failed.any():
        per_trial += float(failed.mean() * s[failed].mean())
    if per_trial <= 0:
        raise ValueError("evaluation seconds must not all be 0")
    return per_trial


def expected_random_best_at_time(costs: ArrayLike, eval_seconds: ArrayLike, grid: ArrayLike) -> np.ndarray:
    """Expected best-so-far of random search against simulated time.

    Seconds become draws as in the package's ``time_to_fevals``: ``max(round(tau / s), 1)`` with ``s`` from
    :func:`random_time_per_trial` (and at most ``N``, the valid configs).

    Args:
        costs: kernel seconds of every config (failed: NaN, infinite or non-positive).
        eval_seconds: simulated seconds to evaluate each config.
        grid: times in seconds.

    Returns:
        :func:`expected_random_best` at the draw count of each grid time.
    """
    g = np.asarray(grid, dtype=float)
    trials = _draws_at(costs, eval_seconds, g)
    if trials.size == 0:
        return np.empty(g.shape)
    return expected_random_best(costs, int(trials.max()))[trials - 1]


def _draws_at(costs: ArrayLike, eval_seconds: ArrayLike, grid: np.ndarray) -> np.ndarray:
    """The package's ``time_to_fevals``: ``max(round(tau / s), 1)`` draws at each grid time, at most the valid
    configs (``s``: :func:`random_time_per_trial`)."""
    per_trial = random_time_per_trial(costs, eval_seconds)
    return np.clip(np.round(grid / per_trial), 1, _valid_sorted(costs).size).astype(int)


def expected_random_best_on_clock(
    costs: ArrayLike,
    eval_seconds: ArrayLike,
    grid: ArrayLike,
    *,
    max_trials: int | None = None,
    samples: int = CLOCK_SAMPLES,
    seed: int = 0,
) -> np.ndarray:
    """Expected best-so-far of random search against simulated time, on the clock runs are scored on.

    Random search draws configs uniformly without replacement (failed ones included); a draw's result counts
    from the moment its evaluation seconds have passed; a failed draw never improves the best; before the first
    valid result the best is the worst valid cost; after ``max_trials`` draws the best is kept. This is
    :func:`best_so_far_at` with :func:`score_curve`'s rule for "nothing yet", in expectation, so ``P`` of a
    random search is 0 in expectation at every grid point.

    Computed as ``E[G(tau)] + mean(F_k(tau) - G_k(tau))`` over ``samples`` permutations ``k`` drawn from
    ``seed``: ``F_k`` is the permutation's best-so-far on the clock, ``G_k`` its best of its first
    ``round(tau / s)`` valid draws (``s``: :func:`random_time_per_trial`), whose expectation is exact
    (:func:`expected_random_best`, the package's calculated baseline, :func:`expected_random_best_at_time`).
    ``F_k - G_k`` is small where the two clocks agree, so the estimate is far tighter than a plain mean of
    ``F_k``. Deterministic for a given ``seed``; results are cached per space, grid and ``max_trials``. With
    the default ``samples``, another seed moves an agent's mean P on the standard suite's time axis by at most
    0.008 (``grid``, at -10.5: 0.08), nearly the same shift for every agent.

    Args:
        costs: kernel seconds of every config (failed: NaN, infinite or non-positive).
        eval_seconds: simulated seconds to evaluate each config (same length).
        grid: times in seconds (non-negative).
        max_trials: trials of the runs scored against it (default: no limit).
        samples: permutations of the Monte Carlo correction.
        seed: their seed.

    Returns:
        ``B`` at each grid time.
    """
    c = np.asarray(costs, dtype=float).ravel()
    s = np.asarray(eval_seconds, dtype=float).ravel()
    g = np.asarray(grid, dtype=float).ravel()
    draws = _draws_at(c, s, g)  # the control's valid draws (checks the lengths and the seconds)
    valid = np.isfinite(c) & (c > 0)
    limit = c.size if max_trials is None else min(c.size, int(max_trials))
    if limit < 1 or samples < 1:
        raise ValueError(f"max_trials and samples must be >= 1, got {max_trials} and {samples}")
    if g.size == 0:
        return np.empty(0)
    key = (hashlib.blake2b(c.tobytes() + s.tobytes() + g.tobytes(), digest_size=16).digest(), limit, samples, seed)
    if (known := _CLOCK_BASELINES.get(key)) is not None:
        return known.copy()
    most = int(draws.max())
    exact = expected_random_best(c, most)[draws - 1]  # = expected_random_best_at_time(c, s, g)
    worst = float(c[valid].max())
    ranked = np.where(valid, c, np.inf)
    correction = np.zeros(g.size)
    rng = np.random.default_rng(seed)
    for _ in range(samples):
        order = rng.permutation(c.size)
        clock = np.cumsum(s[order[:limit]])
        best = np.minimum.accumulate(ranked[order[:limit]])
        done = np.searchsorted(clock, g, side="right")  # draws finished by each grid time
        f = np.where(done > 0, best[np.maximum(done, 1) - 1], np.inf)
        first_valid = c[order[valid[order]][:most]]  # the permutation's first valid draws, in order
        correction += np.where(np.isfinite(f), f, worst) - np.minimum.accumulate(first_valid)[draws - 1]
    out = exact + correction / samples
    _CLOCK_BASELINES[key] = out
    while len(_CLOCK_BASELINES) > _BASELINES_KEPT:
        _CLOCK_BASELINES.pop(next(iter(_CLOCK_BASELINES)))
    return out.copy()


def random_budget(costs: ArrayLike, *, fraction: float = 0.95, margin: float = 0.1) -> int:
    """Trials budget: random search's expected draws to get ``fraction`` of the way from median to optimum.

    Args:
        costs: kernel seconds of every config (failed configs are left out).
        fraction: how far from the median towards the optimum the target lies (the package's
            ``cutoff_percentile``, 0.95).
        margin: relative extra budget (the package's ``cutoff_margin``, 0.1).

    Returns:
        ``ceil(ceil((N + 1) / (K + 1)) * (1 + margin))``, at most ``N``, with ``K`` the valid configs whose cost
        is at most ``S_opt + (median - S_opt) * (1 - fraction)``.
    """
    c = _valid_sorted(costs)
    n = c.size
    target = c[0] + (np.median(c) - c[0]) * (1 - fraction)
    k = int(np.count_nonzero(c <= target))
    trials = math.ceil((n + 1) / (k + 1))
    return min(n, math.ceil(trials * (1 + margin) - 1e-9))  # 1e-9: 10 * 1.1 is 11, not 12


def random_time_budget(
    costs: ArrayLike, eval_seconds: ArrayLike, *, fraction: float = 0.95, margin: float = 0.1
) -> float:
    """Simulated-time budget: :func:`random_budget` (without margin) x median evaluation seconds x (1 + margin).

    As the package's ``cutoff_point_time_from_fevals``: the median is over every config's evaluation seconds,
    failed configs included.

    Args:
        costs: kernel seconds of every config.
        eval_seconds: simulated seconds to evaluate each config.
        fraction: as in :func:`random_budget`.
        margin: as in :func:`random_budget`.

    Returns:
        The budget in simulated seconds.
    """
    s = np.asarray(eval_seconds, dtype=float).ravel()
    if s.size != np.asarray(costs).size or not np.all(np.isfinite(s)):
        raise ValueError("eval_seconds must be finite and as long as costs")
    return random_budget(costs, fraction=fraction, margin=0.0) * float(np.median(s)) * (1 + margin)


def scored_budgets(costs: ArrayLike, eval_seconds: ArrayLike, run_budget: int) -> tuple[int, float]:
    """The budgets a suite's P is averaged over: the methodology's (:func:`random_budget`,
    :func:`random_time_budget`), cut to what runs of ``run_budget`` trials cover where that is
    shorter (``run_budget`` trials; ``run_budget`` median evaluations of the space on the time axis).

    Past the end of a run its best is held while random search's expected best keeps improving, so a
    methodology's budget longer than the runs would score random search itself below 0.

    Returns:
        ``(trials, seconds)``.
    """
    trials = min(random_budget(costs), int(run_budget))
    seconds = min(random_time_budget(costs, eval_seconds),
                  int(run_budget) * float(np.median(np.asarray(eval_seconds, dtype=float))))
    return trials, seconds


# --------------------------------------------------------------------------------------------------- score


def random_relative_score(agent_best: ArrayLike, baseline: ArrayLike, optimum: float) -> np.ndarray:
    """Random-relative score ``P = (B - F) / (B - S_opt)`` on a minimised objective.

    Args:
        agent_best: the agent's best-so-far kernel seconds ``F`` on a grid (trials or time).
        baseline: random search's expected best-so-far ``B`` on the same grid (:func:`expected_random_best`).
        optimum: ``S_opt``, the best cost of the space.

    Returns:
        ``P`` per grid point: 0 = random search, 1 = optimum, negative = worse than random; NaN where ``F`` is NaN
        or ``B == S_opt`` (random search is certain to hold the optimum: the score is undefined).
    """
    f = np.asarray(agent_best, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if f.shape != b.shape:
        raise ValueError(f"agent_best and baseline differ in shape ({f.shape} vs {b.shape})")
    denom = b - optimum
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom != 0, (b - f) / np.where(denom != 0, denom, 1.0), np.nan)


def score_curve(
    agent_times: ArrayLike,
    costs: ArrayLike,
    *,
    budget: float | None = None,
    clocks: ArrayLike | None = None,
    eval_seconds: ArrayLike | None = None,
    num: int = 100,
    max_trials: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``P`` of one run sampled at equal steps over the budget, against trials or simulated time.

    Trials axis (no ``clocks``): every trial count ``1..budget``; a run shorter than the budget keeps its last
    best (as the package extends curves), a longer one is cut. Time axis (``clocks`` and ``eval_seconds``):
    ``num`` equal steps from one median evaluation (the package's 1%-cutoff start, one draw) to the budget,
    against random search on the same clock (:func:`expected_random_best_on_clock`). Before the agent's first
    valid trial its best is taken as the worst valid cost (see the module docstring).

    Args:
        agent_times: the run's kernel seconds per trial, in order (failed: NaN, infinite or non-positive).
        costs: kernel seconds of every config of the exhaustively measured space (defines ``B`` and ``S_opt``).
        budget: trials (or seconds on the time axis); default :func:`random_budget` / :func:`random_time_budget`.
        clocks: the run's cumulative simulated clock per trial; selects the time axis.
        eval_seconds: simulated seconds to evaluate each config of the space (required with ``clocks``).
        num: grid points on the time axis.
        max_trials: on the time axis, the trials the run was given: random search is held to as many (default:
            no limit).

    Returns:
        ``(grid, P)``: trial counts (int) or seconds, and the score at each.
    """
    c = _valid_sorted(costs)
    optimum, worst = c[0], c[-1]
    if clocks is None:
        n_trials = random_budget(costs) if budget is None else int(budget)
        if not 1 <= n_trials <= c.size:
            raise ValueError(f"budget must be in [1, {c.size}] trials, got {budget}")
        grid: np.ndarray = np.arange(1, n_trials + 1)
        run = best_time_so_far(agent_times)
        if run.size == 0:
            run = np.array([np.nan])
        f = run[np.minimum(grid, run.size) - 1]
        b = expected_random_best(costs, n_trials)
    else:
        if eval_seconds is None:
            raise ValueError("the time axis needs eval_seconds of the space")
        seconds = random_time_budget(costs, eval_seconds) if budget is None else float(budget)
        start = float(np.median(np.asarray(eval_seconds, dtype=float)))
        if not seconds > start:
            raise ValueError(f"time budget {seconds} s is not above one evaluation ({start} s)")
        grid = np.linspace(start, seconds, num)
        f = best_so_far_at(agent_times, clocks, grid, minimize=True)
        b = expected_random_best_on_clock(costs, eval_seconds, grid, max_trials=max_trials)
    f = np.where(np.isnan(f), worst, f)
    return grid, random_relative_score(f, b, optimum)


def mean_score(agent_times: ArrayLike, costs: ArrayLike, **kwargs) -> float:
    """Random-relative score of one run averaged over the budget (:func:`score_curve`; NaN points skipped).

    Args:
        agent_times: the run's kernel seconds per trial.
        costs: kernel seconds of every config of the space.
        **kwargs: ``budget``, ``clocks``, ``eval_seconds``, ``num`` of :func:`score_curve`.

    Returns:
        The mean of ``P`` over the budget grid.
    """
    _, p = score_curve(agent_times, costs, **kwargs)
    return float(np.nanmean(p))


def score_band(
    scores: ArrayLike,
    confidence: float = 0.95,
    *,
    method: str = "t",
    bootstrap_method: str = "BCa",
    seed: int | np.random.Generator = 0,
    n_resamples: int = 9999,
    min_seeds: int = BOOTSTRAP_MIN_SEEDS,
) -> dict[str, np.ndarray | float | int]:
    """Mean and confidence band over seeds: Student-t (the leaderboards' band) or bootstrap.

    Average over tasks first (``np.nanmean(per_task_seed, axis=0)`` for a ``(tasks, seeds)`` array of
    :func:`mean_score`), then band the per-seed values; curves (``(seeds, grid)``, e.g. :func:`score_curve` per
    seed) are banded per grid point.

    ``method="t"``: ``mean +- t_(n-1) * sd / sqrt(n)``. ``method="bootstrap"``: :func:`scipy.stats.bootstrap` of
    the mean over seeds (``bootstrap_method`` ``"BCa"`` or ``"percentile"``, ``n_resamples`` resamples drawn
    from ``seed``, so the band is deterministic); where fewer than ``min_seeds`` seeds have a value the t-band
    is given instead. Grid points with the same seeds present are resampled together (the same resampled seeds).

    Measured coverage of the 95% bands (``python -m benchmarks.band_coverage``: 2000 replicates of 5, 10 and 25
    seeds resampled from the committed per-(task, seed) P of the standard and external suites, on trials and on
    time; Monte Carlo s.e. 0.005): the t-band holds the true mean 0.93-0.95 of the time at 5 seeds, 0.92-0.95
    at 10 and 0.94-0.95 at 25 for random search, ``ga``, ``contextual-sa``, ``meta-bo``, ``presample`` and
    ``kt:pso``, and 0.89-0.94 for the entries with the longest tails below (``kt:basinhopping``,
    ``kt:minimize``). The bootstrap bands are narrower and cover less in every case: percentile and BCa
    0.78-0.86 at 5 seeds, 0.83-0.91 at 10, 0.87-0.94 at 25. Hence the t-band by default, and no bootstrap
    below :data:`BOOTSTRAP_MIN_SEEDS` seeds.

    Args:
        scores: ``(seeds,)`` or ``(seeds, ...)``; NaN entries are skipped.
        confidence: the band's confidence level.
        method: ``"t"`` or ``"bootstrap"``.
        bootstrap_method: scipy's interval of ``method="bootstrap"``: ``"BCa"`` or ``"percentile"``.
        seed: seed or Generator of the bootstrap's resamples.
        n_resamples: bootstrap resamples.
        min_seeds: fewest seeds with a value for a bootstrap band (default :data:`BOOTSTRAP_MIN_SEEDS`).

    Returns:
        ``{"mean", "lower", "upper", "n"}`` (floats for 1-D input, arrays otherwise); the band is NaN with fewer
        than two seeds, and ``[mean, mean]`` where every seed has the same value.
    """
    if method not in ("t", "bootstrap"):
        raise ValueError(f"score_band: method must be 't' or 'bootstrap', got {method!r}")
    if bootstrap_method not in ("BCa", "percentile"):
        raise ValueError(f"score_band: bootstrap_method must be 'BCa' or 'percentile', got {bootstrap_method!r}")
    s = np.asarray(scores, dtype=float)
    n = np.sum(~np.isnan(s), axis=0)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(s, axis=0)
        sem = np.nanstd(s, axis=0, ddof=1) / np.sqrt(n)
        half = np.where(n >= 2, stats.t.ppf((1 + confidence) / 2, np.maximum(n - 1, 1)) * sem, np.nan)
    lower, upper = mean - half, mean + half
    if method == "bootstrap" and s.size:
        lower, upper = _bootstrap_band(s.reshape(s.shape[0], -1), lower, upper, confidence, bootstrap_method,
                                       np.random.default_rng(seed), n_resamples, max(min_seeds, 2))
    out = {"mean": mean, "lower": lower, "upper": upper, "n": n}
    if s.ndim == 1:
        return {k: (int(v) if k == "n" else float(v)) for k, v in out.items()}
    return out


def _bootstrap_band(values: np.ndarray, t_lower: ArrayLike, t_upper: ArrayLike, confidence: float, how: str,
                    rng: np.random.Generator, n_resamples: int, min_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`score_band`'s bootstrap band of each column's mean of ``values`` (``(seeds, columns)``, NaN =
    missing): columns with fewer than ``min_seeds`` values keep the t-band (``t_lower``,
    ``t_upper``, one value per column in any shape), columns whose values are all equal get ``[mean, mean]``.

    Returns:
        ``(lower, upper)`` in the shape of ``t_lower``.
    """
    shape = np.shape(t_lower)
    lower, upper = np.array(t_lower, dtype=float).reshape(-1), np.array(t_upper, dtype=float).reshape(-1)
    present = ~np.isnan(values)
    # columns with the same seeds present are one batch (the same resampled seeds, one scipy call)
    masks, group = np.unique(present.T, axis=0, return_inverse=True)
    for g, mask in enumerate(masks):
        cols = np.flatnonzero(group.ravel() == g)
        if mask.sum() < min_seeds:
            continue
        data = values[np.ix_(mask, cols)]
        flat = np.ptp(data, axis=0) == 0
        lower[cols[flat]] = upper[cols[flat]] = data[0, flat]
        if (~flat).any():
            batch = max(1, (1 << 24) // data.size)  # about 2**24 resampled values at a time
            ci = stats.bootstrap((data[:, ~flat],), np.mean, n_resamples=n_resamples, batch=batch, axis=0,
                                 confidence_level=confidence, method=how, rng=rng).confidence_interval
            lower[cols[~flat]], upper[cols[~flat]] = ci.low, ci.high
    return lower.reshape(shape), upper.reshape(shape)


# ---------------------------------------------------------------------------------------------- throughput


def normalized_throughput(
    final_gflops: ArrayLike, best_known_gflops: ArrayLike, reference_gflops: ArrayLike
) -> dict[str, np.ndarray | float]:
    """Final throughput relative to the best known and to a reference (PyTorch) throughput.

    Args:
        final_gflops: the run's best throughput at the end of its budget (failed: 0).
        best_known_gflops: the best throughput known for the task.
        reference_gflops: the reference implementation's throughput.

    Returns:
        ``{"vs_best": final / best_known, "vs_reference": final / reference}`` (floats for scalars).
    """
    f = np.asarray(final_gflops, dtype=float)
    out = {"vs_best": f / np.asarray(best_known_gflops, dtype=float),
           "vs_reference": f / np.asarray(reference_gflops, dtype=float)}
    return {k: float(v) if np.ndim(v) == 0 else v for k, v in out.items()}


def geomean(values: ArrayLike, weights: ArrayLike | None = None) -> float:
    """Weighted geometric mean, e.g. of per-task throughput ratios weighted by occurrences in the network.

    Args:
        values: non-negative values (a 0, e.g. a task whose every config failed, makes the mean 0).
        weights: non-negative weights, same length (default: all 1).

    Returns:
        ``exp(sum(w log v) / sum(w))``.
    """
    v = np.asarray(values, dtype=float).ravel()
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float).ravel()
    if v.shape != w.shape or v.size == 0:
        raise ValueError(f"values and weights must be non-empty and of one length ({v.size} vs {w.size})")
    if np.any(np.isnan(v)) or np.any(v < 0) or np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("values must be >= 0 and weights >= 0 with a positive sum")
    keep = w > 0
    if np.any(v[keep] == 0):
        return 0.0
    return float(np.exp(np.sum(w[keep] * np.log(v[keep])) / w[keep].sum()))
