"""Packed results (benchmarks.leaderboard.packed) and the journal that feeds them (results.py):
lossless on real runs and odd values, crash-safe at every step of a pack and of a compaction,
appended a segment at a time (each linked to the one before), named by either file."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks.leaderboard import packed as P
from benchmarks.leaderboard.results import (
    ResultsError,
    ResultsFile,
    compact_results,
    pack_results,
    read_results,
    results_lines,
    results_paths,
    scan_results,
    unpack_results,
)
from benchmarks.leaderboard.suite import Suite
from tune_gym.cli import main
from tune_gym.jsonl import JsonlAppender

COMMITTED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "leaderboard"
#: SHA-256 of the JSON Lines files the committed packed files were converted from (``git show
#: 789cf16:benchmarks/results/leaderboard/NAME.jsonl | sha256sum``: the files before they were packed).
ORIGINAL_SHA256 = {
    "oneshot_ablation": "a8faabf623a6b2176f5ed875336c7c31c39a025eb94dc4c7e82d49f146bc8e22",
    "metatune_ablation": "cfba8fd7cbc237e9ce98742690df4e852bda1c7d428f4ca7605e9a1b420a96e4",
    "vta": "64ea0d92b9b59801fc68165eb5977db784327e69b0d41eacae0f9f02f6714950",
}


def _texts(path: Path) -> list[str]:
    return [P.line_text(obj) for obj in results_lines(path)]


def _sha256_of_lines(texts: list[str]) -> str:
    return hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest()


def _sample(name: str, runs: int) -> list[str]:
    """The header and the first ``runs`` runs of a committed packed results file, as JSON text."""
    packed = P.read_packed(COMMITTED / f"{name}.parquet", verify=False)
    return [P.line_text(packed.header), *(P.line_text(r) for r in P.decode(packed.table.slice(0, runs)))]


def _journal(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(t + "\n" for t in texts))
    return path


@pytest.fixture(scope="module")
def real() -> list[str]:
    """Real lines: the header and 12 runs of the One-Shot Tuner ablation (64 trials each)."""
    return _sample("oneshot_ablation", 12)


# ------------------------------------------------------------------------------------------ lossless


@pytest.mark.parametrize("name", ["oneshot_ablation", "metatune_ablation"])
def test_a_committed_packed_file_gives_back_the_json_lines_it_was_packed_from(name):
    assert _sha256_of_lines(_texts(COMMITTED / f"{name}.parquet")) == ORIGINAL_SHA256[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vta"])
def test_the_large_committed_packed_files_give_back_their_json_lines(name):
    assert _sha256_of_lines(_texts(COMMITTED / f"{name}.parquet")) == ORIGINAL_SHA256[name]
    read_results(COMMITTED / f"{name}.parquet", verify=True)  # rows against the checksum


@pytest.mark.parametrize("name", ["oneshot_ablation", "metatune_ablation", "standard-v1", "vta"])
def test_real_runs_of_each_committed_file_pack_and_unpack_bit_for_bit(tmp_path, name):
    texts = _sample(name, 3)
    journal = _journal(tmp_path / f"{name}.jsonl", texts)
    assert pack_results(journal) == 3
    assert journal.read_text() == ""  # the journal is emptied
    table = P.read_packed(tmp_path / f"{name}.parquet").table
    # every field in its typed column, but for where a run taken over from other results came from
    expected = {json.dumps({"reused_from": json.loads(t)["reused_from"]}) if "reused_from" in t else None
                for t in texts[1:]}
    assert set(table.column("verbatim").to_pylist()) == expected
    assert _texts(tmp_path / f"{name}.parquet") == texts
    unpack_results(tmp_path / f"{name}.parquet", tmp_path / "back.jsonl")
    assert (tmp_path / "back.jsonl").read_text() == "".join(t + "\n" for t in texts)


def _odd_runs(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs with values the typed columns cannot hold, or that JSON text must keep exactly."""
    n = len(run["configs"])
    odd = [
        {**run, "gflops": [math.nan, math.inf, -math.inf, -0.0, *run["gflops"][4:]]},  # non-finite, negative zero
        {**run, "gflops": [0, *run["gflops"][1:]]},  # an int among floats
        {**run, "clock": [math.nan] + run["clock"][1:]},  # a clock its steps cannot give back
        {**run, "clock": [5e-324, 1e308, 1.7976931348623157e308] + run["clock"][3:]},
        {**run, "configs": [[True, *run["configs"][0][1:]], *run["configs"][1:]]},  # a bool is no knob index
        {**run, "configs": [[2 ** 40, *run["configs"][0][1:]], *run["configs"][1:]]},  # beyond int32
        {**run, "configs": [run["configs"][0][:2], *run["configs"][1:]]},  # configs of two lengths
        {**run, "errors": ["invalid", 3, *run["errors"][2:]]},
        {**run, "ended": None, "extra_field": {"nested": [1, 2.5, None, "é\ud800"]}},
        {**run, "host": "h\ud800st", "key": "k€y"},  # a lone surrogate (JSON can carry one), non-ASCII
        {**run, "space_size": 2 ** 70, "flops": 1.5, "time": 17},
        {**run, "spec": {**run["spec"], "seed": True}},
        {**run, "spec": dict(reversed(list(run["spec"].items())))},  # another key order
        dict(reversed(list(run.items()))),
        {k: v for k, v in run.items() if k not in ("agent_info", "data")},
        {**run, "configs": [], "gflops": [], "errors": [], "clock": [], "not_applicable": "no"},
        {**run, "agent_info": {"b": 1, "a": [math.nan, -0.0]}, "data": []},
    ]
    assert all(len(r["configs"]) in (n, 0) for r in odd)
    return odd


