"""Datasets are sealed and checked on read: edited footers, bad rows, junk files, the seal command."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tune_gym.datasets import Dataset, DatasetError, load_dataset, seal_dataset
from tune_gym.datasets.catalog import CatalogWarning, catalog, read_entry
from tune_gym.datasets.dataset import COLUMNS, SEALED_FIELDS
from tune_gym.datasets.parquet_io import rows_checksum, seal_of
from tune_gym.errors import RecordError
from tune_gym.records import load_records

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"
REPO_DATA = Path(__file__).parents[1] / "benchmarks" / "datasets"
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A sealed 200-row dataset of a small dense task (every row ran)."""
    records = [r for r in load_records(DATA) if r.task == DENSE]
    return Dataset.from_records(records, mode="exhaustive").save(tmp_path_factory.mktemp("trust") / "dense.parquet")


@pytest.fixture(scope="module")
def original(saved) -> Dataset:
    return load_dataset(saved)


def _read(path: Path) -> tuple[pa.Table, dict]:
    table = pq.read_table(path)
    return table.replace_schema_metadata(None), json.loads(table.schema.metadata[b"tune_gym"])


def _write(path: Path, table: pa.Table, meta: dict, reseal: bool = False) -> Path:
    """Write a dataset file; with ``reseal`` its checksum and seal are made to match (a forged
    file that only the value checks can catch)."""
    if reseal:
        meta["checksum"] = rows_checksum(table)
        meta["seal"] = seal_of(meta, SEALED_FIELDS)
    pq.write_table(table.replace_schema_metadata({b"tune_gym": json.dumps(meta).encode()}), path)
    return path


def _edit(src: Path, out: Path, meta_edit=None, column: str | None = None, fn=None, type_=None,
          reseal: bool = False) -> Path:
    table, meta = _read(src)
    if meta_edit:
        meta_edit(meta)
    if column:
        i = table.column_names.index(column)
        values = fn(table.column(column).to_pylist())
        want = type_ or table.schema.field(i).type
        array = pa.array(values, want.value_type if pa.types.is_dictionary(want) else want)
        table = table.set_column(i, column, array.dictionary_encode() if pa.types.is_dictionary(want) else array)
    return _write(out, table, meta, reseal)


def _at(row: int, value):
    return lambda values: [value if i == row else v for i, v in enumerate(values)]


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------------- footer: the seal
def test_footer_flops_times_ten_is_refused(saved, tmp_path):
    times_ten = lambda m: m.update(flops=m["flops"] * 10)
    _edit(saved, tmp_path / "x10.parquet", meta_edit=times_ten)
    with pytest.raises(DatasetError, match="seal mismatch") as err:
        load_dataset(tmp_path / "x10.parquet")
    assert str(tmp_path / "x10.parquet") in _one_line(err)
    # unverified, or re-sealed by hand: the flops are still not the task's own
    with pytest.raises(DatasetError, match=r"flops 655360, but .* does 65536 FLOPs per call \(10x\)"):
        load_dataset(tmp_path / "x10.parquet", verify=False)
    _edit(saved, tmp_path / "x10s.parquet", meta_edit=times_ten, reseal=True)
    with pytest.raises(DatasetError, match=r"flops 655360"):
        load_dataset(tmp_path / "x10s.parquet")
    # the catalog reads the footer only, and refuses it too
    with pytest.raises(DatasetError, match="seal mismatch"):
        read_entry(tmp_path / "x10.parquet")


def _scale_reference(factor: float):
    def edit(meta):
        for ref in meta["references"].values():
            ref["gflops"] *= factor
            ref["samples"] = [s * factor for s in ref["samples"]]
    return edit


