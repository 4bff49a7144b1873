"""Datasets: Parquet round trip and each refusal, the catalog, vectorised replay, the collector."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tune_gym.datasets import DATASET_SCHEMA, Dataset, DatasetError, load_dataset
from tune_gym.datasets.catalog import catalog, find_dataset
from tune_gym.datasets.collect import Plan, collect, journal_path, parse_plan
from tune_gym.errors import TuneGymError
from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.measure.replay import ReplayBackend
from tune_gym.records import load_records
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"


@pytest.fixture(scope="module")
def records():
    return [r for r in load_records(DATA) if r.task == DENSE]


@pytest.fixture(scope="module")
def dataset(records):
    return Dataset.from_records(records, mode="exhaustive")


def _rewrite(path: Path, out: Path, meta_edit=None, column_edit=None, reseal: bool = False) -> None:
    """Rewrite a dataset file edited; ``reseal``: with its seal made to match the edited metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tune_gym.datasets.dataset import SEALED_FIELDS
    from tune_gym.datasets.parquet_io import seal_of

    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"tune_gym"])
    if meta_edit:
        meta_edit(meta)
    if column_edit:
        name, fn = column_edit
        i = table.column_names.index(name)
        table = table.set_column(i, name, pa.array(fn(table.column(name).to_pylist()), table.schema.field(i).type))
    if reseal:
        meta["seal"] = seal_of(meta, SEALED_FIELDS)
    pq.write_table(table.replace_schema_metadata({b"tune_gym": json.dumps(meta).encode()}), out)


# ---------------------------------------------------------------------- format
def test_round_trip_records_parquet_records(tmp_path, records, dataset):
    path = dataset.save(tmp_path / "dense.parquet")
    back = load_dataset(path)
    assert len(back) == len(records) == 200
    assert back.exhaustive and back.mode == ["exhaustive"] * 200
    assert [r.to_json() for r in back.to_records()] == [
        {**r.to_json(), "backend": "live"} for r in records]
    np.testing.assert_array_equal(back.gflops, [r.result.gflops for r in records])
    assert back.meta["checksum"] == dataset.meta["checksum"]


def test_parquet_is_much_smaller_than_jsonl(tmp_path, dataset):
    path = dataset.save(tmp_path / "dense.parquet")
    jsonl = sum(len(json.dumps(r.to_json())) + 1 for r in dataset.to_records())
    assert path.stat().st_size * 4 < jsonl


def test_refuses_another_schema(tmp_path, dataset):
    path = dataset.save(tmp_path / "dense.parquet")
    _rewrite(path, tmp_path / "v9.parquet", meta_edit=lambda m: m.update(schema=DATASET_SCHEMA + 8))
    with pytest.raises(DatasetError, match=rf"schema version {DATASET_SCHEMA + 8}.*reads version {DATASET_SCHEMA}"):
        load_dataset(tmp_path / "v9.parquet")


def test_refuses_a_changed_space(tmp_path, dataset):
    path = dataset.save(tmp_path / "dense.parquet")
    _rewrite(path, tmp_path / "old.parquet", meta_edit=lambda m: m.update(fingerprint="0123456789abcdef"), reseal=True)
    with pytest.raises(DatasetError, match=r"fingerprint 0123456789abcdef.*the space changed.*tune-gym collect"):
        load_dataset(tmp_path / "old.parquet")


def test_refuses_a_tampered_row(tmp_path, dataset):
    path = dataset.save(tmp_path / "dense.parquet")
    faster = lambda costs: [[c / 2 for c in row] if i == 7 else row for i, row in enumerate(costs)]
    _rewrite(path, tmp_path / "edited.parquet", column_edit=("costs", faster))
    with pytest.raises(DatasetError, match="checksum mismatch"):
        load_dataset(tmp_path / "edited.parquet")
    assert len(load_dataset(tmp_path / "edited.parquet", verify=False)) == 200


