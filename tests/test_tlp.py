"""TLP / MTL-TLP: ranking data, the LambdaRank loss, training, MTL masking, checkpoints."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from agents.models.metrics import grouped_pairwise_accuracy
from agents.models.rank_data import RankingData, load_ranking_data, task_networks
from agents.models.tlp import TLPModel, TLPNet, lambdarank_loss

torch.set_num_threads(1)
SHAPE = (25, 22)


def synthetic(tasks: int = 2, rows: int = 64, platforms: tuple[str, ...] = ("p",), seed: int = 0) -> RankingData:
    """Random primitive sequences whose cost falls with the sum of their first argument
    (scaled per task and platform), so the order within a list is learnable."""
    rng = np.random.default_rng(seed)
    n = tasks * rows * len(platforms)
    x = np.zeros((n, *SHAPE), dtype=np.float32)
    for i, length in enumerate(rng.integers(4, 10, n)):
        x[i, np.arange(length), rng.integers(0, 11, length)] = 1.0
        x[i, :length, 11:15] = rng.integers(1, 9, (length, 4))
    task = np.array([f"op://t{i // rows % tasks}" for i in range(n)], dtype=object)
    platform = np.array([platforms[i // (rows * tasks)] for i in range(n)], dtype=object)
    scale = np.array([1.0 + int(t[-1]) + 3 * platforms.index(p) for t, p in zip(task, platform)])
    cost = scale / (1.0 + x[:, :, 11].sum(axis=1))
    label = np.zeros(n, dtype=np.float32)
    for key in set(zip(task, platform)):
        rows_k = (task == key[0]) & (platform == key[1])
        label[rows_k] = cost[rows_k].min() / cost[rows_k]
    config = np.empty(n, dtype=object)
    config[:] = [(i,) for i in range(n)]
    return RankingData(x=x, cost=cost, label=label, task=task, preset=np.full(n, "compact", dtype=object),
                       platform=platform, config=config)


def small_model(**kw) -> TLPModel:
    return TLPModel(**{"shape": SHAPE, "seed": 0, "epochs": 2, "batch": 128, **kw})


# ---------------------------------------------------------------------------- shapes and errors
def test_shapes_and_bad_inputs():
    net = TLPNet(22, n_heads=3)
    x = torch.from_numpy(synthetic(rows=4).x)
    assert net(x).shape == (8, 3)
    assert net(x, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])).shape == (8,)
    model = small_model(platforms=["a", "b"])
    assert model.predict(x.numpy(), "b").shape == (8,)
    with pytest.raises(ValueError, match=r"x must have shape \(n, 25, 22\), got \(8, 25, 21\)"):
        model.predict(x.numpy()[:, :, :21], "a")
    with pytest.raises(ValueError, match="unknown platform 'c'"):
        model.predict(x.numpy(), "c")
    with pytest.raises(ValueError, match="one head per platform"):
        model.predict(x.numpy())
    with pytest.raises(ValueError, match=r"platforms \['p'\] that are not this model's"):
        model.fit(synthetic(rows=4), progress=False)


def test_padding_does_not_change_a_score():
    """Padded primitives are out of the attention and the sum: a sequence scores the same
    however many zero rows follow it."""
    net = TLPNet(22).eval()
    x = torch.from_numpy(synthetic(rows=4).x[:1])  # 4-9 real rows, then padding
    with torch.no_grad():
        assert torch.allclose(net(x), net(torch.cat([x, torch.zeros(1, 10, 22)], dim=1)), atol=1e-5)


# ---------------------------------------------------------------------------- LambdaRank
def test_lambdarank_hand_checked():
    """Labels 1, 0.5, 0 in one list. Gains 2^y - 1 = 1, 0.4142, 0; ideal DCG = 1 + 0.4142/log2(3)
    = 1.2613, so G = 0.7928, 0.3284, 0; 1/log2(1 + rank) = 1, 0.6309, 0.5 for ranks 1, 2, 3.
    A pair (i better than j) weighs |G_i - G_j| * |1/D_i - 1/D_j| and costs
    -log2 sigmoid(s_i - s_j) = log2(1 + exp(s_j - s_i)).

    Scored 2, 1, 0 (right order): weights 0.1714, 0.3964, 0.0430 for pairs (0,1), (0,2), (1,2),
    costs log2(1 + e^-1) = 0.4519, log2(1 + e^-2) = 0.1831, 0.4519: loss 0.1695.
    Scored 0, 1, 2 (reversed, ranks 3, 2, 1): weights 0.0608, 0.3964, 0.1212, costs
    log2(1 + e) = 1.8945, log2(1 + e^2) = 3.0685, 1.8945: loss 1.5612."""
    y = torch.tensor([1.0, 0.5, 0.0])
    one = torch.zeros(3, dtype=torch.long)
    right = lambdarank_loss(torch.tensor([2.0, 1.0, 0.0]), y, one)
    wrong = lambdarank_loss(torch.tensor([0.0, 1.0, 2.0]), y, one)
    assert right.item() == pytest.approx(0.1714 * 0.4519 + 0.3964 * 0.1831 + 0.0430 * 0.4519, abs=2e-4)
    assert wrong.item() == pytest.approx(0.0608 * 1.8945 + 0.3964 * 3.0685 + 0.1212 * 1.8945, abs=2e-4)
    assert right.item() < wrong.item()


def test_lambdarank_lists_are_groups():
    """Pairs across lists cost nothing: the loss of two lists is the sum of their losses,
    however the lists' scores compare."""
    s, y = torch.tensor([0.3, 2.0, -1.0, 5.0, 4.0]), torch.tensor([1.0, 0.2, 0.6, 0.9, 0.1])
    g = torch.tensor([0, 0, 0, 1, 1])
    both = lambdarank_loss(s, y, g)
    apart = lambdarank_loss(s[:3], y[:3], g[:3]) + lambdarank_loss(s[3:], y[3:], g[3:])
    assert both.item() == pytest.approx(apart.item(), rel=1e-6)
    assert lambdarank_loss(s + torch.tensor([0, 0, 0, 100.0, 100.0]), y, g).item() == pytest.approx(both.item())
    assert lambdarank_loss(s, torch.full((5,), 0.5), g).item() == 0.0  # no pair with different labels


