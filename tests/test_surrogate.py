"""The surrogate backend: determinism, fidelity, refusal, replay fallback and the env on it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from tune_gym.errors import TuneGymError
from tune_gym.measure import make_backend
from tune_gym.measure.replay import ReplayBackend
from tune_gym.measure.surrogate import SurrogateBackend, SurrogateModel, fidelity

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
RESNET7 = Path(__file__).parents[1] / "benchmarks" / "datasets" / "resnet18_7_compact.parquet"
TINY_URI = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"


@pytest.fixture(scope="module")
def tiny():
    from tune_gym.datasets import Dataset
    from tune_gym.records import load_records

    return Dataset.from_records(load_records(DATA), task=TINY_URI)


def _configs(space, n, seed=0):
    return space.sample_unique(np.random.default_rng(seed), n)


def test_same_seed_same_results_in_any_order(tiny, dense_task, dense_space):
    configs = _configs(dense_space, 50)
    a = SurrogateBackend(tiny, seed=3).measure(dense_task, dense_space, configs)
    b = SurrogateBackend(tiny, seed=3)
    order = np.random.default_rng(1).permutation(len(configs))
    shuffled = b.measure(dense_task, dense_space, [configs[i] for i in order])
    singles = [b.measure(dense_task, dense_space, [cfg])[0] for cfg in configs[:5]]
    assert [shuffled[j] for j in np.argsort(order)] == a
    assert singles == a[:5]
    other = SurrogateBackend(tiny, seed=4).measure(dense_task, dense_space, configs)
    assert [r.costs for r in other] != [r.costs for r in a]
    assert all(r.ok and len(r.costs) == 3 and r.extra["source"] == "surrogate" for r in a)


def test_noise_off_is_the_prediction_and_noise_is_small(tiny, dense_task, dense_space):
    configs = _configs(dense_space, 40)
    model = SurrogateModel(tiny)
    pred, p_fail = model.predict(configs)
    assert p_fail.tolist() == [0.0] * len(configs)  # no failures in the data: no failure model
    quiet = SurrogateBackend(tiny, noise=False).measure(dense_task, dense_space, configs)
    assert [r.costs for r in quiet] == [(p, p, p) for p in pred.tolist()]
    assert quiet[0].build_secs == pytest.approx(float(np.median(tiny.build_secs)))
    noisy = SurrogateBackend(tiny).measure(dense_task, dense_space, configs)
    ratios = np.array([r.mean for r in noisy]) / pred
    assert np.all(np.abs(ratios - 1) < 0.5) and np.any(ratios != 1)


def test_drift_scales_each_measurement_and_repeats_alike(tiny, dense_task, dense_space):
    """drift=s: one log-normal factor per measurement, shared by its repeats (averaging does not
    remove it); the n-th measurement of a config is the same in any batch; none with drift=0."""
    configs = _configs(dense_space, 400)
    quiet = SurrogateBackend(tiny, noise=False).measure(dense_task, dense_space, configs)
    backend = SurrogateBackend(tiny, noise=False, drift=0.3, seed=5)
    drifted = backend.measure(dense_task, dense_space, configs)
    logs = np.log([d.mean / q.mean for d, q in zip(drifted, quiet)])
    assert all(len(set(d.costs)) == 1 for d in drifted)  # one factor for every repeat of a measurement
    assert 0.2 < logs.std() < 0.4 and abs(logs.mean()) < 0.1  # N(0, 0.3^2): std 0.3 (400 draws)
    second = backend.measure(dense_task, dense_space, configs[:50])  # measured again: fresh draws
    assert sum(a.mean != b.mean for a, b in zip(second, drifted)) == 50
    again = SurrogateBackend(tiny, noise=False, drift=0.3, seed=5)
    assert [again.measure(dense_task, dense_space, [c])[0] for c in configs[:5]] == drifted[:5]
    assert again.measure(dense_task, dense_space, configs[4::-1]) == second[4::-1]  # 2nd measurement, any order
    other = SurrogateBackend(tiny, noise=False, drift=0.3, seed=6).measure(dense_task, dense_space, configs[:20])
    assert [r.mean for r in other] != [r.mean for r in drifted[:20]]
    assert SurrogateBackend(tiny, noise=False, drift=0.0).measure(dense_task, dense_space, configs) == quiet
    assert make_backend("surrogate", dataset=tiny, drift=0.1).drift == 0.1
    with pytest.raises(ValueError, match=r"drift must be a finite number in \[0, 2\], got -0.5"):
        make_backend("surrogate", dataset=tiny, drift=-0.5)


def test_recorded_configs_are_predicted_closely(tiny):
    model = SurrogateModel(tiny)
    pred, _ = model.predict(tiny.configs)
    assert np.median(np.abs(pred / tiny.mean_cost - 1)) < 0.05


def test_fidelity_report_tiny(tiny):
    report = fidelity(tiny, holdout=0.2, seed=0)
    assert {"spearman", "top_1pct_recall", "top_5pct_recall", "top_10pct_recall", "failure_accuracy", "n_train",
            "n_test"} <= set(report)
    assert report["top_1pct_recall"] in (0.0, 1.0)  # the top 1% of 40 held-out rows is one config
    assert (report["n_train"], report["n_test"]) == (160, 40)
    assert report["spearman"] > 0.7  # measured 0.93
    assert report["failure_accuracy"] == 1.0


def test_fidelity_report_resnet18_7_and_refusal(dense_task, dense_space):
    backend = SurrogateBackend(RESNET7)
    from tune_gym.datasets import load_dataset

    ds = load_dataset(RESNET7)
    report = backend.report(ds.task, "compact")
    assert report["spearman"] > 0.85  # measured 0.94
    assert report["top_10pct_recall"] >= 0.5  # measured 0.77 (top 5%: 0.86)
    assert (report["n_train"], report["n_test"]) == (512, 128)
    with pytest.raises(TuneGymError, match=r"no data of op://dense-v1.*fingerprint \w{16}.*c2a2df105f3f11a5"):
        backend.measure(dense_task, dense_space, _configs(dense_space, 2))
    assert backend.measure(ds.task, ds.space, [tuple(ds.configs[0])])[0].ok


def test_refuses_a_space_with_another_fingerprint(tiny, dense_task, dense_space):
    stale = dataclasses.replace(tiny, meta={**tiny.meta, "fingerprint": "0123456789abcdef"})
    backend = SurrogateBackend(stale)
    with pytest.raises(TuneGymError, match=r"fingerprint 0123456789abcdef.*fingerprint 90027489ae336347.*collect"):
        backend.measure(dense_task, dense_space, _configs(dense_space, 2))


def test_failure_model_predicts_failures(tiny, dense_task, dense_space):
    unroll = dense_space.names.index("unroll_explicit")
    bad = tiny.configs[:, unroll] == 3  # fail every config with the largest unroll step
    broken = dataclasses.replace(
        tiny, costs=[() if b else c for c, b in zip(tiny.costs, bad)],
        error=["build_error" if b else None for b in bad],
        error_msg=["boom" if b else "" for b in bad])
    backend = SurrogateBackend(broken)
    results = backend.measure(dense_task, dense_space, [tuple(c) for c in tiny.configs])
    assert [not r.ok for r in results] == bad.tolist()
    failed = next(r for r in results if not r.ok)
    assert failed.error == "build_error" and failed.error_msg.startswith("surrogate: predicted to fail (p=")
    report = backend.report(dense_task, "compact")
    assert report["failure_model"] and report["failure_accuracy"] > 0.9


def test_replay_with_surrogate_fallback(tiny, dense_task, dense_space):
    partial = dataclasses.replace(tiny, configs=tiny.configs[:100], costs=tiny.costs[:100], error=tiny.error[:100],
                                  error_msg=tiny.error_msg[:100], build_secs=tiny.build_secs[:100],
                                  run_secs=tiny.run_secs[:100], time=tiny.time[:100], mode=tiny.mode[:100],
                                  host=tiny.host[:100], tvm=tiny.tvm[:100],
                                  reference_gflops=tiny.reference_gflops[:100], extra=tiny.extra[:100])
    backend = make_backend("replay", dataset=partial, fallback="surrogate", fallback_options={"seed": 1})
    assert isinstance(backend, ReplayBackend) and isinstance(backend.fallback, SurrogateBackend)
    recorded, missing = tuple(int(v) for v in tiny.configs[0]), tuple(int(v) for v in tiny.configs[150])
    got = backend.measure(dense_task, dense_space, [recorded, missing])
    assert got[0] == tiny.results[0]
    assert got[1] == SurrogateBackend(partial, seed=1).measure(dense_task, dense_space, [missing])[0]
    assert got[1].extra["source"] == "surrogate"
    with pytest.raises(TuneGymError, match="not in the dataset"):
        make_backend("replay", dataset=partial).measure(dense_task, dense_space, [missing])
    backend.close()


def test_make_backend_options():
    assert make_backend("surrogate", dataset=str(DATA), seed=2, noise=False).seed == 2
    with pytest.raises(ValueError, match="surrogate backend_options"):
        make_backend("surrogate", dataset=str(DATA), repeats=3)
    with pytest.raises(ValueError, match="replay fallback 'nope'"):
        make_backend("replay", dataset=str(DATA), fallback="nope")


@pytest.mark.parametrize("task, options", [
    (TINY_URI, {"dataset": str(DATA), "seed": 0}),
    ("resnet18:7", {"seed": 1}),  # fitted on the catalog's dataset, reference read from its footer
], ids=["tiny-dataset", "resnet18_7-catalog"])
def test_env_episode_on_the_surrogate(task, options, monkeypatch):
    import tune_gym.measure.reference as reference

    monkeypatch.setattr(reference, "measure_reference", lambda *a, **k: pytest.fail("measured a live reference"))
    env = gym.make("tune_gym/Tune-v0", task=task, preset="compact", backend="surrogate", backend_options=options,
                   batch_size=8, budget=64, reward_norm=50.0 if "dataset" in options else "torch")
    env.action_space.seed(0)
    env.reset(seed=0)
    trunc = term = False
    steps = 0
    while not (trunc or term):
        _, reward, term, trunc, info = env.step(env.action_space.sample())
        assert reward >= 0.0
        steps += 1
    assert info["trials_used"] == 64 and info["best_gflops"] > 0 and steps >= 8
    assert info["clock"] > 0  # the simulated clock advances by the dataset's median build/run seconds
    env.close()


def test_recorded_reference_follows_the_preset_not_the_load_order():
    """One task has a dataset per preset, each with the PyTorch reference measured when it was
    collected; a run on one preset gets that preset's, whichever dataset was loaded first."""
    from tune_gym.datasets.catalog import catalog, task_data_dirs
    from tune_gym.measure.replay import ReplayBackend
    from tune_gym.tasks.task import Task

    task = Task.parse("bert_base:0")
    # no preset: the reference of the task's dataset with the most rows, whichever preset that is
    largest = max((e for e in catalog(task_data_dirs(task)) if e.task == task.uri), key=lambda e: e.rows).preset
    refs = {}
    for first, second in (("full", "compact"), ("compact", "full")):
        backend = ReplayBackend()
        backend.data.datasets(task, first)
        backend.data.datasets(task, second)
        refs[first] = {p: backend.reference(task, p).gflops for p in ("compact", "full", largest)}
        assert backend.reference(task).gflops == refs[first][largest]
    assert refs["full"] == refs["compact"]
    assert refs["full"]["compact"] != refs["full"]["full"]  # two measurements of PyTorch, one per dataset
