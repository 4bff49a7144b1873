"""benchmarks.claims on a tiny results file whose figures are worked out by hand."""

from __future__ import annotations

import pytest

from benchmarks import claims
from benchmarks.leaderboard.metrics import time_to_target, tuning_clock
from benchmarks.leaderboard.suite import Suite, SuiteTask

# (agent, seed) -> (gflops, clock, agent seconds); clocks are cumulative measuring seconds
RUNS = {
    ("xgb-sa", 0): ([1.0, 2.0, 4.0], [1.0, 2.0, 3.0], 3.0),        # tuning seconds 2, 4, 6: reaches 4 at 6 s
    ("contextual-sa", 0): ([4.0, 1.0, 1.0], [1.0, 2.0, 3.0], 0.0),  # reaches 4 at 1 s
    ("xgb-sa", 1): ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], 0.0),        # reaches its final 2 at 1 s
    ("contextual-sa", 1): ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], 0.0),  # never reaches 2: its whole run, 3 s
}


@pytest.fixture
def suite(tmp_path, write_results):
    spec = Suite("tiny", "", ("xgb-sa", "contextual-sa"), 2, 1, (SuiteTask("resnet18:7", "compact", 3),), {})
    runs = [{"key": f"{agent}|resnet18:7|compact|replay|3|1|{seed}",
             "spec": {"agent": agent, "task": "resnet18:7", "preset": "compact", "seed": seed},
             "space_size": 20_000, "gflops": gflops, "clock": clock, "agent_secs": secs,
             "best_gflops": max(gflops), "host": "h1" if agent == "xgb-sa" else "h2"}
            for (agent, seed), (gflops, clock, secs) in RUNS.items()]
    return claims.load(write_results(tmp_path / "r.jsonl", spec, runs))


def test_time_to_target_adds_the_agent_seconds_pro_rata():
    assert list(tuning_clock([1.0, 2.0, 3.0], 3.0)) == [2.0, 4.0, 6.0]
    assert time_to_target([1.0, 2.0, 4.0], [1.0, 2.0, 3.0], 3.0, 2.0) == (4.0, 2)
    assert time_to_target([1.0, float("nan")], [1.0, 2.0], 0.0, 2.0) == (2.0, None)  # never: the whole run


def test_time_to_quality_is_the_ratio_of_median_times(suite):
    (fig,) = claims.time_to_quality(suite, "contextual-sa")
    # xgb-sa: 6 s and 1 s (median 3.5); contextual-sa: 1 s and 3 s (median 2, one censored)
    assert fig.value == pytest.approx(3.5 / 2) and fig.seeds == 2 and fig.reached == 1


def test_equal_time_gain_compares_medians_at_fractions_of_the_common_horizon(suite):
    gains = claims.equal_time_gain(suite, "contextual-sa", min_space=10_000)
    # horizon: min(median end 3 s, median end 4.5 s) = 3 s
    assert [f.value for f in gains[1.0]] == [pytest.approx(2.5 / 1.5 - 1)]  # at 3 s: medians 2.5 and 1.5
    assert [f.value for f in gains[0.5]] == [pytest.approx(2.5 / 1.0 - 1)]  # at 1.5 s: 2.5 and 1
    assert gains[0.25] == []  # at 0.75 s xgb-sa has measured nothing
    assert claims.equal_time_gain(suite, "contextual-sa", min_space=50_000)[1.0] == []  # not a large space


def test_final_gain_and_the_printed_rows(suite):
    (fig,) = claims.final_gain(suite, "contextual-sa")
    assert fig.value == pytest.approx(2.5 / 3.0)
    text = "\n".join(claims.summary_rows(suite, "AdaTune", "contextual-sa"))
    assert "`tiny` (h1, h2)" in text
    assert "1.75x to 1.75x over 1 tasks" in text and ">= 1.3x on 1)" in text
    assert "reached the target in 1 of 2 runs" in text
    assert "+67% to +67% at the common horizon" in text and "largest +150% (resnet18:7, at 0.5 of it)" in text
    assert "weighted geomean 0.833 over 1 tasks" in text
    with pytest.raises(ValueError, match="kinds: \\['speed'\\] are not among"):
        claims.summary_rows(suite, "AdaTune", "contextual-sa", kinds=("speed",))
