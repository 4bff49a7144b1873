"""The comparison with MetaSchedule's own tuner: what a run keeps of MetaSchedule's records, and
re-timing each tuner's fastest kernels (``--retime --top``), on a tiny dense task, live."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import vs_metaschedule as vs
from tune_gym.records import load_records
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task
from tune_gym.tvm_support import ms

TASK = Task.make("dense", m=32, n=32, k=32, weights="packed")


def _commit(work, space, records):
    """A MetaSchedule JSON database in ``work`` holding those of ``records`` that schedule, in
    order, as tune_tir writes one: the schedule's trace, its timings (a failed one: MetaSchedule's
    1e10 s). Returns the records committed."""
    m = ms()
    db = m.database.JSONDatabase(work_dir=str(work))
    workload = db.commit_workload(space.mod)
    committed = []
    for rec in records:
        sch, _ = space.apply(rec.config)
        if sch is None:
            continue
        committed.append(rec)
        costs = [float(c) for c in rec.result.costs] if rec.result.ok else [1e10]
        db.commit_tuning_record(m.database.TuningRecord(
            sch.trace, workload, run_secs=costs, target=space.target,
            args_info=m.arg_info.ArgInfo.from_prim_func(space.mod["main"])))
    return committed


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, live_backend):
    """A finished run folder: a random search's log as an agent's, and the same configs committed
    as MetaSchedule's database, of which the run keeps its 3 fastest."""
    from agents.driver import tune

    out = tmp_path_factory.mktemp("run")
    summary = tune(TASK, agent="random", trials=8, batch=4, log=out / "random.jsonl", seed=0, preset="full",
                   progress=False, reward_norm="none", backend=live_backend)
    space = KnobSpace.for_task(TASK, "full")
    work = tmp_path_factory.mktemp("ms")
    records = _commit(work, space, load_records(out / "random.jsonl"))
    assert sum(r.result.ok for r in records) >= 3
    gflops = vs.record_gflops(TASK, work)
    vs.keep_best(work, gflops, out / vs.BEST_DB, top=3)
    runs = {"random": {"best_so_far": summary.run.best_so_far().tolist()},
            vs.TUNE_TIR: {"best_so_far": np.maximum.accumulate(gflops).tolist()}}
    (out / "summary.json").write_text(json.dumps({"task": TASK.uri, "runs": runs}))
    return out, records, gflops


def test_a_run_keeps_metaschedules_fastest_records_fastest_first(finished_run):
    out, records, gflops = finished_run
    assert gflops == pytest.approx([r.result.gflops if r.result.ok else 0.0 for r in records], rel=1e-9)
    kept = vs.record_gflops(TASK, out / vs.BEST_DB)
    assert kept == pytest.approx(sorted(gflops, reverse=True)[:3], rel=1e-9)


def test_keep_best_refuses_timings_that_do_not_match_the_records(finished_run, tmp_path):
    out, _, gflops = finished_run
    with pytest.raises(ValueError, match="3 records against 2 timings"):
        vs.keep_best(out / vs.BEST_DB, gflops[:2], tmp_path)


def test_candidates_are_each_tuners_fastest_distinct_kernels(finished_run):
    out, _, gflops = finished_run
    task, found = vs.candidates(out, top=2)
    assert task.uri == TASK.uri and set(found) == {"random", vs.TUNE_TIR}
    logged = load_records(out / "random.jsonl")
    fastest = sorted({r.config: r.result.gflops for r in logged if r.result.ok}.values(), reverse=True)
    assert [g for g, _ in found["random"]] == pytest.approx(fastest[:2], rel=1e-9)
    assert [g for g, _ in found[vs.TUNE_TIR]] == pytest.approx(sorted(gflops, reverse=True)[:2], rel=1e-9)
    assert all(sch is not None for picked in found.values() for _, sch in picked)
    _, one = vs.candidates(out)
    assert [len(p) for p in one.values()] == [1, 1]


def test_retime_confirms_the_best_median_of_each_tuners_candidates(finished_run, live_backend, capsys):
    out, _, _ = finished_run
    # MetaSchedule's run kept 3 records: every tuner gets 3 candidates
    rows = vs.retime([out], rounds=2, seed=0, top=5, backend=live_backend)
    assert "3 candidate(s) per tuner, not 5" in capsys.readouterr().out
    assert [r["tuner"] for r in rows] == ["random", vs.TUNE_TIR]
    for row in rows:
        medians = [c["retimed"] for c in row["candidates"]]
        assert len(medians) == 3
        assert all(len(c["rounds"]) == 2 and min(c["rounds"]) > 0 for c in row["candidates"])
        assert row["confirmed"] == max(medians) and row["confirmed_rank"] == int(np.argmax(medians))
        assert row["retimed"] == medians[0] == float(np.median(row["rounds"]))


