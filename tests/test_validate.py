"""``tune-gym validate``: a results file passes only when it is exactly what its runs produce.

One tiny real bench (replayed data, module fixture) is written once; every test tampers with a
copy of it the way a forger (or a broken writer) would, and validation must name the problem.
Also here: the results reader's strictness, the bench CLI's argument checks, and workers that
die with a killed benchmark."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.base import Agent, NotApplicable, register
from benchmarks.leaderboard.packed import line_text
from benchmarks.leaderboard.report import compute
from benchmarks.leaderboard.results import ResultsError, ResultsFile, read_results, results_lines
from benchmarks.leaderboard.runner import run_suite
from benchmarks.leaderboard.suite import RunSpec, Suite, load_suite
from benchmarks.leaderboard.validate import _RunChecks, validate
from tune_gym.cli import main
from tune_gym.datasets import Dataset
from tune_gym.measure.reference import Reference
from tune_gym.records import load_records

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"
SUITE = f"""
name = "tiny-validate"
description = "four agents on the tiny dense space"
seeds = 2
batch = 4
agents = ["random", "xgb-sa", "test-validate-stops", "test-validate-refuses"]
[agent_options]
xgb-sa = {{ plan_size = 8, num_rounds = 5 }}
[[task]]
id = "{DENSE}"
preset = "compact"
budget = 16
"""
STOPS_AT = 10  # trials after which test-validate-stops proposes nothing more


@register("test-validate-stops", "stops after 10 configs (a run its agent ends early)")
class _Stops(Agent):
    def propose(self, n: int) -> list[Any]:
        return self.fresh(min(n, STOPS_AT - len(self.proposed)))

    def observe(self, configs, results) -> None:
        super().observe(configs, results)


@register("test-validate-refuses", "refuses dense tasks (a not-applicable run)")
class _Refuses(Agent):
    def reset(self, space, task, seed=None) -> None:
        super().reset(space, task, seed)
        if task.op == "dense":
            raise NotApplicable("never saw a dense task")

    def propose(self, n: int) -> list[Any]:
        return self.fresh(n)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    ds = Dataset.from_records([r for r in load_records(DATA) if r.task == DENSE], mode="exhaustive")
    ds.meta["references"] = {ds.host[0]: Reference(10.0, "test", (10.0,), ds.host[0]).to_json()}
    ds.save(folder / "dense_compact.parquet")
    return folder


@pytest.fixture(scope="module")
def bench(data_dir, tmp_path_factory):
    """``(results file, its lines as text)``: every run of the tiny suite, written by the runner."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TUNE_GYM_DATA", str(data_dir))
    folder = tmp_path_factory.mktemp("bench")
    (folder / "tiny.toml").write_text(SUITE)
    out = folder / "results.jsonl"
    run_suite(load_suite(folder / "tiny.toml"), out, progress=False)
    yield out, [line_text(obj) for obj in results_lines(out)]  # packed by the bench: its lines as JSONL
    mp.undo()


