"""Record logs are trusted only after checking: strict lines, records checked against their task
and space, logs written through one locked crash-safe JSONL module (tune_gym.jsonl)."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tune_gym.cli import main
from tune_gym.errors import RecordError
from tune_gym.jsonl import JsonlAppender, JsonlError, append_json, read_jsonl
from tune_gym.measure.replay import ReplayBackend
from tune_gym.records import Record, RecordWriter, best_records, check_record, load_records
from tune_gym.session import TuningSession

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"  # the task of DATA (conftest's dense_task)
ROOT = Path(__file__).resolve().parents[1]


def good_lines(n: int = 3) -> list[dict[str, Any]]:
    """The first ``n`` records of DATA (measured records of DENSE, compact preset) as JSON objects."""
    with open(DATA) as f:
        return [json.loads(next(f)) for _ in range(n)]


def edit(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def write_log(path: Path, objs: list[Any]) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def log_with(tmp_path: Path, bad: Any, name: str = "log.jsonl") -> Path:
    """A log whose line 2 is ``bad`` between two good records."""
    first, _, third = good_lines()
    return write_log(tmp_path / name, [first, bad, third])


def fast(obj: dict[str, Any], seconds: float = 6e-9) -> dict[str, Any]:
    """``obj`` as a success of ``seconds`` per call (6 ns: 10923 GFLOPS, within the llvm bound)."""
    return edit(edit(obj, ("result", "costs"), [seconds] * 3), ("result", "error"), None)


# ---------------------------------------------------------------------- impossible costs
@pytest.mark.parametrize("cost", [1e-9, 1e-30, 0.0, -1e-5, math.nan, math.inf])
def test_an_impossible_cost_is_refused_not_a_success(tmp_path, cost):
    log = log_with(tmp_path, fast(good_lines()[1], cost))
    refused = r"log\.jsonl:2: result.* costs? .* (is not a measured time|are not a list of finite numbers)"
    with pytest.raises(RecordError, match=refused):
        load_records(log)
    with pytest.raises(RecordError, match=r"log\.jsonl:2:"):
        load_records(log, check=False)  # the line's own fields are checked however it is read


def test_a_throughput_beyond_the_target_is_refused(tmp_path, dense_task):
    # the task's FLOP count claimed by a record of a 2^40-FLOP op: 10^8 GFLOPS on a CPU
    line = edit(fast(good_lines()[1], 1e-5), ("result", "flops"), 2 ** 40)
    with pytest.raises(RecordError, match=r":2: result flops 1099511627776 is not the task's FLOP count 65536"):
        load_records(log_with(tmp_path, line))
    big = Record.from_json(edit(edit(line, ("task",), "op://dense-v1/m8192_n8192_k8192?target=llvm"),
                                ("result", "flops"), 2 * 8192 ** 3))
    with pytest.raises(RecordError, match=r"measured throughput .* is not a possible measurement on a llvm target"):
        check_record(big)


def test_an_impossible_reference_is_refused(tmp_path):
    ref = {"gflops": 1e9, "method": "made up", "samples": [1e9], "host": "abc"}
    with pytest.raises(RecordError, match=r":2: reference 1000000000.0 GFLOPS is not a possible measurement"):
        load_records(log_with(tmp_path, {**good_lines()[1], "reference": ref}))


# ---------------------------------------------------------------------- configs
@pytest.mark.parametrize("config, message", [
    ([-1, 0, 0, 0], r"config \[-1, 0, 0, 0\] is not a list of knob indices"),
    ([0, 0, 0, 99], r"config \[0, 0, 0, 99\] is not in the compact space: knob 'unroll_explicit': index 99 out of "
                    r"range \[0, 3\]"),
    ([0, 0, 0], r"config \[0, 0, 0\] is not in the compact space: config has 3 values but the space has 4 knobs"),
    ("0123", r"config '0123' is not a list of knob indices"),
    ([True, 0, 0, 0], r"config \[True, 0, 0, 0\] is not a list of knob indices"),
    ([0.0, 0, 0, 0], r"config \[0.0, 0, 0, 0\] is not a list of knob indices"),
    ([0, 0, 0, 2], r"knobs .* are not the values of config \[0, 0, 0, 2\]"),  # the line's knobs are of [0, 0, 0, 1]
])
def test_a_bad_config_is_refused(tmp_path, config, message):
    with pytest.raises(RecordError, match=r"log\.jsonl:2: " + message):
        load_records(log_with(tmp_path, edit(good_lines()[1], ("config",), config)))


def test_listing_without_the_space_check(tmp_path):
    out_of_range = edit(good_lines()[1], ("config",), [0, 0, 0, 99])
    log = log_with(tmp_path, out_of_range)
    assert [r.config for r in load_records(log, check_space=False)][1] == (0, 0, 0, 99)
    with pytest.raises(RecordError, match=":2:"):
        load_records(log)
    # records of other tasks are parsed but not checked against their space
    assert load_records(log, task="op://dense-v1/m16_n16_k16?target=llvm") == []


# ---------------------------------------------------------------------- strict fields
@pytest.mark.parametrize("change, message", [
    (lambda d: {k: v for k, v in d.items() if k != "knobs"}, r"record has no 'knobs' field"),
    (lambda d: {**d, "extra_field": 1}, r"record has unknown field\(s\) 'extra_field'"),
    (lambda d: {**d, "schema": True}, r"record schema True is not the supported version 1"),
    (lambda d: {**d, "schema": 1.0}, r"record schema 1.0 is not the supported version 1"),
    (lambda d: {**d, "task": "op://nope-v1/m1?target=llvm"}, r"task: .*nope"),
    (lambda d: {**d, "task": " " + DENSE}, r"task ' op://dense.* is not in its canonical form"),
    (lambda d: {**d, "preset": "fast"}, r"preset 'fast' is not a space preset"),
    (lambda d: {**d, "backend": 3}, r"backend 3 is not a string"),
    (lambda d: {**d, "time": "now"}, r"time 'now' is not a unix time"),
    (lambda d: {**d, "time": -1.0}, r"time -1.0 is not a unix time"),
    (lambda d: {**d, "knobs": []}, r"knobs \[\] is not a JSON object"),
    (lambda d: {**d, "reference": None}, r"reference None is not a JSON object"),
    (lambda d: {**d, "reference": {"gflops": 20.0}}, r"reference has no 'method', 'samples', 'host' field"),
    (lambda d: edit(d, ("result", "flops"), 65536.0), r"result: flops 65536.0 is not a FLOP count"),
    (lambda d: {**d, "result": {k: v for k, v in d["result"].items() if k != "build_secs"}},
     r"result has no 'build_secs' field"),
    (lambda d: [d], r"a record is a JSON object, not a list"),
])
def test_fields_are_strict(tmp_path, change, message):
    with pytest.raises(RecordError, match=r"log\.jsonl:2: " + message):
        load_records(log_with(tmp_path, change(good_lines()[1])))


def test_good_records_still_read(tmp_path):
    ref = {"gflops": 20.0, "method": "test", "samples": [19.0, 20.0, 21.0], "host": "abc"}
    failed = edit(edit(good_lines()[2], ("result", "error"), "run_error"), ("result", "costs"), [])
    lines = [good_lines()[0], {**good_lines()[1], "reference": ref}, failed]
    records = load_records(write_log(tmp_path / "log.jsonl", lines))
    assert [r.to_json() for r in records] == lines
    assert records[1].reference is not None and records[1].reference.gflops == 20.0
    assert not records[2].result.ok


# ---------------------------------------------------------------------- best, resume, convert
def test_best_refuses_a_bad_record_instead_of_crowning_it(tmp_path, capsys):
    fastest = fast(edit(good_lines()[1], ("config",), [-1, 0, 0, 0]))
    log = log_with(tmp_path, fastest)
    assert main(["best", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "log.jsonl:2: config [-1, 0, 0, 0] is not a list of knob indices" in err
    good = [r for r in load_records(DATA) if r.task == DENSE][:3]
    assert best_records(good)[DENSE].config in {r.config for r in good}


def test_resume_refuses_an_out_of_range_config(tmp_path, dense_task, dense_space, capsys):
    log = log_with(tmp_path, edit(good_lines()[1], ("config",), [0, 0, 0, 99]))
    backend = ReplayBackend(DATA)
    with pytest.raises(RecordError, match=r"log\.jsonl:2: config \[0, 0, 0, 99\] is not in the compact space"):
        TuningSession(dense_task, dense_space, backend, log=log, resume=True)
    RecordWriter(log).close()  # the failed session let go of the log
    argv = ["tune", DENSE, "--preset", "compact", "--trials", "2", "--batch", "2", "--log", str(log), "--resume",
            "--backend", "replay", "-b", f"dataset={DATA}", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "log.jsonl:2: config [0, 0, 0, 99]" in err


def test_convert_refuses_a_log_with_a_bad_record(tmp_path, capsys):
    out = tmp_path / "out.parquet"
    for bad, message in [(edit(good_lines()[1], ("config",), [0, 0, 0, 99]), "log.jsonl:2: config [0, 0, 0, 99]"),
                         (fast(good_lines()[1], 1e-30), "log.jsonl:2: result: cost 1e-30")]:
        assert main(["dataset", "convert", str(log_with(tmp_path, bad)), str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err
        assert not out.exists()


# ---------------------------------------------------------------------- what --log appends to
def _parquet(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2, 3]}), path)


NOT_LOGS = {
    "parquet": (_parquet, r"x is a Parquet file, not a record log"),
    "results": (lambda p: write_log(p, [{"format": "tune_gym-bench-results", "version": 1, "suite": {}}]),
                r"x is a 'tune_gym-bench-results' file, not a record log"),
    "text": (lambda p: p.write_text("some notes\nmore notes\n"),
             r"x is not a record log \(line 1: invalid JSON \(Expecting value at column 1\)\)"),
    "json": (lambda p: write_log(p, [{"a": 1}]),
             r"x is not a record log \(line 1 is not a record: record schema None is not the supported version"),
    "other schema": (lambda p: write_log(p, [{**good_lines()[0], "schema": 2}]),
                     r"x is not a record log \(line 1 is not a record: record schema 2"),
    "directory": (lambda p: p.mkdir(), r"x is a directory, not a record log"),
}


@pytest.mark.parametrize("kind", list(NOT_LOGS))
def test_log_refuses_a_file_that_is_not_a_record_log(tmp_path, kind, dense_task, dense_space, capsys):
    make, message = NOT_LOGS[kind]
    path = tmp_path / "x"
    make(path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(RecordError, match=message):
        RecordWriter(path)
    backend = ReplayBackend(DATA)
    with pytest.raises(RecordError, match=message):
        TuningSession(dense_task, dense_space, backend, log=path)
    argv = ["tune", DENSE, "--preset", "compact", "--trials", "2", "--batch", "2", "--log", str(path),
            "--backend", "replay", "-b", f"dataset={DATA}", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err
    assert (path.read_bytes() if path.is_file() else None) == before  # nothing appended


@pytest.mark.parametrize("content", ["", "\n\n", '{"schema": 1, "tvm": "0.2', None])
def test_log_accepts_a_new_empty_or_torn_log(tmp_path, content, dense_space):
    path = tmp_path / "log.jsonl"
    if content is not None:
        path.write_text(content)
    with RecordWriter(path) as writer:
        writer.append([Record.create(dense_space, dense_space.config(3), load_records(DATA)[0].result, "test")])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert [r.config for r in load_records(path)] == [dense_space.config(3)]


def test_resume_without_log_is_an_error(capsys):
    assert main(["tune", DENSE, "--preset", "compact", "--trials", "2", "--resume", "--quiet"]) == 2
    assert "--resume works on the records of --log FILE" in capsys.readouterr().err


# ---------------------------------------------------------------------- concurrent writers
def test_two_writers_in_one_process_conflict(tmp_path, dense_task, dense_space):
    log = tmp_path / "log.jsonl"
    with RecordWriter(log), pytest.raises(RecordError, match=r"log\.jsonl is being written by another writer"):
        RecordWriter(log)
    RecordWriter(log).close()  # released on close
    backend = ReplayBackend(DATA)
    with TuningSession(dense_task, dense_space, backend, log=log), \
            pytest.raises(RecordError, match="being written by another writer"):
        TuningSession(dense_task, dense_space, backend, log=log, resume=True)


_HOLDER = """
import sys
from tune_gym.records import RecordWriter
writer = RecordWriter(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
writer.close()
print("released", flush=True)
"""


def _holder(log: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(log)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "locked\n", proc.stderr and proc.stderr.read()
    return proc


def test_two_writer_processes_conflict_and_a_killed_writer_releases(tmp_path):
    log = tmp_path / "log.jsonl"
    proc = _holder(log)
    try:
        with pytest.raises(RecordError, match=r"log\.jsonl is being written by another writer"):
            RecordWriter(log)
        out, _ = proc.communicate("\n", timeout=60)
        assert out == "released\n"
        RecordWriter(log).close()
        proc = _holder(log)
        os.kill(proc.pid, signal.SIGKILL)  # a killed run leaves no lock behind
        proc.wait(timeout=60)
        RecordWriter(log).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------- the JSONL module
def test_jsonl_reader_numbers_lines_and_handles_torn_ones(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n[2]\n{"b": "unfini\n{"c": 3}\n{"d": 4')
    with pytest.warns(UserWarning) as caught:
        assert list(read_jsonl(path)) == [(1, {"a": 1}), (3, [2]), (5, {"c": 3})]
    assert [str(w.message).split(": ")[0] for w in caught] == [f"{path}:4", f"{path}:6"]
    with pytest.raises(JsonlError, match=r"x\.jsonl:4: truncated line"):
        list(read_jsonl(path, strict=True))
    for bad, message in [(b'{"a": 1}}', r":2: invalid JSON \(Extra data at column 9\)"),
                         (b"not json", r":2: invalid JSON"),
                         (b'{"a": "\xff"}', r":2: not UTF-8 text \(byte 8\)"),
                         (b"1" * 5000, r":2: invalid JSON \(ValueError")]:
        path.write_bytes(b'{"a": 1}\n' + bad + b'\n{"a": 2}\n')
        with pytest.raises(JsonlError, match=message):
            list(read_jsonl(path))
    path.write_bytes('{"a": 1}\n{"b": "\u00e9'.encode()[:-1])  # a kill inside a two-byte character
    with pytest.warns(UserWarning, match=":2: skipping a truncated line"):
        assert list(read_jsonl(path)) == [(1, {"a": 1})]
    with pytest.raises(RecordError, match=r"cannot read"):
        list(read_jsonl(tmp_path, error=RecordError))


def test_jsonl_append_json_one_shot(tmp_path):
    path = tmp_path / "sub" / "results.jsonl"
    append_json(path, {"n": 1})
    with open(path, "a") as f:
        f.write('{"n": 2, "x": [1, 2')  # a killed writer
    with pytest.warns(UserWarning, match=":2: skipping a truncated line"):
        assert [v["n"] for _, v in read_jsonl(path)] == [1]
    with pytest.warns(UserWarning, match=":2: cut off a truncated last line"):
        append_json(path, {"n": 3})
    assert [v["n"] for _, v in read_jsonl(path)] == [1, 3]
    with JsonlAppender(path), pytest.raises(JsonlError, match="being written by another writer"):
        append_json(path, {"n": 4})
    with pytest.raises(ValueError, match="Out of range float values"):
        append_json(path, {"n": math.nan})
    append_json(path, {"n": math.inf}, allow_nan=True)
    assert path.read_text().splitlines()[-1] == '{"n": Infinity}'
    assert len(path.read_text().splitlines()) == 3


# ---------------------------------------------------------------------- the reader, mutated
JSON_KINDS = {"number": 7, "string": "x", "boolean": True, "null": None, "list": [1], "object": {"k": 1}}
EXTREMES = [math.nan, math.inf, -math.inf, -1, -1e-300, 0, 1e-30, 0.5, 1e308, 2 ** 64]
_REFERENCE = {"gflops": 20.0, "method": "test", "samples": [19.0, 20.0, 21.0], "host": "abc"}


def _base_lines() -> list[dict[str, Any]]:
    first, second, third = good_lines()
    failed = edit(edit(third, ("result", "error"), "run_error"), ("result", "costs"), [])
    return [first, {**second, "reference": _REFERENCE}, {**failed, "result": {**failed["result"], "error_msg": "x"}}]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return {int: "number", float: "number", str: "string", list: "list", dict: "object"}[type(value)]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    out = []
    for key, value in items:
        out.append((*prefix, key))
        out.extend(_paths(value, (*prefix, key)))
    return out


def _free_form(path: tuple[Any, ...]) -> bool:
    """Inside ``result.extra``: backend details, any JSON."""
    return path[:2] == ("result", "extra") and len(path) > 2


def _required(path: tuple[Any, ...]) -> bool:
    return not _free_form(path) and path not in {("reference",), ("result", "extra")}


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@st.composite
def mutations(draw: st.DrawFn) -> tuple[dict[str, Any], str, str, bool]:
    """``(original, mutated line, kind, must_fail)``."""
    original = draw(st.sampled_from(_base_lines()))
    kind = draw(st.sampled_from(["delete", "swap", "extreme", "truncate"]))
    if kind == "truncate":
        text = json.dumps(original)
        return original, text[: draw(st.integers(1, len(text) - 1))], kind, True
    paths = _paths(original)
    if kind == "delete":
        path = draw(st.sampled_from([p for p in paths if isinstance(_get(original, p[:-1]), dict)]))
        mutated = copy.deepcopy(original)
        del _get(mutated, path[:-1])[path[-1]]
        return original, json.dumps(mutated), kind, _required(path)
    if kind == "swap":
        path = draw(st.sampled_from(paths))
        old = _kind(_get(original, path))
        new = draw(st.sampled_from([v for k, v in JSON_KINDS.items() if k != old]))
        return original, json.dumps(edit(original, path, new)), kind, not _free_form(path)
    numeric = [p for p in paths if _kind(_get(original, p)) == "number"]
    path, value = draw(st.sampled_from(numeric)), draw(st.sampled_from(EXTREMES))
    must_fail = not _free_form(path) and (not math.isfinite(value) or value < 0)
    return original, json.dumps(edit(original, path, value)), kind, must_fail


@settings(max_examples=250, deadline=None, derandomize=True)
@given(mutations(), st.booleans())
def test_mutated_lines_read_exactly_or_fail_naming_the_line(dense_space, case, strict):
    """A mutated record line in the middle of a log reads to exactly what it says (and so to the
    original record when nothing changed) or raises RecordError naming line 2; a deleted field,
    a value of another JSON type, a negative or non-finite number or a truncation always raises
    (a truncation is skipped with a warning unless strict)."""
    original, line, kind, must_fail = case
    first, _, third = good_lines()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_log(Path(tmp) / "m.jsonl", [first, line, third])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                records = load_records(path, strict=strict)
            except RecordError as err:
                assert str(err).startswith(f"{path}:2: ") and "\n" not in str(err), err
                return
    if kind == "truncate" and not strict:
        assert [r.to_json() for r in records] == [first, third]
        assert [str(w.message) for w in caught] == [f"{path}:2: skipping a truncated line (a writer was killed "
                                                    "while writing it)"]
        return
    assert not must_fail, f"{kind} read as {records[1]}: {line}"
    said = json.loads(line)
    if said["result"].get("extra") == {}:  # to_json leaves an empty extra out
        del said["result"]["extra"]
    assert len(records) == 3 and records[1].to_json() == said  # nothing converted or filled in
    if json.loads(line) == original:
        assert records[1] == Record.from_json(original)


@pytest.mark.parametrize("tail,kept", [('{"n": 2}', True), ('{"n": 2}}', True), ('{"n": 2, "x": "ab', False)])
def test_jsonl_appender_cuts_only_a_torn_last_line(tmp_path, tail, kept):
    """A complete value that lost only its newline, and a corrupt line, stay for readers to see;
    only an unfinished JSON text (what a kill leaves) is cut off."""
    path = tmp_path / "log.jsonl"
    path.write_text('{"n": 1}\n' + tail)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        append_json(path, {"n": 3})
    assert path.read_text() == '{"n": 1}\n' + (tail + "\n" if kept else "") + '{"n": 3}\n'
    assert any("cut off a truncated last line" in str(w.message) for w in caught) != kept
