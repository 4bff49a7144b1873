"""Tuning records: JSONL round trip, crash tolerance, best-of selection, TVM database export."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from tune_gym.errors import RecordError
from tune_gym.host import host_fingerprint, host_id
from tune_gym.measure.result import MeasureResult
from tune_gym.records import (
    SCHEMA_VERSION,
    Record,
    RecordWriter,
    best_records,
    export_database,
    keep_best_records,
    load_database,
    load_records,
)
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task
from tune_gym.tvm_support import ms, tvm

TASK = Task.make("dense", m=16, n=16, k=16)


@pytest.fixture(scope="module")
def space() -> KnobSpace:
    return KnobSpace.for_task(TASK, "compact")


def ok(seconds: float) -> MeasureResult:
    return MeasureResult(costs=(seconds, seconds), flops=TASK.flops)


def make_records(space: KnobSpace, n: int, start: int = 0) -> list[Record]:
    return [Record.create(space, space.config(start + i), ok(1e-5 * (i + 1)), "test") for i in range(n)]


def test_round_trip(tmp_path, space):
    path = tmp_path / "sub" / "records.jsonl"
    recs = make_records(space, 5)
    with RecordWriter(path) as writer:
        writer.append(recs[:2])
        writer.append(recs[2:])
    assert load_records(path) == recs
    assert load_records(path, task=TASK) == recs
    assert load_records(path, task="op://dense-v1/m1_n1_k1?target=llvm") == []
    assert load_records(tmp_path / "missing.jsonl") == []

    line = json.loads(path.read_text().splitlines()[0])
    assert line["schema"] == SCHEMA_VERSION and line["task"] == TASK.uri and line["preset"] == "compact"
    assert line["knobs"] == json.loads(json.dumps(space.to_dict(recs[0].config)))
    assert line["host"] == host_id() and line["tvm"] == tvm().__version__
    assert Record.from_json(line) == recs[0]


def test_truncated_last_line_is_skipped_and_append_continues(tmp_path, space):
    path = tmp_path / "records.jsonl"
    recs = make_records(space, 4)
    with RecordWriter(path) as writer:
        writer.append(recs[:2])
    full = json.dumps(recs[2].to_json())
    with open(path, "a") as f:  # a writer killed in the middle of a line
        f.write(full[: len(full) // 2])
    with pytest.warns(UserWarning, match=r"records\.jsonl:3:"):
        assert load_records(path) == recs[:2]

    with pytest.warns(UserWarning, match=r"records\.jsonl:3: cut off a truncated last line"), \
            RecordWriter(path) as writer:
        writer.append(recs[3:])
    assert len(path.read_text().splitlines()) == 3
    assert load_records(path) == [recs[0], recs[1], recs[3]]


def test_any_torn_line_is_tolerated(tmp_path, space):
    """Whatever byte a kill stops at, the torn line is skipped and the rest loads."""
    a, b, c = make_records(space, 3)
    full = json.dumps(b.to_json())
    path = tmp_path / "records.jsonl"
    for cut in range(1, len(full)):
        path.write_text(json.dumps(a.to_json()) + "\n" + full[:cut])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert load_records(path) == [a], full[:cut]
        assert len(caught) == 1
        with pytest.warns(UserWarning, match=":2: cut off a truncated last line"), RecordWriter(path) as writer:
            writer.append([c])  # the next writer cuts the torn line off before it writes
        assert path.read_text() == json.dumps(a.to_json()) + "\n" + json.dumps(c.to_json()) + "\n"


@pytest.mark.parametrize("bad", ["not json", '{"schema": 1}}', "[1, 2, 3]", '{"schema": 1, "task": 3}'])
def test_corrupted_middle_line_raises(tmp_path, space, bad):
    path = tmp_path / "records.jsonl"
    lines = [json.dumps(r.to_json()) for r in make_records(space, 3)]
    lines[1] = bad
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=r"records\.jsonl:2:"):
        load_records(path)


def test_other_schema_raises_even_on_last_line(tmp_path, space):
    path = tmp_path / "records.jsonl"
    lines = [r.to_json() for r in make_records(space, 2)]
    lines[1]["schema"] = SCHEMA_VERSION + 1
    path.write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    with pytest.raises(RecordError, match=r":2: record schema 2"):
        load_records(path)


def test_best_records(space):
    other = Task.make("dense", m=16, n=16, k=8).uri
    fast = Record.create(space, space.config(3), ok(1e-6), "test")
    failed = Record.create(space, space.config(4), MeasureResult.failure("run_error", "boom"), "test")
    lost = Record(other, "compact", "test", (0, 0, 0, 0), failed.result)
    recs = [*make_records(space, 3), fast, failed, lost]
    best = best_records(recs)
    assert best == {TASK.uri: fast}
    assert best_records([failed]) == {}


def test_export_database_compiles_with_tvm(tmp_path, space):
    best = Record.create(space, space.config(57), ok(1e-6), "test")
    recs = [*make_records(space, 3), best]
    export_database(recs, tmp_path / "db")
    export_database(recs, tmp_path / "db")  # exporting again replaces, not appends
    db = load_database(tmp_path / "db")
    assert len(db) == 1

    sch = ms().tir_integration.compile_tir(db, space.mod, space.target)
    assert sch is not None
    tvm().ir.assert_structural_equal(sch.mod, space.apply(best.config)[0].mod)
    # The database only knows the exact committed module (the other weight layout is another workload).
    assert ms().tir_integration.compile_tir(db, TASK.with_weights("given").ir_module(), space.target) is None

    lib = tvm().compile(sch.mod, target=space.target)
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((16, 16), dtype=np.float32) for _ in range(2))
    dev = tvm().cpu()
    args = [tvm().runtime.tensor(a, dev) for a in (x, w, np.zeros((16, 16), np.float32))]
    lib["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), x @ w.T, rtol=1e-5, atol=1e-5)


def test_keep_best_records_keeps_each_workloads_best_compressed(tmp_path, space):
    """A tuner's whole database shrinks to the best record of each workload, gzip-compressed, and
    still compiles to the best program."""
    best = Record.create(space, space.config(57), ok(1e-6), "test")
    export_database([best], tmp_path)
    line = json.loads((tmp_path / "database_tuning_record.json").read_text())
    slower, failed = json.loads(json.dumps(line)), json.loads(json.dumps(line))
    slower[1][1], failed[1][1] = [2e-6, 2e-6], [1e10]  # a slower run of the same program; a failed one
    (tmp_path / "database_tuning_record.json").write_text("".join(json.dumps(x) + "\n" for x in (slower, line, failed)))
    assert keep_best_records(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["database_tuning_record.json.gz", "database_workload.json.gz"]
    db = load_database(tmp_path)
    assert len(db) == 1 and list(tmp_path.iterdir())  # read from a temporary copy; the files stay as they are
    sch = ms().tir_integration.compile_tir(db, space.mod, space.target)
    tvm().ir.assert_structural_equal(sch.mod, space.apply(best.config)[0].mod)


def test_save_json_round_trips(space):
    """Regression: apache-tvm-ffi 0.1.15 made save_json (and the JSON database) segfault."""
    text = tvm().ir.save_json(space.mod)
    tvm().ir.assert_structural_equal(tvm().ir.load_json(text), space.mod)


def test_host_fingerprint():
    fp = host_fingerprint()
    assert {"cpu", "llvm_cpu", "logical_cores", "physical_cores", "os", "python", "tvm"} <= set(fp)
    assert host_id() == host_id() and len(host_id()) == 12
    int(host_id(), 16)
