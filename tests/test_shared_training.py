"""The pieces the cost models, pretrained agents and training scripts share: the epoch loop
(agents/models/training.py), the cached checkpoint load (PretrainedAgent), the SA-refined
candidate pool of the BO agents, XGBModel's option checks and the scripts' splits and scores."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from agents import pretrained
from agents.base import make_agent
from agents.models.oneshot import OneShotModel
from agents.models.training import BatchLoss, run_epochs, validation_mse
from agents.models.xgb import XGBModel
from agents.optimizers.bo import refined_pool
from agents.optimizers.sa import SimulatedAnnealing
from tune_gym.options import OptionError

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- the epoch loop
def _linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(3, 1)


def test_train_loss_is_the_weighted_sum_over_the_units_and_validation_is_optional():
    net = _linear()
    x, y = torch.ones(4, 3), torch.zeros(4)
    calls = []

    def batches():
        calls.append(net.training)
        for idx in (torch.arange(3), torch.arange(3, 4)):  # batches of 3 rows and 1 row
            yield BatchLoss(((net(x[idx]).squeeze(-1) - y[idx]) ** 2).mean(), len(idx), len(idx))

    opt = torch.optim.SGD(net.parameters(), lr=0.0)  # no step moves the weights: every batch loss is known
    with torch.no_grad():
        expected = float(((net(x).squeeze(-1) - y) ** 2).mean())
    history = run_epochs(net, opt, 2, batches, progress=False)
    assert calls == [True, True] and not net.training  # one call per epoch in training mode, eval at the end
    assert history["train_loss"] == pytest.approx([expected, expected]) and history["val_loss"] == []
    assert len(history["epoch_secs"]) == 2
    lists = run_epochs(net, opt, 1, lambda: iter([BatchLoss(torch.tensor(6.0, requires_grad=True), 1, 3)]),
                       validate=lambda: 0.5, progress=False)
    assert lists["train_loss"] == [2.0] and lists["val_loss"] == [0.5]  # summed over 3 lists: 2 per list


def test_clip_bounds_the_gradient_norm_of_each_step():
    net = _linear()
    before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    loss = lambda: iter([BatchLoss(1000.0 * net(torch.ones(1, 3)).sum(), 1, 1)])
    run_epochs(net, opt, 1, loss, clip=0.5, progress=False)
    step = torch.cat([p.detach().flatten() for p in net.parameters()]) - before
    assert float(step.norm()) == pytest.approx(0.5, rel=1e-5)


def test_validation_mse_scores_labels_and_is_none_without_rows():
    class Rows:
        label = np.array([1.0, 0.0])

        def __len__(self) -> int:
            return 2

    validate = validation_mse(lambda rows: np.array([0.5, 0.5]), Rows())
    assert validate is not None and validate() == pytest.approx(0.25)
    assert validation_mse(lambda rows: np.zeros(0), None) is None


# ---------------------------------------------------------------------- pretrained agents
def test_pretrained_agents_share_one_load_per_checkpoint_and_describe_it(tmp_path):
    path = tmp_path / "m.pt"
    OneShotModel(shape=(25, 22), d_model=16, ff=32, layers=1, dropout=0.0).save(
        path, {"train_tasks": ["op://other"], "ops": ["dense"], "rows": {"train": 1}, "command": "test"})
    assert pretrained.cached_model("OneShotModel", str(path)) is pretrained.cached_model("OneShotModel", str(path))
    agent = make_agent("one-shot", checkpoint=str(path))
    model = agent.load_checkpoint("op://dense-v1/m8_n8_k8?target=llvm", lambda uri: path, "One-Shot", "OneShotModel")
    assert model is pretrained.cached_model("OneShotModel", str(path.resolve()))
    assert agent.describe() == {"checkpoint": "m.pt", "sha256": pretrained.sha256(str(path))}


# ---------------------------------------------------------------------- the BO candidate pool
def test_refined_pool_puts_the_sa_picks_first_and_never_an_excluded_config(dense_space):
    def score(configs: np.ndarray) -> np.ndarray:
        return -np.abs(np.asarray(configs, dtype=np.float64) - 2).sum(axis=1)

    top = dense_space.sample_unique(np.random.default_rng(1), 4)
    excluded = set(top)

    def pool(seed: int) -> list:
        sa = SimulatedAnnealing(n_points=8, max_steps=5, early_stop=3, persistent=False)
        return refined_pool(dense_space, sa, score, np.random.default_rng(seed), 40, top, 2, excluded)

    first, again = pool(0), pool(0)
    assert first == again and len(first) == len(set(first)) == 40 and not excluded & set(first)
    sa = SimulatedAnnealing(n_points=8, max_steps=5, early_stop=3, persistent=False)
    picks = sa.search(dense_space, score, 10, np.random.default_rng(0), exclude=excluded, init=top)
    assert first[: len(picks)] == picks  # the SA picks of the same draw lead the pool


# ---------------------------------------------------------------------- XGBoost options
@pytest.mark.parametrize("options, name", [({"loss": "hinge"}, "loss"), ({"num_rounds": 0}, "num_rounds"),
                                           ({"max_rounds": 1.5}, "max_rounds"), ({"nthread": 0}, "nthread"),
                                           ({"stopping_rounds": True}, "stopping_rounds")])
def test_the_xgboost_model_checks_its_options_and_xgb_sa_reports_them(options, name):
    with pytest.raises(OptionError, match=f"^{name} must be"):
        XGBModel(**options)
    with pytest.raises(OptionError, match=f"^agent 'xgb-sa': {name} must be"):
        make_agent("xgb-sa", **options)
    agent = make_agent("xgb-sa", loss="reg", num_rounds=np.int64(7), nthread=None)
    assert (agent.loss, agent.num_rounds, agent.nthread) == ("reg", 7, None)
    assert type(agent.num_rounds) is int


# ---------------------------------------------------------------------- the training scripts
@pytest.fixture(scope="module")
def common():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import training_common

        yield training_common
    finally:
        sys.path.remove(str(REPO / "scripts"))


class _Rows:
    def __init__(self, task: np.ndarray) -> None:
        self.task = task

    def __len__(self) -> int:
        return len(self.task)

    def subset(self, sel: np.ndarray) -> _Rows:
        return _Rows(self.task[sel])


def test_split_validation_is_a_seeded_rounded_fraction(common):
    pool = _Rows(np.array([f"t{i}" for i in range(25)], dtype=object))
    train, val = common.split_validation(pool, 0.1, np.random.default_rng(3))
    again, _ = common.split_validation(pool, 0.1, np.random.default_rng(3))
    assert len(val) == 2 and len(train) == 23 and list(train.task) == list(again.task)
    assert sorted([*train.task, *val.task]) == sorted(pool.task)


def test_split_holdout_exits_on_an_unknown_network(common):
    with pytest.raises(SystemExit, match="unknown network"):
        common.split_holdout(_Rows(np.array(["op://a"], dtype=object)), ["no-such-network"])


def test_network_scores_leave_out_tasks_without_a_measured_cost(common):
    task = np.array(["a", "a", "b", "b"], dtype=object)
    cost = np.array([1.0, 2.0, np.inf, 0.0])  # task b: nothing ran
    scores = common.network_scores(np.array([1.0, 0.0, 1.0, 0.0]), task, cost, {"net": {"a": 2, "b": 1}}, 0)
    assert scores == {"net": {"tasks_with_data": 1, "tasks": 2, "top1": 1.0, "top5": 1.0}}
    assert common.network_scores(np.zeros(2), task[2:], cost[2:], {"net": {"b": 1}}, 0) == {}


def test_holdout_scripts_refuse_a_validation_fraction_outside_0_1(common, capsys):
    parser = common.holdout_parser("Train.\n\nMore.", "things")
    assert parser.parse_args(["--val-fraction", "0.25"]).val_fraction == 0.25
    for bad in ("0", "1", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--val-fraction", bad])
        assert "argument --val-fraction" in capsys.readouterr().err
