"""Tuning records: an append-only JSONL log of measured configs, and TVM database export.

Each line is one self-contained JSON object (schema :data:`SCHEMA_VERSION`)::

    {"schema": 1, "tvm": "0.27.0.post1", "host": "3f9c2a1b7d04", "task": "op://dense-v1/...",
     "preset": "compact", "backend": "local", "config": [1, 3, 0, 2],
     "knobs": {"sketch": 1, "tile_i0": [4, 4], ...}, "result": {...}, "time": 1718000000.5}

``config`` holds the per-knob choice indices of the space ``KnobSpace.for_task(task, preset)``;
``knobs`` repeats them as values for humans; ``result`` is :meth:`MeasureResult.to_json`;
``host`` is :func:`tune_gym.host.host_id`, a hash of :func:`tune_gym.host.host_fingerprint`. An optional ``reference``
(:meth:`tune_gym.measure.reference.Reference.to_json`: GFLOPS, samples, how and where it was
measured) is the throughput rewards were normalized by; :func:`recorded_reference` finds it,
so replayed and resumed runs reuse it.

Crash safety and locking (:mod:`tune_gym.jsonl`): :meth:`RecordWriter.append` writes a batch
with one ``write`` to a file opened with ``O_APPEND`` and then ``fsync``\\ s it, so a process
killed at any moment loses at most the batch being written; what a kill leaves behind is at
worst a torn (truncated) last line, which :func:`load_records` skips with a warning and the
next :class:`RecordWriter` cuts off (with a warning) before it writes. A writer holds an exclusive ``flock`` on
the log itself while it is open: a second writer of the same log (another tuning run) fails
at once with an error naming the file. A writer refuses a file that is not a record log (a
directory, a Parquet file, a file whose first line is not a record of this schema).

Trust on read: :meth:`Record.from_json` accepts only what :meth:`Record.to_json` writes (every
field present and of its type, nothing converted), and :func:`load_records` checks each
record against its task and space (:func:`check_record`): FLOPs, plausible throughput and
reference on the task's target kind, the config in range and canonical, the knobs its
values. Any other malformed line is an error (:class:`RecordError` naming the file and line):
a record is never silently dropped, repaired or used.

The best config of each task exports to a MetaSchedule JSON database
(:func:`export_database`) that TVM's own API compiles from.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_gym.errors import RecordError, SpaceError, TuneGymError
from tune_gym.host import host_id, tvm_version
from tune_gym.jsonl import JsonlAppender, read_jsonl
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.space import PRESETS, Config, KnobSpace
from tune_gym.tasks.task import Task
from tune_gym.tvm_support import ms

__all__ = [
    "SCHEMA_VERSION", "Record", "RecordWriter", "best_records", "check_record", "export_database",
    "keep_best_records", "load_database", "load_records", "recorded_reference",
]

SCHEMA_VERSION = 1
_WORKLOAD_FILE, _RECORD_FILE = "database_workload.json", "database_tuning_record.json"


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


@dataclass(frozen=True)
class Record:
    """One measured config of one task.

    Attributes:
        task: the task URI.
        preset: the knob space preset (``full`` / ``compact`` / ``medium``).
        backend: name of the backend that measured it.
        config: per-knob choice indices in ``KnobSpace.for_task(Task.from_uri(task), preset)``.
        result: the measurement.
        time: unix time of the measurement (seconds).
        host: :func:`tune_gym.host.host_id` of the measuring machine.
        tvm: TVM version string.
        knobs: ``{knob name: value}`` (split factors as lists), for humans.
        reference: the reference throughput (PyTorch on the same op, on the measuring host)
            that rewards were normalized by when this record was written, or ``None``.
    """

    task: str
    preset: str
    backend: str
    config: Config
    result: MeasureResult
    time: float = field(default_factory=time.time)
    host: str = field(default_factory=host_id)
    tvm: str = field(default_factory=tvm_version)
    knobs: dict[str, Any] = field(default_factory=dict)
    reference: Reference | None = None

    @classmethod
    def create(cls, space: KnobSpace, config: Config, result: MeasureResult, backend: str,
               reference: Reference | None = None) -> Record:
        """A record of the canonical ``config`` of ``space`` measured now on this host."""
        knobs = {k: _jsonable(v) for k, v in space.to_dict(config).items()}
        return cls(space.task.uri, space.preset, backend, tuple(config), result, knobs=knobs, reference=reference)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION, "tvm": self.tvm, "host": self.host, "task": self.task,
            "preset": self.preset, "backend": self.backend, "config": list(self.config),
            "knobs": {k: _jsonable(v) for k, v in self.knobs.items()}, "result": self.result.to_json(),
            "time": self.time, **({"reference": self.reference.to_json()} if self.reference else {}),
        }

    @classmethod
    def from_json(cls, d: Any) -> Record:
        """Parse one line's object as written by :meth:`to_json`, refusing anything else.

        Every field must be present (``reference`` and the result's ``extra`` may be left out)
        and of its type: strings, a parseable task URI in its canonical form, a known preset,
        ``config`` a list of ints >= 0 (not bools, floats or strings), ``knobs`` an object,
        ``time`` a finite number >= 0, ``result`` / ``reference`` as their own ``from_json``
        accept them. Nothing is converted or filled in.

        Raises:
            RecordError: naming the field and what is wrong (another schema version included).
        """
        if not isinstance(d, dict):
            raise RecordError(f"a record is a JSON object, not {_kind(d)}")
        schema = d.get("schema")
        if type(schema) is not int or schema != SCHEMA_VERSION:
            raise RecordError(f"record schema {_short(schema)} is not the supported version {SCHEMA_VERSION}")
        _check_fields(d, _FIELDS, ("reference",), "record")
        for name in ("tvm", "host", "backend", "preset", "task"):
            if not isinstance(d[name], str):
                raise RecordError(f"{name} {_short(d[name])} is not a string")
        if d["preset"] not in PRESETS:
            raise RecordError(f"preset {_short(d['preset'])} is not a space preset (known: {', '.join(PRESETS)})")
        _task(d["task"])
        if not isinstance(d["knobs"], dict):
            raise RecordError(f"knobs {_short(d['knobs'])} is not a JSON object")
        if not _is_time(d["time"]):
            raise RecordError(f"time {_short(d['time'])} is not a unix time (want a finite number >= 0)")
        return cls(task=d["task"], preset=d["preset"], backend=d["backend"], config=_config(d["config"]),
                   result=_result(d["result"]), time=float(d["time"]), host=d["host"], tvm=d["tvm"],
                   knobs=d["knobs"], reference=_reference(d["reference"]) if "reference" in d else None)


#: The fields of a record line (besides the optional ``reference``), of its ``result`` (besides
#: the optional ``extra``) and of its ``reference`` (besides the optional ones below): what
#: :meth:`Record.to_json` writes.
_FIELDS = ("schema", "tvm", "host", "task", "preset", "backend", "config", "knobs", "result", "time")
_RESULT_FIELDS = ("costs", "flops", "error", "error_msg", "build_secs", "run_secs")
_REFERENCE_FIELDS = ("gflops", "method", "samples", "host")
#: The reference's fields written only when set (:meth:`Reference.to_json`).
_REFERENCE_OPTIONAL = ("threads", "single_thread_gflops", "single_thread_samples", "conditions", "flags", "suspect")


def _kind(value: Any) -> str:
    return {dict: "a JSON object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _check_fields(d: dict[str, Any], required: Sequence[str], optional: Sequence[str], what: str) -> None:
    missing = [k for k in required if k not in d]
    if missing:
        raise RecordError(f"{what} has no {', '.join(map(repr, missing))} field")
    unknown = [k for k in d if k not in required and k not in optional]
    if unknown:
        raise RecordError(f"{what} has unknown field(s) {', '.join(_short(k) for k in unknown)} "
                          f"(schema {SCHEMA_VERSION} has {', '.join((*required, *optional))})")


@functools.lru_cache(maxsize=1024)
def _task(uri: str) -> Task:
    """The task of a record's URI (parsed once per process), refusing a non-canonical spelling
    (``load_records(path, task=...)`` matches URIs as strings)."""
    try:
        task = Task.from_uri(uri)
    except TuneGymError as err:
        raise RecordError(f"task: {err}") from None
    if task.uri != uri:
        raise RecordError(f"task {_short(uri, 120)} is not in its canonical form {task.uri!r}")
    return task


def _config(value: Any) -> Config:
    if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
        raise RecordError(f"config {_short(value)} is not a list of knob indices (ints >= 0)")
    return tuple(value)


def _is_time(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _result(value: Any) -> MeasureResult:
    if not isinstance(value, dict):
        raise RecordError(f"result {_short(value)} is not a JSON object")
    _check_fields(value, _RESULT_FIELDS, ("extra",), "result")
    try:
        return MeasureResult.from_json(value)
    except (TypeError, ValueError) as err:
        raise RecordError(_prefixed("result", err)) from None


def _reference(value: Any) -> Reference:
    if not isinstance(value, dict):
        raise RecordError(f"reference {_short(value)} is not a JSON object")
    _check_fields(value, _REFERENCE_FIELDS, _REFERENCE_OPTIONAL, "reference")
    try:
        return Reference.from_json(value)
    except (TypeError, ValueError) as err:
        raise RecordError(_prefixed("reference", err)) from None


def _prefixed(field: str, err: Exception) -> str:
    """``err``'s message, starting with the field it is about."""
    text = str(err)
    return text if text.startswith(field) else f"{field}: {text}"


def check_record(rec: Record, space: KnobSpace | None = None) -> None:
    """Check ``rec`` against its task and, when given, its space (``KnobSpace.for_task(task,
    rec.preset)``): the result's FLOPs are the task's, its throughput and the reference's are
    possible on the task's target kind, the config is a canonical config of the space and the
    knobs are its values.

    Raises:
        RecordError: naming what is wrong.
    """
    task = _task(rec.task)
    kind = task.target.kind
    if rec.result.flops != task.flops:
        raise RecordError(f"result flops {rec.result.flops} is not the task's FLOP count {task.flops}")
    try:
        rec.result.check_plausible(kind)
        if rec.reference is not None:
            rec.reference.check(kind)
    except ValueError as err:
        raise RecordError(str(err)) from None
    if space is not None:
        _check_in_space(rec, space)


def _check_in_space(rec: Record, space: KnobSpace) -> None:
    try:
        canonical = space.check(rec.config)
    except SpaceError as err:
        raise RecordError(f"config {list(rec.config)} is not in the {rec.preset} space: {err}") from None
    if canonical != rec.config:
        raise RecordError(f"config {list(rec.config)} is not canonical (want {list(canonical)}: knobs that its "
                          "sketch does not use are 0)")
    knobs = {k: _jsonable(v) for k, v in space.to_dict(canonical).items()}
    if rec.knobs != knobs:
        raise RecordError(f"knobs {_short(rec.knobs)} are not the values of config {list(rec.config)} "
                          f"({_short(knobs)}): the space has changed since the record was written")


class RecordWriter:
    """Appends batches of records to a JSONL file, each batch fsynced (a context manager).

    Opening takes the file's exclusive lock (:class:`tune_gym.jsonl.JsonlAppender`) until
    :meth:`close`, so a second writer of the same log fails at once, and refuses a file that is
    not a record log: a directory, a Parquet file, or a non-empty file whose first line is not
    a record of this schema (e.g. a benchmark results file).

    Example:
        >>> with RecordWriter("runs/dense.jsonl") as writer:
        ...     writer.append([Record.create(space, cfg, result, backend="local")])

    Raises:
        RecordError: one line naming the file and why it is refused.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._appender = JsonlAppender(self.path, accept=self._accept, error=RecordError, what="record log")

    def _accept(self, first: tuple[int, Any] | None) -> None:
        if first is None:
            return
        line, obj = first
        if isinstance(obj, dict) and "schema" not in obj and isinstance(obj.get("format"), str):
            raise RecordError(f"{self.path} is a {_short(obj['format'])} file, not a record log")
        try:
            Record.from_json(obj)
        except RecordError as err:
            raise RecordError(f"{self.path} is not a record log (line {line} is not a record: {err})") from None

    def append(self, records: Sequence[Record]) -> None:
        """Write all lines of ``records`` with one write, then flush them to disk."""
        if self._appender.closed:
            raise ValueError(f"RecordWriter({self.path}) is closed")
        self._appender.append(r.to_json() for r in records)

    def close(self) -> None:
        self._appender.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SpaceCache:
    """``KnobSpace.for_task`` once per (task URI, preset) of one read."""

    def __init__(self) -> None:
        self.spaces: dict[tuple[str, str], KnobSpace] = {}

    def get(self, rec: Record) -> KnobSpace:
        key = (rec.task, rec.preset)
        if key not in self.spaces:
            try:
                self.spaces[key] = KnobSpace.for_task(_task(rec.task), rec.preset)
            except TuneGymError as err:
                raise RecordError(f"the {rec.preset} space of {rec.task} cannot be built to check the record: "
                                  f"{err}") from None
        return self.spaces[key]


def load_records(path: str | os.PathLike[str], task: str | Task | None = None, check: bool = True, *,
                 check_space: bool = True, strict: bool = False) -> list[Record]:
    """Read a record file (a missing file gives ``[]``), optionally only one task's records.

    Every line must be a record (:meth:`Record.from_json`). With ``check`` each record read is
    also checked against its task (:func:`check_record`: FLOPs, plausible throughput, the
    reference) and, with ``check_space``, against its space, built once per task and preset
    (config in range and canonical, knobs its values). ``check_space=False`` skips building
    spaces (for a caller that only lists records); ``check=False`` skips both.

    A torn line left by a killed writer is skipped with a warning, or is an error with
    ``strict`` (:func:`tune_gym.jsonl.read_jsonl`).

    Raises:
        RecordError: ``FILE:LINE: what is wrong`` for the first line that is not a valid record
            (a record is never silently dropped or repaired).
    """
    path = Path(path)
    if not path.exists():
        return []
    uri = task.uri if isinstance(task, Task) else task
    spaces = _SpaceCache() if check and check_space else None
    out = []
    for line, obj in read_jsonl(path, strict=strict, error=RecordError):
        try:
            rec = Record.from_json(obj)
            if uri is not None and rec.task != uri:
                continue
            if check:
                check_record(rec, spaces.get(rec) if spaces is not None else None)
        except RecordError as err:
            raise RecordError(f"{path}:{line}: {err}") from None
        out.append(rec)
    return out


def recorded_reference(records: Iterable[Record], task: str | Task, host: str | None = None) -> Reference | None:
    """The reference throughput last recorded with ``task``'s records (optionally only those
    measured on ``host``), or ``None``; with the reference audit's verdict
    (:func:`~tune_gym.datasets.reference_audit.audited`)."""
    from tune_gym.datasets.reference_audit import audited

    uri = task.uri if isinstance(task, Task) else task
    found = None
    for rec in records:
        if rec.task == uri and rec.reference is not None and (host is None or rec.host == host):
            found = rec.reference
    return audited(uri, found) if found is not None else None


def best_records(records: Iterable[Record]) -> dict[str, Record]:
    """The successful record with the highest GFLOPS of each task URI (first one on ties)."""
    best: dict[str, Record] = {}
    for rec in records:
        if not rec.result.ok:
            continue
        cur = best.get(rec.task)
        if cur is None or (rec.result.gflops, -rec.result.mean) > (cur.result.gflops, -cur.result.mean):
            best[rec.task] = rec
    return best


def export_database(records: Iterable[Record], directory: str | os.PathLike[str]) -> Path:
    """Write the best config of each task as a MetaSchedule JSON database in ``directory``.

    Existing ``database_workload.json`` / ``database_tuning_record.json`` there are replaced.
    The workload committed for a task is ``KnobSpace.for_task(task, preset).mod``, which is
    ``task.ir_module()``: with ``weights=packed`` its weights are marked ``layout_free_buffers``,
    with ``weights=given`` nothing is. The database answers queries for that exact module, so
    compile with it::

        db = load_database(directory)
        sch = ms().tir_integration.compile_tir(db, space.mod, space.target)  # a Schedule
        lib = tvm().compile(sch.mod, target=space.target)

    For a packed task the schedule keeps MetaSchedule's weight layout rewrite block, so ``lib``
    takes weights in the op's own layout and converts them on every call; a deployed model
    splits that block off and runs it once (Relax's ``SplitLayoutRewritePreproc``), and
    ``RemoveWeightLayoutRewriteBlock`` gives the kernel alone, as the live backend times it.

    Returns:
        ``directory`` as a Path.

    Raises:
        RecordError: when a best config no longer schedules (e.g. a different TVM).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in (_WORKLOAD_FILE, _RECORD_FILE):
        (directory / name).unlink(missing_ok=True)
    m = ms()
    db = load_database(directory)
    for rec in best_records(records).values():
        space = KnobSpace.for_task(Task.from_uri(rec.task), rec.preset)
        sch, why = space.apply(rec.config)
        if sch is None:
            raise RecordError(f"{rec.task}: config {list(rec.config)} does not schedule: {why}")
        workload = db.commit_workload(space.mod)
        db.commit_tuning_record(m.database.TuningRecord(
            sch.trace, workload, run_secs=[float(c) for c in rec.result.costs], target=space.target,
            args_info=m.arg_info.ArgInfo.from_prim_func(space.mod["main"]),
        ))
    return directory


def load_database(directory: str | os.PathLike[str]) -> Any:
    """The MetaSchedule ``JSONDatabase`` in ``directory`` (as written by :func:`export_database`,
    or by MetaSchedule's tuning). A database kept compressed (:func:`keep_best_records`) is read
    from a temporary copy: the database holds its records in memory once made."""
    directory = Path(directory)
    packed = [directory / f"{name}.gz" for name in (_WORKLOAD_FILE, _RECORD_FILE)]
    if not (directory / _WORKLOAD_FILE).exists() and all(p.exists() for p in packed):
        with tempfile.TemporaryDirectory(prefix="tune_gym_db_") as tmp:
            for path in packed:
                (Path(tmp) / path.name[:-3]).write_bytes(gzip.decompress(path.read_bytes()))
            return load_database(tmp)
    return ms().database.JSONDatabase(
        path_workload=str(directory / _WORKLOAD_FILE), path_tuning_record=str(directory / _RECORD_FILE),
    )


def keep_best_records(directory: str | os.PathLike[str]) -> int:
    """Shrink the MetaSchedule JSON database in ``directory`` to what rebuilds its best program:
    the best record of each workload (lowest mean run time; failed runs, timed at 1e10 s, never
    win), in their order, then both files gzip-compressed (``.json.gz``, which
    :func:`load_database` reads). Returns the records kept."""
    directory = Path(directory)
    lines = [line for line in (directory / _RECORD_FILE).read_text().splitlines() if line.strip()]
    best: dict[int, tuple[float, int]] = {}  # workload -> (mean seconds, line)
    for i, line in enumerate(lines):
        workload, (_, run_secs, *_) = json.loads(line)
        costs = [float(c) for c in run_secs or [] if float(c) < 1e9]
        if costs and (workload not in best or sum(costs) / len(costs) < best[workload][0]):
            best[workload] = (sum(costs) / len(costs), i)
    kept = "".join(lines[i] + "\n" for i in sorted(i for _, i in best.values()))
    for name, text in ((_WORKLOAD_FILE, (directory / _WORKLOAD_FILE).read_text()), (_RECORD_FILE, kept)):
        (directory / f"{name}.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        (directory / name).unlink()
    return len(best)
