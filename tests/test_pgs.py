"""Model-zoo prior and prior-guided task sampling (One-Shot Tuner's PGS)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tune_gym.datasets.pgs import ORDER, TaskPrior, held_out_tasks, layer_task, uniform_tasks
from tune_gym.datasets.zoo import HELD_OUT_NETWORKS, ZOO, zoo_layers


@pytest.fixture(scope="module")
def prior() -> TaskPrior:
    return TaskPrior.from_zoo()


def test_zoo_layer_counts_match_the_architectures():
    # conv layers of torchvision's definitions: stem + blocks + projections / transitions
    assert len(ZOO["resnet50"]()) == 1 + 16 * 3 + 4
    assert len(ZOO["resnet34"]()) == 1 + 16 * 2 + 3
    assert len(ZOO["densenet121"]()) == 1 + 58 * 2 + 3
    assert len(ZOO["googlenet"]()) == 3 + 9 * 6
    assert len(ZOO["vgg19"]()) == 16
    last = ZOO["efficientnet_b3"]()[-1]
    assert (last.c, last.h, last.k) == (384, 10, 1536)  # 300x300 input, 4x head of the 1.2-wide net


def test_zoo_leaves_out_the_evaluation_networks_and_every_layer_is_a_task():
    assert not set(HELD_OUT_NETWORKS) & set(ZOO)
    layers = list(zoo_layers())
    assert {x.model for x in layers} == set(ZOO)
    for x in {(x.op, x.c, x.h, x.k, x.r, x.s, x.p): x for x in layers}.values():
        assert layer_task(vars(x)).op == x.op
    with pytest.raises(KeyError, match="unknown zoo model 'resnet18'"):
        list(zoo_layers(["resnet18"]))


def test_pgs_samples_stay_in_the_support_of_every_conditional(prior):
    combos = {name: {(tuple(r[q] for q in prior.parents[name]), r[name]) for r in prior.rows} for name in ORDER}
    rng = np.random.default_rng(0)
    for _ in range(2000):
        row = prior.draw(rng)
        for name in ORDER:
            assert (tuple(row[q] for q in prior.parents[name]), row[name]) in combos[name], name


def test_pgs_reproduces_the_zoo_marginals(prior):
    rng = np.random.default_rng(1)
    draws = [prior.draw(rng) for _ in range(20000)]
    for name in ORDER:
        want = prior.marginal(name)
        got = Counter(d[name] for d in draws)
        worst = max(abs(got[v] / len(draws) - p) for v, p in want.items())
        assert worst < 0.015, (name, worst)
        assert set(got) <= set(want)


def test_pgs_makes_new_tasks_and_the_full_chain_only_zoo_layers(prior):
    zoo = {layer_task(vars(x)).uri for x in zoo_layers()}
    tasks = prior.sample(100, np.random.default_rng(0))
    assert 0 < sum(t.uri in zoo for t in tasks) < 100  # some zoo layers, some new combinations
    chain = TaskPrior.from_zoo(parents="chain").sample(50, np.random.default_rng(0))
    assert all(t.uri in zoo for t in chain)


def test_sampling_is_seeded_distinct_and_excludes_held_out_tasks(prior):
    a = prior.sample(60, np.random.default_rng(7))
    assert [t.uri for t in a] == [t.uri for t in prior.sample(60, np.random.default_rng(7))]
    assert len({t.uri for t in a}) == 60
    banned = held_out_tasks()
    assert banned and not banned & {t.uri for t in a}
    # excluding a task the sampler would draw removes it
    first = a[0].uri
    again = prior.sample(60, np.random.default_rng(7), exclude=banned | {first})
    assert first not in {t.uri for t in again}


def test_uniform_sampling_ignores_frequencies(prior):
    tasks = uniform_tasks(prior.rows, 300, np.random.default_rng(0))
    kernels = Counter(dict(t.params)["r"] for t in tasks)
    support = {r["r"] for r in prior.rows}
    assert set(kernels) <= support
    # the zoo is mostly 1x1 and 3x3 kernels; uniform draws give the rare kernels as often
    assert prior.marginal("r")[7] < 0.05 and kernels[7] / len(tasks) > 0.1


def test_bad_conditioning_is_rejected():
    with pytest.raises(ValueError, match="parameter 'r' can only be conditioned on parameters drawn before it"):
        TaskPrior.from_zoo(parents={"r": ("k",)})
    with pytest.raises(ValueError, match="at least one layer row"):
        TaskPrior([])


def _script(name: str):
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).parents[1] / "scripts"
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_capped_draw_stays_under_its_flops_and_a_longer_one_extends_it():
    from tune_gym.tasks.task import Task

    sample_tasks = _script("collect_pgs").sample_tasks
    short, long = sample_tasks("uniform", 5, 0, "llvm", 0.5), sample_tasks("uniform", 12, 0, "llvm", 0.5)
    assert long[:5] == short and len(set(long)) == 12
    assert all(Task.parse(u).flops <= 0.5e9 for u in long)
    assert sample_tasks("pgs", 4, 0, "llvm") == sample_tasks("pgs", 9, 0, "llvm")[:4]


def test_training_data_of_the_first_tasks_of_a_collection_folder(tmp_path):
    from agents.cli import dataset_name

    data_dir_files = _script("train_oneshot").data_dir_files
    uris = ["op://dense-v1/m8_n8_k8?target=llvm", "op://dense-v1/m8_n8_k16?target=llvm"]
    (tmp_path / "tasks.txt").write_text("# header\n" + "\n".join(uris) + "\n")
    (tmp_path / dataset_name(uris[0], "full")).write_bytes(b"")
    assert data_dir_files(tmp_path, 1) == [tmp_path / dataset_name(uris[0], "full")]
    assert data_dir_files(tmp_path) == [tmp_path / dataset_name(uris[0], "full")]  # what is collected so far
    with pytest.raises(SystemExit, match="1 of the first 2 tasks .* are not collected yet"):
        data_dir_files(tmp_path, 2)