def test_retime_never_overwrites_earlier_figures(finished_run, capsys):
    out, _, _ = finished_run
    earlier = out.parent / "retimed-top8.json"
    earlier.write_text("{}")
    with pytest.raises(SystemExit):
        vs.main(["--retime", str(out), "--top", "8"])
    assert f"{earlier} exists" in capsys.readouterr().err and earlier.read_text() == "{}"
    with pytest.raises(SystemExit):
        vs.main(["--retime", str(out), "--top", "0"])
    assert "--top and --rounds must be >= 1, got 0 and 5" in capsys.readouterr().err


def test_in_space_maps_metaschedules_records_back_to_the_configs_that_schedule_them(finished_run):
    out, records, gflops = finished_run
    rows = vs.in_space(out)
    ran = [r for r in records if r.result.ok]
    assert [row["gflops"] for row in rows] == pytest.approx(sorted(gflops, reverse=True)[:3], rel=1e-9)
    for row in rows:  # the kept records were committed from these configs' own schedules
        committed = min(ran, key=lambda r: abs(r.result.gflops - row["gflops"]))
        assert row["same_program"] and tuple(row["config"]) == tuple(committed.config)
    with pytest.raises(FileNotFoundError, match="MetaSchedule's records were not kept there"):
        vs.in_space(out / vs.BEST_DB)


def test_a_killed_comparison_resumes_at_the_next_tuner_and_keeps_the_first_reference(tmp_path, monkeypatch):
    """A comparison killed during its second tuner keeps the first tuner's run and the reference
    measured before tuning; run again, it tunes only what is left. The tuners are stand-ins that
    record their calls: what is under test is what the folder keeps and takes over."""
    from tune_gym.measure import reference as ref

    calls: list[str] = []
    killed = {"b"}

    def agent_run(task, agent, trials, seed, log):
        calls.append(agent)
        if agent in killed:
            raise KeyboardInterrupt  # the session ends mid-run
        return {"best_so_far": [1.0, float(len(calls))], "seconds": 2.0, "trials": 2}

    def metaschedule_run(task, trials, seed, work_dir, keep=None):
        calls.append(vs.TUNE_TIR)
        return {"best_so_far": [0.5, 1.5], "seconds": 4.0, "trials": 2}

    def measure_reference(task):
        calls.append("reference")
        return ref.Reference(gflops=2.0, method="stand-in", samples=(2.0,), host="h")

    monkeypatch.setattr(vs, "agent_run", agent_run)
    monkeypatch.setattr(vs, "metaschedule_run", metaschedule_run)
    monkeypatch.setattr(ref, "measure_reference", measure_reference)
    out = tmp_path / "run"
    argv = ["--task", TASK.uri, "--trials", "1", "2", "--seed", "3", "--agents", "a", "b", "--out", str(out)]
    with pytest.raises(KeyboardInterrupt):
        vs.main(argv)
    kept = json.loads((out / vs.PARTIAL).read_text())
    assert calls == ["reference", "a", "b"] and list(kept["runs"]) == ["a"] and kept["seed"] == 3
    assert not (out / "summary.json").exists()

    killed.clear()
    assert vs.main(argv) == 0
    assert calls == ["reference", "a", "b", "b", vs.TUNE_TIR]  # a is taken over; nothing measured twice
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["runs"]) == ["a", "b", vs.TUNE_TIR] and summary["runs"]["a"]["best_so_far"] == [1.0, 2.0]
    assert summary["reference"]["gflops"] == 2.0 and not (out / vs.PARTIAL).exists()
    assert "| b | 1.00 | 4.00 | 2.00 |" in (out / "summary.md").read_text()  # x PyTorch from the kept reference


def test_progress_of_another_comparison_is_refused_naming_the_field(tmp_path):
    vs.Progress(tmp_path, TASK.uri, seed=0, budget=512).save()
    with pytest.raises(ValueError, match=r"runs.partial.json: kept runs are for seed 0, not 1"):
        vs.Progress(tmp_path, TASK.uri, seed=1, budget=512)
    with pytest.raises(ValueError, match=r"kept runs are for budget 512, not 128"):
        vs.Progress(tmp_path, TASK.uri, seed=0, budget=128)
    with pytest.raises(ValueError, match=r"kept runs are for host '[0-9a-f]+', not 'another'"):
        vs.Progress(tmp_path, TASK.uri, seed=0, budget=512, host="another")  # not resumed on another machine
    (tmp_path / vs.PARTIAL).write_text("{")
    with pytest.raises(ValueError, match="not a comparison's progress"):
        vs.Progress(tmp_path, TASK.uri, seed=0, budget=512)
