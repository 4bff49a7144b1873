"""Which rank differences on the leaderboard are significant: paired tests between agents.

The leaderboard ranks agents by the random-relative score P (:mod:`benchmarks.leaderboard.metrics`)
averaged over each task's budget, then over tasks and seeds; its 95% bands overlap, and a band says
nothing about whether two agents differ *on the same runs*. Here two agents are compared run by run:

* **What is compared**: one agent's per-run score (P averaged over ``metrics.scored_budgets``: the value
  the leaderboard's P columns average: :attr:`Cell.p_trials <benchmarks.leaderboard.report.Cell>` on
  the trials axis, ``p_time`` on the simulated-time axis) against the other's on the same task and
  seed. Only (task, seed) pairs that both agents ran, with a finite score for both, count; a task one
  agent declined or a seed only one of them has is left out.
* **The test**: the two-sided Wilcoxon signed-rank test (:func:`scipy.stats.wilcoxon`) of the paired
  differences, null hypothesis "the differences are symmetric about 0" (neither agent tends to score
  higher on the same run). Differences are rounded to :data:`DECIMALS` decimals; zeros (equal runs)
  are dropped (``zero_method="wilcox"``); scipy's ``method="auto"`` is exact for up to 50 distinct differences,
  exhaustive over sign flips for up to 13 with ties, and the normal approximation otherwise: every
  p-value is deterministic. With fewer than :data:`MIN_PAIRS` non-zero differences the smallest
  possible p-value is above 0.05, so such a comparison is not tested ("n/a").
* **Which agent is better**: the sign of the signed-rank statistic (the sum of the ranks of the
  differences favouring one agent minus those favouring the other), the direction the test measures;
  it can disagree with the order of the means the ranking uses.
* **Multiple comparisons**: the p-values of every comparison a leaderboard reports (each agent against
  the next-ranked one, and every pair among the top :data:`TOP`, on both axes) form one family,
  adjusted with Holm-Bonferroni (:func:`holm`); a difference is significant when its adjusted p-value is
  below :data:`ALPHA`. Comparisons that are not tested are not in the family.

Example:
    >>> scores = {"a": {("t", s): 0.5 + 0.01 * s for s in range(10)}, "b": {("t", s): 0.1 for s in range(10)}}
    >>> sig = compare_ranking({"trials": scores}, ["a", "b"])
    >>> c = sig.get("a", "b", "trials")
    >>> c.verdict, c.pairs, round(c.p_adjusted, 4)
    ('better', 10, 0.002)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    from benchmarks.leaderboard.report import Cell

__all__ = [
    "ALPHA",
    "AXES",
    "DECIMALS",
    "MIN_PAIRS",
    "TOP",
    "Comparison",
    "Significance",
    "compare_cells",
    "compare_ranking",
    "explanation",
    "holm",
    "matrix_lines",
    "next_cell",
    "paired_test",
    "run_scores",
]

#: Family-wise error rate of the Holm-Bonferroni procedure.
ALPHA = 0.05
#: Fewest non-zero paired differences tested: with 5 the smallest two-sided p-value is 2 / 2^5 > 0.05.
MIN_PAIRS = 6
#: Paired differences are rounded to this many decimals, so that equal runs differ by exactly 0 and
#: differences equal but for floating-point rounding tie (as :func:`scipy.stats.wilcoxon` advises).
DECIMALS = 12
#: The pairwise matrix covers the agents ranked this high.
TOP = 6
#: Axis name -> the :class:`~benchmarks.leaderboard.report.Cell` attribute holding its per-run P.
AXES = {"trials": "p_trials", "time": "p_time"}

Scores = Mapping[tuple[str, int], float]  # (task, seed) -> one run's score


@dataclass(frozen=True)
class Comparison:
    """Agent ``a`` against agent ``b`` on one axis (``"trials"`` or ``"time"``)."""

    a: str
    b: str
    axis: str
    pairs: int  # (task, seed) pairs with a finite score for both agents
    p: float  # two-sided Wilcoxon p-value; NaN when not tested
    direction: int  # +1: a tends to score higher, -1: lower, 0: not tested
    why: str = ""  # why not tested ("" when tested)
    p_adjusted: float = math.nan  # Holm-adjusted over the family; NaN when not tested

    @property
    def tested(self) -> bool:
        return not self.why

    @property
    def verdict(self) -> str:
        """``"better"`` / ``"worse"`` (``a`` than ``b``, significant), ``"n.s."`` or ``"n/a"`` (not tested)."""
        if not self.tested:
            return "n/a"
        if self.p_adjusted < ALPHA:
            return "better" if self.direction > 0 else "worse"
        return "n.s."

    def flipped(self) -> Comparison:
        """The same comparison read as ``b`` against ``a``."""
        return replace(self, a=self.b, b=self.a, direction=-self.direction)


def paired_test(a: Scores, b: Scores) -> tuple[int, float, int, str]:
    """Wilcoxon signed-rank test of ``a`` against ``b`` on the runs both have.

    Args:
        a: one agent's per-run scores by (task, seed).
        b: the other's.

    Returns:
        ``(pairs, p, direction, why)``: the number of (task, seed) keys with a finite score in both, the
        two-sided p-value, +1 / -1 when ``a`` / ``b`` tends to score higher, and ``""``; or, when there is
        nothing to test (no scored runs on one side, none in common, too few non-zero differences, or all
        equal), p NaN, direction 0 and the reason.
    """
    keys = sorted(k for k in a.keys() & b.keys() if math.isfinite(a[k]) and math.isfinite(b[k]))
    d = np.round(np.array([a[k] - b[k] for k in keys], dtype=float), DECIMALS)
    nonzero = d[d != 0]
    if not keys:
        scored = all(any(math.isfinite(v) for v in side.values()) for side in (a, b))
        return 0, math.nan, 0, "no common runs" if scored else "no scored runs"
    if nonzero.size == 0:
        return len(keys), math.nan, 0, f"equal on all {len(keys)} pairs"
    if nonzero.size < MIN_PAIRS:
        return len(keys), math.nan, 0, f"{nonzero.size} unequal of {len(keys)} pairs"
    ranks = stats.rankdata(np.abs(nonzero))
    signed = float(ranks[nonzero > 0].sum() - ranks[nonzero < 0].sum())
    p = float(stats.wilcoxon(nonzero, zero_method="wilcox", alternative="two-sided", method="auto").pvalue)
    return len(keys), p, int(np.sign(signed)), ""


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given.

    The ``m`` p-values (NaN ones are not tests: they stay NaN and do not count in ``m``) are sorted
    ascending; the ``j``-th smallest (1-based) becomes ``min(1, max over i <= j of (m - i + 1) p_(i))``.
    Rejecting where the adjusted value is below ``alpha`` keeps the family-wise error rate at ``alpha``.

    Example:
        >>> [round(q, 6) for q in holm([0.01, 0.04, 0.03, 0.005, math.nan])]
        [0.03, 0.06, 0.06, 0.02, nan]
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = order.size
    running = 0.0
    for i, idx in enumerate(order):
        running = max(running, min(1.0, (m - i) * float(p[idx])))
        out[idx] = running
    return [float(x) for x in out]


@dataclass
class Significance:
    """The comparisons a leaderboard reports, Holm-adjusted together (:func:`compare_ranking`)."""

    ranking: list[str]
    axes: list[str]
    top: int
    comparisons: dict[tuple[str, str, str], Comparison]  # (a, b, axis), a ranked above b

    @property
    def family(self) -> int:
        """The number of tests the Holm adjustment covers."""
        return sum(c.tested for c in self.comparisons.values())

    def get(self, a: str, b: str, axis: str) -> Comparison:
        """``a`` against ``b`` on ``axis`` (either order of a pair the family holds)."""
        if (a, b, axis) in self.comparisons:
            return self.comparisons[(a, b, axis)]
        return self.comparisons[(b, a, axis)].flipped()


def _reported_pairs(ranking: Sequence[str], top: int) -> list[tuple[str, str]]:
    """Each agent with the next-ranked one, and every pair among the first ``top``; higher-ranked first."""
    pairs = list(itertools.pairwise(ranking))
    head = ranking[:top]
    pairs += [(a, b) for i, a in enumerate(head) for b in head[i + 1:] if (a, b) not in pairs]
    return pairs


def compare_ranking(scores: Mapping[str, Mapping[str, Scores]], ranking: Sequence[str], *,
                    top: int = TOP) -> Significance:
    """Test the rank differences a leaderboard shows, on every axis of ``scores``.

    Args:
        scores: axis (e.g. ``"trials"``) -> agent -> (task, seed) -> the run's score (:func:`run_scores`);
            an agent missing from an axis has no runs there.
        ranking: the agents, best first.
        top: the pairwise matrix covers the first ``top`` agents.

    Returns:
        Each agent against the next-ranked one and every pair among the top ``top``, on each axis, with
        p-values Holm-adjusted over all of them together.
    """
    raw = {}
    for axis, by_agent in scores.items():
        for a, b in _reported_pairs(ranking, top):
            pairs, p, direction, why = paired_test(by_agent.get(a, {}), by_agent.get(b, {}))
            raw[(a, b, axis)] = Comparison(a, b, axis, pairs, p, direction, why)
    keys = list(raw)
    adjusted = holm([raw[k].p for k in keys])
    comparisons = {k: replace(raw[k], p_adjusted=q) for k, q in zip(keys, adjusted)}
    return Significance(list(ranking), list(scores), top, comparisons)


def run_scores(cells: Iterable[Cell], attr: str) -> dict[str, dict[tuple[str, int], float]]:
    """Agent -> (task, seed) -> the cell attribute ``attr`` (a per-run list, e.g. ``"p_trials"``)."""
    out: dict[str, dict[tuple[str, int], float]] = {}
    for cell in cells:
        for seed, value in zip(cell.seed_ids, getattr(cell, attr)):
            out.setdefault(cell.agent, {})[(cell.task, seed)] = float(value)
    return out


def compare_cells(cells: Iterable[Cell], ranking: Sequence[str], *, top: int = TOP) -> Significance:
    """:func:`compare_ranking` of a leaderboard's cells on every axis of :data:`AXES`."""
    cells = list(cells)
    return compare_ranking({axis: run_scores(cells, attr) for axis, attr in AXES.items()}, ranking, top=top)


