"""How often the leaderboard's 95% band of P holds the true mean: Student-t against bootstrap bands.

Command (from the repository root; the external suite's spaces must be on ``TUNE_GYM_DATA``)::

    TUNE_GYM_DATA=/path/to/benchmark_hub PYTHONPATH=. python -m benchmarks.band_coverage

A leaderboard row's P is the mean over seeds of per-seed scores, each the mean over tasks of one run's P
(:func:`benchmarks.leaderboard.metrics.score_band`). P is at most 1 and long-tailed below on some tasks, so a
Student-t band can hold the true mean less often than its 95% says. This measures it on the committed runs:

* **Population**: an agent's committed per-(task, seed) P (:func:`benchmarks.leaderboard.report.compute`,
  the leaderboards' own loader; NaN runs left out). The true mean is the mean over tasks of each task's mean
  P over its committed seeds.
* **One replicate**: ``n`` seeds drawn per task with replacement, independently per task (runs of different
  tasks share nothing but the seed number), the per-seed score the mean over tasks, then the band of
  :func:`~benchmarks.leaderboard.metrics.score_band` with ``method="t"``, ``"bootstrap"`` percentile and
  ``"bootstrap"`` BCa (bootstrapped at every ``n``: ``min_seeds=2``).
* **Coverage**: the fraction of ``--replicates`` replicates whose band holds the true mean (Monte Carlo
  standard error about ``sqrt(0.95 * 0.05 / replicates)``, 0.005 at 2000); **width**: the mean width of the
  band. The replicates of one (agent, n) are banded in one call, so they share the bootstrap's resampled seed
  indices; each replicate's band is still the band of its own data.

Everything is drawn from ``--seed``: the table is the same on every run.
"""

from __future__ import annotations

import argparse
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.leaderboard import metrics as M
from benchmarks.leaderboard.report import Leaderboard, compute

RESULTS = Path(__file__).resolve().parent / "results" / "leaderboard"
#: Suite -> the agents measured by default: random search, a few ranked above it, and (external) the entries
#: whose per-run P has the longest tails below (``kt:minimize``: down to -211).
AGENTS = {
    "standard-v1": ("random", "ga", "contextual-sa", "meta-bo"),
    "external": ("random", "ga", "presample", "kt:pso", "kt:basinhopping", "kt:minimize"),
}
AXES = {"trials": "p_trials", "time": "p_time"}
#: Band name -> score_band's ``method`` and ``bootstrap_method``.
METHODS = {"t": ("t", "BCa"), "percentile": ("bootstrap", "percentile"), "BCa": ("bootstrap", "BCa")}


@dataclass
class Coverage:
    """The bands of one agent at one number of seeds."""

    suite: str
    axis: str
    agent: str
    n: int
    truth: float
    coverage: dict[str, float]
    width: dict[str, float]


def load(results: Path) -> Leaderboard:
    """The leaderboard of a results file, as the leaderboards compute it (their warnings silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compute(results)


def population(lb: Leaderboard, agent: str, attr: str) -> list[np.ndarray]:
    """An agent's committed P per task: one array of its seeds' values (``attr`` of each cell) per task, NaN
    left out."""
    cells = [c for (a, _), c in lb.cells.items() if a == agent and getattr(c, attr)]
    if not cells:
        known = sorted({a for a, _ in lb.cells})
        raise SystemExit(f"--agents: {agent!r} has no scored runs in suite {lb.header['suite']['name']} "
                         f"(it has: {', '.join(known)})")
    values = [np.asarray(getattr(c, attr), dtype=float) for c in cells]
    return [v[~np.isnan(v)] for v in values if (~np.isnan(v)).any()]


def replicate_scores(tasks: list[np.ndarray], n: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, replicates)`` per-seed scores: ``n`` seeds drawn per task with replacement, mean over tasks."""
    draws = [v[rng.integers(0, v.size, size=(n, replicates))] for v in tasks]
    return np.mean(draws, axis=0)


def measure(suite: str, axis: str, agent: str, tasks: list[np.ndarray], n: int, replicates: int,
            resamples: int, rng: np.random.Generator) -> Coverage:
    """Coverage and mean width of each band of :data:`METHODS` over ``replicates`` replicates of ``n`` seeds."""
    truth = float(np.mean([v.mean() for v in tasks]))
    scores = replicate_scores(tasks, n, replicates, rng)
    coverage, width = {}, {}
    for name, (method, how) in METHODS.items():
        band = M.score_band(scores, method=method, bootstrap_method=how, seed=rng, n_resamples=resamples, min_seeds=2)
        lower, upper = np.asarray(band["lower"]), np.asarray(band["upper"])
        coverage[name] = float(np.mean((lower <= truth) & (truth <= upper)))
        width[name] = float(np.mean(upper - lower))
    return Coverage(suite, axis, agent, n, truth, coverage, width)


def table_head() -> str:
    """The markdown table's head: coverage and mean width of each band of :data:`METHODS`."""
    return ("| suite | axis | agent | true P | seeds | " + " | ".join(f"cover {m}" for m in METHODS) + " | "
            + " | ".join(f"width {m}" for m in METHODS) + " |\n|" + "---|" * 3 + "---:|" * (2 + 2 * len(METHODS)))


def table_row(r: Coverage) -> str:
    """One row of the markdown table."""
    return (f"| {r.suite} | {r.axis} | {r.agent} | {r.truth:.3f} | {r.n} | "
            + " | ".join(f"{r.coverage[m]:.3f}" for m in METHODS) + " | "
            + " | ".join(f"{r.width[m]:.3f}" for m in METHODS) + " |")


def main(argv: list[str] | None = None) -> None:
    """Print the coverage table (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", nargs="+", default=list(AGENTS), choices=list(AGENTS),
                    help="committed results to resample (benchmarks/results/leaderboard/SUITE.parquet)")
    ap.add_argument("--agents", nargs="+", help="agents to measure (default: a few per suite, AGENTS)")
    ap.add_argument("--axes", nargs="+", default=list(AXES), choices=list(AXES), help="P on trials and/or time")
    ap.add_argument("--seeds", nargs="+", type=int, default=[5, 10, 25], help="seeds per replicate")
    ap.add_argument("--replicates", type=int, default=2000, help="replicates per agent and number of seeds")
    ap.add_argument("--resamples", type=int, default=2999, help="bootstrap resamples per band")
    ap.add_argument("--seed", type=int, default=0, help="seed of every draw")
    args = ap.parse_args(argv)
    if min(args.seeds) < 2 or args.replicates < 1 or args.resamples < 1:
        raise SystemExit("--seeds must be >= 2, --replicates and --resamples >= 1")
    rng = np.random.default_rng(args.seed)
    print(table_head(), flush=True)
    for suite in args.suites:
        lb = load(RESULTS / f"{suite}.parquet")
        for axis in args.axes:
            for agent in args.agents or AGENTS[suite]:
                tasks = population(lb, agent, AXES[axis])
                for n in args.seeds:
                    print(table_row(measure(suite, axis, agent, tasks, n, args.replicates, args.resamples, rng)),
                          flush=True)
    print(f"\n{args.replicates} replicates per row (Monte Carlo s.e. of a coverage near 0.95: "
          f"{math.sqrt(0.95 * 0.05 / args.replicates):.3f}); the bootstrap bands here are bootstrapped at every "
          f"number of seeds (the leaderboards' score_band gives the t-band below {M.BOOTSTRAP_MIN_SEEDS}).")


if __name__ == "__main__":
    main()
