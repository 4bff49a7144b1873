"""Kernel Tuner's strategies run in simulation mode on a measured space, as traces."""

from __future__ import annotations

import gzip
import json
import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kt_toy_space import KERNEL, PARAMS, RESTRICTIONS, ToySpace, write_toy_space

from benchmarks.external.kernel_tuner_runs import (
    DEFAULT_STRATEGY,
    MULTI_OBJECTIVE_STRATEGIES,
    NEWEST_STRATEGIES,
    OPTIONAL_PACKAGE_STRATEGIES,
    STRATEGIES,
    KernelTunerRunError,
    KernelTunerSimulation,
    StrategyTrace,
    run_strategy,
)
from tune_gym.external.kernel_tuner_io import read_cache, read_problem

HUB = Path(__file__).resolve().parents[2] / "shared" / "external" / "benchmark_hub"
FAST = ("random_sample", "genetic_algorithm", "greedy_ils", "simulated_annealing", "pso", "diff_evo", "bayes_opt")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> ToySpace:
    return write_toy_space(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="module")
def sim(toy: ToySpace) -> Iterator[KernelTunerSimulation]:
    with KernelTunerSimulation(toy.cache, toy.problem) as s:
        yield s


def plain_kernel_tuner(toy: ToySpace, folder: Path, strategy: str, seed: int, max_fevals: int) -> list[dict[str, Any]]:
    """Kernel Tuner on its own (no trace): its results, in its order, with the global generators seeded."""
    import kernel_tuner

    copy = folder / "plain_cache.json"
    copy.write_bytes(gzip.decompress(toy.cache.read_bytes()))
    random.seed(seed)
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(KERNEL, "", [1024, 1024], [], PARAMS, restrictions=RESTRICTIONS,
                                              cache=str(copy), simulation_mode=True, strategy=strategy,
                                              strategy_options={"max_fevals": max_fevals}, quiet=True)
    return results


def test_strategy_lists():
    from kernel_tuner.interface import strategy_map

    assert set(strategy_map) == set(STRATEGIES) | set(MULTI_OBJECTIVE_STRATEGIES) | set(OPTIONAL_PACKAGE_STRATEGIES)
    assert {"random_sample", "genetic_algorithm", "dual_annealing", "simulated_annealing", "pso", "firefly_algorithm",
            "diff_evo", "greedy_ils", "basinhopping", "mls", "bayes_opt"} <= set(STRATEGIES)
    assert DEFAULT_STRATEGY in STRATEGIES and set(NEWEST_STRATEGIES) <= set(STRATEGIES)


@pytest.mark.parametrize("strategy", ["random_sample", "genetic_algorithm", "greedy_ils", "simulated_annealing",
                                      "pso", "firefly_algorithm", "mls"])
def test_trace_is_kernel_tuners_own_order(toy, sim, tmp_path, strategy):
    """Every result Kernel Tuner returns, in its order and with its times, repeats included."""
    trace = sim.run(strategy, seed=3, max_fevals=40)
    plain = plain_kernel_tuner(toy, tmp_path, strategy, seed=3, max_fevals=40)
    assert [e.config for e in trace.evaluations] == [tuple(r[n] for n in PARAMS) for r in plain]
    for e, r in zip(trace.evaluations, plain):
        if e.error is None:
            assert r["time"] == pytest.approx(e.time_secs * 1e3, rel=1e-12)
        else:
            assert str(r["__error__"]) == e.error_name


@pytest.mark.parametrize("strategy", FAST)
def test_same_seed_same_trace(sim, strategy):
    a = sim.run(strategy, seed=11, max_fevals=25)
    b = sim.run(strategy, seed=11, max_fevals=25)
    assert a == b
    others = [sim.run(strategy, seed=s, max_fevals=25) for s in (12, 13)]
    assert any([e.config for e in o.evaluations] != [e.config for e in a.evaluations] for o in others)


