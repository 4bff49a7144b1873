"""Paired significance tests between leaderboard agents (benchmarks/leaderboard/significance.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.leaderboard import significance as S
from benchmarks.leaderboard.report import Cell


def runs(values: dict[str, list[float]]) -> dict[tuple[str, int], float]:
    """(task, seed) -> score from task -> per-seed scores (seed = position)."""
    return {(task, seed): v for task, vs in values.items() for seed, v in enumerate(vs)}


def noisy(rng: np.random.Generator, shift: float, tasks: int = 3, seeds: int = 10) -> dict[tuple[str, int], float]:
    """Per-run scores: a per-task level plus noise, ``shift`` higher for the whole agent."""
    base = np.random.default_rng(0).uniform(-0.5, 0.8, tasks)  # the same task levels for every agent
    return runs({f"t{t}": list(base[t] + shift + rng.normal(0, 0.05, seeds)) for t in range(tasks)})


def test_a_dominating_agent_is_significantly_better_and_the_other_worse():
    rng = np.random.default_rng(1)
    strong, weak = noisy(rng, 0.3), noisy(rng, 0.0)
    sig = S.compare_ranking({"trials": {"strong": strong, "weak": weak}}, ["strong", "weak"])
    c = sig.get("strong", "weak", "trials")
    assert c.pairs == 30 and c.tested and c.direction == 1
    assert c.p_adjusted < 1e-4 and c.verdict == "better"
    assert sig.get("weak", "strong", "trials").verdict == "worse"
    assert S.next_cell(sig, "strong", "weak", "trials") == "**yes** (p<0.001, n=30)"
    assert S.next_cell(sig, "weak", None, "trials") == "-"


def test_the_direction_is_the_tests_not_the_ranking_order():
    # ranked first by a mean that one huge run carries, but lower on 11 of 12 runs
    a = runs({"t": [5.0] + [0.1] * 11})
    b = runs({"t": [0.0] + [0.2 + 0.01 * s for s in range(11)]})
    sig = S.compare_ranking({"trials": {"a": a, "b": b}}, ["a", "b"])
    c = sig.get("a", "b", "trials")
    assert c.direction == -1
    # exact: the one positive difference has rank 12; 70 of the 4096 sign patterns have a rank sum <= 12
    assert c.p == pytest.approx(2 * 70 / 4096)
    assert c.verdict == "worse" and S.next_cell(sig, "a", "b", "trials") == "no, worse (p=0.034, n=12)"


def test_identical_agents_are_not_tested_and_symmetric_differences_are_not_significant():
    rng = np.random.default_rng(2)
    a = noisy(rng, 0.0)
    pairs, p, direction, why = S.paired_test(a, dict(a))
    assert (pairs, direction, why) == (30, 0, "equal on all 30 pairs") and math.isnan(p)
    # b differs from a by +-x in equal measure: the signed ranks cancel
    b = {k: v + (0.01 * (i // 2 + 1) * (1 if i % 2 else -1)) for i, (k, v) in enumerate(sorted(a.items()))}
    sig = S.compare_ranking({"trials": {"a": a, "b": b}}, ["a", "b"])
    c = sig.get("a", "b", "trials")
    assert c.tested and c.p == pytest.approx(1.0) and c.verdict == "n.s."
    assert S.next_cell(sig, "a", "b", "trials") == "no (p=1.000, n=30)"


def test_holm_on_a_hand_checked_family():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept at 0.06 (monotone)
    adjusted = S.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # NaN is not a test: it stays NaN and the family is the other 2; capped at 1
    adjusted = S.holm([0.6, math.nan, 0.02])
    assert adjusted[0] == pytest.approx(0.6) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.04)
    assert S.holm([0.7, 0.8]) == [1.0, 1.0]
    assert S.holm([]) == []


def test_the_family_is_adjacent_ranks_and_the_top_matrix_on_every_axis():
    rng = np.random.default_rng(3)
    agents = {name: noisy(rng, shift) for name, shift in (("a", 0.3), ("b", 0.2), ("c", 0.1), ("d", 0.0))}
    scores = {"trials": agents, "time": agents}
    sig = S.compare_ranking(scores, list(agents), top=3)
    # adjacent: ab, bc, cd; top 3 adds ac; x 2 axes
    assert {(a, b) for a, b, _ in sig.comparisons} == {("a", "b"), ("b", "c"), ("c", "d"), ("a", "c")}
    assert sig.family == 8
    raw = [c.p for c in sig.comparisons.values()]
    assert [c.p_adjusted for c in sig.comparisons.values()] == pytest.approx(S.holm(raw))
    # a lone test of the same pair is adjusted less than within the family
    alone = S.compare_ranking({"trials": {"b": agents["b"], "c": agents["c"]}}, ["b", "c"])
    assert alone.get("b", "c", "trials").p_adjusted == pytest.approx(alone.get("b", "c", "trials").p)
    assert alone.get("b", "c", "trials").p_adjusted < sig.get("b", "c", "trials").p_adjusted
    lines = S.matrix_lines(sig)
    assert lines[0] == "## Significance of the top 3" and "| | a | b | c |" in lines
    assert "| a |  | better / better | better / better |" in lines


def test_only_runs_both_agents_have_count():
    a = runs({"t0": [1.0] * 10, "t1": [1.0] * 10})
    b = runs({"t0": [0.0] * 4, "t2": [0.0] * 10})  # 4 seeds of t0 in common, t1 and t2 one-sided
    b[("t0", 3)] = math.nan  # a failed score is no pair either
    assert [S.paired_test(a, b)[i] for i in (0, 2, 3)] == [3, 0, "3 unequal of 3 pairs"]
    assert [S.paired_test(a, {})[i] for i in (0, 2, 3)] == [0, 0, "no scored runs"]
    assert S.paired_test(a, {("t0", 0): math.nan})[3] == "no scored runs"
    assert S.paired_test(a, runs({"t3": [0.0]}))[3] == "no common runs"
    assert math.isnan(S.paired_test(a, b)[1]) and math.isnan(S.paired_test(a, {})[1])
    six = runs({"t0": [0.0] * 6})
    pairs, p, direction, why = S.paired_test(a, six)  # the fewest that can reach p < 0.05
    assert (pairs, direction, why) == (6, 1, "") and p == pytest.approx(2 / 2**6)
    sig = S.compare_ranking({"trials": {"a": a, "b": b}, "time": {"a": a}}, ["a", "b", "c"])
    assert S.next_cell(sig, "a", "b", "trials") == "n/a (3 unequal of 3 pairs)"
    assert S.next_cell(sig, "b", "c", "time") == "n/a (no scored runs)"
    assert sig.family == 0 and S.matrix_lines(sig) == []


def test_scores_come_from_cells_by_task_and_seed():
    cells = [Cell("a", "t0", 1.0, seed_ids=[3, 7], p_trials=[0.5, 0.6], p_time=[0.4, math.nan]),
             Cell("a", "t1", 1.0, seed_ids=[3], p_trials=[0.1], p_time=[0.2]),
             Cell("b", "t0", 1.0, seed_ids=[7], p_trials=[0.2], p_time=[0.3])]
    assert S.run_scores(cells, "p_trials") == {"a": {("t0", 3): 0.5, ("t0", 7): 0.6, ("t1", 3): 0.1},
                                               "b": {("t0", 7): 0.2}}
    sig = S.compare_cells(cells, ["a", "b"])
    assert sig.axes == ["trials", "time"]
    assert sig.get("a", "b", "trials").pairs == 1 and sig.get("a", "b", "time").pairs == 0


def test_the_output_is_deterministic_and_independent_of_input_order():
    rng = np.random.default_rng(4)
    agents = {name: noisy(rng, shift) for name, shift in (("a", 0.05), ("b", 0.0), ("c", 0.02))}
    reordered = {name: dict(reversed(list(s.items()))) for name, s in reversed(list(agents.items()))}
    first = S.compare_ranking({"trials": agents}, ["a", "c", "b"])
    again = S.compare_ranking({"trials": agents}, ["a", "c", "b"])
    other = S.compare_ranking({"trials": reordered}, ["a", "c", "b"])
    assert first.comparisons == again.comparisons == other.comparisons
    assert S.matrix_lines(first) == S.matrix_lines(other)