# ---------------------------------------------------------------------------- training
def test_overfits_a_tiny_dataset(train_seed, record_property):
    """40 epochs (20 left seeds 7 and 15 at 0.93 pairwise accuracy): 0.995-0.999 over seeds 0-19."""
    data = synthetic(tasks=2, rows=64)
    model = small_model(epochs=40, seed=train_seed)
    groups = data.task + "\0" + data.platform
    before = grouped_pairwise_accuracy(model.predict(data.x), data.cost, groups)
    history = model.fit(data, progress=False)
    after = grouped_pairwise_accuracy(model.predict(data.x), data.cost, groups)
    loss = history["train_loss"]
    record_property("accuracy_before", before)
    record_property("accuracy_after", after)
    record_property("last_over_first_loss", loss[-1] / loss[0])
    assert after > 0.95 > before, (before, after)
    assert loss[-1] < 0.5 * loss[0], (loss[0], loss[-1])


def test_training_is_deterministic_for_a_seed():
    data = synthetic(rows=32)
    runs = [small_model(seed=3).fit(data, val=data.subset(np.arange(16)), progress=False) for _ in range(2)]
    assert runs[0]["train_loss"] == runs[1]["train_loss"] and runs[0]["val_loss"] == runs[1]["val_loss"]
    assert len(runs[0]["val_loss"]) == len(runs[0]["epoch_secs"]) == 2
    a, b = small_model(seed=3), small_model(seed=3)
    a.fit(data, progress=False)
    b.fit(data, progress=False)
    np.testing.assert_array_equal(a.predict(data.x), b.predict(data.x))
    assert not np.array_equal(a.predict(data.x), small_model(seed=4).predict(data.x))


# ---------------------------------------------------------------------------- MTL-TLP
def test_mtl_head_gets_no_gradient_from_other_platforms():
    data = synthetic(rows=16, platforms=("a", "b"))
    model = small_model(platforms=["a", "b"])
    only_b = data.subset(data.platform == "b")
    model.batch_loss(only_b).backward()
    grad_b = [p.grad.clone() for p in model.net.heads[1].parameters()]
    assert all(p.grad is None for p in model.net.heads[0].parameters())  # no row of platform a
    model.net.zero_grad(set_to_none=True)
    model.batch_loss(data).backward()  # rows of a are in the batch, but they do not reach head b
    for p, g in zip(model.net.heads[1].parameters(), grad_b):
        torch.testing.assert_close(p.grad, g)
    assert any(p.grad.abs().sum() > 0 for p in model.net.heads[0].parameters())


def test_mtl_fit_leaves_a_head_without_rows_untouched():
    data = synthetic(rows=16, platforms=("a", "b"))
    model = small_model(platforms=["a", "b"])
    head_b = [p.detach().clone() for p in model.net.heads[1].parameters()]
    model.fit(data.subset(data.platform == "a"), progress=False)
    for p, q in zip(model.net.heads[1].parameters(), head_b):
        assert torch.equal(p, q)