def test_refuses_files_that_are_not_datasets(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "missing.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        load_dataset(tmp_path / "junk.parquet")


def test_one_task_per_dataset(records):
    both = load_records(DATA)
    with pytest.raises(DatasetError, match="one task and preset"):
        Dataset.from_records(both)
    assert len(Dataset.from_records(both, task=DENSE)) == 200


def test_catalog_finds_datasets_in_tune_gym_data(tmp_path, monkeypatch, dataset):
    dataset.save(tmp_path / "dense_compact.parquet")
    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path))
    entry = find_dataset(DENSE, "compact")
    assert entry is not None and entry.rows == 200 and entry.exhaustive
    assert any(e.path == tmp_path / "dense_compact.parquet" for e in catalog())
    backend = ReplayBackend()  # no data given: the catalog serves the task
    space = KnobSpace.for_task(Task.from_uri(DENSE), "compact")
    assert backend.measure(space.task, space, [space.config(5)])[0] == dataset.results[
        int(np.flatnonzero((dataset.configs == space.config(5)).all(axis=1))[0])]


# ---------------------------------------------------------------------- replay
def test_replay_is_an_exact_vectorised_lookup(records, dataset):
    space = KnobSpace.for_task(Task.from_uri(DENSE), "compact")
    by_config = {r.config: r.result for r in records}
    rng = np.random.default_rng(0)
    configs = [space.config(int(i)) for i in rng.permutation(space.size)]
    for backend in (ReplayBackend(DATA), ReplayBackend(dataset)):
        assert backend.measure(space.task, space, configs) == [by_config[c] for c in configs]
        assert backend.covers(space.task, space)


def test_replay_names_a_missing_config_and_uses_a_fallback(records):
    space = KnobSpace.for_task(Task.from_uri(DENSE), "compact")
    partial = ReplayBackend(records[:50])
    missing = next(c for c in space if c not in {r.config for r in records[:50]})
    with pytest.raises(TuneGymError, match=rf"config \[{', '.join(map(str, missing))}\] .* holds 50 configs"):
        partial.measure(space.task, space, [records[0].config, missing])
    full = ReplayBackend(records)
    with_fallback = ReplayBackend(records[:50], fallback=full)
    got = with_fallback.measure(space.task, space, [records[0].config, missing])
    assert got == full.measure(space.task, space, [records[0].config, missing])


def test_replay_without_a_dataset_says_how_to_collect_one(monkeypatch, tmp_path):
    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path))
    task = Task.make("dense", m=8, n=8, k=8, weights="given")
    space = KnobSpace.for_task(task, "compact")
    with pytest.raises(TuneGymError, match="no dataset of .*tune-gym collect"):
        ReplayBackend().measure(task, space, [space.config(0)])


# ---------------------------------------------------------------------- collector
class CountingBackend(Backend):
    """Replay as the 'hardware': counts what is measured, can die after some batches."""

    name = "counting"

    def __init__(self, data, die_after: int | None = None):
        self.inner = ReplayBackend(data)
        self.measured: list[tuple[int, ...]] = []
        self.die_after = die_after

    def reference(self, task, preset=None):
        return Reference(100.0, "test reference", (100.0,), "test")

    def measure(self, task, space, configs):
        if self.die_after is not None and len(self.measured) >= self.die_after:
            raise KeyboardInterrupt  # a kill mid-collection
        self.measured.extend(configs)
        return self.inner.measure(task, space, configs)

    def close(self):
        pass


def test_plans_parse_and_refuse_bad_text():
    assert parse_plan("random:300", seed=3) == Plan("random", 300, 3)
    assert parse_plan("explore:20").mode == "exploration"
    with pytest.raises(DatasetError, match="unknown collection mode"):
        parse_plan("grid:3")
    with pytest.raises(DatasetError, match="needs a count"):
        parse_plan("random")


def test_collect_exhaustive_resumes_after_a_kill_without_measuring_twice(tmp_path, records):
    task = Task.from_uri(DENSE)
    out = tmp_path / "dense.parquet"
    first = CountingBackend(records, die_after=64)
    with pytest.raises(KeyboardInterrupt):
        collect(task, "compact", out, [Plan("exhaustive")], backend=first, batch=32, progress=False)
    assert len(load_records(journal_path(out))) == 64  # two fsynced batches survive
    saved = collect(task, "compact", out, [Plan("exhaustive")], backend=CountingBackend(records, die_after=0),
                    progress=False, measure=False)  # rewrite the dataset from the journal only
    assert len(saved) == 64 and len(load_dataset(out)) == 64
    second = CountingBackend(records)
    ds = collect(task, "compact", out, [Plan("exhaustive")], backend=second, batch=32, progress=False,
                 command="test")
    assert len(second.measured) == 200 - 64
    assert not set(first.measured) & set(second.measured)
    assert len(ds) == 200 and ds.exhaustive and set(ds.mode) == {"exhaustive"}
    assert ds.reference.gflops == 100.0
    # the journal is not needed to resume: the dataset alone is enough
    journal_path(out).unlink()
    third = CountingBackend(records)
    collect(task, "compact", out, [Plan("exhaustive")], backend=third, progress=False)
    assert third.measured == []


