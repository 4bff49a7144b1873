"""``meta-bo-evo``: ``meta-bo``'s run until it stalls, then MetaSchedule's search, told everything."""

from __future__ import annotations

import pytest
from test_agents import CONV, FAST, _replay_env

from agents.base import make_agent, run
from agents.meta_bo_evo import MetaBOEvoAgent
from tune_gym.measure.result import MeasureResult
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

SMALL = FAST["meta-bo-evo"]
BO_ONLY = {k: v for k, v in SMALL.items() if k in FAST["meta-bo"]}


def _run(agent_id: str, options: dict, budget: int = 48, seed: int = 3):
    env = _replay_env(CONV, budget=budget)
    agent = make_agent(agent_id, **options)
    result = run(agent, env, seed=seed)
    env.close()
    return agent, [t.config for t in result.trials]


def test_until_the_switch_the_run_is_meta_bos_and_after_it_nothing_is_measured_twice():
    evo, configs = _run("meta-bo-evo", SMALL)
    _, bo_configs = _run("meta-bo", BO_ONLY)
    assert evo.switched_at is not None and evo.switched_at >= SMALL["min_trials"]
    assert configs[:evo.switched_at] == bo_configs[:evo.switched_at]  # the same seed's meta-bo run
    assert configs[evo.switched_at:] != bo_configs[evo.switched_at:len(configs)]  # then the search's own
    assert len(set(configs)) == len(configs) == 48
    assert evo.evo is not None and set(evo.evo.seen) == set(configs)  # the search was told every measurement
    assert evo.describe()["switched_at"] == evo.switched_at
    assert _run("meta-bo-evo", SMALL)[1] == configs  # same seed, same run


def test_without_a_stall_before_the_budget_it_is_meta_bo():
    evo, configs = _run("meta-bo-evo", {**SMALL, "min_trials": 64})
    _, bo_configs = _run("meta-bo", BO_ONLY)
    assert evo.switched_at is None and evo.evo is None and evo.describe()["switched_at"] is None
    assert configs == bo_configs


def _result(gflops: float) -> MeasureResult:
    if gflops <= 0:
        return MeasureResult(costs=(), flops=10**9, error="run_error", error_msg="boom")
    return MeasureResult(costs=(1.0 / gflops,), flops=10**9)


def test_stalled_counts_measurements_since_the_last_gain_above_min_gain():
    space = KnobSpace.for_task(Task.from_uri(CONV), "compact")
    agent = make_agent("meta-bo-evo", **{**SMALL, "patience": 3, "min_trials": 4, "min_gain": 0.1})
    assert isinstance(agent, MetaBOEvoAgent)
    agent.reset(space, space.task, seed=0)
    configs = space.sample_unique(agent.rng, 9)
    gains = [1.0, 2.0, 2.1, 0.0, 2.15]  # 2.1 and 2.15 are under 10% above 2.0; the failure gains nothing
    for cfg, g in zip(configs, gains):
        agent.observe([cfg], [_result(g)])
    assert agent.stalled()  # 5 measured, the last 3 without a gain
    agent.observe([configs[4]], [_result(9.0)])  # a config seen before: not a new measurement
    assert agent.stalled()
    agent.observe([configs[5]], [_result(2.5)])  # a gain of 16% over 2.15
    assert not agent.stalled()
    agent.observe(configs[6:9], [_result(1.0)] * 3)
    assert agent.stalled()


def test_options_are_checked_and_meta_bos_pass_through():
    agent = make_agent("meta-bo-evo", plan_size=4, patience=10)
    assert agent.plan_size == 4 and agent.patience == 10
    with pytest.raises(ValueError, match="patience"):
        make_agent("meta-bo-evo", patience=0)
    with pytest.raises(ValueError, match="min_gain"):
        make_agent("meta-bo-evo", min_gain=-0.5)