def test_odd_values_pack_losslessly_and_plain_ones_stay_in_their_columns(real, tmp_path, monkeypatch):
    runs = [json.loads(t) for t in real[1:3]]
    odd = _odd_runs(runs[0])
    table = P.encode([*runs, *odd])
    back = P.decode(table)
    assert [P.line_text(r) for r in back] == [P.line_text(r) for r in [*runs, *odd]]
    verbatim = table.column("verbatim").to_pylist()
    assert verbatim[:2] == [None, None]
    assert json.loads(verbatim[2 + 1]) == {"gflops": odd[1]["gflops"]}  # only the odd field is kept as JSON
    # the same through a journal, a pack (4 runs at a time), the packed file and an unpack
    monkeypatch.setattr(P, "CHUNK", 4)
    texts = [real[0], *(P.line_text(r) for r in [*runs, *odd])]
    _journal(tmp_path / "odd.jsonl", texts)
    pack_results(tmp_path / "odd.jsonl")
    assert _texts(tmp_path / "odd.parquet") == texts


def test_a_suite_update_keeps_its_place_and_line_numbers_are_those_of_the_json_lines(real, tmp_path):
    header = json.loads(real[0])
    update = {"suite_update": header["suite"], "suite_digest": header["suite_digest"], "time": 1.5}
    texts = [real[0], real[1], real[2], P.line_text(update), real[3]]
    _journal(tmp_path / "r.jsonl", texts)
    pack_results(tmp_path / "r.jsonl")
    scan = scan_results(tmp_path / "r.parquet", verify=True)
    assert [r.lineno for r in scan.runs] == [2, 3, 5] and [v.lineno for v in scan.versions] == [1, 4]
    assert {r.source for r in scan.runs} == {tmp_path / "r.parquet"}
    assert _texts(tmp_path / "r.jsonl") == texts


def test_results_without_runs_pack_to_a_file_of_no_rows(real, tmp_path):
    _journal(tmp_path / "r.jsonl", real[:1])
    assert pack_results(tmp_path / "r.parquet") == 0
    assert P.read_packed(tmp_path / "r.parquet").rows == 0 and _texts(tmp_path / "r.parquet") == real[:1]
    assert pack_results(tmp_path / "r.parquet") == 0  # an empty journal: nothing to do


# ------------------------------------------------------------------------------------------ crash safety