def test_run_leaves_global_generators_as_they_were(sim):
    random.seed(5)
    np.random.seed(5)
    expected = (random.random(), np.random.random())
    random.seed(5)
    np.random.seed(5)
    sim.run("genetic_algorithm", seed=0, max_fevals=20)
    assert (random.random(), np.random.random()) == expected


def test_every_strategy_runs(sim, toy):
    measured = read_cache(toy.cache, read_problem(toy.problem))
    for strategy in STRATEGIES:
        trace = sim.run(strategy, seed=0, max_fevals=12)
        assert 0 < len(trace.trials) <= 12, strategy
        for e in trace.evaluations:
            assert measured.space.config(e.index) == dict(zip(PARAMS, e.config))
        assert trace.ended in ("max_fevals", "strategy"), strategy


def test_clock_charges_first_evaluations_only(sim, toy):
    measured = read_cache(toy.cache, read_problem(toy.problem))
    trace = sim.run("genetic_algorithm", seed=1, max_fevals=60)
    assert any(e.status == "repeat" for e in trace.evaluations)  # a small space: the GA revisits
    clock, seen = 0.0, set()
    for step, e in enumerate(trace.evaluations):
        assert e.step == step
        record = measured.records[e.index]
        assert e.status == ("repeat" if e.index in seen else "new")
        assert e.charge_secs == (0.0 if e.status == "repeat" else record.charge_secs)
        clock += e.charge_secs
        assert e.clock_secs == pytest.approx(clock, rel=1e-12)
        assert (e.time_secs, e.error, e.error_name) == (record.time_secs, record.error, record.error_name)
        seen.add(e.index)
    assert len({e.index for e in trace.trials}) == len(trace.trials)
    assert np.array_equal(trace.clocks(), [e.clock_secs for e in trace.trials])


def test_max_fevals_counts_distinct_configurations(sim):
    for strategy in ("random_sample", "genetic_algorithm", "greedy_ils"):
        trace = sim.run(strategy, seed=2, max_fevals=30)
        assert len(trace.trials) == 30 and trace.ended == "max_fevals", strategy
        assert trace.strategy_options["max_fevals"] == 30


def test_time_limit_is_checked_before_each_evaluation(sim):
    trace = sim.run("random_sample", seed=4, max_fevals=98, time_limit=20.0)
    clocks = trace.clocks()
    assert trace.ended == "time_limit"
    assert clocks[-2] <= 20.0 < clocks[-1]  # the evaluation that crosses the limit runs, the next does not
    assert trace.strategy_options["time_limit"] == 20.0


def test_whole_space_with_failure_kinds(sim, toy):
    """random_sample with a budget of the whole space: every configuration once, failures included."""
    trace = sim.run("random_sample", seed=0, max_fevals=len(toy.rows))
    assert trace.ended == "space" and len(trace.evaluations) == len(toy.rows)
    assert sorted(e.index for e in trace.trials) == list(range(len(toy.rows)))
    by_index = {e.index: e for e in trace.trials}
    for i, (config, time_ms, timings) in enumerate(toy.rows):
        e = by_index[i]
        assert e.config == tuple(config.values())
        expected_charge = (timings["compile_time"] + timings["verification_time"] + timings["benchmark_time"]
                           + timings["framework_time"]) / 1e3
        assert e.charge_secs == pytest.approx(expected_charge, rel=1e-12)
        if isinstance(time_ms, str):
            kind = {"CompilationFailedConfig": "build_error", "RuntimeFailedConfig": "run_error"}[time_ms]
            assert (e.time_secs, e.error, e.error_name) == (None, kind, time_ms)
        else:
            assert (e.time_secs, e.error) == (pytest.approx(time_ms / 1e3, rel=1e-12), None)
    times = trace.times()
    assert int(np.isnan(times).sum()) == 4 and np.nanmin(times) == pytest.approx(
        min(t for _, t, _ in toy.rows if isinstance(t, float)) / 1e3)


