"""Mechanisms of the ga, grid and random agents, with synthetic throughputs on real knob spaces.

Each test fails when the mechanism it names is removed: the GA's one-point crossover, its
mutation, elitism and fitness-proportional parent selection; grid's flat-index order and
exhaustiveness; random search's no-repeat rule.
"""

from __future__ import annotations

import numpy as np
import pytest

from agents.base import make_agent
from agents.ga import GAAgent
from tune_gym.measure.result import MeasureResult
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

CONV = Task.from_uri("op://conv2d_nchw-v1/n1_c8_h8_w8_k8_r3_s1_p1_d1?weights=given&target=llvm")
#: knobs of the compact conv2d space: sketch (2), tile_n (1), tile_f, tile_y, tile_x, unroll (4 each)
A = (0, 0, 0, 0, 0, 0)
B = (1, 0, 3, 3, 3, 3)


@pytest.fixture(scope="module")
def conv_space() -> KnobSpace:
    return KnobSpace.for_task(CONV, "compact")


def _ok(gflops: float) -> MeasureResult:
    return MeasureResult(costs=(1.0 / gflops,), flops=10**9)


FAILED = MeasureResult(error="run_error")


def _crossovers(a, b) -> set[tuple[int, ...]]:
    """Every one-point crossover ``x[:p] + y[p:]`` of ``a`` and ``b`` (both orders)."""
    return {tuple(x[:p] + y[p:]) for x, y in ((a, b), (b, a)) for p in range(1, len(a))} - {a, b}


def _ga_on(space, generation, fitness, seed=0, **options) -> GAAgent:
    """A GA whose first generation is ``generation``, measured with ``fitness`` (0 = failed)."""
    agent = make_agent("ga", pop_size=len(generation), **options)
    agent.reset(space, space.task, seed=seed)
    agent.generation, agent._queue = list(generation), list(generation)
    assert agent.propose(len(generation)) == list(generation)
    agent.observe(generation, [_ok(f) if f > 0 else FAILED for f in fitness])
    return agent


def _spy_fresh(agent) -> list:
    """Record the random configs that fill up a generation (they are not bred)."""
    drawn: list = []
    fresh = agent.fresh

    def spy(n, taken=frozenset()):
        out = fresh(n, taken)
        drawn.extend(out)
        return out

    agent.fresh = spy
    return drawn


def _others(space, n, avoid, seed=1, where=lambda c: True):
    pool = [c for c in space if c not in avoid and where(c)]
    return [pool[int(i)] for i in np.random.default_rng(seed).permutation(len(pool))[:n]]


# ---------------------------------------------------------------------------------------------- ga


def test_ga_children_are_crossovers_of_the_fit_parents_and_elites_stay(conv_space):
    """Only A and B have fitness, so with no mutation every child is a one-point crossover
    of A and B; all 8 distinct ones are found; A and B (the elites) stay in the population,
    unmeasured again, and still lead it after a generation of failed children."""
    cross = _crossovers(A, B)
    assert len(cross) == 8
    gen0 = [A, B, *_others(conv_space, 14, cross | {A, B})]
    agent = _ga_on(conv_space, gen0, [10.0, 5.0] + [0.0] * 14, elite_num=2, mutation_prob=0.0)
    gen1 = agent.propose(16)
    assert agent.generation[:2] == [A, B]  # the elites, fittest first
    assert set(gen1) == set(agent.generation[2:]) and not set(gen1) & set(gen0)  # no repeats
    assert cross <= set(gen1)  # children inherit a prefix from one parent and the rest from the other
    agent.observe(gen1, [FAILED] * len(gen1))
    agent.propose(16)
    assert agent.generation[:2] == [A, B]


def test_ga_mutation_explores_around_a_lone_fit_parent(conv_space):
    """With a single parent of nonzero fitness, crossover only copies it; children differ
    from it by mutation, so they stay close to it (few knobs changed)."""
    gen0 = [A, *_others(conv_space, 15, {A}, where=lambda c: sum(v != 0 for v in c) >= 3)]
    agent = _ga_on(conv_space, gen0, [10.0] + [0.0] * 15, elite_num=1, mutation_prob=0.2)
    children = agent.propose(16)
    assert len(children) == 15 and A not in children and not set(children) & set(gen0)
    changed = [sum(x != y for x, y in zip(c, A)) for c in children]
    # Random configs: about 10% within 2 knobs of A (and gen0 holds none).
    assert np.mean(np.array(changed) <= 2) >= 0.8


def test_ga_selects_fitter_parents_more_often(conv_space):
    """Parent F (fitness 7; sketch 1, unroll 3) against 7 parents of fitness 1 and 8 failed
    ones (all sketch 0, unroll < 3). A child's sketch comes from its first parent and its
    unroll from its second (no mutation), so the children that carry F's values show how
    often F was chosen: about half the time (7/14), not 1/16 as with uniform choice."""
    f = (1, 0, 1, 2, 1, 3)
    from_f = {"first": 0, "second": 0}
    n_children = 0
    for seed in range(4):
        others = _others(conv_space, 15, {f}, seed=seed, where=lambda c: c[0] == 0 and c[5] < 3)
        agent = _ga_on(conv_space, [f, *others], [7.0] + [1.0] * 7 + [0.0] * 8, seed=seed, elite_num=1,
                       mutation_prob=0.0)
        fresh_fill = _spy_fresh(agent)
        children = [c for c in agent.propose(16) if c not in fresh_fill]  # bred, not random fill
        n_children += len(children)
        from_f["first"] += sum(c[0] == 1 for c in children)
        from_f["second"] += sum(c[5] == 3 for c in children)
    assert n_children >= 40  # (60 here: 29 with F first, 17 with F second)
    assert from_f["first"] / n_children > 0.2 and from_f["second"] / n_children > 0.2


# ---------------------------------------------------------------------------------------------- grid / random


def test_grid_walks_every_config_in_flat_index_order(dense_space):
    agent = make_agent("grid")
    agent.reset(dense_space, dense_space.task, seed=0)
    walked = []
    for _ in range(100):  # bounded: a broken agent must not loop forever
        batch = agent.propose(7)
        if not batch:
            break
        assert len(batch) <= 7
        walked += batch
    assert walked == list(dense_space)  # each config once, index 0, 1, 2, ...
    later = make_agent("grid", start=195)
    later.reset(dense_space, dense_space.task, seed=0)
    assert later.propose(10) == [dense_space.config(i) for i in range(195, 200)] and later.propose(10) == []


def test_random_never_repeats_a_config(dense_space):
    """Uniform draws without replacement: the whole space once, in a shuffled order, never a
    config it proposed or was told about (e.g. records loaded before the run)."""
    agent = make_agent("random")
    agent.reset(dense_space, dense_space.task, seed=0)
    known = [dense_space.config(i) for i in range(0, 200, 10)]
    agent.observe(known, [_ok(1.0)] * len(known))
    drawn = []
    for _ in range(100):  # bounded: a broken agent must not loop forever
        batch = agent.propose(9)
        if not batch:
            break
        drawn += batch
    assert len(drawn) == len(set(drawn)) == dense_space.size - len(known)
    assert set(drawn) == set(dense_space) - set(known)
    assert drawn[:20] != sorted(drawn[:20], key=dense_space.index)
