"""Distinctive mechanisms of xgb-sa, xgb-sa-transfer and ga, on the recorded tiny tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.base import make_agent
from tune_gym.measure.replay import ReplayBackend
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
CONV = Task.from_uri("op://conv2d_nchw-v1/n1_c8_h8_w8_k8_r3_s1_p1_d1?target=llvm")


@pytest.fixture(scope="module")
def conv():
    space = KnobSpace.for_task(CONV, "compact")
    backend = ReplayBackend(DATA)
    truth = {c: r.gflops for c, r in zip(space, backend.measure(CONV, space, list(space)))}
    return space, backend, truth


def _feed(agent, backend, space, configs):
    agent.observe(configs, backend.measure(CONV, space, configs))


def test_xgb_sa_plan_is_model_guided_with_a_random_tail(conv):
    space, backend, truth = conv
    agent = make_agent("xgb-sa", plan_size=40, n_init=40, sa_points=32, sa_steps=60, num_rounds=50)
    agent.reset(space, CONV, seed=0)
    first = agent.propose(40)  # random: the model has no data yet
    assert not agent.fitted
    _feed(agent, backend, space, first)
    plan = agent.propose(40)
    assert agent.fitted and len(set(plan) | set(first)) == 80  # nothing proposed twice
    n_random = round(0.05 * 40)
    guided, tail = plan[:-n_random], plan[-n_random:]
    # The SA's picks are ranked by the model, so they beat random configs on average...
    assert np.mean([truth[c] for c in guided]) > np.mean([truth[c] for c in first])
    # ...and the model scores them above the random tail it appended.
    scores = agent.score(np.array(plan))
    assert scores[: len(guided)].min() >= scores[len(guided):].max() - 1e-6 or len(tail) == 0


def test_transfer_model_guides_the_first_plan(conv):
    space, _, _ = conv
    agent = make_agent("xgb-sa-transfer", records=[str(DATA)], plan_size=16, sa_points=16, sa_steps=5,
                       num_rounds=30)
    agent.reset(space, CONV, seed=0)
    # Trained before any measurement, on the *other* task of the file only (dense 32x32x32).
    assert agent.fitted and agent.base is not None
    plan = agent.propose(16)
    rng_plan = make_agent("random")
    rng_plan.reset(space, CONV, seed=0)
    assert plan != rng_plan.propose(16)
    scores = agent.score(np.array(plan[:-1]))  # the last slot (5% of 16, rounded) is random
    others = agent.score(np.array(space.sample(np.random.default_rng(1), 200)))
    assert np.median(scores) >= np.median(others)


def test_transfer_ignores_records_of_the_task_itself(tmp_path, conv):
    space, _, _ = conv
    only_self = tmp_path / "self.jsonl"
    only_self.write_text("".join(line for line in DATA.read_text().splitlines(keepends=True)
                                 if CONV.uri in line))
    agent = make_agent("xgb-sa-transfer", records=[str(only_self)])
    agent.reset(space, CONV, seed=0)
    assert agent.base is None and not agent.fitted


def test_ga_keeps_elites_and_breeds_new_children(conv):
    space, backend, truth = conv
    agent = make_agent("ga", pop_size=16, elite_num=3, mutation_prob=0.1)
    agent.reset(space, CONV, seed=0)
    gen0 = agent.propose(16)
    _feed(agent, backend, space, gen0)
    gen1 = agent.propose(16)
    elites = sorted(gen0, key=lambda c: -truth[c])[:3]
    assert set(elites) <= set(agent.generation)  # carried over without re-measuring
    assert not set(gen1) & set(gen0) and len(set(gen1)) == len(gen1)
    # Children inherit knob values from their parents: most of their knobs match some parent.
    shared = np.mean([max(np.mean(np.array(c) == np.array(p)) for p in gen0) for c in gen1])
    assert shared > 0.5