def test_edited_references_are_refused(saved, tmp_path):
    table, meta = _read(saved)
    if not meta["references"]:  # the record file holds none: give it one, sealed
        meta["references"] = {"h": {"gflops": 50.0, "method": "test", "samples": [50.0], "host": "h"}}
        _write(saved.with_name("ref.parquet"), table, meta, reseal=True)
        saved = saved.with_name("ref.parquet")
    _edit(saved, tmp_path / "ref10.parquet", meta_edit=_scale_reference(10))
    with pytest.raises(DatasetError, match="seal mismatch"):
        load_dataset(tmp_path / "ref10.parquet")
    _edit(saved, tmp_path / "ref_huge.parquet", meta_edit=_scale_reference(1e9), reseal=True)
    with pytest.raises(DatasetError, match=r"references\[.*\]: reference .* GFLOPS is not a possible measurement on a "
                                           r"llvm target"):
        load_dataset(tmp_path / "ref_huge.parquet")
    _edit(saved, tmp_path / "ref_neg.parquet", meta_edit=_scale_reference(-1), reseal=True)
    with pytest.raises(DatasetError, match=r"reference gflops -.* is not a finite number > 0"):
        load_dataset(tmp_path / "ref_neg.parquet")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("rows", 10, "its metadata says rows 10, but it is 200"),
    ("space_size", 7, "its metadata says space_size 7, but it is 200"),
    ("knobs", ["a", "b", "c", "d"], "its metadata says knobs"),
    ("flops", 65536.5, "its metadata has 65536.5 as 'flops'"),
    ("hosts", {"h": 3}, "hosts .* is not an object of host fingerprints"),
])
def test_resealed_footer_values_are_checked(saved, tmp_path, field, value, message):
    _edit(saved, tmp_path / "f.parquet", meta_edit=lambda m: m.update({field: value}), reseal=True)
    with pytest.raises(DatasetError, match=message) as err:
        load_dataset(tmp_path / "f.parquet")
    _one_line(err)


# ---------------------------------------------------------------------- rows
BAD_ROWS = [
    ("config", _at(3, [99, 0, 0, 0]), None, r"row 3: knob 'sketch': index 99 out of range \[0, 1\]"),
    ("config", _at(4, [0, -1, 0, 0]), None, r"row 4: knob 'tile_i0': index -1 out of range \[0, "),
    ("config", lambda v: [[float(x) for x in c] for c in v], pa.list_(pa.float64()), "not lists of integer"),
    ("costs", _at(5, [0.0]), None, r"row 5 .*cost 0\.0 s is not a measured time"),
    ("costs", _at(5, [-1e-6]), None, r"row 5 .*cost -1e-06 s is not a measured time"),
    ("costs", _at(5, [1e-5, float("nan")]), None, r"row 5 .*cost nan s is not a measured time"),
    ("costs", _at(5, [float("inf")]), None, r"row 5 .*cost inf s is not a measured time"),
    ("costs", _at(5, [1e-30]), None, r"row 5 .*cost 1e-30 s is not a measured time"),
    ("costs", _at(6, []), None, r"row 6 .*no costs and no error"),
    ("costs", _at(6, None), None, r"row 6 .*costs is missing"),
    ("error", _at(7, "exploded"), None, r"row 7 .*error 'exploded' is not one of invalid, build_error"),
    ("mode", _at(8, "guessed"), None, r"row 8 .*mode 'guessed' is not one of exhaustive"),
    ("host", _at(8, None), None, r"row 8 .*host is missing"),
    ("build_secs", _at(9, -1.0), None, r"row 9 .*build_secs -1\.0 is not a duration"),
    ("run_secs", _at(9, float("nan")), None, r"row 9 .*run_secs nan is not a duration"),
    ("time", _at(9, float("inf")), None, r"row 9 .*time inf is not a unix time"),
    ("reference_gflops", _at(10, 1e9), None, r"row 10 .*reference 1000000000\.0 GFLOPS is not a possible"),
    ("reference_gflops", _at(10, -3.0), None, r"row 10 .*reference -3\.0 GFLOPS is not a possible"),
    ("extra", _at(11, "{oops"), None, r"row 11: extra is not JSON"),
    ("extra", _at(11, "[1]"), None, r"row 11: extra is a JSON list, not an object"),
    ("costs", lambda v: [["x"] for _ in v], pa.list_(pa.string()),
     "column costs holds list<.*: string>, not lists of seconds"),
]


@pytest.mark.parametrize(("column", "fn", "type_", "message"), BAD_ROWS,
                         ids=[f"{c}-{i}" for i, (c, *_) in enumerate(BAD_ROWS)])
def test_each_bad_row_is_refused(saved, tmp_path, column, fn, type_, message):
    path = _edit(saved, tmp_path / "bad.parquet", column=column, fn=fn, type_=type_, reseal=True)
    with pytest.raises(DatasetError, match=message) as err:
        load_dataset(path)
    assert str(path) in _one_line(err)
    with pytest.raises(DatasetError, match=message):  # the value checks do not depend on verify
        load_dataset(path, verify=False)


