"""Distinctive mechanisms of xgb-sa, xgb-sa-transfer and ga, on recorded tiny tasks.

Each test checks one mechanism of AutoTVM's tuner and fails when that mechanism is removed:
simulated annealing (Metropolis acceptance, early stop, persistent random-start points), the
rank objective, early-stopped boosting, the fading transfer base model, and transfer itself
(two exhaustively measured conv2d shapes, replayed).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from agents.base import make_agent, run
from agents.models import xgb as xgb_module
from agents.models.features import KnobFeaturizer
from agents.models.xgb import XGBModel, average_recall, recall_curve
from agents.optimizers.sa import SimulatedAnnealing
from tune_gym.measure.replay import ReplayBackend
from tune_gym.records import load_records
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
C16_DATA = Path(__file__).parent / "data" / "transfer_conv2d_c16.jsonl"
CONV = Task.from_uri("op://conv2d_nchw-v1/n1_c8_h8_w8_k8_r3_s1_p1_d1?weights=given&target=llvm")
CONV16 = Task.from_uri("op://conv2d_nchw-v1/n1_c16_h8_w8_k8_r3_s1_p1_d1?weights=given&target=llvm")
DENSE = Task.from_uri("op://dense-v1/m32_n32_k32?weights=given&target=llvm")
BOTH = [str(DATA), str(C16_DATA)]


@pytest.fixture(scope="module")
def conv():
    space = KnobSpace.for_task(CONV, "compact")
    backend = ReplayBackend(DATA)
    truth = {c: r.gflops for c, r in zip(space, backend.measure(CONV, space, list(space)))}
    return space, backend, truth


@pytest.fixture(scope="module")
def conv_xy(conv):
    space, _, truth = conv
    configs = list(space)
    return KnobFeaturizer(space)(np.array(configs)), np.array([truth[c] for c in configs])


def _feed(agent, backend, space, configs):
    agent.observe(configs, backend.measure(CONV, space, configs))


def _env(task: Task, dataset: Path, budget: int) -> gym.Env:
    return gym.make("tune_gym/Tune-v0", task=task, backend="replay", backend_options={"dataset": str(dataset)},
                    reward_norm="none", batch_size=64, budget=budget, preset="compact")


# ---------------------------------------------------------------------------------------------- xgb-sa


def test_xgb_sa_plan_is_model_guided_with_a_random_tail(conv, train_seed, record_property):
    space, backend, truth = conv
    agent = make_agent("xgb-sa", plan_size=40, n_init=40, sa_points=32, sa_steps=60, num_rounds=50)
    agent.reset(space, CONV, seed=train_seed)
    first = agent.propose(40)  # random: the model has no data yet
    assert not agent.fitted
    _feed(agent, backend, space, first)
    plan = agent.propose(40)
    assert agent.fitted and len(set(plan) | set(first)) == 80  # nothing proposed twice
    n_random = round(0.05 * 40)
    guided, tail = plan[:-n_random], plan[-n_random:]
    # The SA's picks are ranked by the model, so they beat random configs on average...
    record_property("guided_mean_over_random_mean",
                    np.mean([truth[c] for c in guided]) / np.mean([truth[c] for c in first]))
    assert np.mean([truth[c] for c in guided]) > np.mean([truth[c] for c in first])
    # ...and the model scores them above the random tail it appended.
    scores = agent.score(np.array(plan))
    assert scores[: len(guided)].min() >= scores[len(guided):].max() - 1e-6 or len(tail) == 0


def test_first_sa_round_starts_random_and_points_persist(conv):
    """AutoTVM's SA starts from random points (not the best measured configs) and keeps its
    points from one plan to the next; a new run starts afresh."""
    space, backend, _ = conv
    agent = make_agent("xgb-sa", plan_size=32, sa_points=48, sa_steps=30, num_rounds=20)
    agent.reset(space, CONV, seed=0)
    starts, ends = [], []
    search = agent.sa.search

    def spy(space_, score, n, rng, exclude=frozenset(), init=None):
        starts.append((None if agent.sa.points is None else agent.sa.points.copy(), init))
        out = search(space_, score, n, rng, exclude=exclude, init=init)
        ends.append(agent.sa.points.copy())
        return out

    agent.sa.search = spy
    for _ in range(3):
        _feed(agent, backend, space, agent.propose(32))
    assert len(starts) == 2  # the first plan was random, two SA rounds followed
    assert starts[0][0] is None and not starts[0][1]  # nothing seeded: SA draws random points
    np.testing.assert_array_equal(starts[1][0], ends[0])  # persisted between rounds
    assert not np.array_equal(ends[1], ends[0])  # and walked on
    agent.reset(space, CONV, seed=1)
    assert agent.sa.points is None


def test_sa_accepts_worse_moves_by_temperature(conv):
    """Metropolis rule: at T=1 a move that loses 0.05 is taken with probability exp(-0.05);
    at T ~ 0 never."""
    space, _, _ = conv
    values = np.random.default_rng(0).random(space.size) * 0.05

    def score(points):
        return values[[space.index(tuple(int(v) for v in p)) for p in points]]

    taken = {}
    for temp in (1.0, 1e-9):
        scored: list[np.ndarray] = []
        sa = SimulatedAnnealing(n_points=256, max_steps=1, temp=(temp, temp))
        sa.search(space, lambda p, log=scored: log.append(p.copy()) or score(p), 8, np.random.default_rng(1))
        start, cand = scored  # the start points, then one random move of each
        moved = np.all(sa.points == cand, axis=1) & ~np.all(start == cand, axis=1)
        taken[temp] = (moved & (score(cand) < score(start))).sum()
    assert taken[1e-9] == 0
    assert taken[1.0] > 40  # about half the moves are worse, and nearly all of those are taken


def test_sa_stops_early_and_keeps_its_points(conv):
    space, _, _ = conv
    calls = []

    def flat(points):
        calls.append(len(points))
        return np.zeros(len(points))

    sa = SimulatedAnnealing(n_points=16, max_steps=500, early_stop=50)
    sa.search(space, flat, 4, np.random.default_rng(0))
    assert len(calls) == 1 + 50  # initial scoring + 50 steps without a change of the top set
    points = sa.points.copy()
    seen = []
    sa.search(space, lambda p: seen.append(p.copy()) or np.zeros(len(p)), 4, np.random.default_rng(0))
    np.testing.assert_array_equal(seen[0], points)  # the next search starts where the last ended


# ---------------------------------------------------------------------------------------------- XGBModel


def test_recall_metric_is_autotvm_average_recall():
    rng = np.random.default_rng(0)
    for n in (5, 16, 64):
        preds, labels = rng.random(40), rng.random(40)
        trials = np.argsort(preds)[::-1]
        ranks = np.empty(40, dtype=int)
        ranks[np.argsort(-labels[trials])] = np.arange(40)
        curve = [np.sum(ranks[:i] <= i) / (i + 1) for i in range(40)]  # tuner/metric.py recall_curve
        np.testing.assert_allclose(recall_curve(ranks), curve)
        assert average_recall(preds, labels, n) == pytest.approx(np.sum(curve[:n]) / n)
    perfect = sum(i / (i + 1) for i in range(10)) / 10  # ranks[j] = j: position i itself is left out
    assert average_recall(np.arange(10.0), np.arange(10.0), 10) == pytest.approx(perfect)


def test_rank_objective_learns_order_only(conv_xy):
    """rank:pairwise sees only the order of the labels: a monotone transform of the
    throughputs gives the same model; regression does not."""
    x, y = conv_xy
    rows = np.random.default_rng(0).choice(len(y), 128, replace=False)
    diffs = {}
    for loss in ("rank", "reg"):
        a = XGBModel(loss, seed=3).fit(x[rows], y[rows])
        b = XGBModel(loss, seed=3).fit(x[rows], y[rows] ** 3)
        diffs[loss] = float(np.abs(a.predict(x) - b.predict(x)).max())
        objective = json.loads(a.booster.save_config())["learner"]["objective"]["name"]
        assert objective == {"rank": "rank:pairwise", "reg": "reg:squarederror"}[loss]
    assert diffs["rank"] == 0.0 and diffs["reg"] > 0.05
    assert make_agent("xgb-sa").loss == "rank"  # AutoTVM's default


def test_boosting_stops_early_on_training_recall(conv_xy, monkeypatch):
    x, y = conv_xy
    metric_n = []
    recall = xgb_module.average_recall
    monkeypatch.setattr(xgb_module, "average_recall", lambda p, lab, n: metric_n.append(n) or recall(p, lab, n))
    model = XGBModel("rank", seed=0).fit(x[:128], y[:128], plan_size=32)
    best = int(model.booster.attr("best_iteration"))
    assert model.rounds == best + 1 + 20 < 8000  # stopped 20 rounds after the best training recall
    assert set(metric_n) == {32}  # recall@plan_size
    short = XGBModel("rank", seed=0, stopping_rounds=5).fit(x[:128], y[:128], 32)
    assert short.rounds == int(short.booster.attr("best_iteration")) + 1 + 5 < model.rounds
    metric_n.clear()
    base = XGBModel("rank", seed=0).fit_log(x, y, plan_size=32)  # transfer: 400 rounds cap, stop 100, N = 64
    assert set(metric_n) == {64}
    assert base.rounds == 400 or base.rounds == int(base.booster.attr("best_iteration")) + 1 + 100
    assert XGBModel("rank", 7, seed=0).fit(x[:128], y[:128]).rounds == 7  # fixed rounds when asked


def test_base_model_margin_fades_with_own_data(conv_xy):
    x, y = conv_xy
    rng = np.random.default_rng(0)
    base = XGBModel("rank", seed=0).fit_log(x[::-1], y[::-1] ** 0.5, plan_size=32)
    model = XGBModel("rank", seed=1)
    model.base = base
    assert np.array_equal(model.predict(x), base.predict(x))  # before any own data: the base model
    rows = rng.permutation(len(y))
    for n, discount in ((64, 0.5), (128, 0.25), (256, 1 / 16)):
        model.fit(x[rows[:n]], y[rows[:n]])
        assert model.discount == pytest.approx(discount) and model.base is base
        own = model.booster.inplace_predict(x, predict_type="margin", base_margin=np.zeros(len(x)))
        np.testing.assert_allclose(model.predict(x), own + discount * base.predict(x), rtol=1e-4, atol=1e-4)
    plain = XGBModel("rank", seed=1).fit(x[rows[:256]], y[rows[:256]])
    assert not np.allclose(plain.predict(x), own, atol=1e-3)  # the base margin shaped the training
    model.fit(x[rows[:300]], y[rows[:300]])  # 1 / 2 ** (300 / 64) < 0.05: the base model is dropped
    assert model.base is None
    np.testing.assert_allclose(model.predict(x), model.booster.inplace_predict(x, predict_type="margin"))


# ---------------------------------------------------------------------------------------------- transfer


def test_transfer_model_guides_the_first_plan(conv, train_seed, record_property):
    space, _, truth = conv
    agent = make_agent("xgb-sa-transfer", records=BOTH, plan_size=16)
    agent.reset(space, CONV, seed=train_seed)
    # Trained before any measurement, on the other conv2d shape only (not on dense, not on itself).
    assert agent.fitted and agent.base is not None and agent.n_transfer_records == 512
    plan = agent.propose(16)
    rng_plan = make_agent("random")
    rng_plan.reset(space, CONV, seed=train_seed)
    assert plan != rng_plan.propose(16)
    scores = agent.score(np.array(plan[:-1]))  # the last slot (5% of 16, rounded) is random
    others = agent.score(np.array(space.sample(np.random.default_rng(1 + train_seed), 200)))
    record_property("plan_mean_over_space_mean",
                    np.mean([truth[c] for c in plan[:-1]]) / np.mean(list(truth.values())))
    assert np.median(scores) >= np.median(others)
    assert np.mean([truth[c] for c in plan[:-1]]) > 1.5 * np.mean(list(truth.values()))


def test_transfer_keeps_same_op_other_tasks_only(tmp_path, conv):
    space, _, _ = conv
    only_self = tmp_path / "self.jsonl"
    only_self.write_text("".join(line for line in DATA.read_text().splitlines(keepends=True)
                                 if CONV.uri in line))
    with pytest.warns(UserWarning, match="min_seed_records"):
        agent = make_agent("xgb-sa-transfer", records=[str(only_self)])
        agent.reset(space, CONV, seed=0)
    assert agent.base is None and not agent.fitted and agent.n_transfer_records == 0
    dense = make_agent("xgb-sa-transfer", records=BOTH, min_seed_records=1)
    with pytest.warns(UserWarning):  # the conv2d records are another op
        dense.reset(KnobSpace.for_task(DENSE, "compact"), DENSE, seed=0)
    assert dense.n_transfer_records == 0 and dense.base is None


def test_transfer_reads_datasets_and_the_catalog(tmp_path, monkeypatch, conv):
    from tune_gym.datasets import Dataset
    from tune_gym.datasets.catalog import catalog

    space, _, _ = conv
    Dataset.from_records(load_records(C16_DATA)).save(tmp_path / "c16.parquet")
    from_file = make_agent("xgb-sa-transfer", records=[str(tmp_path / "c16.parquet")], plan_size=16)
    from_file.reset(space, CONV, seed=0)
    assert from_file.n_transfer_records == 512 and from_file.fitted
    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path))
    family = (CONV.op, CONV.target.kind)  # the same op on the same target kind (not the CUDA conv2d data)
    conv_rows = sum(e.rows for e in catalog()
                    if (Task.from_uri(e.task).op, Task.from_uri(e.task).target.kind) == family and e.task != CONV.uri)
    from_catalog = make_agent("xgb-sa-transfer", records="catalog", plan_size=16)
    from_catalog.reset(space, CONV, seed=0)
    assert from_catalog.n_transfer_records == conv_rows >= 512 + 3000


def test_no_transfer_below_min_seed_records(conv):
    space, _, _ = conv
    agent = make_agent("xgb-sa-transfer", records=BOTH, min_seed_records=513)  # 512 usable records
    with pytest.warns(UserWarning, match="512 records .* fewer than min_seed_records=513"):
        agent.reset(space, CONV, seed=0)
    assert agent.base is None and not agent.fitted and "no transfer" in agent.transfer_status
    plain = make_agent("xgb-sa")
    plain.reset(space, CONV, seed=0)
    assert agent.propose(64) == plain.propose(64)  # exactly xgb-sa: a random first plan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_agent("xgb-sa-transfer", records=BOTH).reset(space, CONV, seed=0)  # 512 >= 500: no warning


@pytest.mark.parametrize(("task", "dataset"), [(CONV16, C16_DATA), (CONV, DATA)])
def test_transfer_beats_no_transfer_on_a_related_shape(task, dataset, train_seed, record_property):
    """conv2d 8 -> 16 input channels and back: over 5 seeds, the transferred model finds
    better configs early (its first plan is model-guided) and is not worse at the end
    (``--seeds`` runs seeds 5N to 5N + 4)."""
    budget = 64
    curves: dict[str, list[np.ndarray]] = {"xgb-sa": [], "xgb-sa-transfer": []}
    for seed in range(5 * train_seed, 5 * train_seed + 5):
        for agent_id, options in (("xgb-sa", {}), ("xgb-sa-transfer", {"records": BOTH})):
            env = _env(task, dataset, budget)
            curves[agent_id].append(run(make_agent(agent_id, **options), env, seed=seed).best_so_far())
            env.close()
    best = max(r.result.gflops for r in load_records(dataset, task))

    def median_at(agent_id: str, trials: int) -> float:
        return float(np.median([c[trials - 1] for c in curves[agent_id]]))

    record_property("transfer_over_plain_at_16", median_at("xgb-sa-transfer", 16) / median_at("xgb-sa", 16))
    record_property("transfer_at_16_over_best", median_at("xgb-sa-transfer", 16) / best)
    record_property("transfer_minus_plain_at_budget",
                    median_at("xgb-sa-transfer", budget) - median_at("xgb-sa", budget))
    # seeds 0-99 (--seeds 0-19): 1.08-2.46x xgb-sa's median at 16 trials, always the best config
    assert median_at("xgb-sa-transfer", 16) > median_at("xgb-sa", 16)
    assert median_at("xgb-sa-transfer", 16) >= 0.8 * best
    assert median_at("xgb-sa-transfer", budget) >= median_at("xgb-sa", budget)


# ---------------------------------------------------------------------------------------------- ga


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
