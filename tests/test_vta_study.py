"""The VTA study's data path: an exhaustive simulated dataset, its replay on the leaderboard, and the
study's numbers (trials to the best config, the cost-model metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.hwaware_study import model_metrics, model_study, spread, trials_to_best, tuning_study
from benchmarks.leaderboard.report import compute
from benchmarks.leaderboard.results import ResultsFile
from benchmarks.leaderboard.runner import run_suite
from benchmarks.leaderboard.suite import Suite, SuiteTask, load_suite
from benchmarks.leaderboard.validate import validate
from tune_gym.cli import main
from tune_gym.datasets import load_dataset
from tune_gym.datasets.catalog import catalog, find_dataset
from tune_gym.measure import make_backend
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

# 192 configs on a VTA with a 512 B input buffer: 8 valid, the rest broken by four different rules.
TINY = "op://vta_conv2d-v1/n1_c32_h4_w2_k16_kh3_kw3_sh1_sw1_ph1_pw1?dtype=int8&target=vta&log_inp_buff_size=9"


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """A data folder whose ``vta/`` subfolder holds the tiny space, collected by ``tune-gym collect``."""
    root = tmp_path_factory.mktemp("data")
    path = root / "vta" / "tiny_full.parquet"
    assert main(["collect", TINY, "--preset", "full", "--plan", "exhaustive", "--backend", "vta-sim",
                 "--out", str(path), "--batch", "64", "--quiet"]) == 0
    return root, path


@pytest.fixture()
def catalog_dir(tiny_data, monkeypatch):
    monkeypatch.setenv("TUNE_GYM_DATA", str(tiny_data[0]))
    return tiny_data[0]


def _simulated(space):
    return make_backend("vta-sim").measure(space.task, space, list(space))


def test_collector_writes_an_exhaustive_simulated_dataset_keeping_each_error(tiny_data):
    ds = load_dataset(tiny_data[1])
    space = KnobSpace.for_task(Task.parse(TINY), "full")
    assert ds.exhaustive and len(ds) == space.size == 192 and int(ds.ok.sum()) == 8
    by_config = {tuple(int(v) for v in c): r for c, r in zip(ds.configs, ds.results)}
    for cfg, expected in zip(space, _simulated(space)):
        got = by_config[cfg]
        assert (got.error, got.error_msg, got.costs, got.extra) == (expected.error, expected.error_msg,
                                                                   expected.costs, expected.extra)
    assert {r.extra["rule"] for r in ds.results if not r.ok} == {"threads", "inp_buffer", "inp_dma", "acc_hazard"}
    assert {r.error for r in ds.results if not r.ok} == {"invalid"}
    # the footer says the rows are simulated
    assert set(ds.host) == {"vta-sim"} and ds.meta["hosts"]["vta-sim"]["simulated"] is True
    step = ds.meta["collection"][-1]
    assert step["simulated"] == "vta-sim" and "nothing was measured on hardware" in step["note"]
    assert ds.reference.gflops == pytest.approx(51.2) and "simulated" in ds.reference.method


def test_replay_finds_the_vta_subfolder_and_gives_the_simulators_numbers(tiny_data, catalog_dir):
    task = Task.parse(TINY)
    space = KnobSpace.for_task(task, "full")
    assert not any(e.task == TINY for e in catalog())  # the catalog's own listing leaves vta/ out
    assert find_dataset(TINY, "full").path == tiny_data[1]
    replay = make_backend("replay")
    got, expected = replay.measure(task, space, list(space)), _simulated(space)
    assert [(r.costs, r.error, r.error_msg, r.gflops) for r in got] == [
        (r.costs, r.error, r.error_msg, r.gflops) for r in expected]
    assert replay.reference(task, "full").gflops == make_backend("vta-sim").reference(task).gflops


def test_a_vta_suite_runs_validates_and_gives_the_studys_trials_to_best(catalog_dir, tmp_path):
    suite_file = tmp_path / "vta_tiny.toml"
    suite_file.write_text(f"""