def test_a_throughput_beyond_the_target_is_refused(tmp_path):
    """A simulated VTA dataset (its space builds without TVM): a cost that makes a row faster
    than any device of the target is refused, naming the row."""
    src = REPO_DATA / "vta" / "deepbench_5_full.parquet"
    table, _ = _read(src)
    row = table.column("error").to_pylist().index(None)
    path = _edit(src, tmp_path / "fast.parquet", column="costs", fn=_at(row, [1e-8]), reseal=True)
    with pytest.raises(DatasetError, match=rf"row {row} .*measured throughput .* GFLOPS is not a possible measurement "
                                           r"on a vta target"):
        load_dataset(path)


def test_save_refuses_what_load_would_refuse(original, tmp_path):
    ds = dataclasses.replace(original, costs=[(0.0,), *original.costs[1:]])
    with pytest.raises(DatasetError, match=r"row 0 .*cost 0\.0 s is not a measured time"):
        ds.save(tmp_path / "never.parquet")
    assert not (tmp_path / "never.parquet").exists()


# ---------------------------------------------------------------------- unreadable files
def test_missing_column_nondict_and_undecodable_footers_are_one_line_errors(saved, tmp_path):
    table, meta = _read(saved)
    _write(tmp_path / "nocol.parquet", table.drop_columns(["costs"]), meta)
    with pytest.raises(DatasetError, match=r"lacks the column\(s\) costs") as err:
        load_dataset(tmp_path / "nocol.parquet")
    _one_line(err)
    for name, raw, message in [("list", b"[1, 2]", "metadata is a JSON list, not an object"),
                               ("str", b'"x"', "metadata is a JSON str, not an object"),
                               ("bytes", b"\xff\xfe{", "metadata is not UTF-8 JSON"),
                               ("json", b"{flops: 3", "metadata is not UTF-8 JSON")]:
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table.replace_schema_metadata({b"tune_gym": raw}), path)
        for read in (load_dataset, read_entry):
            with pytest.raises(DatasetError, match=message) as err:
                read(path)
            assert str(path) in _one_line(err)
    _write(tmp_path / "nofield.parquet", table, {k: v for k, v in meta.items() if k != "references"})
    with pytest.raises(DatasetError, match="its metadata lacks the field 'references'"):
        load_dataset(tmp_path / "nofield.parquet")


def test_unsealed_file_is_refused_with_the_hint(saved, tmp_path):
    _edit(saved, tmp_path / "old.parquet", meta_edit=lambda m: m.pop("seal"))
    for read in (load_dataset, read_entry):
        with pytest.raises(DatasetError, match=r"is not sealed.*seal it with `tune-gym dataset seal FILE`") as err:
            read(tmp_path / "old.parquet")
        _one_line(err)


# ---------------------------------------------------------------------- sealing
def test_seal_round_trip_keeps_the_rows_checksum(saved, original, tmp_path):
    path = _edit(saved, tmp_path / "old.parquet", meta_edit=lambda m: m.pop("seal"))
    seal = seal_dataset(path)
    back = load_dataset(path)
    assert back.meta["seal"] == seal == original.meta["seal"]
    assert back.meta["checksum"] == original.meta["checksum"]
    np.testing.assert_array_equal(back.gflops, original.gflops)
    assert seal_dataset(path) == seal  # idempotent


def test_seal_refuses_edited_rows_and_bad_values(saved, tmp_path):
    path = _edit(saved, tmp_path / "rows.parquet", column="costs", fn=_at(3, [1e-6]))
    before = path.read_bytes()
    with pytest.raises(DatasetError, match="checksum mismatch.*not sealed"):
        seal_dataset(path)
    assert path.read_bytes() == before
    path = _edit(saved, tmp_path / "vals.parquet", column="costs", fn=_at(3, [0.0]), reseal=True)
    with pytest.raises(DatasetError, match=r"row 3 .*cost 0\.0"):
        seal_dataset(path)