def test_collect_refuses_an_object_that_is_no_backend(tmp_path):
    class MeasureOnly:
        def measure(self, task, space, configs):
            return []

    with pytest.raises(DatasetError, match=r"collect: backend must be a tune_gym.measure.Backend, got MeasureOnly, "
                                           r"which lacks close\(\), reference\(\)"):
        collect(Task.from_uri(DENSE), "compact", tmp_path / "x.parquet", [Plan("exhaustive")],
                backend=MeasureOnly(), progress=False)
    assert not (tmp_path / "x.parquet").exists()


def test_collect_random_then_exploration(tmp_path, records, train_seed, record_property):
    from agents import make_agent

    task = Task.from_uri(DENSE)
    out = tmp_path / "dense.parquet"
    plans = [Plan("random", 40, seed=1), Plan("exploration", 30, seed=2 + train_seed, agent="xgb-sa")]
    backend = CountingBackend(records)
    ds = collect(task, "compact", out, plans, backend=backend, batch=8, progress=False,
                 explorer=lambda plan: make_agent(plan.agent, plan_size=8))
    assert len(backend.measured) == len(set(backend.measured)) == 70
    assert ds.mode.count("random") == 40 and ds.mode.count("exploration") == 30
    space = KnobSpace.for_task(task, "compact")
    assert set(space.sample_unique(np.random.default_rng(1), 40)) == {
        tuple(c) for c, m in zip(ds.configs.tolist(), ds.mode) if m == "random"}
    # explored configs are faster on average than random ones (the model steers the search)
    gf = ds.gflops
    record_property("explored_mean_over_random_mean",
                    gf[np.array(ds.mode) == "exploration"].mean() / gf[np.array(ds.mode) == "random"].mean())
    assert gf[np.array(ds.mode) == "exploration"].mean() > gf[np.array(ds.mode) == "random"].mean()
    # a second run has nothing left to measure
    again = CountingBackend(records)
    collect(task, "compact", out, plans, backend=again, batch=8, progress=False,
            explorer=lambda plan: make_agent(plan.agent, plan_size=8))
    assert again.measured == []
    assert len(load_dataset(out).meta["collection"]) == 2