def test_default_strategy_runs_in_order_and_stops_at_the_budget(sim, toy):
    trace = sim.run(DEFAULT_STRATEGY, seed=0, max_fevals=10)
    assert [e.config for e in trace.evaluations] == [tuple(c.values()) for c, _, _ in toy.rows[:10]]
    assert trace.ended == "max_fevals" and trace.strategy_options == {}  # brute_force takes no options


def test_strategy_options_are_kernel_tuners_defaults(sim):
    trace = sim.run("genetic_algorithm", seed=0, max_fevals=20)
    assert trace.strategy_options == {"popsize": 26, "maxiter": 90, "method": "single_point", "mutation_chance": 55,
                                      "constraint_aware": True, "max_fevals": 20}


def test_trace_metadata_and_json(sim, toy):
    trace = sim.run("pso", seed=0, max_fevals=15)
    assert (trace.device, trace.kernel, trace.space_size, trace.parameters) == (
        "Toy GPU", KERNEL, len(toy.rows), tuple(PARAMS))
    assert trace.source == str(toy.cache) and len(trace.sha256) == 64
    data = json.loads(json.dumps(trace.to_dict()))
    assert data["evaluations"]["index"] == [e.index for e in trace.evaluations]
    assert data["evaluations"]["config"] == [list(e.config) for e in trace.evaluations]
    assert data["strategy"] == "pso" and data["kernel_tuner_version"]


def test_run_strategy_on_an_uncompressed_cache(tmp_path):
    toy = write_toy_space(tmp_path, gz=False)
    before = toy.cache.read_bytes()
    trace = run_strategy(toy.cache, "random_sample", seed=0, max_fevals=5, problem=toy.problem)
    assert isinstance(trace, StrategyTrace) and len(trace.trials) == 5
    assert toy.cache.read_bytes() == before


@pytest.mark.parametrize(("kwargs", "part"), [
    ({"strategy": "no_such"}, "unknown Kernel Tuner strategy 'no_such'"),
    ({"strategy": "nsga2"}, "multi-objective"),
    ({"strategy": "skopt"}, "needs the scikit-optimize package"),
    ({"seed": -1}, "seed -1"),
    ({"seed": 1.5}, "seed 1.5"),
    ({"max_fevals": 0}, "max_fevals 0 is not a positive integer"),
    ({"max_fevals": True}, "max_fevals True"),
    ({"time_limit": -2.0}, "time_limit -2.0"),
    ({"time_limit": float("nan")}, "time_limit nan"),
    ({"max_fevals": None}, "no budget"),
])
def test_bad_runs(sim, kwargs, part):
    args = {"strategy": "random_sample", "seed": 0, "max_fevals": 10, **kwargs}
    with pytest.raises(KernelTunerRunError, match=part.replace("(", r"\(")):
        sim.run(args.pop("strategy"), **args)


def test_cache_without_its_restrictions(toy):
    """Without the T1 problem the space is every combination, which the cache does not hold."""
    with pytest.raises(KernelTunerRunError, match="lacks 46 of the 144 configurations.*give the T1 problem"):
        KernelTunerSimulation(toy.cache)


def test_closed_simulation(toy):
    sim = KernelTunerSimulation(toy.cache, toy.problem)
    sim.close()
    with pytest.raises(KernelTunerRunError, match="closed"):
        sim.run("random_sample", seed=0, max_fevals=3)


@pytest.mark.slow
def test_every_strategy_on_the_benchmark_hub_file_is_deterministic():
    cache = HUB / "cachefiles" / "convolution_milo" / "A100.json.gz"
    if not cache.is_file():
        pytest.skip(f"{cache} is not here")
    with KernelTunerSimulation(cache, HUB / "kernels" / "convolution_milo.json") as sim:
        for strategy in STRATEGIES:
            a = sim.run(strategy, seed=7, max_fevals=220)
            assert a == sim.run(strategy, seed=7, max_fevals=220), strategy
            assert len(a.trials) <= 220 and a.ended in ("max_fevals", "strategy"), strategy
        ga = sim.run("genetic_algorithm", seed=0, max_fevals=100)
        assert len(ga.trials) == 100 and len(ga.evaluations) > 100  # repeats do not count
