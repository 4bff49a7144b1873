"""References that can be trusted: the quiet checks of measure_reference, the reference audit,
and how the env and the leaderboard treat a suspect reference. Every machine here is scripted
(virtual clock and counters): nothing is timed."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from tune_gym.datasets import Dataset, load_dataset
from tune_gym.datasets.reference_audit import (
    AUDIT_FILE,
    Found,
    audit,
    audited,
    find_references,
    read_audit,
    remeasure,
    suspect_reason,
    write_audit,
)
from tune_gym.errors import RecordError
from tune_gym.measure.quiet import BusyHostError, CpuTimes, Machine, PeakCache, QuietPolicy, Timing, other_cores
from tune_gym.measure.reference import Reference, measure_reference, reference_at, reference_threads
from tune_gym.records import Record, load_records
from tune_gym.tasks.task import Task

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"
BERT_DENSE = "op://dense-v1/m128_n768_k768?target=llvm&cores=2"  # 151 MFLOP


class ScriptedMachine(Machine):
    """A machine on a virtual clock: other processes take ``others`` cores all the time (or
    ``others[i]`` during attempt i), the op runs at ``op[threads]`` GFLOPS and the calibration
    matmul at ``calibration[threads]`` (before, after)."""

    def __init__(self, tmp_path: Path, others: float | list[float] = 0.0, op: dict[int, float] | None = None,
                 calibration: dict[int, tuple[float, float]] | None = None, host: str = "scripted-host") -> None:
        super().__init__(PeakCache(tmp_path / "peaks.json"))
        self.others = others if isinstance(others, list) else [others] * 100
        self.op = op or {2: 150.0, 1: 80.0}
        self.calibration = calibration or {2: (300.0, 299.0), 1: (160.0, 159.0)}
        self._host = host
        self.clock = self.busy = self.own = 0.0
        self.attempt = 0
        self.sleeps: list[float] = []
        self.timed: list[int] = []

    def host(self) -> str:
        return self._host

    def _advance(self, seconds: float, own_cores: float) -> None:
        self.clock += seconds
        self.own += own_cores * seconds
        self.busy += (own_cores + self.others[min(self.attempt, len(self.others) - 1)]) * seconds

    def cpu_times(self) -> CpuTimes:
        return CpuTimes(self.busy, self.own, self.clock)

    def load_average(self) -> float:
        return 0.02 + self.others[min(self.attempt, len(self.others) - 1)]

    def sleep(self, seconds: float) -> None:
        if seconds >= 30:  # the wait between attempts
            self.attempt += 1
        self.sleeps.append(seconds)
        self._advance(seconds, 0.0)

    def time_op(self, uri: str, threads: int, repeats: int, warmup: int, min_seconds: float,
                timeout: float) -> Timing:
        self.timed.append(threads)
        self._advance(3.0, float(threads))  # the timing process keeps its threads busy for 3 s
        most = max(self.op)  # a host with more cores than scripted runs as the largest count
        return Timing((self.op.get(threads, self.op[most]),) * repeats,
                      self.calibration.get(threads, self.calibration[max(self.calibration)]))


# ---------------------------------------------------------------------------------- quiet checks
def test_other_cores_subtracts_own_cpu_time():
    assert other_cores(CpuTimes(10.0, 4.0, 100.0), CpuTimes(16.0, 8.0, 104.0)) == pytest.approx(0.5)
    assert other_cores(CpuTimes(0, 0, 5.0), CpuTimes(1, 0, 5.0)) == 0.0  # no time passed: no figure


def test_a_busy_host_is_refused_after_the_retries_naming_the_cause(tmp_path):
    machine = ScriptedMachine(tmp_path, others=1.0)
    with pytest.raises(BusyHostError) as err:
        measure_reference(Task.parse(BERT_DENSE), machine=machine)
    message = str(err.value)
    assert "busy in all 4 attempts (30 s apart)" in message
    assert "before the timing other processes used 1.00 cores" in message and "limit 0.1" in message
    assert machine.sleeps.count(30.0) == 3 and machine.timed == []  # never timed on a busy host


def test_busy_during_the_timing_is_retried_and_a_quiet_attempt_recorded(tmp_path):
    class BusyDuringFirstTiming(ScriptedMachine):
        def time_op(self, *args, **kwargs):  # another job starts with the first timing, then stops
            self.others[0] = 0.6 if self.attempt == 0 else 0.0
            return super().time_op(*args, **kwargs)

    machine = BusyDuringFirstTiming(tmp_path, others=[0.0, 0.0])
    ref = measure_reference(Task.parse(BERT_DENSE), machine=machine)
    assert ref.conditions["attempts"] == 2 and machine.timed == [2, 1, 2, 1]
    policy = QuietPolicy(retries=0)
    machine = BusyDuringFirstTiming(tmp_path, others=[0.0])
    with pytest.raises(BusyHostError, match=r"during the timing other processes used 0\.\d+ cores"):
        measure_reference(Task.parse(BERT_DENSE), machine=machine, policy=policy)


def test_a_quiet_host_records_both_thread_counts_and_the_conditions(tmp_path):
    machine = ScriptedMachine(tmp_path)
    ref = measure_reference(Task.parse(BERT_DENSE), machine=machine)
    assert (ref.gflops, ref.threads, ref.single_thread_gflops) == (150.0, 2, 80.0)
    assert ref.samples == (150.0,) * 7 and ref.single_thread_samples == (80.0,) * 7
    assert ref.host == "scripted-host" and ref.flags == () and ref.suspect == ""
    assert "2 threads and 1 thread" in ref.method and "quiet-checked" in ref.method
    c = ref.conditions
    assert c["attempts"] == 1 and c["others_cores_before"] == 0 and c["others_cores_during"] == 0
    assert c["calibration_gflops_2t"] == 299.0 and c["host_peak_gflops_2t"] == 300.0
    assert machine.peaks.best("scripted-host", "cpu:2") == 300.0  # the host's best calibration is kept
    assert machine.peaks.best("scripted-host", "cpu:1") == 160.0
    assert Reference.from_json(json.loads(json.dumps(ref.to_json()))) == ref  # it travels as JSON


def test_one_core_target_is_timed_once(tmp_path):
    machine = ScriptedMachine(tmp_path, op={1: 80.0})
    ref = measure_reference(Task.parse(BERT_DENSE.replace("cores=2", "cores=1")), machine=machine)
    assert machine.timed == [1] and ref.threads == 1 and ref.single_thread_gflops == ref.gflops == 80.0


def test_a_slow_calibration_against_the_hosts_best_is_busy(tmp_path):
    machine = ScriptedMachine(tmp_path, calibration={2: (150.0, 148.0), 1: (160.0, 160.0)})
    machine.peaks.update("scripted-host", "cpu:2", 300.0)  # an earlier quiet run's best
    with pytest.raises(BusyHostError, match=r"calibration matmul at 2 thread\(s\) ran at 148\.0 GFLOPS, below 70% "
                                            r"of this host's best 300\.0"):
        measure_reference(Task.parse(BERT_DENSE), machine=machine, policy=QuietPolicy(retries=1))
    # the first run on a host compares the attempt's two calibrations with each other
    machine = ScriptedMachine(tmp_path / "fresh", calibration={2: (300.0, 120.0), 1: (160.0, 160.0)})
    with pytest.raises(BusyHostError, match=r"ran at 120\.0 GFLOPS, below 70% of this host's best 300\.0"):
        measure_reference(Task.parse(BERT_DENSE), machine=machine, policy=QuietPolicy(retries=0))


def test_a_value_far_below_the_hosts_peak_is_flagged_not_refused(tmp_path):
    machine = ScriptedMachine(tmp_path, op={2: 6.0, 1: 9.0})
    with pytest.warns(UserWarning, match=r"below 5% of this host's calibration matmul peak"):
        ref = measure_reference(Task.parse(BERT_DENSE), machine=machine)
    assert ref.gflops == 6.0 and len(ref.flags) == 1 and "at 2 thread(s) 6.00 GFLOPS" in ref.flags[0]
    small = ScriptedMachine(tmp_path / "small", op={2: 0.5, 1: 0.4})  # 65 kFLOP: overhead may explain it
    assert measure_reference(Task.parse(DENSE), machine=small).flags == ()


def test_bad_policy_and_peak_cache_are_named(tmp_path):
    with pytest.raises(ValueError, match="QuietPolicy min_calibration 1.5 is not a number in"):
        QuietPolicy(min_calibration=1.5)
    with pytest.raises(ValueError, match="QuietPolicy retries -1 is not an integer >= 0"):
        QuietPolicy(retries=-1)
    bad = tmp_path / "peaks.json"
    bad.write_text('{"h": {"cpu:2": "fast"}}')
    with pytest.raises(ValueError, match=rf"host peak cache {bad} is not .*; delete it"):
        PeakCache(bad).best("h", "cpu:2")


# ---------------------------------------------------------------------------------- Reference JSON
def test_old_references_read_and_write_back_unchanged_and_new_fields_are_checked():
    old = {"gflops": 6.18, "method": "torch 2.13.0+cpu cpu, 2 threads, separate process", "samples": [6.1, 6.2],
           "host": "2d10b741c5ee"}
    ref = Reference.from_json(old)
    assert ref.to_json() == old and reference_threads(ref) == 2 and ref.threads == 0
    assert reference_threads(Reference(51.2, "simulated VTA peak")) is None
    for bad, what in (({"threads": True}, "threads"), ({"single_thread_gflops": -1}, "single_thread_gflops"),
                      ({"conditions": {"x": "busy"}}, "conditions"), ({"flags": "low"}, "flags")):
        with pytest.raises(ValueError, match=what):
            Reference.from_json({**old, **bad})


def test_records_accept_the_new_reference_fields_and_refuse_unknown_ones():
    line = json.loads(DATA.read_text().splitlines()[0])
    ref = Reference(150.0, "m", (150.0,), "h", 2, 80.0, (80.0,), {"attempts": 1}, ("low",), "")
    rec = Record.from_json({**line, "reference": ref.to_json()})
    assert rec.reference == ref
    with pytest.raises(RecordError, match=r"reference has unknown field\(s\) 'speed'"):
        Record.from_json({**line, "reference": {**ref.to_json(), "speed": 1}})


def test_committed_datasets_and_record_files_still_load():
    for name in ("bert_base_0_compact", "resnet18_7_compact", "pgs/conv2d_nchw_2111b9f9_full"):
        ds = load_dataset(REPO / "benchmarks" / "datasets" / f"{name}.parquet")  # checksum and seal verified
        footer_ref = ds.meta["references"][ds.host[0]]
        assert Reference.from_json(footer_ref).to_json() == footer_ref
        assert bool(ds.reference.suspect) == (name != "resnet18_7_compact")  # the committed audit's verdicts
    records = load_records(REPO / "benchmarks" / "results" / "vs_metaschedule" / "xgb-sa.jsonl", check_space=False)
    assert records[-1].reference is not None and records[-1].reference.gflops > 100


# ---------------------------------------------------------------------------------- the audit
def _found(gflops: float, flops: int = 150_000_000, host: str = "a", task: str = "op://x", where: str = "f"):
    return Found(task, flops, Reference(gflops, "torch, 2 threads", (gflops,), host), where)


def test_the_rule():
    assert "below the floor of 10 GFLOPS on an op of 150 MFLOP" in suspect_reason(_found(6.2), [])
    assert suspect_reason(_found(6.2, flops=1_000_000), []) == ""  # a short call: overhead may explain it
    good, low = _found(100.0, flops=1_000_000), _found(40.0, flops=1_000_000, where="g")
    assert "2.5x below the same op's 100.00 GFLOPS at 2 thread(s) on this host (f" in suspect_reason(low, [good, low])
    assert suspect_reason(good, [good, low]) == ""
    other = _found(100.0, host="b")
    assert suspect_reason(_found(40.0), [other]) == ""  # another host: 2.5x is not beyond hardware
    assert "on host b" in suspect_reason(_found(11.0), [other])  # 9x is
    assert suspect_reason(_found(11.0, task="op://y"), [other]) == ""  # another op proves nothing


@pytest.fixture()
def two_datasets(tmp_path):
    """Two datasets of the tiny dense space on one host: one with a sound reference, one with
    a reference 10x below it."""
    folder = tmp_path / "data"
    folder.mkdir()
    records = [r for r in load_records(DATA) if r.task == DENSE]
    for name, gflops in (("good", 100.0), ("low", 10.0)):
        ds = Dataset.from_records(records, mode="exhaustive")
        ds.meta["references"] = {ds.host[0]: Reference(gflops, "torch, 2 threads", (gflops,), ds.host[0]).to_json()}
        ds.reference_gflops[:] = gflops
        ds.save(folder / f"{name}_compact.parquet")
    return folder


def test_the_audit_marks_the_low_reference_and_leaves_the_good_one(two_datasets, monkeypatch):
    entries = audit(find_references([two_datasets], root=two_datasets))
    verdict = {e["files"][0]: e for e in entries}
    assert not verdict["good_compact.parquet"]["suspect"]
    assert verdict["low_compact.parquet"]["suspect"] and "10.0x below" in verdict["low_compact.parquet"]["reason"]
    assert verdict["low_compact.parquet"]["checksums"] == [load_dataset(two_datasets / "low_compact.parquet")
                                                           .meta["checksum"]]
    path = write_audit(two_datasets / AUDIT_FILE, entries, "test")
    assert list(read_audit(path).values()) == [verdict["low_compact.parquet"]["reason"]]
    monkeypatch.setenv("TUNE_GYM_DATA", str(two_datasets))
    low = load_dataset(two_datasets / "low_compact.parquet")  # still verifies: the datasets are untouched
    assert "10.0x below" in low.reference.suspect
    assert load_dataset(two_datasets / "good_compact.parquet").reference.suspect == ""
    assert audited(DENSE, Reference(10.0, "another measurement", (), "elsewhere")).suspect == ""  # another host


def test_the_audit_script_writes_counts_and_refuses_to_remeasure_another_hosts_data(two_datasets, capsys,
                                                                                   monkeypatch):
    import tune_gym.host

    monkeypatch.setattr(tune_gym.host, "host_id", lambda: "this-host")
    spec = importlib.util.spec_from_file_location("audit_references", REPO / "scripts" / "audit_references.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = two_datasets / "verdicts.json"
    assert script.main(["--path", str(two_datasets), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    host = load_dataset(two_datasets / "low_compact.parquet").host[0]
    assert doc["counts"] == {host: {"references": 2, "suspect": 1}} and "10 GFLOPS" in doc["rule"]
    printed = capsys.readouterr().out
    assert f"{host:<13} {2:>10}  {1:>7}" in printed and "suspect: " in printed
    assert script.main(["--path", str(two_datasets), "--out", str(out), "--remeasure"]) == 1  # this host is another
    assert f"measured on host {host}, not on this host (this-host)" in capsys.readouterr().err


def test_remeasure_writes_the_new_reference_and_reseals(two_datasets, tmp_path):
    path = two_datasets / "low_compact.parquet"
    host = load_dataset(path).host[0]
    machine = ScriptedMachine(tmp_path, host=host, op={2: 120.0, 1: 70.0})
    new = remeasure(path, host, machine=machine, command="test")
    ds = load_dataset(path)  # a fresh checksum and seal
    assert ds.reference.gflops == new.gflops and ds.reference.single_thread_gflops == 70.0
    assert np.all(ds.reference_gflops == new.gflops)
    assert ds.meta["collection"][-1]["note"].startswith("PyTorch reference re-measured: 10.00 -> ")


# ---------------------------------------------------------------------------------- env and leaderboard
@pytest.fixture()
def suspect_catalog(two_datasets, monkeypatch):
    """``two_datasets`` audited, as the catalog (only the low dataset: the catalog's dense data)."""
    write_audit(two_datasets / AUDIT_FILE, audit(find_references([two_datasets])), "test")
    (two_datasets / "good_compact.parquet").rename(two_datasets.parent / "good_compact.parquet")
    monkeypatch.setenv("TUNE_GYM_DATA", str(two_datasets))
    return two_datasets


def test_env_refuses_a_suspect_reference_unless_asked(suspect_catalog):
    kwargs = dict(task=DENSE, preset="compact", backend="replay", batch_size=2, budget=4, disable_env_checker=True)
    with pytest.raises(ValueError, match=r"reference \(10\.00 GFLOPS, host \w+\) is marked suspect by the reference "
                                         r"audit: .*pass reward_norm=<GFLOPS> or 'none', or allow_suspect_reference"):
        gym.make("tune_gym/Tune-v0", **kwargs)
    with pytest.warns(UserWarning, match="normalizing rewards by it as asked"):
        env = gym.make("tune_gym/Tune-v0", allow_suspect_reference=True, **kwargs)
    env.reset(seed=0)
    _, _, _, _, info = env.step(env.action_space.sample())
    assert info["reference_gflops"] == 10.0 and "10.0x below" in info["reference_suspect"]
    env.close()
    env = gym.make("tune_gym/Tune-v0", reward_norm=50.0, **kwargs)  # an explicit number needs no reference
    _, info = env.reset(seed=0)
    assert info["reference_suspect"] == ""
    env.close()
    sound = dict(kwargs, backend_options={"dataset": str(suspect_catalog.parent / "good_compact.parquet")})
    env = gym.make("tune_gym/Tune-v0", **sound)
    _, info = env.reset(seed=0)
    assert info["reference_gflops"] == 100.0 and info["reference_suspect"] == ""
    env.close()


def test_leaderboard_prints_suspect_instead_of_a_ratio(suspect_catalog, tmp_path):
    from benchmarks.leaderboard.report import compute, write_leaderboard
    from benchmarks.leaderboard.runner import run_suite
    from benchmarks.leaderboard.suite import load_suite

    suite = tmp_path / "tiny.toml"
    suite.write_text(f'name = "tiny"\ndescription = "random on the tiny dense space"\nseeds = 1\nbatch = 4\n'
                     f'agents = ["random"]\n[[task]]\nid = "{DENSE}"\npreset = "compact"\nbudget = 8\nweight = 1\n')
    out = tmp_path / "results.jsonl"
    run_suite(load_suite(suite), out, progress=False)  # the runner asks for the data's reference explicitly
    lb = compute(out)
    assert math.isnan(lb.rows[0]["vs_reference"]) and lb.rows[0]["suspect_references"] == 1
    text = write_leaderboard(out, tmp_path / "LB.md", plots=tmp_path / "plots").read_text()
    agent_row = next(line for line in text.splitlines() if line.startswith("| 1 | random |"))
    assert "| suspect |" in agent_row
    assert "| 10.00 (suspect) |" in text and "**vs PyTorch** leaves out the tasks" in text


def test_after_a_refused_reference_the_same_log_tunes_with_another_reward_norm(suspect_catalog, tmp_path):
    """A refused reference (suspect here; a busy host alike) leaves the record file usable: the
    same log resumes at once with another reward_norm (what ``make demo`` does on a busy host)."""
    log = tmp_path / "records.jsonl"
    kwargs = dict(task=DENSE, preset="compact", backend="replay", batch_size=2, budget=4, disable_env_checker=True,
                  log=log, resume=True)
    with pytest.raises(ValueError, match="marked suspect"):
        gym.make("tune_gym/Tune-v0", **kwargs)
    env = gym.make("tune_gym/Tune-v0", reward_norm="none", **kwargs)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.close()
    assert len(load_records(log)) == 2


# ---------------------------------------------------------------------------------- thread counts
def _dataset(host_info: dict | None, threads: int | None = None, reference: Reference | None = None) -> Dataset:
    """The tiny dense space's dataset, its kernels timed on ``threads`` (None: not recorded)."""
    ds = Dataset.from_records([r for r in load_records(DATA) if r.task == DENSE], mode="exhaustive")
    ds.meta["hosts"] = {ds.host[0]: host_info or {}}
    if threads is not None:
        ds.extra = [{**x, "threads": threads} for x in ds.extra]
    if reference is not None:
        ds.meta["references"] = {ds.host[0]: reference.to_json()}
        ds.reference_gflops[:] = reference.gflops
    return ds


def test_a_datasets_kernel_threads_are_recorded_or_tvms_default_pool():
    x86 = {"logical_cores": 2, "os": "Linux-x86_64"}
    assert _dataset(x86, threads=2).kernel_threads == 2  # recorded by the live backend
    assert _dataset(x86).kernel_threads == 1  # before that: TVM's default pool, half the logical CPUs
    assert _dataset({"logical_cores": 8, "os": "Linux-x86_64"}).kernel_threads == 4
    assert _dataset({"logical_cores": 8, "os": "Linux-aarch64"}).kernel_threads is None  # no halving known there
    assert _dataset(None).kernel_threads is None  # the footer does not describe the host


def test_a_reference_is_taken_at_the_kernels_thread_count_where_it_has_one():
    both = Reference(100.0, "torch, 2 threads", (100.0,), "h", threads=2, single_thread_gflops=60.0)
    assert reference_at(both, 1) == (60.0, 1) and reference_at(both, 2) == (100.0, 2)
    old = Reference(100.0, "torch 2.13.0+cpu cpu, 2 threads, separate process", (100.0,), "h")
    assert reference_at(old, 1) == (100.0, 2) and reference_at(old, None) == (100.0, 2)


@pytest.mark.parametrize("single", [None, 40.0])
def test_leaderboard_sets_kernels_against_the_reference_on_their_threads(tmp_path, monkeypatch, single):
    from benchmarks.leaderboard.report import compute, write_leaderboard
    from benchmarks.leaderboard.runner import run_suite
    from benchmarks.leaderboard.suite import load_suite

    data = tmp_path / "data"
    data.mkdir()
    ref = Reference(100.0, "torch, 2 threads", (100.0,), "h", threads=2, single_thread_gflops=single)
    ds = _dataset({"logical_cores": 2, "os": "Linux-x86_64"}, reference=ref)  # kernels on TVM's default: 1
    ds.save(data / "dense_compact.parquet")
    monkeypatch.setenv("TUNE_GYM_DATA", str(data))
    suite = tmp_path / "tiny.toml"
    suite.write_text(f'name = "tiny"\ndescription = "random on the tiny dense space"\nseeds = 1\nbatch = 4\n'
                     f'agents = ["random"]\n[[task]]\nid = "{DENSE}"\npreset = "compact"\nbudget = 8\nweight = 1\n')
    out = tmp_path / "results.jsonl"
    run_suite(load_suite(suite), out, progress=False)
    lb = compute(out)
    best = lb.cells[("random", DENSE)].best_gflops[0]
    assert lb.rows[0]["vs_reference"] == pytest.approx(best / (single or 100.0))
    text = write_leaderboard(out, tmp_path / "LB.md", plots=tmp_path / "plots").read_text()
    if single is None:  # no one-thread value: the 2-thread one, and the page says so
        assert "| 100.00 (2t; kernels 1t) |" in text
        assert f"kernels on 1 thread against PyTorch on 2: {DENSE}" in text
    else:  # like for like: no note
        assert "| 40.00 |" in text and "kernels on 1 thread against" not in text