def test_fine_tune_decoder_moves_only_that_head():
    data = synthetic(rows=16, platforms=("a", "b"))
    model = small_model(platforms=["a", "b"])
    state = {k: v.clone() for k, v in model.net.state_dict().items()}
    rows = data.subset((data.platform == "b") & (data.task == "op://t0"))
    model.fine_tune(rows.x, rows.label, epochs=3, head="b")
    changed = {k for k, v in model.net.state_dict().items() if not torch.equal(v, state[k])}
    assert changed and all(k.startswith("heads.1.") for k in changed)
    model.fine_tune(rows.x, rows.label, epochs=1, head="b", part="all")
    changed = {k for k, v in model.net.state_dict().items() if not torch.equal(v, state[k])}
    assert any(k.startswith("encoder.") for k in changed) and not any(k.startswith("heads.0.") for k in changed)
    with pytest.raises(ValueError, match="part must be 'decoder' or 'all', not 'head'"):
        model.fine_tune(rows.x, rows.label, head="b", part="head")
    with pytest.raises(ValueError, match=r"label must have shape \(16,\), got \(3,\)"):
        model.fine_tune(rows.x, rows.label[:3], head="b")


# ---------------------------------------------------------------------------- checkpoints
def test_save_load_round_trip(tmp_path):
    data = synthetic(rows=16, platforms=("a", "b"))
    model = small_model(platforms=["a", "b"])
    model.fit(data, progress=False)
    sidecar = model.save(tmp_path / "m.pt", {"epochs_run": 2})
    doc = json.loads(sidecar.read_text())
    assert doc["config"]["platforms"] == ["a", "b"] and doc["metadata"] == {"epochs_run": 2}
    loaded = TLPModel.load(tmp_path / "m.pt")
    for p in ("a", "b"):
        np.testing.assert_array_equal(loaded.predict(data.x, p), model.predict(data.x, p))
    assert loaded.metadata == {"epochs_run": 2}
    (tmp_path / "m.json").unlink()
    with pytest.raises(ValueError, match="has no sidecar m.json"):
        TLPModel.load(tmp_path / "m.pt")


# ---------------------------------------------------------------------------- ranking data
def test_ranking_data_labels_from_a_dataset(tmp_path, dense_space):
    """label = the task's min cost on the row's platform / cost; failed configs get 0."""
    from tune_gym.datasets import Dataset
    from tune_gym.measure.result import MeasureResult
    from tune_gym.records import Record

    flops = dense_space.task.flops
    configs = dense_space.sample_unique(np.random.default_rng(0), 7)
    runs = [(2e-5, "A"), (1e-5, "A"), (4e-5, "A"), (None, "A"), (3e-5, "B"), (6e-5, "B"), (1.5e-5, "B")]
    records = []
    for cfg, (cost, host) in zip(configs, runs):
        result = (MeasureResult(costs=(cost, cost), flops=flops) if cost else
                  MeasureResult(flops=flops, error="build_error", error_msg="failed"))
        records.append(dataclasses.replace(Record.create(dense_space, cfg, result, "test"), host=host))
    path = Dataset.from_records(records).save(tmp_path / "dense.parquet")

    data = load_ranking_data([path], cache_dir=tmp_path / "cache", progress=False)
    by_config = {c: i for i, c in enumerate(data.config)}
    rows = [by_config[tuple(c)] for c in configs]
    np.testing.assert_allclose(data.label[rows], [0.5, 1.0, 0.25, 0.0, 0.5, 0.25, 1.0], rtol=1e-6)
    assert math.isinf(data.cost[rows[3]]) and data.cost[rows[1]] == pytest.approx(1e-5)
    assert data.x.shape == (7, *SHAPE) and data.x.dtype == np.float32 and data.platforms == ["A", "B"]
    assert sorted(data.groups()) == [(dense_space.task.uri, "compact", "A"), (dense_space.task.uri, "compact", "B")]
    assert len(list((tmp_path / "cache").glob("dense-*.npz"))) == 1
    again = load_ranking_data([path], cache_dir=tmp_path / "cache", progress=False)  # from the cache
    np.testing.assert_array_equal(again.x, data.x)
    sub = data.subset(data.platform == "B")
    assert len(sub) == 3 and sub.platforms == ["B"]


