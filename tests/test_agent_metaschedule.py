"""``metaschedule``: TVM's defaults, reproducible runs, fresh valid proposals, a model that is used."""

from __future__ import annotations

import inspect
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the environments)
from agents.base import make_agent, run
from agents.metaschedule import DEFAULTS, EMPTY_ITERS_BEFORE_STOP, MUTATORS_LEFT_OUT, MetaScheduleAgent
from tune_gym.measure import make_backend
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"  # both spaces measured exhaustively
CONV = "op://conv2d_nchw-v1/n1_c8_h8_w8_k8_r3_s1_p1_d1?weights=given&target=llvm"  # 512 configs
DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"  # 200 configs
#: A small search (TVM: batches of 64, a population of 512, 4 generations) whose model scores from
#: the 16th measurement on (TVM: the 100th).
SMALL = {"plan_size": 8, "population_size": 32, "init_min_unmeasured": 8, "genetic_num_iters": 2,
         "num_warmup_samples": 16}


def _env(task: str, budget: int):
    return gym.make("tune_gym/Tune-v0", task=Task.from_uri(task), preset="compact", backend="replay",
                    backend_options={"dataset": str(DATA)}, batch_size=8, budget=budget, reward_norm=1.0)


def test_defaults_are_tvms():
    from tune_gym.tvm_support import ms

    m = ms()

    def defaults(fn):
        return {p.name: p.default for p in inspect.signature(fn).parameters.values()
                if p.default is not inspect.Parameter.empty}

    tvm = {**defaults(m.search_strategy.EvolutionarySearch.__init__), **defaults(m.cost_model.XGBModel._cls.__init__)}
    tvm["plan_size"] = defaults(m.tir_integration.tune_tir)["num_trials_per_iter"]
    assert {k: tvm[k] for k in DEFAULTS} == DEFAULTS
    ours = defaults(MetaScheduleAgent.__init__)
    assert {k: ours[k] for k in DEFAULTS} == DEFAULTS
    assert set(MUTATORS_LEFT_OUT) <= {type(mut).__name__ for mut in m.Mutator.create("llvm")}
    assert m.search_strategy.EvolutionarySearch().num_empty_iters_before_early_stop == EMPTY_ITERS_BEFORE_STOP


def test_same_seed_same_proposals():
    runs = []
    for seed in (3, 3, 4):
        env = _env(CONV, budget=24)  # the third batch is the model's
        agent = make_agent("metaschedule", **{**SMALL, "population_size": 16, "genetic_num_iters": 1})
        runs.append([t.config for t in run(agent, env, seed=seed).trials])
        env.close()
    assert len(runs[0]) == 24 and runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_proposals_are_valid_and_never_repeated():
    """On a 200-config space, 120 trials: every proposal a canonical config, none twice, the
    budget used up (the search keeps finding configs it has not proposed)."""
    env = _env(DENSE, budget=120)
    agent = make_agent("metaschedule", **{**SMALL, "plan_size": 16})
    proposals: list[tuple[int, ...]] = []
    propose = agent.propose

    def recording(n: int) -> list[tuple[int, ...]]:
        out = propose(n)
        proposals.extend(out)
        return out

    agent.propose = recording
    result = run(agent, env, seed=0)
    env.close()
    space = env.unwrapped.space
    assert len(result.trials) == 120
    assert len(proposals) == len(set(proposals)) == 120
    assert all(space.check(c) == c for c in proposals)


def test_model_picks_beat_random(train_seed, record_property):
    """After the model has learned two batches, the search's picks (its batch minus the
    random share) are faster than the configs not yet measured: on average they beat more than
    half of them, the expectation of random picks (3 seeds; ``--seeds N``: seeds 3N to 3N + 2)."""
    space = KnobSpace.for_task(Task.from_uri(CONV), "compact")
    backend = make_backend("replay", dataset=str(DATA))
    everything = list(space)
    speed = dict(zip(everything, (r.gflops for r in backend.measure(space.task, space, everything))))
    options = {**SMALL, "plan_size": 16}
    shares = []
    for seed in range(3 * train_seed, 3 * train_seed + 3):
        agent = make_agent("metaschedule", **options)
        agent.reset(space, space.task, seed=seed)
        for _ in range(2):
            batch = agent.propose(16)
            agent.observe(batch, backend.measure(space.task, space, batch))
        picks = agent.propose(16)[:15]  # the last slot is random (eps_greedy 0.05 of 16)
        assert agent.model.booster is not None  # the model scored this batch
        rest = np.array([speed[c] for c in everything if c not in agent.seen])
        shares.append(np.mean([(rest < speed[c]).mean() for c in picks]))
    record_property("picks_beat_share", float(np.mean(shares)))
    assert np.mean(shares) > 0.5


def test_declines_a_task_without_programs():
    from agents.base import NotApplicable

    task = Task.parse("deepbench:3")  # the simulated VTA: knobs, no TVM schedules
    with pytest.raises(NotApplicable, match="^agent metaschedule needs TVM schedules; configs of target vta"):
        make_agent("metaschedule").reset(KnobSpace.for_task(task), task, seed=0)


def test_bad_options():
    with pytest.raises(ValueError, match="genetic_mutate_prob must be a finite number in \\[0, 1\\]"):
        make_agent("metaschedule", genetic_mutate_prob=1.5)
    with pytest.raises(ValueError, match="population_size must be an integer >= 1"):
        make_agent("metaschedule", population_size=0)
