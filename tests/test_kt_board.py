"""Kernel Tuner's strategies as leaderboard entries, and the external suite's section.

A tiny external-style suite over the toy kt space (``kt_toy_space``: files the tests write):
two tune_gym agents and two Kernel Tuner strategies x 2 seeds, through ``tune-gym bench``,
``tune-gym leaderboard`` and ``tune-gym validate``; tampered strategy lines must fail
validation. One slow test checks the shipped suite's budgets against the FAIR Benchmark Hub's
files in ../shared when they are there."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kt_toy_space import ToySpace, write_toy_space

from benchmarks.external.kernel_tuner_runs import STRATEGIES, run_strategy
from benchmarks.leaderboard import kt_entries
from benchmarks.leaderboard import metrics as M
from benchmarks.leaderboard.packed import line_text
from benchmarks.leaderboard.report import compute
from benchmarks.leaderboard.results import read_results, results_lines
from benchmarks.leaderboard.suite import SuiteError, load_suite
from benchmarks.leaderboard.validate import validate
from tune_gym.cli import main
from tune_gym.external.replay import kt_dataset
from tune_gym.tasks import Task

HUB = Path(__file__).resolve().parents[2] / "shared" / "external" / "benchmark_hub"
# kt:simulated_annealing ends its runs at 3/4 of max_fevals with its default temperatures (its own stopping rule)
ENTRIES = ["random", "ga", "kt:random_sample", "kt:genetic_algorithm", "kt:simulated_annealing",
           "kt:simulated_annealing+restarts"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToySpace, str]]:
    """The toy space's files on ``TUNE_GYM_DATA`` (worker processes find them there) and its task URI."""
    folder = tmp_path_factory.mktemp("toy_external")
    space = write_toy_space(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNE_GYM_DATA", str(folder))
        yield space, f"kt://toy/toy_cache?digest={_digest(space.cache)}&spec={_digest(space.problem)}&target=kt"


def _budget(uri: str) -> int:
    """The methodology's trials budget of the task, from its own data (the suite's rule)."""
    ds = kt_dataset(Task.parse(uri), "full")
    return M.random_budget(ds.mean_cost)


def _suite(folder: Path, uri: str, entries: list[str] = ENTRIES, extra: str = "") -> Path:
    path = folder / "tiny_external.toml"
    path.write_text(f'name = "tiny_external"\ndescription = "toy kt space"\nseeds = 2\nbatch = 4\n'
                    f"agents = {json.dumps(entries)}\n{extra}\n"
                    f'[[task]]\nid = "{uri}"\npreset = "full"\nbudget = {_budget(uri)}\n')
    return path


def _bench(folder: Path, uri: str, *args: str) -> tuple[Path, Path]:
    """``tune-gym bench`` of the tiny suite into ``folder``: its results and leaderboard."""
    out, board = folder / "tiny_external.jsonl", folder / "tiny_external.md"
    assert main(["bench", "--suite", str(_suite(folder, uri)), "--out", str(out), "--leaderboard", str(board),
                 "--quiet", *args]) == 0
    return out, board


@pytest.fixture(scope="module")
def bench(toy: tuple[ToySpace, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _bench(tmp_path_factory.mktemp("bench"), toy[1])


def _lines(path: Path) -> list[str]:
    """The results' lines as one JSON Lines file holds them (the bench packs its results)."""
    return [line_text(obj) for obj in results_lines(path)]


def _write(folder: Path, lines: list[str], name: str) -> Path:
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _kt_line(lines: list[str], entry: str, seed: int = 0) -> int:
    return next(i for i, text in enumerate(lines[1:], 1)
                if json.loads(text)["spec"]["agent"] == entry and json.loads(text)["spec"]["seed"] == seed)


def test_bench_runs_agents_and_strategies_as_ordinary_lines(toy, bench):
    space, uri = toy
    header, runs = read_results(bench[0])
    assert sorted((r["spec"]["agent"], r["spec"]["seed"]) for r in runs) == sorted(
        (a, s) for a in ENTRIES for s in range(2))
    budget = _budget(uri)
    for line in runs:
        assert line["task_uri"] == uri and line["ended"] in ("budget", "agent")
        assert len(line["configs"]) == len(line["clock"]) <= budget and np.all(np.diff(line["clock"]) > 0)
        assert len({tuple(c) for c in line["configs"]}) == len(line["configs"])  # repeats dropped
    plain = [r for r in runs if kt_entries.is_entry(r["spec"]["agent"]) and not kt_entries.restarts(r["spec"]["agent"])]
    for line in plain:  # a restarted run: test_a_restarted_strategy_continues_its_plain_run_to_the_budget
        strategy = line["spec"]["agent"].removeprefix("kt:")
        assert line["agent_info"]["strategy"] == strategy
        assert line["agent_info"]["strategy_options"]["max_fevals"] == budget
        trace = run_strategy(space.cache, strategy, seed=line["spec"]["seed"], max_fevals=budget,
                             problem=space.problem)
        task = Task.parse(uri)
        from tune_gym.space import KnobSpace

        knobs = KnobSpace.for_task(task, "full")
        assert line["configs"] == [list(knobs.from_dict(dict(zip(trace.parameters, e.config)))) for e in trace.trials]
        assert np.allclose(line["clock"], trace.clocks(), rtol=1e-12)
        times = np.array([1e6 / (g * 1e9) if g > 0 else math.nan for g in line["gflops"]])
        assert np.array_equal(np.isnan(times), np.isnan(trace.times()))
        assert line["ended"] == {"max_fevals": "budget", "strategy": "agent"}[trace.ended]


def test_a_restarted_strategy_continues_its_plain_run_to_the_budget(toy, bench):
    space, uri = toy
    budget = _budget(uri)
    runs = {(r["spec"]["agent"], r["spec"]["seed"]): r for r in read_results(bench[0])[1]}
    for seed in (0, 1):
        plain, restarted = runs[("kt:simulated_annealing", seed)], runs[("kt:simulated_annealing+restarts", seed)]
        assert plain["ended"] == "agent" and len(plain["configs"]) < budget  # it stops at 3/4 of max_fevals
        assert restarted["ended"] == "budget" and len(restarted["configs"]) == budget
        assert restarted["configs"][:len(plain["configs"])] == plain["configs"]  # the first run is the plain one
        assert len({tuple(c) for c in restarted["configs"]}) == budget  # a config met again is no trial
        assert restarted["clock"][:len(plain["clock"])] == plain["clock"] and np.all(np.diff(restarted["clock"]) > 0)
        assert "restarts" in restarted["agent_info"] and "restarts" not in plain["agent_info"]
        # the later runs are the strategy's own with seeds drawn from the run's seed, handed the budget left
        second = run_strategy(space.cache, "simulated_annealing", problem=space.problem,
                              seed=int(np.random.SeedSequence([seed, 1]).generate_state(1)[0]),
                              max_fevals=budget - len(plain["configs"]))
        task = Task.parse(uri)
        from tune_gym.space import KnobSpace

        knobs = KnobSpace.for_task(task, "full")
        seen = {tuple(c) for c in plain["configs"]}
        new = [c for c in (list(knobs.from_dict(dict(zip(second.parameters, e.config)))) for e in second.trials)
               if tuple(c) not in seen]
        assert restarted["configs"][len(plain["configs"]):][:len(new)] == new


def test_restart_entries_are_named_and_checked():
    assert kt_entries.strategy_of("kt:pso+restarts") == "pso" and kt_entries.restarts("kt:pso+restarts")
    assert not kt_entries.restarts("kt:pso") and not kt_entries.restarts("pso+restarts")
    with pytest.raises(ValueError, match="'kt:nope\\+restarts' is not a Kernel Tuner strategy entry.*'\\+restarts'"):
        kt_entries.strategy_of("kt:nope+restarts")
    info = kt_entries.entry_info("kt:pso+restarts", 50)
    assert info["strategy"] == "pso" and info["hyperparameters"] == "Kernel Tuner's defaults"
    assert kt_entries.entry_info("kt:pso", 50) == {k: v for k, v in info.items() if k != "restarts"}


@pytest.mark.slow
def test_worker_processes_give_the_same_lines_and_a_resumed_bench_adds_nothing(toy, bench, tmp_path):
    out, _ = _bench(tmp_path, toy[1], "--jobs", "2")  # workers find the files through TUNE_GYM_DATA
    key = lambda r: r["key"]
    fields = ("configs", "gflops", "errors", "clock", "ended", "agent_info")
    assert [{k: r[k] for k in fields} for r in sorted(read_results(out)[1], key=key)] == \
        [{k: r[k] for k in fields} for r in sorted(read_results(bench[0])[1], key=key)]
    lines = _lines(out)
    _bench(tmp_path, toy[1], "--jobs", "2")
    assert _lines(out) == lines


def test_the_section_shows_times_and_p_of_agents_and_strategies(bench):
    text = bench[1].read_text()
    assert text.startswith("## External spaces")
    assert "GFLOPS" not in text
    for entry in ENTRIES:
        source = "Kernel Tuner" if kt_entries.is_entry(entry) else "tune_gym"
        assert f"| {entry} | {source} |" in text
    assert ("| rank | entry | source | P (trials) | 95% band | > next (trials) | P (time) | 95% band | > next (time) "
            "| toy_cache | runs | agent s |" in text)
    assert "**> next**: whether the agent scores significantly higher" in text  # 2 seeds: too few pairs to test
    assert "| n/a (" in text
    png = bench[1].parent / "tiny_external" / "random_relative_score.png"
    assert png.is_file() and "(tiny_external/random_relative_score.png)" in text
    lb = compute(bench[0])
    for (entry, _), cell in lb.cells.items():  # each entry's P on both axes, per seed
        assert sorted(cell.seed_ids) == [0, 1] and len(cell.p_trials) == len(cell.p_time) == 2
        assert all(-10 < p <= 1 for p in cell.p_trials + cell.p_time), (entry, cell.p_trials, cell.p_time)
    # the table's band is the Student-t band of the per-seed P
    row = next(line for line in text.splitlines() if line.startswith("| ") and "| kt:random_sample |" in line)
    cell = lb.cells[("kt:random_sample", next(iter(lb.tasks)))]
    band = M.score_band(np.array(cell.p_trials))
    assert f"| {band['mean']:.3f} | [{band['lower']:.3f}, {band['upper']:.3f}] |" in row


def test_the_section_shows_p_per_task_and_the_share_of_the_budget_runs_used(bench):
    text = bench[1].read_text()
    lb = compute(bench[0])
    (tid,) = lb.tasks
    means = {entry: float(np.mean(lb.cells[(entry, tid)].p_trials)) for entry in ENTRIES}
    table = text.split("P on the trials axis per task")[1].split("\n\n")[1].splitlines()
    for entry, p in means.items():
        shown = f"{p:.2f}"
        shown = f"**{shown}**" if p == max(means.values()) else shown
        assert f"| {entry} | {shown} |" in table, (entry, table)
    # an entry is in the budget table when its runs end before the budget (its own stopping rule)
    budget = _budget(next(iter(lb.tasks.values())).uri)
    runs = read_results(bench[0])[1]
    share = {e: float(np.mean([len(r["configs"]) / budget for r in runs if r["spec"]["agent"] == e])) for e in ENTRIES}
    early = {e for e, v in share.items() if v < 0.995}
    assert early == {"kt:simulated_annealing"}, share
    used = text.split("trials evaluated per run as a share of the task's budget")[1].split("\n\n")[1]
    assert [line.split(" | ")[0].removeprefix("| ") for line in used.splitlines()[2:]] == sorted(early)
    assert f"| kt:simulated_annealing | {share['kt:simulated_annealing']:.2f} |" in used


def test_the_standard_leaderboard_includes_the_section_with_its_plot(bench, tmp_path):
    from benchmarks.leaderboard.external_report import included_section

    lines = included_section(bench[1], tmp_path / "sub" / "LEADERBOARD.md")
    image = next(line for line in lines if line.startswith("!["))
    target = (tmp_path / "sub" / image[image.index("](") + 2:-1]).resolve()
    assert target == (bench[1].parent / "tiny_external" / "random_relative_score.png").resolve()


def test_validate_confirms_the_file_and_reruns_the_strategies(bench):
    runs = 2 * len(ENTRIES)
    report = validate(bench[0], rerun=runs)
    assert report.ok, report.problems
    assert report.checked == runs and report.rerun == runs
    assert sum(k.startswith("kt:") for k in report.rerun_keys) == 2 * sum(map(kt_entries.is_entry, ENTRIES))


def test_a_tampered_strategy_line_is_caught(bench, tmp_path):
    lines = _lines(bench[0])
    i = _kt_line(lines, "kt:genetic_algorithm")
    run = json.loads(lines[i])

    def fails(edited: dict[str, Any], name: str, needle: str, rerun: int = 0) -> None:
        path = _write(tmp_path, [*lines[:i], json.dumps(edited), *lines[i + 1:]], name)
        report = validate(path, rerun=rerun)
        assert any(needle in p for p in report.problems), report.problems
        assert main(["validate", str(path), "--rerun", str(rerun)]) == 1

    # a better time than the file records
    better = json.loads(lines[i])
    better["gflops"][2] *= 1.01
    better["best_gflops"] = max(better["gflops"])
    fails(better, "number.jsonl", "gflops of trial 3")
    # the optimum moved to the front with its true numbers: replay agrees, the re-run does not
    best = int(np.argmax(run["gflops"]))
    order = [best, *(k for k in range(len(run["configs"])) if k != best)]
    swapped = dict(run, **{k: [run[k][j] for j in order] for k in ("configs", "gflops", "errors")})
    charges = np.diff([0.0, *run["clock"]])[order]
    swapped["clock"] = np.cumsum(charges).tolist()
    if best:
        # every run re-run: which runs a smaller sample draws hangs on the file's bytes, and the
        # clocks in them differ from host to host
        fails(swapped, "swapped.jsonl", "re-run from its seed proposes other configs from trial 1",
              rerun=len(lines))
    # other hyperparameters claimed
    claimed = json.loads(lines[i])
    claimed["agent_info"]["strategy_options"]["popsize"] = 50
    fails(claimed, "options.jsonl", "agent_info is")
    # cut to half its trials: a strategy that stopped early is always re-run
    half = json.loads(lines[i])
    n = len(half["configs"]) // 2
    half.update({k: half[k][:n] for k in ("configs", "gflops", "errors", "clock")}, ended="agent",
                best_gflops=max(half["gflops"][:n]))
    fails(half, "half.jsonl", "re-run from its seed proposes other configs")


def test_suite_entries_are_checked(toy, tmp_path):
    uri = toy[1]
    with pytest.raises(SuiteError, match="'kt:nope' is not a Kernel Tuner strategy entry; known: kt:"):
        load_suite(_suite(tmp_path, uri, ["random", "kt:nope"]))
    with pytest.raises(SuiteError, match="kt:pso takes no agent_options"):
        load_suite(_suite(tmp_path, uri, ["kt:pso"], '[agent_options]\n"kt:pso" = { popsize = 10 }\n'))
    suite = load_suite(_suite(tmp_path, uri, ["kt:pso", "*"]))
    assert suite.agents[0] == "kt:pso" and "random" in suite.agents and "*" not in suite.agents
    # on a task that is not a kt task, a strategy declines
    assert kt_entries.refusal(Task.parse("op://dense-v1/m32_n32_k32?weights=given&target=llvm"))
    assert kt_entries.refusal(Task.parse(uri)) is None


def test_missing_files_are_one_error_naming_the_variable_and_the_doi(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path / "empty"))
    path = tmp_path / "gone.toml"
    path.write_text('name = "gone"\nseeds = 1\nagents = ["random"]\n[[task]]\n'
                    'id = "kt://conv/A100?digest=0123456789abcdef&spec=fedcba9876543210&target=kt"\nbudget = 10\n')
    assert main(["bench", "--suite", str(path), "--out", str(tmp_path / "gone.jsonl"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "suite gone:" in err and "TUNE_GYM_DATA" in err and "10.5281/zenodo.15364124" in err
    assert not (tmp_path / "gone.jsonl").exists()


def test_the_shipped_external_suite():
    suite = load_suite("external")
    assert len(suite.tasks) == 12 and suite.seeds >= 25
    assert all(t.id.startswith("kt://") and t.preset == "full" for t in suite.tasks)
    plain = [kt_entries.strategy_of(a) for a in suite.agents if kt_entries.is_entry(a) and not kt_entries.restarts(a)]
    assert sorted(plain) == sorted(STRATEGIES)
    restarted = {kt_entries.strategy_of(a) for a in suite.agents if kt_entries.restarts(a)}
    assert restarted == {"genetic_algorithm", "adaptive_tabu_greywolf", "pso", "simulated_annealing",
                         "firefly_algorithm"}
    assert {"random", "xgb-sa", "ga", "contextual-sa"} <= set(suite.agents)


@pytest.mark.slow
@pytest.mark.skipif(not HUB.is_dir(), reason="the FAIR Benchmark Hub's files are not in ../shared")
def test_the_shipped_budgets_are_the_methodologys_on_the_hubs_files(monkeypatch):
    monkeypatch.setenv("TUNE_GYM_DATA", str(HUB))
    for t in load_suite("external").tasks:
        assert t.budget == _budget(t.id), t.id


def test_an_entry_with_runs_to_come_is_listed_unranked(bench, tmp_path):
    """An entry without every run the suite asks of it (here: a seed to come) follows the ranked ones."""
    lines = _lines(bench[0])
    one_seed = [lines[0]] + [t for t in lines[1:]
                             if (json.loads(t)["spec"]["agent"], json.loads(t)["spec"]["seed"]) != ("ga", 1)]
    board = tmp_path / "one_seed.md"
    assert main(["leaderboard", str(_write(tmp_path, one_seed, "one_seed.jsonl")), "--out", str(board)]) == 0
    rows = [line for line in board.read_text().splitlines() if line.startswith("| ")][2:]
    ga = next(i for i, line in enumerate(rows) if line.split(" | ")[1] == "ga")
    assert rows[ga].startswith("| - | ga |") and "(1 of 2 so far, on 1 of 1 tasks)" in rows[ga]
    assert all(not line.startswith("| - ") for line in rows[:ga])  # the ranked entries come first
    # the page opens with how far the results are through the suite
    text = board.read_text()
    done = len(one_seed) - 1
    assert f"**In progress: {done:,} of the suite's {done + 1:,} runs.**" in text
    assert "In progress" not in bench[1].read_text()  # the whole suite: no such paragraph