@pytest.fixture()
def env(bench, data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("TUNE_GYM_DATA", str(data_dir))
    return bench


def _runs(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(t) for t in lines[1:]]


def _find(runs: list[dict[str, Any]], agent: str, seed: int) -> int:
    return next(i for i, r in enumerate(runs) if r["spec"]["agent"] == agent and r["spec"]["seed"] == seed)


def _write(tmp_path: Path, header: str | dict[str, Any], runs: list[Any], name: str = "tampered.jsonl") -> Path:
    path = tmp_path / name
    head = header if isinstance(header, str) else json.dumps(header)
    path.write_text("\n".join([head, *(r if isinstance(r, str) else json.dumps(r) for r in runs)]) + "\n")
    return path


def _fails(path: Path, *needles: str, rerun: int = 0) -> list[str]:
    report = validate(path, rerun=rerun)
    assert not report.ok, "validate confirmed a tampered file"
    for needle in needles:
        assert any(needle in p for p in report.problems), (needle, report.problems)
    return report.problems


def _with_trials(line: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """``line`` with the trials (configs and their true numbers) of ``source``."""
    keys = ("configs", "gflops", "errors", "clock", "best_gflops")
    return {**line, **{k: copy.deepcopy(source[k]) for k in keys}, "ended": source["ended"]}


# ----------------------------------------------------------------------------------------------- the real file


def test_a_file_the_bench_wrote_is_confirmed_with_its_early_stops_and_refusals(env):
    out, lines = env
    runs = _runs(lines)
    assert len(runs) == 8
    stops = [r for r in runs if r["spec"]["agent"] == "test-validate-stops"]
    assert all(len(r["configs"]) == STOPS_AT and r["ended"] == "agent" for r in stops)
    assert all(r["ended"] == "budget" for r in runs if r["spec"]["agent"] in ("random", "xgb-sa"))
    report = validate(out, rerun=2)
    assert report.ok, report.problems
    assert report.checked == 8 and report.stale == 0
    # the runs its agent ended early are always re-run; two more are sampled
    assert report.rerun == 4 and {k for k in report.rerun_keys if k.startswith("test-validate-stops")} == {
        r["key"] for r in stops}
    # the CLI lists the re-run runs and exits 0
    assert main(["validate", str(out), "--rerun", "0"]) == 0


def test_the_rerun_sample_is_drawn_from_the_files_content(env, tmp_path):
    out, lines = env
    first, again = validate(out, rerun=2), validate(out, rerun=2)
    assert first.rerun_keys == again.rerun_keys  # the same file: the same runs
    sampled = lambda report: [k for k in report.rerun_keys if not k.startswith("test-validate-stops")]
    for i in range(20):  # another file (here: another wall clock of a run) draws another sample, sooner or later
        runs = _runs(lines)
        runs[0]["wall_secs"] += i + 1
        report = validate(_write(tmp_path, lines[0], runs, f"t{i}.jsonl"), rerun=2)
        assert report.ok, report.problems
        if sampled(report) != sampled(first):
            break
    else:
        pytest.fail("20 files drew the same sample of re-runs")


def test_a_validation_given_its_log_takes_only_the_reruns_it_holds_for_this_host_and_code(env, tmp_path, capsys):
    """--log: a killed validation goes on where it stopped; an answer counts only for the same run
    line re-run on the same host, numerics and code, and a problem it holds names the run's place now."""
    _, lines = env
    runs = _runs(lines)
    cut = _find(runs, "random", 1)
    runs[cut] = {**_halve(runs[cut]), "ended": "agent"}  # its re-run proposes more: a problem
    path, log = _write(tmp_path, lines[0], runs), tmp_path / "reruns.jsonl"
    first = validate(path, rerun=2, log=log)
    assert first.rerun == 5 and first.resumed == 0
    assert sum("re-run from its seed proposes other configs" in p for p in first.problems) == 1, first.problems
    entries = [json.loads(t) for t in log.read_text().splitlines()]
    assert len(entries) == 5 and [e["key"] for e in entries] == first.rerun_keys
    assert sum(e["problem"] is not None for e in entries) == 1
    assert not any(str(path) in (e["problem"] or "") for e in entries)  # the place is not stored

    log.write_text("\n".join(log.read_text().splitlines()[:3]) + '\n{"run": "ab')  # killed: 3 answers, a torn 4th
    assert validate(path, rerun=2, log=log) == dataclasses.replace(first, resumed=3)
    assert validate(path, rerun=2, log=log) == dataclasses.replace(first, resumed=5)  # the 2 re-run are logged
    capsys.readouterr()
    assert main(["validate", str(path), "--rerun", "2", "--log", str(log)]) == 1
    assert f"5 re-run from their seeds (5 of them answered by {log})" in capsys.readouterr().out

    moved = _write(tmp_path, lines[0], [runs[-1], *runs[:-1]], "moved.jsonl")  # every run on another line
    again = validate(moved, rerun=0, log=log)  # the runs ended early: re-run for sure, whatever the sample
    assert again.resumed == again.rerun == 3 and again.problems == validate(moved, rerun=0).problems

    runs[cut]["wall_secs"] += 1  # another line: its answer is not the log's; the two other runs' are
    edited = validate(_write(tmp_path, lines[0], runs, "edited.jsonl"), rerun=0, log=log)
    assert edited.rerun == 3 and edited.resumed == 2
    other = [{**e, "identity": {**e["identity"], "host": "0" * 12}} for e in entries]
    log.write_text("".join(json.dumps(e) + "\n" for e in other))  # answers from another host (or code)
    assert validate(path, rerun=2, log=log).resumed == 0


def test_a_log_that_cannot_be_written_fails_before_any_check_and_its_folder_is_made(env, tmp_path, capsys):
    """--log in a folder not there yet: the folder is made. A log that is a folder, or below a file: a
    one-line error naming it, before the first run is checked (not after an hour of re-runs)."""
    _, lines = env
    path = _write(tmp_path, lines[0], _runs(lines))
    log = tmp_path / "new" / "deeper" / "reruns.jsonl"
    report = validate(path, rerun=1, log=log)
    assert report.ok and report.rerun >= 1
    assert len(log.read_text().splitlines()) == report.rerun
    (tmp_path / "plain").write_text("a file")
    for bad, why in ((tmp_path, "is a folder"), (tmp_path / "plain" / "reruns.jsonl", "cannot write")):
        with pytest.raises(ValueError, match=why):
            validate(path, rerun=1, log=bad)
        assert main(["validate", str(path), "--log", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------- tampering


def test_two_runs_configs_swapped(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    a, b = _find(runs, "random", 0), _find(runs, "random", 1)
    runs[a], runs[b] = _with_trials(runs[a], runs[b]), _with_trials(runs[b], runs[a])
    _fails(_write(tmp_path, lines[0], runs), "is not the agent's: its first batch from seed 0")


def test_one_seeds_trials_copied_into_another_agents_run(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    xgb = _find(runs, "xgb-sa", 1)
    runs[xgb] = _with_trials(runs[xgb], runs[_find(runs, "random", 0)])
    _fails(_write(tmp_path, lines[0], runs), "is not the agent's: its first batch from seed 1")


@pytest.mark.parametrize("field,value", [("agent", "xgb-sa"), ("seed", 1)])
def test_spec_agent_or_seed_edited(env, tmp_path, field, value):
    _, lines = env
    runs = _runs(lines)
    i = _find(runs, "random", 0)
    runs[i]["spec"][field] = value
    if field == "agent":
        runs[i]["spec"]["options"] = {"plan_size": 8, "num_rounds": 5}
    _fails(_write(tmp_path, lines[0], runs), "key is not its spec's")
    # with the key made to match, the run it now claims to be is there twice (or its trials are not the agent's)
    runs[i]["key"] = RunSpec(**runs[i]["spec"]).key
    _fails(_write(tmp_path, lines[0], runs), "repeats the run of line", "runs of suite 'tiny-validate' are not in")
    del runs[next(j for j, r in enumerate(runs) if r["key"] == runs[i]["key"] and j != i)]
    _fails(_write(tmp_path, lines[0], runs), "is not the agent's", "are not in the file (e.g. random|")


def test_a_run_deleted_or_duplicated(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    gone = runs.pop(_find(runs, "xgb-sa", 0))
    _fails(_write(tmp_path, lines[0], runs), f"1 of the 8 runs of suite 'tiny-validate' are not in the file "
                                             f"(e.g. {gone['key']})")
    runs = _runs(lines)
    runs.append(runs[0])
    _fails(_write(tmp_path, lines[0], runs), f"tampered.jsonl:{len(runs) + 1}: run {runs[0]['key']}: repeats the run "
                                             "of line 2")


def _halve(line: dict[str, Any]) -> dict[str, Any]:
    n = len(line["configs"]) // 2
    out = {**line, **{k: line[k][:n] for k in ("configs", "gflops", "errors", "clock")}}
    out["best_gflops"] = max(out["gflops"])
    return out


def test_a_run_cut_to_half_its_trials(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    i = _find(runs, "random", 1)
    runs[i] = _halve(runs[i])
    _fails(_write(tmp_path, lines[0], runs), "ended is 'budget', but a run of 8 trials (budget 16, space 200) "
                                             "ended by 'agent'")
    for ended in ("agent", None):  # the line says its agent stopped, or says nothing: the re-run tells
        if ended is None:
            del runs[i]["ended"]
        else:
            runs[i]["ended"] = ended
        problems = _fails(_write(tmp_path, lines[0], runs), "re-run from its seed proposes other configs from trial 9 "
                                                            "(16 trials, the file has 8)")
        assert len(problems) == 1
    # an early stop cut shorter still is caught the same way
    runs = _runs(lines)
    j = _find(runs, "test-validate-stops", 0)
    runs[j] = _halve(runs[j])
    _fails(_write(tmp_path, lines[0], runs), "re-run from its seed proposes other configs from trial 6")
    # recorded on another host: the problem names both hosts (floats may differ there, tune_gym.numerics)
    runs = _runs(lines)
    runs[i] = {**_halve(runs[i]), "ended": "agent", "host": "0123456789ab"}
    _fails(_write(tmp_path, lines[0], runs), "(16 trials, the file has 8) (recorded on host 0123456789ab, re-run on ")


def test_a_run_turned_into_not_applicable_or_a_refusal_given_trials(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    i = _find(runs, "xgb-sa", 0)
    runs[i] = {**runs[i], "configs": [], "gflops": [], "errors": [], "clock": [], "best_gflops": 0.0,
               "agent_info": {}, "not_applicable": "never saw a dense task"}
    del runs[i]["ended"]
    _fails(_write(tmp_path, lines[0], runs), "marked not applicable (never saw a dense task), but agent xgb-sa takes "
                                             "the task")
    runs = _runs(lines)
    j = _find(runs, "test-validate-refuses", 0)
    runs[j]["not_applicable"] = "another reason"
    _fails(_write(tmp_path, lines[0], runs), "but the agent refuses the task because never saw a dense task")
    runs = _runs(lines)
    source = runs[_find(runs, "random", 0)]
    runs[j] = _with_trials(runs[j], source)
    del runs[j]["not_applicable"]
    _fails(_write(tmp_path, lines[0], runs), "agent test-validate-refuses refuses the task (never saw a dense task)")


def test_the_headers_agent_list_replaced(env, tmp_path):
    _, lines = env
    header = json.loads(lines[0])
    header["suite"]["agents"] = ["grid", "ga"]
    problems = _fails(_write(tmp_path, header, _runs(lines)), "suite_digest", "not a run of suite 'tiny-validate'",
                      "4 of the 4 runs of suite 'tiny-validate' are not in the file")
    header["suite_digest"] = Suite.from_dict(header["suite"]).digest  # a consistent forgery
    assert len(_fails(_write(tmp_path, header, _runs(lines)), "not a run of suite")) == len(problems) - 1
    report = validate(_write(tmp_path, header, []))
    assert not report.ok and report.checked == 0  # "0 runs replayed" is no confirmation


def test_a_header_claiming_a_shipped_suite_must_be_that_suite(env, tmp_path):
    _, lines = env
    quick = load_suite("quick")
    header = json.loads(lines[0])
    suite = {**header["suite"], "name": "quick", "description": quick.description,
             "agents": [a for a in quick.agents if a != "xgb-sa"], "seeds": quick.seeds, "batch": quick.batch,
             "tasks": [vars(t) for t in quick.tasks], "agent_options": quick.agent_options}
    header = {**header, "suite": suite, "suite_digest": Suite.from_dict(suite).digest}
    _fails(_write(tmp_path, header, []), "its suite 'quick' is not", "quick.toml: agents [")


def test_flops_halved_on_one_agents_lines(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    for r in runs:
        if r["spec"]["agent"] == "random":
            r["flops"] //= 2
    path = _write(tmp_path, lines[0], runs)
    assert max(row["p_trials"] for row in compute(path).rows) > 1  # what the leaderboard would show
    _fails(path, "flops is 32768, but the task's is 65536")
    # the bound on P itself, for a line whose flops slipped past: P can never exceed 1
    checks = _RunChecks()
    line = runs[_find(runs, "random", 0)]
    spec = RunSpec(**line["spec"])
    task, space = checks._space(spec.task, spec.preset)
    checks._bounds(line, spec, task, space, "here")
    assert any("random-relative score P reaches" in p and "(at most 1" in p for p in checks.problems)


def test_a_number_above_the_best_known_config(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    line = runs[_find(runs, "xgb-sa", 1)]
    line["gflops"][0] *= 100
    line["best_gflops"] = max(line["gflops"])
    _fails(_write(tmp_path, lines[0], runs), "gflops of trial 1 is")
    checks = _RunChecks()
    spec = RunSpec(**line["spec"])
    checks._bounds(line, spec, *checks._space(spec.task, spec.preset), "here")
    assert any("above the best known" in p for p in checks.problems)


@pytest.mark.parametrize("field,value,needle", [
    ("task_uri", "op://dense-v1/m32_n32_k16?weights=given&target=llvm", "task_uri is"),
    ("space_size", 65, "space_size is 65, but the task's is 200"),
    ("reference_gflops", 20.0, "reference_gflops 20.0 is not the data's 10.0"),
    ("data", {"backend": "replay", "datasets": []}, "the data answering it changed"),
    ("agent_info", {"checkpoint": "x.pt"}, "agent_info is {'checkpoint': 'x.pt'}, but the agent runs with {}"),
    ("configs", [[99, 0, 0]], "configs, gflops, errors and clock differ in length"),
    ("ended", "space", "ended is 'space'"),
    ("ended", "later", "field 'ended' is 'later', not one of budget, space, agent"),
    ("spec", {"agent": "random"}, "spec has the fields ['agent']"),
    ("gflops", "many", "field 'gflops' is 'many', not a list"),
    ("extra", 1, "has unknown field(s) extra"),
])
def test_every_identity_field_is_checked(env, tmp_path, field, value, needle):
    _, lines = env
    runs = _runs(lines)
    runs[_find(runs, "random", 0)][field] = value
    _fails(_write(tmp_path, lines[0], runs), needle)


def test_configs_outside_the_space_and_repeated(env, tmp_path):
    _, lines = env
    runs = _runs(lines)
    line = runs[_find(runs, "random", 0)]
    good = line["configs"][1]
    line["configs"][1] = [99] * len(good)
    _fails(_write(tmp_path, lines[0], runs), "of trial 2 is not a config of the space")
    line["configs"][1] = line["configs"][0]
    _fails(_write(tmp_path, lines[0], runs), "configs repeat")


# ----------------------------------------------------------------------------------------------- the reader


def test_a_corrupt_run_line_fails_validate_naming_file_and_line(env, tmp_path):
    _, lines = env
    runs: list[Any] = _runs(lines)
    runs[2] = lines[3][: len(lines[3]) // 2]  # torn in the middle of the file
    path = _write(tmp_path, lines[0], runs)
    _fails(path, f"{path}:4: invalid JSON")
    with pytest.warns(UserWarning, match=":4: skipping a torn line"):  # the leaderboard still reads the rest
        assert len(read_results(path)[1]) == 7
    runs[2] = "[1, 2]"  # JSON, but not a run: the reader names it too
    path = _write(tmp_path, lines[0], runs)
    _fails(path, f"{path}:4: a JSON list, not an object")
    with pytest.raises(ResultsError, match=r":4: a JSON list, not an object"):
        read_results(path)


def test_a_torn_last_line_fails_validate_until_the_resumed_bench_cuts_it_off(env, tmp_path):
    out, lines = env
    path = tmp_path / "torn.jsonl"
    path.write_text("\n".join(lines) + "\n" + lines[1][:40])
    with pytest.warns(UserWarning, match="skipping a torn line"):
        assert len(read_results(path)[1]) == 8
    _fails(path, f"{path}:10: ")
    (tmp_path / "tiny.toml").write_text(SUITE)
    with pytest.warns(UserWarning, match=":10: cut off a truncated last line"):
        results = ResultsFile.open(path, load_suite(tmp_path / "tiny.toml"))
    results.close()
    assert path.read_text() == "\n".join(lines) + "\n"  # the resumed bench has nothing left to run
    assert validate(path, rerun=0).ok


def test_one_writer_per_results_file_and_only_results_files(env, tmp_path):
    _, lines = env
    path = _write(tmp_path, lines[0], _runs(lines))
    (tmp_path / "tiny.toml").write_text(SUITE)
    suite = load_suite(tmp_path / "tiny.toml")
    with ResultsFile.open(path, suite), pytest.raises(ResultsError, match="being written by another writer"):
        ResultsFile.open(path, suite)  # a second bench on the same file stops before running anything
    log = tmp_path / "records.jsonl"
    log.write_text(DATA.read_text().splitlines()[0] + "\n")
    with pytest.raises(ResultsError, match="line 1 is not a tune_gym-bench-results header"):
        ResultsFile.open(log, suite)
    assert log.read_text() == DATA.read_text().splitlines()[0] + "\n"


@pytest.mark.parametrize("header,needle", [
    ({"format": "tune_gym-bench-results", "version": 1}, "the header has no 'suite' field"),
    ({"format": "tune_gym-bench-results", "version": 1, "suite": {"name": "x"}, "suite_digest": "0"},
     "field 'suite': suite lacks description"),
    ({"format": "tune_gym-bench-results", "version": 1, "suite": "quick", "suite_digest": "0"},
     "a suite is a JSON object, got str"),
    ({"format": "nope"}, "is not a tune_gym results file"),
])
def test_a_malformed_header_is_a_one_line_error(env, tmp_path, capsys, header, needle):
    _, lines = env
    path = _write(tmp_path, header, _runs(lines)[:1])
    with pytest.raises(ResultsError, match=needle):
        read_results(path)
    for argv in (["bench", "--suite", str(tmp_path / "s.toml"), "--out", str(path), "--no-leaderboard"],
                 ["validate", str(path)], ["leaderboard", str(path), "--out", str(tmp_path / "lb.md")]):
        (tmp_path / "s.toml").write_text(SUITE)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle.split("'")[0] in err and len(err.strip().splitlines()) == 1, err


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=30), st.integers().map(str), st.just("{}"), st.just("[]"),
                          st.just('{"key": "k", "spec": {}}'), st.just('{"suite_update": 1}')), max_size=4))
def test_the_reader_never_crashes_on_any_lines_after_a_header(env, tmp_path, extra):
    _, lines = env
    path = tmp_path / "fuzz.jsonl"
    path.write_text("\n".join([lines[0], *extra, lines[1]]) + "\n")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read_results(path)
    except ResultsError as err:
        assert str(path) in str(err) and "\n" not in str(err)
    try:
        report = validate(path, rerun=0)
    except ResultsError:
        return
    assert not report.ok  # one run of eight, whatever else: never confirmed


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), st.floats(allow_nan=True), st.text(max_size=8),
                    st.lists(st.integers(-1, 9), max_size=4), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                             max_size=2))


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["key", "spec", "task_uri", "space_size", "flops", "reference_gflops", "data",
                              "configs", "gflops", "errors", "clock", "best_gflops", "agent_info", "ended",
                              "spec.seed", "spec.budget", "spec.options", "spec.task"]),
       value=_VALUES)
def test_any_change_to_a_confirmed_field_fails_without_crashing(env, tmp_path, field, value):
    _, lines = env
    runs = _runs(lines)
    line = runs[_find(runs, "random", 1)]
    target, name = (line["spec"], field[5:]) if field.startswith("spec.") else (line, field)
    if target.get(name) == value and type(target.get(name)) is type(value):
        return  # no change
    target[name] = value
    report = validate(_write(tmp_path, lines[0], runs), rerun=0)
    assert not report.ok
    assert all("\n" not in p for p in report.problems)


def test_a_grown_suite_keeps_earlier_runs_as_stale_and_an_unknown_run_is_extra(env, tmp_path):
    out, lines = env
    path = tmp_path / "grown.jsonl"
    path.write_text("\n".join(lines) + "\n")
    smaller = tmp_path / "smaller.toml"
    smaller.write_text(SUITE.replace(', "test-validate-stops"', ""))
    run_suite(load_suite(smaller), path, progress=False)  # nothing to run: a suite_update line
    report = validate(path, rerun=0)
    assert report.ok and report.stale == 2 and report.checked == 6, report.problems
    runs = _runs(lines)
    alien = runs[_find(runs, "random", 0)]
    alien["spec"]["budget"] = 12
    alien["key"] = RunSpec(**alien["spec"]).key
    _fails(_write(tmp_path, lines[0], runs), "not a run of suite 'tiny-validate' (nor of an earlier version")


# ----------------------------------------------------------------------------------------------- the bench CLI


@pytest.mark.parametrize("seeds", ["0", "-2", "x", "1.5", "3"])
def test_bench_seeds_must_be_a_positive_count_within_the_suite(env, tmp_path, capsys, seeds):
    (tmp_path / "s.toml").write_text(SUITE)
    out = tmp_path / "out.jsonl"
    assert main(["bench", "--suite", str(tmp_path / "s.toml"), "--out", str(out), f"--seeds={seeds}",
                 "--no-leaderboard", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "seeds" in err, err
    assert not out.exists()


def test_bench_agents_must_be_agents_of_the_suite(env, tmp_path):
    with pytest.raises(ValueError, match=r"agents: \['grid'\] are not agents of suite tiny-validate"):
        run_suite(Suite.from_dict(json.loads(env[1][0])["suite"]), tmp_path / "x.jsonl", agents=["grid"])


# ----------------------------------------------------------------------------------------------- workers die


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[Any]) -> list[Any]:
    import psutil

    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_sigkill_of_a_parallel_bench_leaves_no_worker_behind(env, tmp_path, data_dir):
    """Workers (and multiprocessing's resource tracker) end with a killed ``bench --jobs 2``."""
    started = tmp_path / "started"
    started.mkdir()
    (tmp_path / "endless_runner.py").write_text(textwrap.dedent(f"""
        import os, time

        def run(spec):  # a run that never ends; says which worker runs it
            open(os.path.join({str(started)!r}, str(os.getpid())), "w").close()
            time.sleep(300)
    """))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import endless_runner
        from benchmarks.leaderboard.runner import run_suite
        from benchmarks.leaderboard.suite import Suite, SuiteTask

        suite = Suite("tiny-validate", "", ("random",), 2, 4, (SuiteTask({DENSE!r}, "compact", 16),), {{}})
        run_suite(suite, {str(tmp_path / 'out.jsonl')!r}, jobs=2, progress=False, runner=endless_runner.run)
    """)
    (tmp_path / "out.jsonl").write_text(env[1][0] + "\n")  # a header already: no host fingerprint to take
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "TUNE_GYM_DATA": str(data_dir)})
    kids: list[Any] = []
    try:
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(started.iterdir())) == 2, "the two workers did not start"
        kids = _descendants(proc.pid)
        assert len(kids) >= 2, kids
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 60  # generous: a loaded host may be slow to reap them
        while _alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(kids), [(p.pid, p.cmdline()) for p in _alive(kids)]
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _alive(kids):
            p.kill()


def test_the_watchdog_thread_ends_a_process_whose_parent_died(tmp_path):
    """Where there is no parent-death signal, a thread watching ``os.getppid()`` ends the worker."""
    pidfile = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import os, time
        pid = os.fork()
        if pid == 0:  # the worker: watch the parent without the kernel's help
            from benchmarks.leaderboard import runner
            runner._parent_death_signal = lambda: False
            runner.die_with_parent(os.getppid(), interval=0.05)
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    import psutil

    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = psutil.Process(int(pidfile.read_text()))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 60
        while _alive([child]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive([child])
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_replayed_number_a_last_bit_off_is_the_same_number(env, tmp_path):
    """Another CPU's last bit (the surrogate's SIMD sums) is tolerated; no bigger change is."""
    _, lines = env
    runs = _runs(lines)
    line = runs[_find(runs, "xgb-sa", 0)]
    line["gflops"] = [math.nextafter(g, math.inf) for g in line["gflops"]]
    line["best_gflops"] = max(line["gflops"])
    assert validate(_write(tmp_path, lines[0], runs), rerun=0).ok


# ----------------------------------------------------------------------------------------------- in parallel


@register("test-validate-dies", "kills the worker process that makes it (a worker that dies)")
class _Dies(Agent):
    def reset(self, space, task, seed=None) -> None:
        import multiprocessing

        if multiprocessing.parent_process() is not None:  # a worker of validate --jobs, never the test's process
            os.kill(os.getpid(), signal.SIGKILL)
        super().reset(space, task, seed)

    def propose(self, n: int) -> list[Any]:
        return self.fresh(n)


def _tampered_grown_file(tmp_path: Path, lines: list[str]) -> Path:
    """The bench's file after its suite dropped test-validate-stops (two stale runs, a ``suite_update``
    line), with problems of every kind: a torn line, a run missing, one repeated, one of no version
    of the suite, one whose FLOP count is wrong, one given another agent's trials, and one cut short
    that says its agent ended it (only its re-run tells)."""
    grown = tmp_path / "grown.jsonl"
    grown.write_text("\n".join(lines) + "\n")
    smaller = tmp_path / "smaller.toml"
    smaller.write_text(SUITE.replace(', "test-validate-stops"', ""))
    run_suite(load_suite(smaller), grown, progress=False)  # nothing to run: a suite_update line
    head, *objs = results_lines(grown)
    runs = [o for o in objs if "key" in o]
    update = next(o for o in objs if "suite_update" in o)
    runs[_find(runs, "random", 0)]["flops"] //= 2
    xgb = _find(runs, "xgb-sa", 1)
    runs[xgb] = _with_trials(runs[xgb], runs[_find(runs, "random", 0)])
    cut = _find(runs, "random", 1)
    runs[cut] = {**_halve(runs[cut]), "ended": "agent"}
    alien = copy.deepcopy(runs[_find(runs, "random", 0)])
    alien["spec"]["budget"] = 12
    alien["key"] = RunSpec(**alien["spec"]).key
    repeated = copy.deepcopy(runs[_find(runs, "test-validate-refuses", 1)])
    del runs[_find(runs, "test-validate-refuses", 0)]
    return _write(tmp_path, head, [*runs[:3], "{torn", *runs[3:], repeated, alien, update])


@pytest.mark.slow  # two worker processes start (each imports torch and the agents): 15-20 s on a busy host
def test_validate_in_worker_processes_gives_the_same_report(env, tmp_path):
    """jobs=2 checks and re-runs the runs in two worker processes: the same counts, re-runs (the
    run cut short, and one drawn) and problems in the same order as one process."""
    _, lines = env
    path = _tampered_grown_file(tmp_path, lines)
    serial, parallel = validate(path, rerun=2), validate(path, rerun=2, jobs=2, log=tmp_path / "log.jsonl")
    assert serial == parallel
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == parallel.rerun  # each answer as it came
    assert serial.stale == 2 and serial.checked == 5 and serial.rerun == 2
    for needle in (":5: invalid JSON", "flops is 32768", "is not the agent's", "repeats the run of line",
                   "not a run of suite", "1 of the 6 runs of suite", "re-run from its seed proposes other configs"):
        assert sum(needle in p for p in serial.problems) == 1, (needle, serial.problems)


@pytest.mark.slow  # two worker processes start (each imports torch and the agents): 15-20 s on a busy host
def test_a_worker_that_dies_is_an_error_naming_the_runs_it_held(env, tmp_path, capsys):
    _, lines = env
    header = json.loads(lines[0])
    header["suite"]["agents"] = [*header["suite"]["agents"], "test-validate-dies"]
    header["suite_digest"] = Suite.from_dict(header["suite"]).digest
    runs = _runs(lines)
    for seed in (0, 1):  # the runs of the new agent: random's trials, which its checks never reach
        line = copy.deepcopy(runs[_find(runs, "random", seed)])
        line["spec"]["agent"] = "test-validate-dies"
        line["key"] = RunSpec(**line["spec"]).key
        runs.append(line)
    path = _write(tmp_path, header, runs)
    assert main(["validate", str(path), "--rerun", "0", "--jobs", "2"]) == 2  # an error, not a hang
    err = capsys.readouterr().err
    assert re.search(r"a worker process died .* these \d+ runs, which are not checked: .*"
                     r"tampered.jsonl:\d+: run test-validate-dies\|", err), err
    assert len(err.strip().splitlines()) == 1, err
    with pytest.raises(ValueError, match="jobs: 0 is not a number of worker processes"):
        validate(path, jobs=0)
