"""Tuning records: an append-only JSONL log of measured configs, and TVM database export.

Each line is one self-contained JSON object (schema :data:`SCHEMA_VERSION`)::

    {"schema": 1, "tvm": "0.27.0.post1", "host": "3f9c2a1b7d04", "task": "op://dense-v1/...",
     "preset": "compact", "backend": "local", "config": [1, 3, 0, 2],
     "knobs": {"sketch": 1, "tile_i0": [4, 4], ...}, "result": {...}, "time": 1718000000.5}

``config`` holds the per-knob choice indices of the space ``KnobSpace.for_task(task, preset)``;
``knobs`` repeats them as values for humans; ``result`` is :meth:`MeasureResult.to_json`;
``host`` is :func:`host_id`, a hash of :func:`host_fingerprint`. An optional ``reference``
(:meth:`tune_gym.measure.reference.Reference.to_json`: GFLOPS, samples, how and where it was
measured) is the throughput rewards were normalized by; :func:`recorded_reference` finds it,
so replayed and resumed runs reuse it.

Crash safety: :meth:`RecordWriter.append` writes a batch with one ``write`` to a file opened
with ``O_APPEND`` and then ``fsync``\\ s it, so a process killed at any moment loses at most
the batch being written. What a kill leaves behind is at worst a torn (truncated) last line:
:func:`load_records` skips it with a warning, and the next :class:`RecordWriter` starts a
fresh line after it, so the torn line stays skippable when it is no longer the last one.
Any other malformed line is an error (:class:`RecordError` naming the file and line).

The best config of each task exports to a MetaSchedule JSON database
(:func:`export_database`) that TVM's own API compiles from.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_gym._tvm import ms, tvm
from tune_gym.errors import RecordError
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = [
    "SCHEMA_VERSION", "Record", "RecordWriter", "best_records", "export_database",
    "host_fingerprint", "host_id", "load_database", "load_records", "recorded_reference",
]

SCHEMA_VERSION = 1
#: Fingerprint fields left out of :func:`host_id` (software that changes under the same machine).
_VOLATILE = ("os_release", "python", "tvm")
_WORKLOAD_FILE, _RECORD_FILE = "database_workload.json", "database_tuning_record.json"


@functools.cache
def host_fingerprint() -> dict[str, Any]:
    """What identifies the measuring machine: CPU, cores, OS and software versions."""
    import psutil

    from tune_gym.tasks.targets import host_cpu

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu, "llvm_cpu": host_cpu(), "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False), "os": f"{platform.system()}-{platform.machine()}",
        "os_release": platform.release(), "python": platform.python_version(), "tvm": _tvm_version(),
    }


@functools.cache
def host_id() -> str:
    """A short stable hex id of this machine (the fingerprint without :data:`_VOLATILE` fields)."""
    stable = {k: v for k, v in host_fingerprint().items() if k not in _VOLATILE}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:12]


def _tvm_version() -> str:
    return str(tvm().__version__)


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


@dataclass(frozen=True)
class Record:
    """One measured config of one task.

    Attributes:
        task: the task URI.
        preset: the knob space preset (``full`` / ``compact``).
        backend: name of the backend that measured it.
        config: per-knob choice indices in ``KnobSpace.for_task(Task.from_uri(task), preset)``.
        result: the measurement.
        time: unix time of the measurement (seconds).
        host: :func:`host_id` of the measuring machine.
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
    tvm: str = field(default_factory=lambda: _tvm_version())
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
    def from_json(cls, d: dict[str, Any]) -> Record:
        """Parse one line's object; raise RecordError on another schema or missing fields."""
        if not isinstance(d, dict) or d.get("schema") != SCHEMA_VERSION:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise RecordError(f"record schema {got!r} is not the supported version {SCHEMA_VERSION}")
        try:
            return cls(
                task=str(d["task"]), preset=str(d["preset"]), backend=str(d["backend"]),
                config=tuple(int(c) for c in d["config"]), result=MeasureResult.from_json(d["result"]),
                time=float(d["time"]), host=str(d["host"]), tvm=str(d["tvm"]), knobs=dict(d.get("knobs", {})),
                reference=Reference.from_json(d["reference"]) if d.get("reference") else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise RecordError(f"malformed record ({type(err).__name__}: {err})") from err


class RecordWriter:
    """Appends batches of records to a JSONL file, each batch fsynced (a context manager).

    Example:
        >>> with RecordWriter("runs/dense.jsonl") as writer:
        ...     writer.append([Record.create(space, cfg, result, backend="local")])
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        # A killed writer may have left a torn last line: start ours on a fresh line.
        size = os.fstat(self._fd).st_size
        self._needs_newline = size > 0 and os.pread(self._fd, 1, size - 1) != b"\n"

    def append(self, records: Sequence[Record]) -> None:
        """Write all lines of ``records`` with one write, then flush them to disk."""
        if self._fd is None:
            raise ValueError(f"RecordWriter({self.path}) is closed")
        if not records:
            return
        text = "\n" if self._needs_newline else ""
        text += "".join(json.dumps(r.to_json()) + "\n" for r in records)
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)
        self._needs_newline = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_NUMBER_PREFIX = re.compile(r"-?\d*\.?\d*(?:[eE][+-]?\d*)?")


def _is_torn(line: str) -> bool:
    """True when ``line`` is an unfinished JSON text (what a killed writer leaves behind)."""
    try:
        json.loads(line)
        return False
    except json.JSONDecodeError as err:
        tail = line[err.pos:].rstrip()
        return (err.msg.startswith("Unterminated string") or not tail
                or any(lit.startswith(tail) for lit in ("true", "false", "null"))
                or _NUMBER_PREFIX.fullmatch(tail) is not None)


def load_records(path: str | os.PathLike[str], task: str | Task | None = None) -> list[Record]:
    """Read a record file (a missing file gives ``[]``), optionally only one task's records.

    Torn lines left by a killed writer (the last line, or an unfinished line that a later
    writer started a fresh line after) are skipped with a warning. Any other undecodable
    line, a malformed record or another schema version raises :class:`RecordError`.
    """
    path = Path(path)
    if not path.exists():
        return []
    uri = task.uri if isinstance(task, Task) else task
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            if i == last or _is_torn(line):
                warnings.warn(f"{path}:{i + 1}: skipping a truncated record line", stacklevel=2)
                continue
            raise RecordError(f"{path}:{i + 1}: invalid JSON ({err.msg} at column {err.colno})") from err
        try:
            rec = Record.from_json(obj)
        except RecordError as err:
            raise RecordError(f"{path}:{i + 1}: {err}") from err
        if uri is None or rec.task == uri:
            out.append(rec)
    return out


def recorded_reference(records: Iterable[Record], task: str | Task, host: str | None = None) -> Reference | None:
    """The reference throughput last recorded with ``task``'s records (optionally only those
    measured on ``host``), or ``None``."""
    uri = task.uri if isinstance(task, Task) else task
    found = None
    for rec in records:
        if rec.task == uri and rec.reference is not None and (host is None or rec.host == host):
            found = rec.reference
    return found


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
    """The MetaSchedule ``JSONDatabase`` in ``directory`` (as written by :func:`export_database`)."""
    directory = Path(directory)
    return ms().database.JSONDatabase(
        path_workload=str(directory / _WORKLOAD_FILE), path_tuning_record=str(directory / _RECORD_FILE),
    )