def test_cli_seal_verify_and_convert(saved, tmp_path, capsys):
    from tune_gym.cli import main

    old = _edit(saved, tmp_path / "old.parquet", meta_edit=lambda m: m.pop("seal"))
    assert main(["dataset", "verify", str(old)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tune-gym dataset seal FILE" in err
    bad = _edit(saved, tmp_path / "bad.parquet", column="costs", fn=_at(3, [1e-6]))
    assert main(["dataset", "seal", str(old), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert f"{old}: sealed" in out and f"not sealed: dataset {bad}: checksum mismatch" in err
    assert main(["dataset", "verify", str(old)]) == 0
    assert "seal, space fingerprint, values and checksum OK" in capsys.readouterr().out
    # a bad record log: one line naming the record's file:line
    lines = [ln for ln in DATA.read_text().splitlines() if DENSE in ln][:5]
    lines[2] = json.dumps({**json.loads(lines[2]), "config": "not a config"})
    src = tmp_path / "bad.jsonl"
    src.write_text("\n".join(lines) + "\n")
    assert main(["dataset", "convert", str(src), str(tmp_path / "out.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{src}:3:" in err
    assert not (tmp_path / "out.parquet").exists()
    with pytest.raises(RecordError, match=f"{src}:3:"):
        load_dataset(src)


# ---------------------------------------------------------------------- the catalog
def test_a_junk_file_in_tune_gym_data_is_skipped_with_a_warning(saved, tmp_path, monkeypatch, capsys):
    shutil.copy(saved, tmp_path / "dense_compact.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "plain.parquet")
    _edit(saved, tmp_path / "edited.parquet", meta_edit=lambda m: m.update(flops=1))
    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path))
    with pytest.warns(CatalogWarning) as caught:
        entries = catalog([tmp_path])
    assert [e.path.name for e in entries] == ["dense_compact.parquet"]
    text = " | ".join(str(w.message) for w in caught)
    assert f"{tmp_path / 'junk.parquet'} is not a readable Parquet file" in text
    assert f"{tmp_path / 'plain.parquet'} is a Parquet file without 'tune_gym' metadata" in text
    assert f"{tmp_path / 'edited.parquet'}: seal mismatch" in text
    from tune_gym.cli import main

    assert main(["datasets"]) == 0
    out, err = capsys.readouterr()
    assert "dense_compact.parquet" in out and "junk.parquet" not in out
    assert "warning: catalog: skipped: dataset " in err and len(err.strip().splitlines()) == 3


def test_replay_sources_check_records_and_catalog_references(saved, tmp_path, monkeypatch):
    from tune_gym.datasets.source import DataSource
    from tune_gym.tasks import Task

    records = [r for r in load_records(DATA) if r.task == DENSE][:20]
    records[4] = dataclasses.replace(records[4], config=(0, 0, 77, 0))
    with pytest.raises(DatasetError, match=r"replay records of .*: row 4: knob 'tile_i1': index 77 out of range"):
        DataSource(records)
    # a catalog footer's reference, re-sealed beyond what a CPU does, is refused when read
    _edit(saved, tmp_path / "dense_compact.parquet", meta_edit=lambda m: m.update(
        references={"h": {"gflops": 1e9, "method": "x", "samples": [], "host": "h"}}), reseal=True)
    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path))
    with pytest.raises(DatasetError, match=r"dense_compact.parquet: its reference: reference 1000000000.0 GFLOPS"):
        DataSource().reference(Task.from_uri(DENSE), "compact")


# ---------------------------------------------------------------------- property: no silent change
def _numbers(ds: Dataset) -> tuple:
    ref = ds.reference
    return (ds.configs.tolist(), np.round(ds.gflops, 12).tolist(), ds.flops, ref and ref.gflops, ds.exhaustive,
            [r.error for r in ds.results], ds.task.uri, ds.preset)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True)
                    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
FOOTER_FIELDS = ["flops", "references", "task", "preset", "fingerprint", "space_size", "hosts", "knobs", "rows",
                 "checksum", "seal", "schema", "collection"]


def _cell(column: str, old, data):
    """A new value for one cell, of the column's kind."""
    if column == "config":
        return data.draw(st.lists(st.integers(-2, 40), min_size=4, max_size=4))
    if column == "costs":
        return data.draw(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3))
    if column in ("build_secs", "run_secs", "time", "reference_gflops"):
        return data.draw(st.floats(allow_nan=True) | st.just(old * 10 if old == old else 1.0))
    if column in ("error", "mode"):
        return data.draw(st.sampled_from([None, "invalid", "timeout", "random", "records", "x"]))
    return data.draw(st.text(max_size=6) | st.just("{}"))


@SETTINGS
@given(data=st.data())
def test_random_edits_never_load_with_changed_numbers(saved, original, tmp_path, data):
    table, meta = _read(saved)
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.booleans()):
            field = data.draw(st.sampled_from(FOOTER_FIELDS))
            if field == "references" and meta["references"] and data.draw(st.booleans()):
                host = next(iter(meta["references"]))
                meta["references"][host]["gflops"] = data.draw(st.floats(allow_nan=True))
            else:
                meta[field] = data.draw(JSON)
        else:
            column = data.draw(st.sampled_from([c for c in COLUMNS if c != "knobs"]))
            row = data.draw(st.integers(0, table.num_rows - 1))
            i = table.column_names.index(column)
            values = table.column(column).to_pylist()
            values[row] = _cell(column, values[row], data)
            kind = table.schema.field(i).type
            try:
                array = pa.array(values, kind.value_type if pa.types.is_dictionary(kind) else kind)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                continue
            table = table.set_column(i, column, array.dictionary_encode() if pa.types.is_dictionary(kind) else array)
    path = _write(tmp_path / f"edit_{data.draw(st.integers(0, 10**9))}.parquet", table, meta)
    try:
        ds = load_dataset(path)
    except DatasetError:
        return
    assert _numbers(ds) == _numbers(original)


@SETTINGS
@given(raw=st.binary(max_size=40))
def test_any_footer_bytes_load_or_give_one_line(saved, tmp_path, raw):
    table, _ = _read(saved)
    path = tmp_path / "raw.parquet"
    pq.write_table(table.replace_schema_metadata({b"tune_gym": raw}), path)
    with pytest.raises(DatasetError) as err:
        load_dataset(path)
    _one_line(err)


# ---------------------------------------------------------------------- validity label files (shared reader)
@pytest.fixture(scope="module")
def label_file(tmp_path_factory) -> Path:
    from tune_gym.datasets import space_fingerprint
    from tune_gym.datasets.validity import ValidityLabels, save_validity
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    space = KnobSpace.for_task(Task.from_uri(DENSE), "compact")
    labels = ValidityLabels(DENSE, "compact", space_fingerprint(space), space.size,
                            np.array([space.config(i) for i in range(6)]), [True] * 5 + [False],
                            [""] * 5 + ["other"], [""] * 5 + ["no"])
    return save_validity(labels, tmp_path_factory.mktemp("labels") / "labels.parquet")


def _relabel(src: Path, out: Path, header_edit=None, configs=None) -> Path:
    from tune_gym.datasets.validity import META_KEY

    table = pq.read_table(src)
    header = json.loads(table.schema.metadata[META_KEY])
    if header_edit:
        header_edit(header)
    if configs is not None:
        table = table.set_column(0, "config", pa.array(configs, table.schema.field(0).type))
        header["checksum"] = rows_checksum(table)
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(header).encode()}), out)
    return out