@pytest.mark.heavy
def test_collect_survives_sigkill(tmp_path, records):
    """A collector process killed with SIGKILL loses at most the batch in flight."""
    out = tmp_path / "dense.parquet"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_datasets import CountingBackend
        from tune_gym.datasets.collect import Plan, collect
        from tune_gym.records import load_records
        from tune_gym.tasks import Task

        class Slow(CountingBackend):
            def measure(self, task, space, configs):
                if len(self.measured) >= 48:
                    print("ready", flush=True)
                    time.sleep(60)
                return super().measure(task, space, configs)

        recs = [r for r in load_records({str(DATA)!r}) if r.task == {DENSE!r}]
        collect(Task.from_uri({DENSE!r}), "compact", {str(out)!r}, [Plan("exhaustive")], backend=Slow(recs),
                batch=16, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(load_records(journal_path(out))) == 48
    backend = CountingBackend(records)
    ds = collect(Task.from_uri(DENSE), "compact", out, [Plan("exhaustive")], backend=backend, progress=False)
    assert len(backend.measured) == 200 - 48 and len(ds) == 200


# ---------------------------------------------------------------------- command line
def test_cli_convert_verify_and_inventory(tmp_path, monkeypatch, capsys, records):
    from tune_gym.cli import main

    src = tmp_path / "dense.jsonl"
    src.write_text("".join(line for line in DATA.read_text().splitlines(keepends=True) if DENSE in line))
    assert main(["dataset", "convert", str(src), str(tmp_path / "dense.parquet"), "--mode", "exhaustive"]) == 0
    assert main(["dataset", "verify", str(tmp_path / "dense.parquet")]) == 0
    assert "checksum OK" in capsys.readouterr().out
    assert main(["dataset", "convert", str(tmp_path / "dense.parquet"), str(tmp_path / "back.jsonl")]) == 0
    assert [r.result for r in load_records(tmp_path / "back.jsonl")] == [r.result for r in records]
    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path))
    capsys.readouterr()
    assert main(["datasets", "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "| dense.parquet |" in text and "exhaustive 200" in text and "## How each was collected" in text
    (tmp_path / "dense.parquet").write_bytes((tmp_path / "dense.parquet").read_bytes()[:-40] + b"x" * 40)
    assert main(["dataset", "verify", str(tmp_path / "dense.parquet")]) == 2


class ThreadedBackend(CountingBackend):
    """CountingBackend whose kernels 'ran' on ``threads`` CPU threads, as the live backend says."""

    def __init__(self, data, threads: int):
        super().__init__(data)
        self.threads = threads

    def threads_for(self, task):
        return self.threads

    def measure(self, task, space, configs):
        import dataclasses

        return [dataclasses.replace(r, extra={**r.extra, "threads": self.threads})
                for r in super().measure(task, space, configs)]


def test_collect_never_resumes_another_hosts_measurements(tmp_path, records):
    import dataclasses

    from tune_gym.datasets.collect import journal_path
    from tune_gym.records import RecordWriter

    task = Task.from_uri(DENSE)
    out = tmp_path / "dense.parquet"
    elsewhere = [dataclasses.replace(r, host="0123456789ab") for r in records if r.task == DENSE][:5]
    with RecordWriter(journal_path(out)) as writer:  # a killed collection's journal, from another host
        writer.append(elsewhere)
    backend = CountingBackend(records)
    with pytest.raises(DatasetError, match=r"dense.parquet: its rows were measured on host\(s\) 0123456789ab, this "
                                           r"is host [0-9a-f]+; a dataset never mixes hosts"):
        collect(task, "compact", out, [Plan("random", 20, seed=1)], backend=backend, progress=False)
    assert backend.measured == [] and not out.exists()
    # rewriting the file from the journal measures nothing and is allowed
    assert len(collect(task, "compact", out, [], backend=backend, progress=False, measure=False)) == 5


def test_collect_never_mixes_thread_counts_in_one_dataset(tmp_path, records):
    task = Task.from_uri(DENSE)
    out = tmp_path / "dense.parquet"
    collect(task, "compact", out, [Plan("random", 20, seed=1)], backend=ThreadedBackend(records, 2), progress=False)
    more = ThreadedBackend(records, 2)  # same count: resumes and adds
    ds = collect(task, "compact", out, [Plan("random", 30, seed=1)], backend=more, progress=False)
    assert len(more.measured) == 10 and len(ds) == 30
    other = ThreadedBackend(records, 1)
    with pytest.raises(DatasetError, match=r"dense.parquet: its kernels were timed on 2 thread\(s\), this backend "
                                           r"times them on 1"):
        collect(task, "compact", out, [Plan("random", 40, seed=1)], backend=other, progress=False)
    assert other.measured == [] and len(load_dataset(out)) == 30
    # rows of a dataset without the field ran on TVM's default pool: refused too
    with pytest.raises(DatasetError, match=r"TVM's default \(half the logical CPUs\)"):
        collect(task, "compact", tmp_path / "old.parquet", [Plan("random", 5, seed=1)],
                backend=CountingBackend(records), progress=False)
        collect(task, "compact", tmp_path / "old.parquet", [Plan("random", 6, seed=1)],
                backend=ThreadedBackend(records, 2), progress=False)


def test_committed_inventory_is_up_to_date():
    """benchmarks/datasets/README.md is what `tune-gym datasets --markdown` writes for the committed
    datasets: a dataset added without regenerating it would be missing from the inventory."""
    from tune_gym.cli import inventory_markdown
    from tune_gym.datasets.catalog import repo_datasets

    readme = repo_datasets() / "README.md"
    expected = inventory_markdown(catalog([repo_datasets()]))
    assert readme.read_text().rstrip("\n") == expected.rstrip("\n"), (
        "benchmarks/datasets/README.md is stale: `tune-gym datasets --markdown > benchmarks/datasets/README.md`")