name = "vta-tiny"
seeds = 2
batch = 10
agents = ["random", "presample"]
[agent_options]
presample = {{ plan_size = 10, n_init = 10, n_valid = 4, sa_points = 16, sa_steps = 10, num_rounds = 5 }}
[[task]]
id = "{TINY}"
preset = "full"
budget = 40
""")
    out = tmp_path / "results.jsonl"
    results = run_suite(load_suite(suite_file), out, progress=False)
    assert len(results.runs) == 4
    assert all(e in (None, "invalid") for r in results.runs for e in r["errors"])
    assert any(g == 0.0 for r in results.runs for g in r["gflops"])  # invalid configs score 0
    report = validate(out, rerun=1)
    assert report.ok, report.problems
    lb = compute(out)
    assert lb.tasks[TINY].exhaustive
    study = tuning_study(out, method="presample", baseline="random", agents=("presample", "random"))
    (row,) = study["workloads"]
    assert row["space"] == 192 and row["valid"] == 8
    for agent in ("presample", "random"):
        to100 = lb.cells[(agent, TINY)].to100  # the leaderboard's trials to 100% of the best known
        assert [row["agents"][agent]["trials"][s] for s in (0, 1)] == to100


def test_trials_to_best_of_a_hand_made_results_file(catalog_dir, tmp_path):
    best = load_dataset(find_dataset(TINY, "full").path).best_gflops
    assert trials_to_best([0, best * 0.999, best], best) == 3 and trials_to_best([1.0, 2.0], best) is None
    suite = Suite("vta-tiny", "", ("presample", "xgb-sa", "random"), 4, 10, (SuiteTask(TINY, "full", 20),), {})
    out = tmp_path / "hand.jsonl"
    results = ResultsFile.open(out, suite)

    def run(first_best: int | None) -> list[float]:  # 20 trials, the optimum first at trial first_best
        g = [best * 0.5] * 20
        if first_best is not None:
            g[first_best - 1:] = [best] * (21 - first_best)
        return g

    found = {"presample": [2, 3, 5, None], "xgb-sa": [4, 8, 10, 12], "random": [None] * 4}
    for agent, firsts in found.items():
        for seed, first in enumerate(firsts):
            spec = {"agent": agent, "task": TINY, "preset": "full", "backend": "replay", "seed": seed,
                    "budget": 20, "batch": 10, "options": {}}
            results.append({"key": f"{agent}|{seed}", "spec": spec, "task_uri": TINY, "gflops": run(first)})
    study = tuning_study(out)
    (row,) = study["workloads"]
    pre, xgb, rnd = (row["agents"][a] for a in ("presample", "xgb-sa", "random"))
    # never found counts as the budget: presample [2, 3, 5, 20]
    assert (pre["median"], pre["q25"], pre["q75"], pre["iqr"], pre["never"]) == (4.0, 2.75, 8.75, 6.0, 1)
    assert (xgb["median"], xgb["q25"], xgb["q75"], xgb["iqr"], xgb["never"]) == (9.0, 7.0, 10.5, 3.5, 0)
    assert (rnd["median"], rnd["iqr"], rnd["never"]) == (20.0, 0.0, 4)
    assert row["median_ratio"] == pytest.approx(4 / 9) and row["iqr_ratio"] == pytest.approx(6 / 3.5)
    assert study["summary"]["median_ratio"]["mean"] == pytest.approx(4 / 9)
    assert study["summary"]["median_ratio"]["better"] == 1
    assert spread([None, 1], 7)["median"] == 4.0


def test_model_metrics_follow_the_papers_definitions(catalog_dir):
    cost = np.array([1.0, 2.0, math.inf, math.inf])
    right = model_metrics(np.array([4.0, 3.0, 2.0, 1.0]), cost, ks=(2,))
    assert (right["acc"], right["acc_vi"], right["acc_vv"], right["precision@2"], right["ndcg@2"]) == (1, 1, 1, 1, 1)
    wrong = model_metrics(np.array([1.0, 2.0, 3.0, 4.0]), cost, ks=(2,))
    assert (wrong["acc"], wrong["precision@2"], wrong["ndcg@2"]) == (0, 0, 0)
    # invalid-invalid pairs do not count: 4 valid-invalid pairs right, the valid pair wrong -> 4/5
    assert model_metrics(np.array([3.0, 4.0, 2.0, 1.0]), cost, ks=(2,))["acc"] == pytest.approx(4 / 5)
    assert model_metrics(np.zeros(4), cost, ks=(2,))["acc"] == 0.5  # equal scores count half
    study = model_study([TINY], ratios=(0.0, 0.5, 1.0), n_train=10, repeats=2, ks=(5,))
    cells = study["tasks"][TINY]["ratios"]
    assert "skipped" in cells["1"] and study["left_out"] == [TINY]  # 10 valid configs needed, 8 exist
    assert cells["0"]["mean"]["rounds"] == 0 and cells["0.5"]["mean"]["rounds"] > 0  # no fit without a valid one
    assert 0 <= cells["0.5"]["mean"]["precision@5"] <= 1
