"""The benchmark runner, results files, validation, the leaderboard report and Ray dispatch."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from agents.base import Agent, NotApplicable, register
from benchmarks.leaderboard.packed import line_text
from benchmarks.leaderboard.report import compute, write_leaderboard
from benchmarks.leaderboard.results import ResultsError, read_results, results_lines
from benchmarks.leaderboard.runner import run_suite
from benchmarks.leaderboard.suite import Suite, SuiteError, list_suites, load_suite
from benchmarks.leaderboard.validate import validate
from tune_gym.datasets import Dataset
from tune_gym.measure.reference import Reference
from tune_gym.records import load_records

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"
SUITE = f"""
name = "tiny"
description = "two agents on the tiny dense space"
seeds = 4
batch = 4
agents = ["random", "xgb-sa"]
[agent_options]
xgb-sa = {{ plan_size = 8, num_rounds = 10 }}
[[task]]
id = "{DENSE}"
preset = "compact"
budget = 24
weight = 2
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A dataset catalog holding the tiny dense space, exhaustively, with a reference."""
    folder = tmp_path_factory.mktemp("data")
    ds = Dataset.from_records([r for r in load_records(DATA) if r.task == DENSE], mode="exhaustive")
    ds.meta["references"] = {ds.host[0]: Reference(10.0, "test", (10.0,), ds.host[0]).to_json()}
    ds.save(folder / "dense_compact.parquet")
    return folder


@pytest.fixture()
def suite_file(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("TUNE_GYM_DATA", str(data_dir))
    path = tmp_path / "tiny.toml"
    path.write_text(SUITE)
    return path


def test_suites_are_data_files_and_bad_ones_are_refused(tmp_path):
    assert {"quick", "standard", "live"} <= set(list_suites())
    for name in list_suites():
        suite = load_suite(name)
        assert suite.agents and suite.tasks and suite.seeds >= 3
    standard = load_suite("standard")  # enough seeds that adjacent ranks can be told apart
    assert min(standard.seeds_of(agent) for agent in standard.agents) >= 25
    with pytest.raises(ValueError, match="timed one at a time"):
        run_suite(load_suite("live"), tmp_path / "live.jsonl", jobs=2, progress=False)
    with pytest.raises(SuiteError, match="no suite 'nope'"):
        load_suite("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text('seeds = 3\n[[task]]\nid = "resnet18:7"\nbudget = 8\nbackend = "gpu"\n')
    with pytest.raises(SuiteError, match="backend 'gpu' is not one of"):
        load_suite(bad)
    bad.write_text('sedes = 3\n[[task]]\nid = "resnet18:7"\nbudget = 8\n')
    with pytest.raises(SuiteError, match=r"unknown keys \['sedes'\]"):
        load_suite(bad)


def test_bench_writes_every_run_and_validates(suite_file, tmp_path):
    out = tmp_path / "results.jsonl"
    results = run_suite(load_suite(suite_file), out, progress=False)
    header, runs = read_results(out)
    assert header["suite"]["name"] == "tiny" and len(runs) == 8 == len(results.done)
    for line in runs:
        assert len(line["configs"]) == len(line["gflops"]) == len(line["clock"]) == 24
        assert line["reference_gflops"] == 10.0 and line["agent_secs"] >= 0
        assert line["data"]["datasets"][0]["checksum"]
    report = validate(out, rerun=8)
    assert report.ok, report.problems
    assert report.checked == 8 and report.rerun == 8


def test_same_seed_same_run(suite_file, tmp_path):
    a = run_suite(load_suite(suite_file), tmp_path / "a.jsonl", progress=False, seeds=2)
    b = run_suite(load_suite(suite_file), tmp_path / "b.jsonl", progress=False, seeds=2)
    assert [r["configs"] for r in a.runs] == [r["configs"] for r in b.runs]


def test_validate_catches_a_tampered_number_and_a_swapped_config(suite_file, tmp_path):
    suite_file.write_text(SUITE.replace("seeds = 4", "seeds = 1"))  # a complete file: every run of its suite
    out = tmp_path / "results.jsonl"
    run_suite(load_suite(suite_file), out, progress=False)
    lines = [line_text(obj) for obj in results_lines(out)]
    run = json.loads(lines[1])
    bumped = [math.nextafter(g, math.inf) for g in run["gflops"]]  # another CPU's last bit
    last_bit = dict(run, gflops=bumped, best_gflops=max(bumped))
    (tmp_path / "ulp.jsonl").write_text("\n".join([lines[0], json.dumps(last_bit), *lines[2:]]) + "\n")
    assert validate(tmp_path / "ulp.jsonl", rerun=0).ok
    run["gflops"][3] *= 1 + 1e-6  # a slightly better number than was measured
    (tmp_path / "number.jsonl").write_text("\n".join([lines[0], json.dumps(run), *lines[2:]]) + "\n")
    report = validate(tmp_path / "number.jsonl", rerun=0)
    assert not report.ok and any("gflops of trial 4" in p for p in report.problems)
    from tune_gym.cli import main

    assert main(["validate", str(tmp_path / "number.jsonl"), "--rerun", "0"]) == 1
    assert main(["validate", str(out), "--rerun", "1"]) == 0

    # a config swapped for the best one, with its true number: replay agrees, the re-run does not
    from tune_gym.datasets import load_dataset
    from tune_gym.datasets.catalog import find_dataset

    ds = load_dataset(find_dataset(DENSE, "compact").path)
    best = int(ds.gflops.argmax())
    run = json.loads(lines[1])
    if ds.configs[best].tolist() not in run["configs"]:
        run["configs"][0] = ds.configs[best].tolist()
        run["gflops"][0] = float(ds.gflops[best])
        run["errors"][0] = None
        clock0 = float(ds.build_secs[best] + ds.run_secs[best])
        old0 = run["clock"][0]
        run["clock"] = [c - old0 + clock0 for c in run["clock"]]
        run["best_gflops"] = max(run["gflops"])
        (tmp_path / "swapped.jsonl").write_text("\n".join([lines[0], json.dumps(run), *lines[2:]]) + "\n")
        report = validate(tmp_path / "swapped.jsonl", rerun=2)
        assert any("is not the agent's: its first batch" in p or "re-run from its seed proposes other configs" in p
                   for p in report.problems), report.problems


def test_a_grown_suite_keeps_its_runs_and_another_suite_is_refused(suite_file, tmp_path):
    out = tmp_path / "results.jsonl"
    first = run_suite(load_suite(suite_file), out, progress=False)
    grown = tmp_path / "grown.toml"
    grown.write_text(SUITE.replace("budget = 24", "budget = 16").replace("seeds = 4", "seeds = 5"))
    again = run_suite(load_suite(grown), out, progress=False)
    assert len(again.runs) == 8 + 10  # the budget-24 runs stay; 10 budget-16 runs were added
    assert again.runs[:8] == first.runs
    assert {r["runs"] for r in compute(out).rows} == {5}  # the leaderboard shows the suite as it is now
    other = tmp_path / "other.toml"
    other.write_text(SUITE.replace('name = "tiny"', 'name = "other"'))
    with pytest.raises(ResultsError, match="holds results of suite 'tiny', not 'other'"):
        run_suite(load_suite(other), out, progress=False)


def test_runs_of_another_suite_are_taken_over_not_run_again(suite_file, tmp_path):
    first = tmp_path / "first.jsonl"
    made = run_suite(load_suite(suite_file), first, progress=False, seeds=2)
    other = tmp_path / "other.toml"  # the same runs and two more seeds, under another name
    other.write_text(SUITE.replace('name = "tiny"', 'name = "other"'))

    def refuse(spec):
        raise AssertionError(f"{spec.key} was run again")

    out = tmp_path / "other.jsonl"
    taken = run_suite(load_suite(other), out, progress=False, seeds=2, reuse=[first], runner=refuse)
    assert [{k: v for k, v in r.items() if k != "reused_from"} for r in taken.runs] == made.runs
    assert {r["reused_from"] for r in taken.runs} == {"first.jsonl (suite tiny)"}
    grown = run_suite(load_suite(other), out, progress=False, reuse=[first])  # seeds 2 and 3 are run
    assert len(grown.runs) == 8 and sum("reused_from" in r for r in grown.runs) == 4
    report = validate(out, rerun=8)
    assert report.ok, report.problems
    assert report.checked == 8 and report.rerun == 8
    assert "runs made on" not in write_leaderboard(out, tmp_path / "here.md").read_text()
    # runs made on another host: the page names the hosts, whose compute the agent seconds are
    moved = results_lines(out)
    moved[1] = {**moved[1], "host": "0123456789ab"}
    (tmp_path / "moved.jsonl").write_text("".join(line_text(obj) + "\n" for obj in moved))
    page = write_leaderboard(tmp_path / "moved.jsonl", tmp_path / "moved.md").read_text()
    assert "`0123456789ab` (1)" in page and "(**agent s** is each one's compute)" in page

    # a run whose data changed since is not taken over: it is run again
    lines = results_lines(first)
    changed = [lines[0], *({**r, "data": {**r["data"], "datasets": []}} for r in lines[1:])]
    (tmp_path / "changed.jsonl").write_text("".join(line_text(obj) + "\n" for obj in changed))
    again = run_suite(load_suite(other), tmp_path / "again.jsonl", progress=False, seeds=2,
                      reuse=[tmp_path / "changed.jsonl"])
    assert not any("reused_from" in r for r in again.runs)
    assert [r["configs"] for r in again.runs] == [r["configs"] for r in made.runs]


def test_dropped_runs_are_gone_from_every_part_and_the_next_bench_runs_them_again(suite_file, tmp_path, capsys):
    from benchmarks.leaderboard.cli import cmd_results
    from benchmarks.leaderboard.results import drop_runs, pack_results, results_paths

    out = tmp_path / "results.parquet"
    run_suite(load_suite(suite_file), out, progress=False, seeds=2)  # packed: the first file
    whole = run_suite(load_suite(suite_file), out, progress=False)  # seeds 2-3: a segment
    assert results_paths(out)[0].with_suffix(".parquet.d").is_dir()
    keys = [whole.runs[1]["key"], whole.runs[6]["key"]]  # one from each packed part
    with pytest.raises(ResultsError, match="no run with key 'nope'"):
        drop_runs(out, [keys[0], "nope"])
    assert len(read_results(out)[1]) == 8  # refused: nothing changed
    listed = tmp_path / "keys.txt"
    listed.write_text(f"# runs to make again\n{keys[0]}\n\n{keys[1]}\n")
    import argparse

    cmd_results(argparse.Namespace(action="drop", results=[out], keys=listed))
    assert "2 runs dropped" in capsys.readouterr().out
    assert not results_paths(out)[0].with_suffix(".parquet.d").exists()  # one packed file again
    left = read_results(out)[1]
    assert [r["key"] for r in left] == [r["key"] for r in whole.runs if r["key"] not in keys]

    def only(spec):  # the next bench runs the dropped runs, and nothing else
        assert spec.key in keys, spec.key
        from benchmarks.leaderboard.runner import run_one

        return run_one(spec)

    again = run_suite(load_suite(suite_file), out, progress=False, runner=only)
    assert len(again.runs) == 8 and pack_results(out) == 0
    redone = {r["key"]: r["configs"] for r in read_results(out)[1]}
    assert all(redone[r["key"]] == r["configs"] for r in whole.runs)  # same seed, same run
    report = validate(out, rerun=0)
    assert report.ok, report.problems


def test_agent_seeds_give_a_costly_entry_fewer_seeds(suite_file, tmp_path):
    plain = load_suite(suite_file)
    fewer = tmp_path / "fewer.toml"
    fewer.write_text(SUITE.replace("[agent_options]", '[agent_seeds]\n"xgb-sa" = 2\n[agent_options]'))
    suite = load_suite(fewer)
    assert (suite.seeds_of("xgb-sa"), suite.seeds_of("random")) == (2, 4)
    assert sorted((r.agent, r.seed) for r in suite.runs()) == [("random", s) for s in range(4)] + [("xgb-sa", 0),
                                                                                                 ("xgb-sa", 1)]
    assert len(suite.runs(seeds=1)) == 2
    def stored(s: Suite, *drop: str) -> dict:  # the suite as a results header stores it
        return json.loads(json.dumps({k: v for k, v in asdict(s).items() if k not in ("path", *drop)}))

    assert suite.digest != plain.digest and Suite.from_dict(stored(suite)).runs() == suite.runs()
    # a suite without [agent_seeds] keeps its digest, so results files of existing suites stay theirs
    assert plain.digest == Suite.from_dict(stored(plain, "agent_seeds")).digest
    for bad, message in [('"ga" = 2', "not one of the suite's agents"), ('"xgb-sa" = 9', r"an int in 1\.\.4")]:
        fewer.write_text(SUITE.replace("[agent_options]", f"[agent_seeds]\n{bad}\n[agent_options]"))
        with pytest.raises(SuiteError, match=message):
            load_suite(fewer)
    report = run_suite(suite, tmp_path / "fewer.jsonl", progress=False)
    assert len(report.runs) == 6 and validate(tmp_path / "fewer.jsonl").ok  # complete: nothing reported missing


@pytest.mark.heavy
def test_bench_resumes_after_sigkill_with_nothing_lost_or_run_twice(suite_file, tmp_path, data_dir):
    out = tmp_path / "results.jsonl"
    script = textwrap.dedent(f"""
        import time
        from benchmarks.leaderboard.runner import run_one, run_suite
        from benchmarks.leaderboard.suite import load_suite

        def slow(spec):
            line = run_one(spec)
            time.sleep(0.4)
            return line

        run_suite(load_suite({str(suite_file)!r}), {str(out)!r}, progress=False, runner=slow)
    """)
    env = {**os.environ, "TUNE_GYM_DATA": str(data_dir)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_text().splitlines()) >= 4:  # header + 3 runs
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _, before = read_results(out)
    assert 3 <= len(before) < 8
    results = run_suite(load_suite(suite_file), out, progress=False)
    _, after = read_results(out)
    keys = [r["key"] for r in after]
    assert len(keys) == len(set(keys)) == 8
    assert after[: len(before)] == before  # earlier runs kept as they were
    assert len(results.runs) == 8


@pytest.mark.heavy
def test_parallel_processes_give_the_same_runs(suite_file, tmp_path):
    serial = run_suite(load_suite(suite_file), tmp_path / "serial.jsonl", progress=False, seeds=2)
    parallel = run_suite(load_suite(suite_file), tmp_path / "parallel.jsonl", progress=False, seeds=2, jobs=2)
    by_key = lambda rs: {r["key"]: r["configs"] for r in rs.runs}
    assert by_key(serial) == by_key(parallel)


def test_leaderboard_report(suite_file, tmp_path):
    out = tmp_path / "results.jsonl"
    run_suite(load_suite(suite_file), out, progress=False)
    lb = compute(out)
    assert {r["agent"] for r in lb.rows} == {"random", "xgb-sa"}
    for row in lb.rows:
        assert 0 < row["vs_best"] <= 1 and row["runs"] == 4
        assert -5 < row["p_trials"] <= 1
    md = write_leaderboard(out, tmp_path / "LEADERBOARD.md", plots=tmp_path / "plots")
    text = md.read_text()
    assert "| 1 |" in text and "random" in text and "xgb-sa" in text
    assert "| agent | @8 | @16 | @24 |" in text  # best-so-far at 8, 16 and the full 24 trials
    assert (tmp_path / "plots" / "best_so_far.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "best_so_far_time.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "random_relative_score.png").stat().st_size > 1000


def test_leaderboard_lists_runs_not_made_yet(suite_file, tmp_path):
    out = tmp_path / "results.jsonl"
    run_suite(load_suite(suite_file), out, agents=["random"], progress=False)
    text = write_leaderboard(out, tmp_path / "LEADERBOARD.md", plots=tmp_path / "plots").read_text()
    assert "not in the results yet" in text and "xgb-sa 4" in text
    # an agent with some of its runs follows the ranked ones, unranked, whatever its score
    run_suite(load_suite(suite_file), out, agents=["xgb-sa"], seeds=1, progress=False)
    lb = compute(out)
    assert [(r["agent"], r["missing"]) for r in lb.rows] == [("random", 0), ("xgb-sa", 3)]
    text = write_leaderboard(out, tmp_path / "LEADERBOARD.md", plots=tmp_path / "plots").read_text()
    assert "| 1 | random |" in text and "| - | xgb-sa |" in text and "| 1 of 4 so far |" in text
    assert "Agents without every run the suite asks of them (`-`) follow the ranked ones" in text


@pytest.mark.heavy
def test_ray_dispatch_on_a_local_instance(suite_file, tmp_path, data_dir):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TUNE_GYM_DATA": str(data_dir), "OMP_NUM_THREADS": "1"}})
    try:
        via_ray = run_suite(load_suite(suite_file), tmp_path / "ray.jsonl", progress=False, seeds=2,
                            ray_address="auto")
    finally:
        ray.shutdown()
    local = run_suite(load_suite(suite_file), tmp_path / "local.jsonl", progress=False, seeds=2)
    by_key = lambda rs: {r["key"]: r["configs"] for r in rs.runs}
    assert by_key(via_ray) == by_key(local) and len(via_ray.runs) == 4


def test_every_suite_task_off_live_hardware_has_a_committed_dataset(monkeypatch):
    from tune_gym import kinds
    from tune_gym.datasets.catalog import find_dataset

    monkeypatch.delenv("TUNE_GYM_DATA", raising=False)
    for name in list_suites():
        for task in load_suite(name).tasks:
            if task.backend == "live":
                continue
            if any(task.id.startswith(scheme) for scheme in kinds.uri_schemes()):
                continue  # a kind's own files, measured elsewhere and never committed (kt: TUNE_GYM_DATA)
            entry = find_dataset(task.id, task.preset)
            assert entry is not None, f"suite {name}: no dataset of {task.id} ({task.preset})"
            if task.backend == "replay":
                assert entry.exhaustive, f"suite {name}: {task.id} is replayed but not measured exhaustively"
                assert task.budget <= entry.rows


@register("test-refuses-dense", "refuses dense tasks (a test of not-applicable runs)")
class _RefusesDense(Agent):
    def reset(self, space, task, seed=None):
        super().reset(space, task, seed)
        if task.op == "dense":
            raise NotApplicable("this agent never saw a dense task")

    def propose(self, n):
        return self.fresh(n)


def test_not_applicable_runs_are_recorded_validated_and_shown_as_na(suite_file, tmp_path):
    suite_file.write_text(SUITE.replace('agents = ["random", "xgb-sa"]', 'agents = ["random", "test-refuses-dense"]')
                          .replace("seeds = 4", "seeds = 3"))
    out = tmp_path / "results.jsonl"
    run_suite(load_suite(suite_file), out, progress=False)
    _, runs = read_results(out)
    refused = [r for r in runs if r["spec"]["agent"] == "test-refuses-dense"]
    assert len(refused) == 3 and all(r["not_applicable"] == "this agent never saw a dense task" for r in refused)
    assert all(r["configs"] == [] and r["gflops"] == [] for r in refused)
    assert all("not_applicable" not in r and len(r["configs"]) == 24 for r in runs if r not in refused)
    report = validate(out, rerun=6)
    assert report.ok, report.problems
    # a resumed run does not redo them, the report shows them as n/a and not as missing
    again = run_suite(load_suite(suite_file), out, progress=False)
    assert len(again.runs) == 6
    text = write_leaderboard(out, tmp_path / "LB.md", plots=tmp_path / "plots").read_text()
    assert "| n/a |" in text and "not in the results yet" not in text
    assert "test-refuses-dense on " in text and "(this agent never saw a dense task)" in text
    assert "test-refuses-dense" not in [r["agent"] for r in compute(out).rows]


def test_an_agent_variant_runs_its_base_agent_with_its_own_options_as_a_row_of_its_own(suite_file, tmp_path):
    text = (SUITE.replace('agents = ["random", "xgb-sa"]', 'agents = ["xgb-sa", "xgb-sa/small-plans"]')
            .replace("seeds = 4", "seeds = 3")
            .replace("[agent_options]", '[agent_options]\n"xgb-sa/small-plans" = { plan_size = 4, num_rounds = 10 }'))
    suite_file.write_text(text)
    out = tmp_path / "results.jsonl"
    run_suite(load_suite(suite_file), out, progress=False)
    _, runs = read_results(out)
    by_agent = {a: [r for r in runs if r["spec"]["agent"] == a] for a in ("xgb-sa", "xgb-sa/small-plans")}
    assert all(len(v) == 3 for v in by_agent.values())
    assert by_agent["xgb-sa/small-plans"][0]["spec"]["options"] == {"plan_size": 4, "num_rounds": 10}
    assert [r["configs"] for r in by_agent["xgb-sa"]] != [r["configs"] for r in by_agent["xgb-sa/small-plans"]]
    assert validate(out, rerun=2).ok
    assert {r["agent"] for r in compute(out).rows} == {"xgb-sa", "xgb-sa/small-plans"}
    suite_file.write_text(text.replace('"xgb-sa/small-plans"]', '"nope/x"]'))
    with pytest.raises(SuiteError, match=r"unknown agent\(s\) \['nope/x'\]"):
        load_suite(suite_file)