def test_label_files_share_the_checked_reader(label_file, tmp_path):
    from tune_gym.datasets.validity import META_KEY, ValidityError, load_validity

    assert load_validity(label_file).n_valid == 5
    table = pq.read_table(label_file)
    pq.write_table(table.replace_schema_metadata({META_KEY: b"[]"}), tmp_path / "list.parquet")
    with pytest.raises(ValidityError, match="metadata is a JSON list, not an object") as err:
        load_validity(tmp_path / "list.parquet")
    _one_line(err)
    _relabel(label_file, tmp_path / "size.parquet", header_edit=lambda h: h.update(space_size=10**9))
    with pytest.raises(ValidityError, match="its metadata says space_size 1000000000, but it is 200"):
        load_validity(tmp_path / "size.parquet")
    _relabel(label_file, tmp_path / "count.parquet", header_edit=lambda h: h.update(valid=6))
    with pytest.raises(ValidityError, match="its metadata says valid 6, but it is 5"):
        load_validity(tmp_path / "count.parquet")
    configs = [[0, 0, 0, 0]] * 5 + [[0, 0, 77, 0]]
    _relabel(label_file, tmp_path / "range.parquet", configs=configs)
    with pytest.raises(ValidityError, match=r"row 5: knob '.*': index 77 out of range"):
        load_validity(tmp_path / "range.parquet")


def test_committed_label_files_keep_their_checksums():
    """Label files hash as datasets do (no dictionary columns): the committed checksums hold."""
    from tune_gym.datasets.validity import read_header

    files = sorted((REPO_DATA / "cuda_validity").glob("*.parquet"))[:3]
    assert files
    for path in files:
        assert rows_checksum(pq.read_table(path)) == read_header(path)["checksum"]