def _fail(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Make a pack stop at ``step``, as a kill there would."""
    import pyarrow.parquet as pq

    from tune_gym.datasets import parquet_io

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt(step)

    if step == "encode":
        monkeypatch.setattr(P, "encode", boom)
    elif step == "write":  # half a temp file on disk
        def half(table: Any, where: Any, **kwargs: Any) -> None:
            Path(where).write_bytes(b"PAR1" + b"\0" * 100)
            raise KeyboardInterrupt(step)
        monkeypatch.setattr(pq, "write_table", half)
    elif step == "rename":  # the temp file complete, not renamed
        monkeypatch.setattr(parquet_io.os, "replace", boom)
    elif step == "empty":  # renamed, the journal not emptied
        monkeypatch.setattr(JsonlAppender, "clear", boom)


def _session(path: Path, texts: list[str]) -> None:
    """A later bench session appending the runs ``texts`` to the results ``path``."""
    suite = Suite.from_dict(json.loads(_texts(path)[0])["suite"])
    with ResultsFile.open(path, suite) as results:
        for text in texts:
            results.append(json.loads(text))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("step", ["encode", "write", "rename", "empty"])
def test_a_pack_killed_at_any_step_loses_nothing_and_counts_nothing_twice(real, tmp_path, monkeypatch, step):
    path = tmp_path / "r.parquet"
    _journal(tmp_path / "r.jsonl", real[:5])
    pack_results(path)  # 4 runs packed: the first file
    _session(path, real[5:9])
    assert pack_results(path) == 4  # the first segment
    first = _digest(path)
    header = json.loads(real[0])
    suite = Suite.from_dict(header["suite"])
    with ResultsFile.open(path, suite) as results:  # a later session appends 4 more
        assert results.done == {json.loads(t)["key"] for t in real[1:9]}
        for text in real[9:]:
            results.append(json.loads(text))
    every = real
    with monkeypatch.context() as m:
        _fail(m, step)
        with pytest.raises(KeyboardInterrupt, match=step):
            pack_results(path)
    assert _texts(path) == every  # all runs, once each, in order
    _, runs = read_results(tmp_path / "r.jsonl")
    assert len(runs) == len({r["key"] for r in runs}) == len(every) - 1
    with ResultsFile.open(path, suite) as results:  # a resumed bench has nothing left to run
        assert results.done == {json.loads(t)["key"] for t in every[1:]}
        assert results.pack() == (0 if step == "empty" else 4)
    assert (tmp_path / "r.jsonl").read_text() == ""
    assert _digest(path) == first  # the first file is never rewritten
    assert [P.read_packed(f).rows for f in P.segment_paths(path)] == [4, 4]
    assert _texts(path) == every
    assert not list(P.segments_dir(path).glob("*.tmp")) or step == "write"


# ------------------------------------------------------------------------------------------ segments


def test_each_pack_appends_a_segment_that_reads_as_one_file_with_the_first(real, tmp_path):
    header = json.loads(real[0])
    update = P.line_text({"suite_update": header["suite"], "suite_digest": header["suite_digest"], "time": 2.5})
    texts = [*real[:4], update, *real[4:]]  # a suite update in the second session
    path = tmp_path / "r.parquet"
    _journal(tmp_path / "r.jsonl", texts[:4])
    assert pack_results(path) == 3
    _journal(tmp_path / "r.jsonl", [real[0], *texts[4:8]])
    assert pack_results(path) == 3
    _journal(tmp_path / "r.jsonl", [real[0], *texts[8:]])
    assert pack_results(path) == 6
    assert P.segment_paths(path) == [tmp_path / "r.parquet.d" / f"000{i}.parquet" for i in (1, 2)]
    parts = P.read_parts(path, verify=True)
    assert [(p.rows, len(p.updates)) for p in parts] == [(3, 0), (3, 1), (6, 0)]
    assert [p.segment["first_line"] for p in parts[1:]] == [5, 9]
    assert parts[1].segment["previous"] == parts[0].seal and parts[2].segment["previous"] == parts[1].seal
    scan = scan_results(path, verify=True)
    assert [r.lineno for r in scan.runs] == [2, 3, 4, 6, 7, 8, *range(9, 15)]
    assert [v.lineno for v in scan.versions] == [1, 5] and scan.versions[1].source == parts[1].path
    assert scan.runs[3].source == parts[1].path and scan.runs[-1].where == f"{parts[2].path}:14"
    assert _texts(path) == texts
    # unpacked, the segments give back what the same runs packed as one file give back, byte for byte
    _journal(tmp_path / "one.jsonl", texts)
    pack_results(tmp_path / "one.jsonl")
    assert not P.segments_dir(tmp_path / "one.parquet").exists()
    unpack_results(path, tmp_path / "back.jsonl")
    unpack_results(tmp_path / "one.parquet", tmp_path / "one_back.jsonl")
    assert (tmp_path / "back.jsonl").read_bytes() == (tmp_path / "one_back.jsonl").read_bytes() \
        == "".join(t + "\n" for t in texts).encode()


def test_a_pack_reads_only_the_footers_and_keys_of_the_runs_packed_before(real, tmp_path, monkeypatch):
    from tune_gym.datasets import parquet_io

    path = tmp_path / "r.parquet"
    _journal(tmp_path / "r.jsonl", real[:5])
    pack_results(path)
    _session(path, real[5:9])
    pack_results(path)
    _session(path, real[9:])
    reads: list[tuple[str, tuple[str, ...], bool]] = []
    decoded: list[int] = []
    read_rows, decode = parquet_io.read_rows, P.decode

    def spy_read(where: Any, columns: Any, *args: Any, only: bool = False) -> Any:
        reads.append((Path(where).name, tuple(columns), only))
        return read_rows(where, columns, *args, only=only)

    def spy_decode(table: Any) -> Any:
        decoded.append(table.num_rows)
        return decode(table)

    monkeypatch.setattr(parquet_io, "read_rows", spy_read)
    monkeypatch.setattr(P, "decode", spy_decode)
    assert pack_results(path) == 4
    assert reads == [("r.parquet", ("key", "verbatim"), True), ("0001.parquet", ("key", "verbatim"), True)]
    assert decoded == [4]  # only the new runs, as encode checks them


def _three_segments(real: list[str], path: Path) -> None:
    _journal(path.with_suffix(".jsonl"), real[:4])
    pack_results(path)
    for texts in (real[4:7], real[7:10], real[10:]):
        _session(path, texts)
        pack_results(path)
    assert len(P.segment_paths(path)) == 3


def test_a_missing_renamed_swapped_or_foreign_segment_is_refused(real, tmp_path):
    path, folder = tmp_path / "r.parquet", tmp_path / "r.parquet.d"
    _three_segments(real, path)
    seg = [folder / f"000{i}.parquet" for i in (1, 2, 3)]
    kept = {f: f.read_bytes() for f in seg}

    def refused(pattern: str) -> None:
        with pytest.raises(ResultsError, match=pattern):
            read_results(path)
        for f, data in kept.items():  # restore
            f.write_bytes(data)

    seg[0].unlink()
    refused(r"0002\.parquet: segment 1, .*0001\.parquet, is missing before it")
    seg[1].rename(folder / "0004.parquet")
    refused(r"0003\.parquet: segment 2, .*0002\.parquet, is missing before it")
    (folder / "0004.parquet").unlink()
    seg[0].write_bytes(kept[seg[1]])
    seg[1].write_bytes(kept[seg[0]])
    refused(r"0001\.parquet: holds segment 2, not 1: segment files were renamed or swapped")
    other = tmp_path / "other" / "r.parquet"  # the same runs packed in other sessions
    other.parent.mkdir()
    _journal(other.with_suffix(".jsonl"), real[:3])
    pack_results(other)
    _session(other, real[3:7])
    pack_results(other)
    seg[0].write_bytes((other.parent / "r.parquet.d" / "0001.parquet").read_bytes())
    refused(r"0001\.parquet: does not follow .*r\.parquet \(its link to it differs\)")
    (folder / "notes.txt").write_text("x")
    refused(r"notes\.txt: not a segment of .*r\.parquet \(they are named 0001\.parquet, 0002\.parquet")
    (folder / "notes.txt").unlink()
    shutil.copyfile(path, seg[1])  # a first file is no segment
    refused(r"0002\.parquet: not a segment \(its footer has no segment link\)")
    assert _texts(path) == real


def test_an_edited_segment_is_refused_naming_it(real, tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "r.parquet"
    _three_segments(real, path)
    seg = P.segment_path(path, 2)
    table = pq.read_table(seg)
    footer = json.loads(table.schema.metadata[P.META_KEY])
    gflops = table.column("gflops").to_pylist()
    gflops[0][0] *= 2
    edited = table.set_column(table.column_names.index("gflops"), "gflops", [gflops])
    pq.write_table(edited.replace_schema_metadata({P.META_KEY: json.dumps(footer).encode()}), seg)
    read_results(path)
    with pytest.raises(ResultsError, match=r"0002\.parquet: checksum mismatch"):
        read_results(path, verify=True)
    footer["segment"]["first_line"] = 2
    pq.write_table(table.replace_schema_metadata({P.META_KEY: json.dumps(footer).encode()}), seg)
    with pytest.raises(ResultsError, match=r"0002\.parquet: seal mismatch"):
        read_results(path)


# ------------------------------------------------------------------------------------------ compaction


def test_compaction_merges_the_segments_into_one_file_and_packs_go_on_after_it(real, tmp_path, capsys):
    path = tmp_path / "r.parquet"
    _three_segments(real, path)
    seals = [P.read_packed(f, verify=False, columns=None).seal for f in P.segment_paths(path)]
    assert main(["results", "pack", "--compact", str(path)]) == 0
    assert "r.parquet: 3 segments merged into it" in capsys.readouterr().out
    assert not P.segments_dir(path).exists()
    merged = P.read_packed(path)
    assert merged.rows == 12 and merged.merged == tuple(seals)
    assert _texts(path) == real
    assert compact_results(path) == 0  # nothing left to merge
    extra = json.loads(real[1])
    extra["key"] += "/again"
    _session(path, [P.line_text(extra)])  # later runs go on as segments of the merged file
    assert pack_results(path) == 1
    assert P.read_parts(path)[1].segment == {"index": 1, "first_line": 14, "previous": merged.seal}
    assert _texts(path) == [*real, P.line_text(extra)]


def test_a_reader_that_a_compaction_overtakes_reads_the_files_again(real, tmp_path, monkeypatch):
    path = tmp_path / "r.parquet"
    _three_segments(real, path)
    listed, listings = P.segment_paths, []

    def then_compaction(where: Any) -> list[Path]:
        files = listed(where)
        listings.append(len(files))
        if len(listings) == 1:  # between the reader's listing and its reading
            assert P.merge_segments(path) == 3
        return files

    monkeypatch.setattr(P, "segment_paths", then_compaction)
    assert _texts(path) == real
    assert listings[0] == 3 and listings[-1] == 0


@pytest.mark.parametrize("step", ["write", "rename", "remove", "remove_one"])
def test_a_compaction_killed_at_any_step_loses_nothing_and_counts_nothing_twice(real, tmp_path, monkeypatch, step):
    path = tmp_path / "r.parquet"
    _three_segments(real, path)
    with monkeypatch.context() as m:
        if step in ("write", "rename"):
            _fail(m, step)
        else:  # the merged file renamed into place; none, or one, of the segments removed
            unlink = Path.unlink

            def boom(self: Path, *args: Any, **kwargs: Any) -> None:
                if step == "remove_one" and self.name == "0001.parquet":
                    return unlink(self, *args, **kwargs)
                raise KeyboardInterrupt(step)
            m.setattr(Path, "unlink", boom)
        with pytest.raises(KeyboardInterrupt, match=step):
            compact_results(path)
    assert _texts(path) == real  # all runs, once each, in order
    read_results(path, verify=True)
    left = len(P.segment_paths(path))
    assert left == {"write": 3, "rename": 3, "remove": 3, "remove_one": 2}[step]
    assert (P.read_packed(path).rows == 12) == (step.startswith("remove"))
    extra = json.loads(real[1])
    extra["key"] += "/again"
    _session(path, [P.line_text(extra)])  # a pack after it removes what the compaction left
    assert pack_results(path) == 1
    assert len(P.segment_paths(path)) == (1 if step.startswith("remove") else 4)
    assert _texts(path) == [*real, P.line_text(extra)]
    assert compact_results(path) >= 1 and not P.segments_dir(path).exists()
    assert _texts(path) == [*real, P.line_text(extra)]


def test_a_journal_beside_a_packed_file_starts_with_its_header_and_is_read_after_it(real, tmp_path):
    path = tmp_path / "r.parquet"
    _journal(tmp_path / "r.jsonl", real[:3])
    pack_results(path)
    suite = Suite.from_dict(json.loads(real[0])["suite"])
    with ResultsFile.open(tmp_path / "r.jsonl", suite) as results:
        results.append(json.loads(real[3]))
    assert (tmp_path / "r.jsonl").read_text().splitlines() == [real[0], real[3]]
    with open(tmp_path / "r.jsonl", "a") as f:
        f.write(real[4][:50])  # a killed writer's torn line
    with pytest.warns(UserWarning, match=r"r\.jsonl:3: skipping a torn line"):
        assert _texts(path) == real[:4]
    with pytest.warns(UserWarning, match="cut off a truncated last line"):
        assert pack_results(path) == 1
    assert _texts(path) == real[:4]


# ------------------------------------------------------------------------------------------ refusals


def test_packing_refuses_a_corrupt_journal_line_and_another_results_journal(real, tmp_path):
    _journal(tmp_path / "r.jsonl", [real[0], real[1], "[1, 2]", real[2]])
    with pytest.raises(ResultsError, match=r"r\.jsonl:3: a JSON list, not an object: packing would drop it"):
        pack_results(tmp_path / "r.jsonl")
    assert not (tmp_path / "r.parquet").exists()
    _journal(tmp_path / "r.jsonl", real[:3])
    pack_results(tmp_path / "r.jsonl")
    other = dict(json.loads(real[0]), created=0.0)
    _journal(tmp_path / "r.jsonl", [json.dumps(other), real[3]])
    with pytest.raises(ResultsError, match=r"r\.jsonl:1: not the header of .*r\.parquet"):
        read_results(tmp_path / "r.parquet")


def test_an_edited_packed_file_is_refused(real, tmp_path):
    import pyarrow.parquet as pq

    _journal(tmp_path / "r.jsonl", real[:4])
    pack_results(tmp_path / "r.jsonl")
    table = pq.read_table(tmp_path / "r.parquet")
    footer = json.loads(table.schema.metadata[P.META_KEY])
    gflops = table.column("gflops").to_pylist()
    gflops[1][0] *= 2
    edited = table.set_column(table.column_names.index("gflops"), "gflops", [gflops])
    pq.write_table(edited.replace_schema_metadata({P.META_KEY: json.dumps(footer).encode()}), tmp_path / "r.parquet")
    read_results(tmp_path / "r.parquet")  # a reader that does not verify reads it
    with pytest.raises(ResultsError, match="checksum mismatch"):
        read_results(tmp_path / "r.parquet", verify=True)
    assert main(["validate", str(tmp_path / "r.parquet"), "--rerun", "0"]) == 2
    footer["rows"] = 2
    pq.write_table(table.replace_schema_metadata({P.META_KEY: json.dumps(footer).encode()}), tmp_path / "r.parquet")
    with pytest.raises(ResultsError, match="seal mismatch"):
        read_results(tmp_path / "r.parquet")


def test_names_and_one_line_errors(tmp_path, capsys):
    assert results_paths("a/b.jsonl") == results_paths("a/b.parquet") == (Path("a/b.parquet"), Path("a/b.jsonl"))
    with pytest.raises(ResultsError, match=r"name them by their packed file \(\.parquet\) or their journal"):
        results_paths("a/b.json")
    with pytest.raises(ResultsError, match="does not exist"):
        read_results(tmp_path / "none.parquet")
    (tmp_path / "d.parquet").write_bytes(b"not parquet")
    with pytest.raises(ResultsError, match="not a readable Parquet file"):
        read_results(tmp_path / "d.jsonl")
    for argv in (["results", "pack", str(tmp_path / "none.jsonl")], ["leaderboard", str(tmp_path / "d.parquet")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err


def test_the_results_command_packs_and_unpacks(real, tmp_path, capsys):
    _journal(tmp_path / "r.jsonl", real)
    assert main(["results", "pack", str(tmp_path / "r.jsonl")]) == 0
    assert "12 runs moved" in capsys.readouterr().out
    assert main(["results", "unpack", str(tmp_path / "r.parquet"), str(tmp_path / "u.jsonl")]) == 0
    assert (tmp_path / "u.jsonl").read_text() == "".join(t + "\n" for t in real)
    assert main(["results", "unpack", str(tmp_path / "r.parquet"), str(tmp_path / "u.jsonl")]) == 2
    assert "u.jsonl exists: unpack into a new file" in capsys.readouterr().err
    (tmp_path / "r.jsonl").unlink()  # the emptied journal
    assert main(["results", "unpack", str(tmp_path / "r.parquet"), str(tmp_path / "r.jsonl")]) == 2
    assert "r.jsonl would be the journal of" in capsys.readouterr().err
    assert os.path.getsize(tmp_path / "r.parquet") * 2 < len("".join(real))
