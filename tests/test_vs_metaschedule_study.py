"""The study over tasks, seeds and hosts (benchmarks/vs_metaschedule_study.py): what it runs, in
which order, what it skips on a second run, and the table it reads off the folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.vs_metaschedule import TUNE_TIR
from benchmarks.vs_metaschedule_study import collect, main, plan, retimed_file, run_dir, run_study, table

TASKS = ("resnet18:1", "bert_base:1")


def _summary(folder: Path, cpu: str, seed: int, curves: dict[str, list[float]], seconds: float = 10.0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    runs = {name: {"best_so_far": curve, "seconds": seconds, "trials": len(curve)} for name, curve in curves.items()}
    (folder / "summary.json").write_text(json.dumps({"task": f"task-of-{folder.name}", "reference": None, "seed": seed,
                                                     "host": {"llvm_cpu": cpu}, "runs": runs}))


def _retimed(path: Path, rows: list[dict], top: int = 8, rounds: int = 30) -> None:
    path.write_text(json.dumps({"host_id": "h", "rounds": rounds, "top": top, "rows": rows}))


def test_the_plan_skips_what_is_done_and_re_times_a_seed_after_its_comparisons(tmp_path):
    assert plan(tmp_path, "cpu", TASKS, [1, 2], 8) == [
        ("compare", ("resnet18:1", 1)), ("compare", ("bert_base:1", 1)), ("retime", 1),
        ("compare", ("resnet18:1", 2)), ("compare", ("bert_base:1", 2)), ("retime", 2)]
    _summary(run_dir(tmp_path, "cpu", "resnet18:1", 1), "cpu", 1, {TUNE_TIR: [1.0]})
    _retimed(retimed_file(tmp_path, "cpu", 2, 8), [])
    assert plan(tmp_path, "cpu", TASKS, [1, 2], 8) == [
        ("compare", ("bert_base:1", 1)), ("retime", 1), ("compare", ("resnet18:1", 2)), ("compare", ("bert_base:1", 2))]
    # another host's folders are its own
    assert len(plan(tmp_path, "other", TASKS, [1], 8)) == 3


def test_the_study_runs_each_step_as_a_process_and_a_second_run_resumes(tmp_path):
    calls: list[list[str]] = []
    failed: list[str] = []

    def call(cmd: list[str]) -> int:  # stands in for the comparison and re-timing processes
        calls.append(cmd)
        args = cmd[3:]
        if "--out" in args:
            out = Path(args[args.index("--out") + 1])
            _summary(out, "cpu", int(args[args.index("--seed") + 1]), {TUNE_TIR: [1.0], "meta-bo": [2.0]})
            return 0
        if not failed:  # the first re-timing fails
            failed.append(args[0])
            return 3
        _retimed(Path(args[args.index("--retime-out") + 1]), [])
        return 0

    with pytest.raises(SystemExit, match=r"retime 1: exited 3; run the study again to resume"):
        run_study(tmp_path, "cpu", TASKS, [1], ["meta-bo", "xgb-sa"], [128, 512], 8, 30, call=call)
    first = calls[0]
    assert first[1:3] == ["-m", "benchmarks.vs_metaschedule"]
    assert first[3:] == ["--task", "resnet18:1", "--trials", "128", "512", "--seed", "1", "--agents", "meta-bo",
                         "xgb-sa", "--out", str(run_dir(tmp_path, "cpu", "resnet18:1", 1))]
    assert calls[2][3:] == ["--retime", str(run_dir(tmp_path, "cpu", "resnet18:1", 1)),
                            str(run_dir(tmp_path, "cpu", "bert_base:1", 1)), "--rounds", "30", "--top", "8",
                            "--retime-out", str(retimed_file(tmp_path, "cpu", 1, 8))]
    # run again: the two comparisons are kept, only the re-timing is done
    calls.clear()
    run_study(tmp_path, "cpu", TASKS, [1], ["meta-bo"], [128, 512], 8, 30, call=call)
    assert [c[3] for c in calls] == ["--retime"]
    assert retimed_file(tmp_path, "cpu", 1, 8).exists()


def test_the_table_sets_the_best_agent_against_tune_tir_per_budget_and_re_timed(tmp_path):
    ramp = lambda lo, hi: [lo] * 128 + [hi] * 384  # best-so-far: lo over the first 128 trials, hi from then on
    _summary(tmp_path / "zen" / "conv-s0", "zen", 0,
             {"meta-bo": ramp(120.0, 130.0), "xgb-sa": ramp(90.0, 150.0), "metaschedule": ramp(200.0, 400.0),
              TUNE_TIR: ramp(100.0, 125.0)})
    _summary(tmp_path / "zen" / "dense-s1", "zen", 1, {"meta-bo": ramp(50.0, 60.0), TUNE_TIR: ramp(40.0, 50.0)})
    _summary(tmp_path / "zen" / "only-ms-s0", "zen", 0, {"metaschedule": ramp(1.0, 2.0), TUNE_TIR: ramp(1.0, 2.0)})
    # kernels timed on one thread: listed, not counted
    _summary(tmp_path / "fidelity" / "conv-s0", "zen", 0, {"xgb-sa": ramp(1.0, 1.0), TUNE_TIR: ramp(2.0, 2.0)})
    # two re-timings of conv-s0: the one with candidates (top 8) is taken over the single-kernel one
    _retimed(tmp_path / "zen" / "retimed.json", [
        {"run": "conv-s0", "tuner": "meta-bo", "retimed": 10.0}, {"run": "conv-s0", "tuner": TUNE_TIR, "retimed": 1.0}],
        top=1)
    _retimed(tmp_path / "zen" / "retimed-s0-top8.json", [
        {"run": "conv-s0", "tuner": "meta-bo", "retimed": 100.0, "confirmed": 110.0},
        {"run": "conv-s0", "tuner": "xgb-sa", "retimed": 105.0, "confirmed": 105.0},
        {"run": "conv-s0", "tuner": "metaschedule", "retimed": 500.0, "confirmed": 500.0},
        {"run": "conv-s0", "tuner": TUNE_TIR, "retimed": 95.0, "confirmed": 100.0}])
    rows = {r["folder"]: r for r in collect(tmp_path)}
    assert set(rows) == {"zen/conv-s0", "zen/dense-s1", "fidelity/conv-s0"}  # no tune_gym agent in only-ms-s0
    conv = rows["zen/conv-s0"]
    assert conv["first"] == {"agent": "meta-bo", "gflops": 120.0, "tune_tir": 100.0}
    assert conv["last"] == {"agent": "xgb-sa", "gflops": 150.0, "tune_tir": 125.0}
    assert conv["retimed"] == {"agent": "meta-bo", "gflops": 110.0, "tune_tir": 100.0, "confirmed": True}
    assert rows["zen/dense-s1"]["retimed"] is None
    text = table(list(rows.values()))
    assert ("| 120.00 / 150.00 (`meta-bo` / `xgb-sa`) | 100.00 / 125.00 | 1.20 / 1.20 | 1.10 (confirmed, `meta-bo`) |"
            in text)
    assert "| zen | `fidelity/conv-s0` (one thread) | 0 |" in text
    assert "| 1.25 / 1.20 | not re-timed |" in text
    assert "zen: 2 of 2 runs >= 1.15x at 128 trials; 2 of 2 runs >= 1.05x at 512; 1 of 1 runs >= 1.05x re-timed" in text
    assert main(["--table", "--root", str(tmp_path)]) == 0


def test_only_sets_the_named_agents_against_tune_tir_in_the_runs_that_have_them(tmp_path, capsys):
    ramp = lambda lo, hi: [lo] * 128 + [hi] * 384
    _summary(tmp_path / "zen" / "conv-s0", "zen", 0,
             {"meta-bo": ramp(120.0, 130.0), "meta-bo-evo": ramp(110.0, 140.0), TUNE_TIR: ramp(100.0, 125.0)})
    _summary(tmp_path / "zen" / "dense-s0", "zen", 0, {"meta-bo": ramp(50.0, 60.0), TUNE_TIR: ramp(40.0, 50.0)})
    _retimed(tmp_path / "zen" / "retimed-s0-top8.json", [
        {"run": "conv-s0", "tuner": "meta-bo", "retimed": 100.0, "confirmed": 130.0},
        {"run": "conv-s0", "tuner": "meta-bo-evo", "retimed": 105.0, "confirmed": 105.0},
        {"run": "conv-s0", "tuner": TUNE_TIR, "retimed": 95.0, "confirmed": 100.0}])
    rows = collect(tmp_path, only=["meta-bo-evo"])
    assert [r["folder"] for r in rows] == ["zen/conv-s0"]  # dense-s0 has no meta-bo-evo run
    assert rows[0]["first"] == {"agent": "meta-bo-evo", "gflops": 110.0, "tune_tir": 100.0}
    assert rows[0]["retimed"]["agent"] == "meta-bo-evo" and rows[0]["retimed"]["gflops"] == 105.0
    assert set(rows[0]["s_per_trial"]) == {"meta-bo-evo", TUNE_TIR}
    assert len(collect(tmp_path, only=["meta-bo"])) == 2
    assert main(["--table", "--root", str(tmp_path), "--only", "meta-bo-evo"]) == 0
    assert "(`meta-bo-evo`)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--only", "meta-bo-evo"])  # --only without --table is an error