def test_task_networks_counts_occurrences():
    from tune_gym.tasks.suites import get_suite

    nets = task_networks()
    resnet = get_suite("resnet18")
    assert nets[resnet[1].task.uri]["resnet18"] == resnet[1].weight == 4
    assert sum(n.get("resnet18", 0) for n in nets.values()) == sum(t.weight for t in resnet.tasks)


def test_held_out_networks_are_disjoint_from_training():
    from dataclasses import replace

    from agents.models.rank_data import held_out_mask, task_networks
    from tune_gym.tasks.suites import get_suite

    resnet = [st.task.uri for st in get_suite("resnet18").tasks]
    others = [uri for uri, nets in task_networks().items() if "resnet18" not in nets][:3]
    uris = [resnet[1], resnet[7], *others]
    data = synthetic(tasks=1, rows=len(uris) * 4)
    data = replace(data, task=np.array([uris[i % len(uris)] for i in range(len(data))], dtype=object))
    held, weights = held_out_mask(data, ["resnet18"])
    assert not set(data.task[held]) & set(data.task[~held])
    assert set(data.task[held]) == {resnet[1], resnet[7]}
    assert set(data.task[~held]) == set(others)
    assert weights["resnet18"][resnet[7]] == get_suite("resnet18")[7].weight
    with pytest.raises(ValueError, match="unknown network"):
        held_out_mask(data, ["resnet19"])


def test_batch_lists_rank_across_tasks():
    """``lists="batch"`` (TLP's code) puts every row of a platform in one list; ``"task"`` does not."""
    x = np.zeros((4, 25, 22), dtype=np.float32)
    x[:, 0, 0] = 1.0
    data = RankingData(x=x, label=np.array([1.0, 0.5, 1.0, 0.5], dtype=np.float32),
                       cost=np.ones(4), task=np.array(["a", "a", "b", "b"], dtype=object),
                       preset=np.array(["p"] * 4, dtype=object), platform=np.array(["h"] * 4, dtype=object),
                       config=np.array([(i,) for i in range(4)] + [None], dtype=object)[:4])
    _, per_task = TLPModel(lists="task")._lists(data)
    _, per_batch = TLPModel(lists="batch")._lists(data)
    assert per_task.tolist() == [0, 0, 1, 1] and per_batch.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="lists must be"):
        TLPModel(lists="pairs")


def test_thin_platform_keeps_a_seeded_fraction_of_one_platform_only():
    from agents.models.rank_data import thin_platform

    data = synthetic(tasks=2, rows=50, platforms=("a", "b"))  # 100 rows each
    thin = thin_platform(data, "b", 0.1, np.random.default_rng(0))
    assert (thin.platform == "a").sum() == 100 and (thin.platform == "b").sum() == 10
    again = thin_platform(data, "b", 0.1, np.random.default_rng(0))
    assert np.array_equal(thin.config, again.config)  # the same rows for the same seed
    assert len(thin_platform(data, "b", 1.0, np.random.default_rng(0))) == 200
    with pytest.raises(ValueError, match="fraction must be in"):
        thin_platform(data, "b", 1.5, np.random.default_rng(0))


def test_platform_study_cells_score_the_target_platform(tmp_path):
    """Each cell trains on what its name says and is scored on the target's held-out rows."""
    import argparse

    from benchmarks.platform_study import cell_names, train_cell

    assert cell_names([0.1]) == ["random", "tlp-source", "tlp-target@0.1", "tlp-pooled@0.1", "mtl-tlp@0.1"]
    data = synthetic(tasks=3, rows=40, platforms=("src", "tgt"))
    held = data.task == "op://t2"
    pool, test = data.subset(~held), data.subset(held & (data.platform == "tgt"))
    args = argparse.Namespace(seed=0, val_fraction=0.1, batch=64, epochs=1, min_steps=3, quiet=True)
    cells = {name: train_cell(name, pool, test, {"op://t2": 1}, "tgt", args) for name in cell_names([0.5])}
    assert cells["tlp-source"]["rows"]["target_train"] == 0
    assert cells["tlp-target@0.5"]["rows"]["train"] == cells["tlp-target@0.5"]["rows"]["target_train"] > 0
    assert cells["mtl-tlp@0.5"]["platforms"] == ["src", "tgt"] and cells["tlp-pooled@0.5"]["platforms"] == ["default"]
    assert all(c["rows"]["test"] == 40 and 0 <= c["pairwise"] <= 1 for c in cells.values())
    assert cells["random"]["epochs"] == 0 and all(c["epochs"] >= 1 for n, c in cells.items() if n != "random")
    assert cells["tlp-target@0.5"]["epochs"] >= 3  # one batch per epoch: raised to the minimum steps
