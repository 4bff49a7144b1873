"""AdaTune's adaptive evaluator: the stopping rule alone, a fake timer, and a real live run."""

from __future__ import annotations

import numpy as np
import pytest

from tune_gym.measure.adaptive import adaptive_costs, should_stop, trimmed_cv


def test_trimmed_cv_drops_min_and_max_only_beyond_four_values():
    four = [1.0, 2.0, 3.0, 10.0]
    assert trimmed_cv(four) == pytest.approx(np.std(four) / np.mean(four))
    five = [100.0, 1.0, 2.0, 3.0, 0.01]  # the outliers 100 and 0.01 are dropped
    assert trimmed_cv(five) == pytest.approx(np.std([1.0, 2.0, 3.0]) / 2.0)
    assert trimmed_cv([]) == float("inf")


def test_should_stop_on_steady_values_after_three_batches():
    assert not should_stop([100.0], 0.1)
    assert not should_stop([100.0, 101.0], 0.1)  # never before more than 2 micro-batches
    assert should_stop([100.0, 101.0, 99.0], 0.1)
    assert not should_stop([100.0, 101.0, 99.0], 0.1, min_batches=4)


def test_should_stop_keeps_going_on_noisy_values():
    assert not should_stop([100.0, 50.0, 150.0], 0.1)
    assert not should_stop([100.0, 60.0, 140.0, 80.0], 0.1)
    assert should_stop([100.0, 60.0, 140.0, 80.0], 0.5)  # a looser threshold accepts them


def test_should_stop_drops_one_outlier_each_side_beyond_four_batches():
    values = [100.0, 101.0, 99.0, 10.0]
    assert not should_stop(values, 0.1)  # 4 values: the outlier counts
    assert should_stop([*values, 500.0], 0.1)  # 5 values: 10 and 500 are dropped


class _FakeTimer:
    """Stands in for ``lib.time_evaluator``: returns the next scripted cost per call."""

    def __init__(self, costs):
        self.costs = list(costs)
        self.numbers: list[int] = []

    def time_evaluator(self, name, dev, number, repeat):
        assert name == "main" and repeat == 1
        self.numbers.append(number)
        cost = self.costs.pop(0)

        class _Result:
            mean = cost

        return lambda *args: _Result()


def test_adaptive_costs_stops_early_on_steady_timings():
    lib = _FakeTimer([1e-3] * 20)
    costs, extra = adaptive_costs(lib, None, [], micro_batch=50, max_runs=500)
    assert costs == [1e-3] * 3 and lib.numbers == [50, 50, 50]
    assert extra["runs"] == 150 and extra["max_runs"] == 500 and extra["micro_batches"] == 3
    assert extra["saved_fraction"] == pytest.approx(0.7)
    assert extra["seconds_saved_estimate"] == pytest.approx(extra["seconds"] / 150 * 350)


def test_adaptive_costs_respects_max_runs_on_noisy_timings():
    noisy = [1e-3, 2e-3, 5e-4, 3e-3, 1e-4, 4e-3, 2e-4, 1e-3, 6e-3]
    lib = _FakeTimer(noisy)
    costs, extra = adaptive_costs(lib, None, [], micro_batch=30, max_runs=100)
    assert lib.numbers == [30, 30, 30, 10]  # the last micro-batch is cut to the budget
    assert len(costs) == 4 and extra["runs"] == 100 and extra["saved_fraction"] == 0.0


def test_adaptive_costs_rejects_bad_options():
    with pytest.raises(ValueError, match="micro_batch"):
        adaptive_costs(_FakeTimer([]), None, [], micro_batch=0)
    with pytest.raises(ValueError, match="cv_threshold"):
        adaptive_costs(_FakeTimer([]), None, [], cv_threshold=0.0)


@pytest.mark.slow
def test_live_adaptive_measurement_reports_runs(dense_task, dense_space):
    from tune_gym.measure.live import LiveBackend

    configs = dense_space.sample_unique(np.random.default_rng(0), 2)
    with LiveBackend(adaptive={"micro_batch": 10, "max_runs": 200}, check_correctness=False,
                     build_workers=1) as backend:
        results = backend.measure(dense_task, dense_space, configs)
    assert len(results) == 2
    for r in results:
        assert r.ok, r.error_msg
        extra = r.extra
        assert 30 <= extra["runs"] <= extra["max_runs"] == 200
        assert extra["runs"] % 10 == 0 and len(r.costs) == extra["micro_batches"] == extra["runs"] // 10
        assert extra["saved_fraction"] == pytest.approx(1 - extra["runs"] / 200)
        assert extra["seconds"] > 0 and extra["seconds_saved_estimate"] >= 0
        assert all(c > 0 for c in r.costs) and 0.01 < r.gflops < 2000