# ------------------------------------------------------------------------------------------------ markdown


def _p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def next_cell(sig: Significance, a: str, b: str | None, axis: str) -> str:
    """The table cell saying whether ``a`` is significantly better than ``b``, the next-ranked agent
    (``"-"`` for the last row): the verdict, the Holm-adjusted p-value and the number of pairs."""
    if b is None:
        return "-"
    c = sig.get(a, b, axis)
    if not c.tested:
        return f"n/a ({c.why})"
    verdict = {"better": "**yes**", "worse": "no, worse", "n.s.": "no"}[c.verdict]
    return f"{verdict} ({_p(c.p_adjusted)}, n={c.pairs})"


def explanation(sig: Significance) -> str:
    """What the significance marks mean (a paragraph)."""
    return (f"**> next**: whether the agent scores significantly higher than the next-ranked one (on P per run, "
            f"paired by task and seed: two-sided Wilcoxon signed-rank test over the (task, seed) pairs both ran, "
            f"`n` of them; Holm-Bonferroni-adjusted p-value over the {sig.family} tests this page reports: "
            f"adjacent ranks and the top-{min(sig.top, len(sig.ranking))} matrix below, on "
            f"{' and on '.join(sig.axes)}; alpha = {ALPHA}). `no, worse`: the next-ranked agent is significantly "
            f"better on the same runs though its mean is lower; `n/a`: fewer than {MIN_PAIRS} pairs differ "
            "(`benchmarks/leaderboard/significance.py`).")


def matrix_lines(sig: Significance, heading: str = "##") -> list[str]:
    """A markdown section: the top agents against each other, one cell per pair (row agent against column
    agent: better / worse / n.s. / n/a, one per axis)."""
    head = sig.ranking[:sig.top]
    if len(head) < 2 or not sig.family:
        return []
    axes = " / ".join(sig.axes)
    lines = [f"{heading} Significance of the top {len(head)}", "",
             f"Row agent against column agent on P per run ({axes}), paired by task and seed: `better` / `worse` "
             f"where the Holm-adjusted Wilcoxon p-value is below {ALPHA}, `n.s.` where it is not, `n/a` where "
             f"fewer than {MIN_PAIRS} pairs differ (same family as **> next** above).", "",
             "| | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for a in head:
        cells = ["" if a == b else " / ".join(sig.get(a, b, axis).verdict for axis in sig.axes) for b in head]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines + [""]
