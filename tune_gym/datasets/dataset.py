"""Measurement datasets: one Parquet file per (task, space preset, host), columnar and checked.

A dataset is every measured config of one task's knob space on one machine, one row per
config. It is what the replay and surrogate backends serve, what the leaderboard scores
against, and what learned cost models train on. Columns:

=================  ==========================================================================
``config``         per-knob choice indices (``KnobSpace.for_task(task, preset)``)
``knobs``          the same config as values, JSON, for humans
``costs``          seconds per call of every repeat (empty when the config failed)
``error``          ``None``, or one of :data:`tune_gym.measure.result.ERROR_KINDS`
``error_msg``      the error's message
``build_secs``     seconds spent building it; ``run_secs``: seconds spent timing it
``time``           unix time of the measurement
``mode``           how the row was collected: ``exhaustive``, ``random``, ``exploration``
                   or ``records`` (converted from a record file)
``host``           :func:`tune_gym.host.host_id` of the measuring machine
``tvm``            TVM version
``reference_gflops``  the PyTorch reference throughput recorded with it
``extra``          backend details (JSON, may be empty)
=================  ==========================================================================

The file's metadata (key ``tune_gym``, JSON) holds the schema version, the task URI and
preset, the space's :func:`space_fingerprint`, size and knob names, the row count, the task's
FLOPs, the host fingerprint(s), the full reference measurement(s), how the data was collected
(commands, dates, duration), ``checksum``: a SHA-256 of the rows
(:func:`~tune_gym.datasets.parquet_io.rows_checksum`; it names the data, e.g. in leaderboard
results) and ``seal``: a SHA-256 of that checksum together with the metadata that changes
numbers (:data:`SEALED_FIELDS`: task, preset, fingerprint, space size, knobs, rows, FLOPs,
hosts, references), so neither the rows nor those fields can be edited unseen. A file one
trusts is (re-)sealed with :func:`seal_dataset` (``tune-gym dataset seal FILE``).

:func:`load_dataset` refuses, each with a one-line message naming the file and what to do: a
file of another schema version, a footer that is not a JSON object or lacks a field, a
missing column, an unsealed file, rows or metadata that do not match the checksum or seal, a
space that no longer matches. It then checks the values against the task and space
(vectorized): each config's indices are integers within the knob's choices; every cost is a
finite number of seconds >= :data:`~tune_gym.measure.result.MIN_COST_SECS`, and a row without
error has at least one; errors are among :data:`~tune_gym.measure.result.ERROR_KINDS` and
modes among :data:`MODES`; durations are finite and >= 0; the footer's ``flops`` is the task's
own FLOP count; each reference passes :meth:`Reference.from_json
<tune_gym.measure.reference.Reference.from_json>` and :meth:`Reference.check
<tune_gym.measure.reference.Reference.check>` for the task's target; no row's throughput is
beyond :func:`~tune_gym.measure.result.max_gflops`. A violation names the row (its index in
the file). :meth:`Dataset.save` makes the same checks (:meth:`Dataset.check`), so it never
writes a file that would be refused. Record files (JSONL) convert both ways (:meth:`Dataset.from_records`,
:meth:`Dataset.to_records`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.datasets import parquet_io
from tune_gym.errors import TuneGymError
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import ERROR_KINDS, MIN_COST_SECS, MeasureResult, check_gflops, max_gflops
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["COLUMNS", "DATASET_SCHEMA", "META_KEY", "MODES", "SEALED_FIELDS", "Dataset", "DatasetError",
           "load_dataset", "read_footer", "seal_dataset", "space_fingerprint"]

#: Version of the Parquet layout; bump it when columns or metadata change meaning.
DATASET_SCHEMA = 1
#: How a row was collected (the ``mode`` column).
MODES = ("exhaustive", "random", "exploration", "records")
#: Schema metadata key of a dataset's footer (a validity label file uses ``tune_gym_validity``).
META_KEY = b"tune_gym"
#: The columns of a dataset, in file order.
COLUMNS = ("config", "knobs", "costs", "error", "error_msg", "build_secs", "run_secs", "time", "mode", "host", "tvm",
           "reference_gflops", "extra")
#: The footer fields the seal covers with the rows checksum: what the rows mean and the numbers
#: derived from them (GFLOPS, rewards, the reference, which file the catalog picks).
SEALED_FIELDS = ("schema", "task", "preset", "fingerprint", "space_size", "knobs", "rows", "flops", "hosts",
                 "references")
#: Footer fields and their JSON types (``int`` excludes booleans).
_FOOTER_TYPES: dict[str, type] = {
    "task": str, "preset": str, "rows": int, "checksum": str, "fingerprint": str, "space_size": int, "knobs": list,
    "flops": int, "hosts": dict, "references": dict, "collection": list,
}
_RESEAL = "if you trust the file as it is, seal it with `tune-gym dataset seal FILE`"
_RESTORE = "Restore it (e.g. `git checkout -- FILE`) or collect it again with `tune-gym collect`"


class DatasetError(TuneGymError):
    """A dataset file that cannot be used: wrong schema, changed space, bad checksum or seal, bad rows."""


def space_fingerprint(space: KnobSpace) -> str:
    """A short hash of what a config means in ``space``: the task, preset, each knob's name,
    kind and choices, and which knobs each sketch uses. Data recorded under one fingerprint
    cannot be replayed against a space with another (the same indices would mean other
    schedules)."""
    desc = {
        "task": space.task.uri, "preset": space.preset,
        "knobs": [[k.name, k.kind, [list(c) if isinstance(c, tuple) else c for c in k.choices]] for k in space.knobs],
        "active": space.active_mask.astype(int).tolist(),
    }
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]


def read_footer(path: str | os.PathLike[str], verify: bool = True) -> dict[str, Any]:
    """A dataset's footer (its metadata, read without the rows), checked.

    Checks the schema version and each field's JSON type; with ``verify`` also the seal (the
    footer's fields against the rows checksum it records; the rows themselves are checked by
    :func:`load_dataset`).

    Raises:
        DatasetError: naming the file: missing, unreadable, not a dataset, a footer that is
            not a JSON object, another schema version, a missing or mistyped field, no seal,
            or a seal that does not match.
    """
    footer = parquet_io.read_footer(path, META_KEY, "dataset", DatasetError,
                                     other=" (a validity label file is read with tune_gym.datasets.validity)")
    parquet_io.check_schema(footer, DATASET_SCHEMA, path, "dataset", DatasetError,
                            "Use the tune_gym release that wrote it, or re-export its records with this one "
                            "(tune-gym dataset convert)")
    for name, kind in _FOOTER_TYPES.items():
        value = footer.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            what = "lacks the field" if name not in footer else f"has {_short(value)} as"
            raise DatasetError(f"dataset {path}: its metadata {what} {name!r} (want a JSON {_JSON[kind]})")
    if verify:
        _check_seal(footer, path)
    return footer


_JSON = {str: "string", int: "integer", list: "array", dict: "object"}


def _check_seal(footer: dict[str, Any], path: str | os.PathLike[str]) -> None:
    if "seal" not in footer:
        raise DatasetError(f"dataset {path} is not sealed: its metadata (flops, references, ...) is not covered by a "
                           f"checksum; {_RESEAL}")
    if footer["seal"] != parquet_io.seal_of(footer, SEALED_FIELDS):
        raise DatasetError(
            f"dataset {path}: seal mismatch: its metadata ({', '.join(SEALED_FIELDS)}) or rows checksum is not what it "
            f"was written with (the file was edited or corrupted). {_RESTORE}; {_RESEAL}")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class Dataset:
    """The measurements of one task's space on one host (see the module docstring).

    Arrays have one entry per row; ``configs`` is ``rows x n_knobs`` (int32). Build one with
    :meth:`from_records` or :func:`load_dataset`; write it with :meth:`save`.

    Attributes:
        task: the task.
        preset: the knob space preset.
        configs: canonical configs, one row each.
        costs: per row, the seconds of each repeat (a tuple; empty on error).
        error: per row, the error kind or ``None``.
        error_msg, build_secs, run_secs, time, mode, host, tvm, extra: per-row columns.
        reference_gflops: per row, the PyTorch reference recorded with it (NaN if none).
        meta: metadata: ``fingerprint``, ``space_size``, ``flops``, ``hosts``,
            ``references``, ``collection`` (list of collection steps), ``checksum``.
    """

    task: Task
    preset: str
    configs: np.ndarray
    costs: list[tuple[float, ...]]
    error: list[str | None]
    error_msg: list[str]
    build_secs: np.ndarray
    run_secs: np.ndarray
    time: np.ndarray
    mode: list[str]
    host: list[str]
    tvm: list[str]
    reference_gflops: np.ndarray
    extra: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "(in memory)"

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_records(cls, records: Iterable[Any], task: Task | str | None = None, preset: str | None = None,
                     mode: str | Sequence[str] = "records", collection: Sequence[dict[str, Any]] = ()) -> Dataset:
        """A dataset from tuning records (:class:`tune_gym.records.Record`) of ONE task and preset.

        Args:
            records: the records; a config recorded twice keeps its first record.
            task, preset: which task/preset to take when the records hold several (otherwise
                the records must hold exactly one).
            mode: the ``mode`` of every row, or one per record.
            collection: collection steps for the metadata (``{"command", "mode", ...}``).
        """
        recs = list(records)
        uri = task.uri if isinstance(task, Task) else task
        pairs = sorted({(r.task, r.preset) for r in recs})
        if uri is not None or preset is not None:
            pairs = [p for p in pairs if (uri is None or p[0] == uri) and (preset is None or p[1] == preset)]
        if len(pairs) != 1:
            raise DatasetError(
                f"a dataset holds one task and preset; the records hold {len(pairs)} matching pairs: "
                f"{pairs[:4]}{' ...' if len(pairs) > 4 else ''} (pass task= and preset=)")
        uri, preset = pairs[0]
        modes = [mode] * len(recs) if isinstance(mode, str) else list(mode)
        if len(modes) != len(recs):
            raise DatasetError(f"{len(modes)} modes for {len(recs)} records")
        keep: dict[Config, tuple[Any, str]] = {}
        for rec, m in zip(recs, modes):
            if (rec.task, rec.preset) == (uri, preset):
                keep.setdefault(tuple(rec.config), (rec, m))
        the_task = Task.from_uri(uri)
        space = KnobSpace.for_task(the_task, preset)
        rows = list(keep.values())
        for i, (rec, _) in enumerate(rows):
            if len(rec.config) != space.n_knobs:
                raise DatasetError(f"record {i} of {uri} (preset {preset}): config {list(rec.config)[:12]} has "
                                   f"{len(rec.config)} knobs; the space has {space.n_knobs} ({', '.join(space.names)})")
        hosts = sorted({r.host for r, _ in rows})
        references: dict[str, Any] = {}
        for r, _ in rows:
            if r.reference is not None:
                references[r.host] = r.reference.to_json()
        ds = cls(
            task=the_task, preset=preset,
            configs=np.array([r.config for r, _ in rows], dtype=np.int32).reshape(len(rows), space.n_knobs),
            costs=[tuple(r.result.costs) for r, _ in rows],
            error=[r.result.error for r, _ in rows],
            error_msg=[r.result.error_msg for r, _ in rows],
            build_secs=np.array([r.result.build_secs for r, _ in rows], dtype=np.float64),
            run_secs=np.array([r.result.run_secs for r, _ in rows], dtype=np.float64),
            time=np.array([r.time for r, _ in rows], dtype=np.float64),
            mode=[m for _, m in rows], host=[r.host for r, _ in rows], tvm=[r.tvm for r, _ in rows],
            reference_gflops=np.array([r.reference.gflops if r.reference else math.nan for r, _ in rows]),
            extra=[dict(r.result.extra) for r, _ in rows],
        )
        from tune_gym.host import host_fingerprint, host_id

        ds.meta = {
            "fingerprint": space_fingerprint(space), "space_size": space.size, "knobs": space.names,
            "flops": the_task.flops,
            "hosts": {h: (host_fingerprint() if h == host_id() else {}) for h in hosts},
            "references": references, "collection": [dict(c) for c in collection],
        }
        for bad in set(ds.mode) - set(MODES):
            raise DatasetError(f"unknown collection mode {bad!r}; known: {', '.join(MODES)}")
        return ds

    def to_records(self) -> list[Any]:
        """The rows as tuning records (JSONL-ready, each with its host's reference)."""
        from tune_gym.records import Record

        refs = {h: Reference.from_json(r) for h, r in self.meta.get("references", {}).items()}
        space = self.space
        out = []
        for i, result in enumerate(self.results):
            cfg = tuple(int(v) for v in self.configs[i])
            knobs = {k: list(v) if isinstance(v, tuple) else v for k, v in space.to_dict(cfg).items()}
            out.append(Record(self.task.uri, self.preset, "live", cfg, result, time=float(self.time[i]),
                              host=self.host[i], tvm=self.tvm[i], knobs=knobs, reference=refs.get(self.host[i])))
        return out

    # ------------------------------------------------------------------ derived views
    def __len__(self) -> int:
        return len(self.configs)

    @cached_property
    def space(self) -> KnobSpace:
        return KnobSpace.for_task(self.task, self.preset)

    @property
    def flops(self) -> int:
        return int(self.meta.get("flops") or self.task.flops)

    @cached_property
    def results(self) -> list[MeasureResult]:
        """One :class:`MeasureResult` per row (built once; backends hand these out)."""
        flops = self.flops
        return [MeasureResult(costs=c, flops=flops, error=e, error_msg=m, build_secs=float(b), run_secs=float(r),
                              extra=x)
                for c, e, m, b, r, x in zip(self.costs, self.error, self.error_msg, self.build_secs,
                                            self.run_secs, self.extra)]

    @cached_property
    def mean_cost(self) -> np.ndarray:
        """Mean seconds per call of each row (``inf`` for failed configs)."""
        return np.array([sum(c) / len(c) if e is None and c else math.inf for c, e in zip(self.costs, self.error)])

    @property
    def ok(self) -> np.ndarray:
        return np.isfinite(self.mean_cost)

    @property
    def gflops(self) -> np.ndarray:
        """Throughput of each row (0 for failed configs)."""
        with np.errstate(divide="ignore"):
            return np.where(self.ok, self.flops / self.mean_cost / 1e9, 0.0)

    @property
    def best_gflops(self) -> float:
        return float(self.gflops.max()) if len(self) else 0.0

    @property
    def exhaustive(self) -> bool:
        """True when every config of the space is in the dataset."""
        return len(self) >= int(self.meta.get("space_size", self.space.size))

    @property
    def reference(self) -> Reference | None:
        """The reference measured on the dataset's (first) host, if recorded, with the reference
        audit's verdict (:func:`~tune_gym.datasets.reference_audit.audited`)."""
        from tune_gym.datasets.reference_audit import audited

        refs = self.meta.get("references", {})
        ref = Reference.from_json(refs[self.host[0]]) if self.host and self.host[0] in refs else None
        return audited(self.task.uri, ref) if ref is not None else None

    @cached_property
    def kernel_threads(self) -> int | None:
        """The CPU threads the dataset's kernels ran on (``None``: not a CPU task, counts that
        differ, or not known).

        A row records it (``extra["threads"]``) since the live backend sizes TVM's thread pool.
        A row timed before that ran on TVM's default pool: half the collecting host's logical
        CPUs on x86-64, at least one (``runtime.NumThreads`` gives 1 on the 2-vCPU hosts the
        committed datasets come from); on another architecture, or a host the footer does not
        describe, the count is not known."""
        if self.task.target.kind != "llvm":
            return None
        counts = set()
        hosts = self.meta.get("hosts", {})
        for ok, extra, host in zip(self.ok, self.extra, self.host, strict=True):
            if not ok:
                continue
            threads = extra.get("threads")
            if threads is None:
                info = hosts.get(host) or {}
                cores = info.get("logical_cores")
                if not cores or not str(info.get("os", "")).endswith("x86_64"):
                    return None
                threads = max(1, int(cores) // 2)
            counts.add(int(threads))
        return counts.pop() if len(counts) == 1 else None

    @property
    def hosts(self) -> list[str]:
        return sorted(set(self.host))

    def summary(self) -> dict[str, Any]:
        """One line of the inventory: counts, best, reference, modes, host, dates."""
        ref = self.reference
        return {
            "task": self.task.uri, "preset": self.preset, "rows": len(self), "ok": int(self.ok.sum()),
            "space_size": int(self.meta.get("space_size", 0)), "exhaustive": self.exhaustive,
            "best_gflops": round(self.best_gflops, 3), "reference_gflops": round(ref.gflops, 3) if ref else None,
            "reference_suspect": ref.suspect if ref else "",
            "modes": {m: self.mode.count(m) for m in sorted(set(self.mode))},
            "hosts": {h: self.meta.get("hosts", {}).get(h, {}).get("cpu", "") for h in self.hosts},
            "first": _date(float(self.time.min())) if len(self) else "",
            "last": _date(float(self.time.max())) if len(self) else "",
            "measure_hours": round(float(self.build_secs.sum() + self.run_secs.sum()) / 3600, 2),
        }

    # ------------------------------------------------------------------ Parquet
    def _configs(self, where: str) -> Any:
        """The ``config`` column, its indices checked against the space (before :meth:`_table`
        looks their choices up)."""
        pa, _ = parquet_io.arrow(DatasetError)
        configs = np.asarray(self.configs)
        if configs.ndim != 2 or configs.dtype.kind not in "iu":
            raise DatasetError(f"{where}: configs are a {configs.dtype} array of shape {configs.shape}, not rows of "
                               "integer knob indices")
        column = pa.FixedSizeListArray.from_arrays(pa.array(configs.reshape(-1), pa.int32()), configs.shape[1])
        parquet_io.config_array(pa.table({"config": column}), self.space.dims, self.space.names, where, DatasetError)
        return column

    def _table(self, where: str | None = None) -> Any:
        pa, _ = parquet_io.arrow(DatasetError)
        cols = {
            "config": self._configs(where or f"dataset {self.source}"),
            "knobs": pa.array([json.dumps(_knob_values(self.space, c)) for c in self.configs], pa.string()),
            "costs": pa.array([list(c) for c in self.costs], pa.list_(pa.float64())),
            "error": pa.array(self.error, pa.string()).dictionary_encode(),
            "error_msg": pa.array(self.error_msg, pa.string()),
            "build_secs": pa.array(self.build_secs, pa.float64()),
            "run_secs": pa.array(self.run_secs, pa.float64()),
            "time": pa.array(self.time, pa.float64()),
            "mode": pa.array(self.mode, pa.string()).dictionary_encode(),
            "host": pa.array(self.host, pa.string()).dictionary_encode(),
            "tvm": pa.array(self.tvm, pa.string()).dictionary_encode(),
            "reference_gflops": pa.array(self.reference_gflops, pa.float64()),
            "extra": pa.array([json.dumps(x, sort_keys=True) if x else "" for x in self.extra], pa.string()),
        }
        return pa.table(cols)

    def check(self, where: str | None = None) -> None:
        """Check the rows and metadata as :func:`load_dataset` checks a file's (configs within
        the space, costs, errors, modes, durations, throughput, the task's FLOPs, references).

        Raises:
            DatasetError: ``{where}: row i (config [...]): what is wrong``, or the bad field.
        """
        where = where or f"dataset {self.source}"
        _check_footer_values({**self.meta, "rows": len(self)}, self.task, self.space, len(self), where)
        _check_rows(self._table(where), self.space, self.task, where)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the dataset to ``path`` (Parquet, zstd), sealed, atomically (a temp file, then
        rename). The rows and metadata are checked first (:meth:`check`), so a dataset that
        would be refused on read is not written (DatasetError)."""
        path = Path(path)
        where = f"dataset {path}" + (f" (from {self.source})" if self.source != "(in memory)" else "")
        table = self._table(where)
        meta = {**self.meta, "schema": DATASET_SCHEMA, "task": self.task.uri, "preset": self.preset,
                "rows": len(self), "checksum": parquet_io.rows_checksum(table)}
        meta["seal"] = parquet_io.seal_of(meta, SEALED_FIELDS)
        _check_footer_values(meta, self.task, self.space, len(self), where)
        _check_rows(table, self.space, self.task, where)
        parquet_io.write_table(table, META_KEY, meta, path, DatasetError)
        self.meta = {k: v for k, v in meta.items() if k not in ("schema", "task", "preset", "rows")}
        self.source = str(path)
        return path


def load_dataset(path: str | os.PathLike[str], space: KnobSpace | None = None, verify: bool = True) -> Dataset:
    """Read a dataset file, refusing what cannot be trusted (see the module docstring).

    Args:
        path: a ``.parquet`` dataset, or a ``.jsonl`` record file (read by
            :func:`tune_gym.records.load_records` and converted on the fly; record files carry
            no fingerprint, checksum or seal, so only their records and values are checked).
        space: the space it will be used with (default: the task's space today); its
            fingerprint must match the one the data was collected under. It becomes the
            dataset's :attr:`Dataset.space`.
        verify: check the rows checksum and the seal (on by default; it reads every row once).
            The footer's fields, the configs and the values are checked either way.

    Raises:
        DatasetError: a one-line message naming the file (and the row, for a bad value) and
            what to do.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"dataset {path} does not exist")
    if path.suffix == ".jsonl":
        return _load_records(path, space)
    footer = read_footer(path, verify)
    table = parquet_io.read_rows(path, COLUMNS, "dataset", DatasetError)
    if verify and parquet_io.rows_checksum(table) != footer["checksum"]:
        raise DatasetError(f"dataset {path}: checksum mismatch: its rows are not the rows it was written with (the "
                           f"file was edited or corrupted). {_RESTORE}")
    task, preset = task_of(footer, path), footer["preset"]
    space = space or _space_of(task, preset, path)
    _check_space(footer, task, preset, space, path)
    where = f"dataset {path}"
    _check_footer_values(footer, task, space, table.num_rows, where)
    configs = _check_rows(table, space, task, where)
    cols = table.to_pydict()
    meta = {k: v for k, v in footer.items() if k not in ("schema", "task", "preset", "rows")}
    ds = Dataset(
        task=task, preset=preset, configs=configs,
        costs=[tuple(c) for c in cols["costs"]], error=list(cols["error"]), error_msg=list(cols["error_msg"]),
        build_secs=np.asarray(cols["build_secs"], dtype=np.float64),
        run_secs=np.asarray(cols["run_secs"], dtype=np.float64), time=np.asarray(cols["time"], dtype=np.float64),
        mode=list(cols["mode"]), host=list(cols["host"]), tvm=list(cols["tvm"]),
        reference_gflops=np.asarray(cols["reference_gflops"], dtype=np.float64),
        extra=_extras(cols["extra"], where), meta=meta, source=str(path),
    )
    ds.space = space  # the space it was checked against (Dataset.space is not built again)
    return ds


def seal_dataset(path: str | os.PathLike[str]) -> str:
    """Seal a dataset one trusts: write its footer's seal (:data:`SEALED_FIELDS`), rows unchanged.

    The file must pass every check of :func:`load_dataset` but the seal: its rows must match
    the checksum its footer records (the checksum is kept as it is), its space must be the
    task's space today, and its values must be valid. Only the footer is rewritten.

    Returns:
        The seal.

    Raises:
        DatasetError: a file that fails a check (it is left as it is).
    """
    path = Path(path)
    footer = read_footer(path, verify=False)
    table = parquet_io.read_rows(path, COLUMNS, "dataset", DatasetError)
    if parquet_io.rows_checksum(table) != footer["checksum"]:
        raise DatasetError(f"dataset {path}: checksum mismatch: its rows are not the rows it was written with, so it "
                           f"is not sealed. {_RESTORE}")
    task = task_of(footer, path)
    space = _space_of(task, footer["preset"], path)
    _check_space(footer, task, footer["preset"], space, path)
    _check_footer_values(footer, task, space, table.num_rows, f"dataset {path}")
    _check_rows(table, space, task, f"dataset {path}")
    footer["seal"] = parquet_io.seal_of(footer, SEALED_FIELDS)
    parquet_io.write_table(table, META_KEY, footer, path, DatasetError)
    return str(footer["seal"])


def _load_records(path: Path, space: KnobSpace | None) -> Dataset:
    """A record file as a dataset, its values checked as a Parquet dataset's."""
    from tune_gym.records import load_records

    ds = Dataset.from_records(load_records(path))
    ds.source = str(path)
    if space is not None and (space.task.uri, space.preset) != (ds.task.uri, ds.preset):
        raise DatasetError(f"record file {path} holds {ds.task.uri} (preset {ds.preset}), not {space.task.uri} "
                           f"(preset {space.preset})")
    ds.check(f"record file {path}")
    return ds


def task_of(footer: dict[str, Any], path: str | os.PathLike[str]) -> Task:
    """The task a dataset's footer names; a :class:`DatasetError` naming ``path`` when it does not parse."""
    try:
        return Task.from_uri(footer["task"])
    except TuneGymError as err:
        raise DatasetError(f"dataset {path}: its task: {err}") from None


def _space_of(task: Task, preset: str, path: str | os.PathLike[str]) -> KnobSpace:
    try:
        return KnobSpace.for_task(task, preset)
    except TuneGymError as err:
        raise DatasetError(f"dataset {path}: its space: {err}") from None


def _check_space(footer: dict[str, Any], task: Task, preset: str, space: KnobSpace,
                 path: str | os.PathLike[str]) -> None:
    """Refuse data collected for another task, preset or knob space than ``space``."""
    if (space.task.uri, space.preset) != (task.uri, preset):
        raise DatasetError(f"dataset {path} holds {task.uri} (preset {preset}), not {space.task.uri} "
                           f"(preset {space.preset})")
    current = space_fingerprint(space)
    if footer["fingerprint"] != current:
        raise DatasetError(
            f"dataset {path} was collected for a knob space with fingerprint {footer['fingerprint']} "
            f"({footer['space_size']} configs, knobs {', '.join(map(str, footer['knobs']))}); the space of "
            f"{task.uri} (preset {preset}) is now {current} ({space.size} configs, knobs {', '.join(space.names)}): "
            f"the space changed (another TVM or space code), so its indices mean other schedules. Collect it again: "
            f"tune-gym collect {task.uri} --preset {preset}")


def _check_footer_values(meta: dict[str, Any], task: Task, space: KnobSpace, rows: int, where: str) -> None:
    """The footer's numbers against the task, the space and the rows: row count, space size
    and knobs, the task's own FLOP count, host fingerprints and references."""
    checks = [("rows", meta.get("rows"), rows), ("space_size", meta.get("space_size"), space.size),
              ("knobs", meta.get("knobs"), list(space.names))]
    for name, got, want in checks:
        if got != want or isinstance(got, bool):
            raise DatasetError(f"{where}: its metadata says {name} {_short(got)}, but it is {_short(want)}")
    flops = meta.get("flops")
    if flops != task.flops or isinstance(flops, bool):
        ratio = f" ({flops / task.flops:.3g}x)" if isinstance(flops, (int, float)) and task.flops else ""
        raise DatasetError(f"{where}: its metadata says flops {_short(flops)}, but {task.uri} does {task.flops} FLOPs "
                           f"per call{ratio}: every GFLOPS and reward derived from it would be off")
    hosts = meta.get("hosts")
    if not isinstance(hosts, dict) or not all(isinstance(h, dict) for h in hosts.values()):
        raise DatasetError(f"{where}: its metadata's hosts {_short(hosts)} is not an object of host fingerprints")
    refs = meta.get("references")
    if not isinstance(refs, dict):
        raise DatasetError(f"{where}: its metadata's references {_short(refs)} is not an object (host -> reference)")
    for host, ref in refs.items():
        try:
            Reference.from_json(ref).check(task.target.kind)
        except ValueError as err:
            raise DatasetError(f"{where}: references[{host!r}]: {err}") from None


def _check_rows(table: Any, space: KnobSpace, task: Task, where: str) -> np.ndarray:
    """Check every row's values (vectorized); returns the configs (``rows x n_knobs`` int32).

    Raises:
        DatasetError: ``{where}: row i (config [...]): what is wrong`` for the first bad row.
    """
    configs = parquet_io.config_array(table, space.dims, space.names, where, DatasetError)
    rows = _RowCheck(table, configs, where)
    error = rows.strings("error", nullable=True)
    failed = ~np.asarray(error.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    rows.among("error", error, ERROR_KINDS, failed)
    rows.among("mode", rows.strings("mode"), MODES)
    for name in ("knobs", "error_msg", "host", "tvm", "extra"):
        rows.strings(name)
    costs, row_of, counts = rows.costs()
    bad_cost = ~np.isfinite(costs) | (costs < MIN_COST_SECS)
    if bad_cost.any():
        i = int(np.flatnonzero(bad_cost)[0])
        rows.fail(int(row_of[i]), f"cost {float(costs[i])!r} s is not a measured time (want a finite number of "
                                  f"seconds >= {MIN_COST_SECS:g})")
    rows.first(~failed & (counts == 0), "no costs and no error (a successful row needs at least one cost)")
    for name in ("build_secs", "run_secs"):
        value = rows.floats(name)
        rows.first(~np.isfinite(value) | (value < 0), f"{name} {{}} is not a duration (want a finite number of "
                                                     "seconds >= 0)", value)
    when = rows.floats("time")
    rows.first(~np.isfinite(when), "time {} is not a unix time", when)
    kind = task.target.kind
    ref = rows.floats("reference_gflops")
    rows.first(~np.isnan(ref) & ~((ref > 0) & (ref <= max_gflops(kind))), "", ref,
               check=lambda v: check_gflops(v, kind, "reference"))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.bincount(row_of, weights=costs, minlength=len(configs)) / counts
        gflops = np.where(~failed, task.flops / mean / 1e9, 0.0)
    rows.first(gflops > max_gflops(kind), "", gflops, check=lambda v: check_gflops(v, kind, "measured throughput"))
    return configs


class _RowCheck:
    """The column readers and first-bad-row reports of :func:`_check_rows`."""

    def __init__(self, table: Any, configs: np.ndarray, where: str) -> None:
        self.pa, _ = parquet_io.arrow(DatasetError)
        self.table, self.configs, self.where = table, configs, where

    def fail(self, row: int, what: str) -> None:
        config = ", ".join(str(int(v)) for v in self.configs[row]) if row < len(self.configs) else "?"
        raise DatasetError(f"{self.where}: row {row} (config [{config}]): {what}")

    def first(self, bad: np.ndarray, what: str, values: np.ndarray | None = None,
              check: Callable[[Any], None] | None = None) -> None:
        """Fail on the first true row of ``bad``: ``what`` with ``{}`` the row's value, or
        the message of ``check(value)``'s ValueError."""
        if not bad.any():
            return
        row = int(np.flatnonzero(bad)[0])
        value = None if values is None else values[row]
        value = value.item() if isinstance(value, np.generic) else value
        if check is not None:
            try:
                check(value)
            except ValueError as err:
                what = str(err)
        self.fail(row, what.format(_short(value)))

    def strings(self, name: str, nullable: bool = False) -> Any:
        """A string column (dictionary-decoded); no missing values unless ``nullable``."""
        pa = self.pa
        col = self.table.column(name)
        value_type = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if not pa.types.is_string(value_type) and not pa.types.is_large_string(value_type):
            raise DatasetError(f"{self.where}: column {name} holds {col.type}, not strings")
        col = col.cast(pa.string())
        if not nullable and col.null_count:
            self.first(np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool), f"{name} is missing")
        return col

    def among(self, name: str, col: Any, allowed: Sequence[str], mask: np.ndarray | None = None) -> None:
        """Fail on the first row (of ``mask``) whose ``name`` is not one of ``allowed``."""
        import pyarrow.compute as pc

        ok = np.asarray(pc.is_in(col, value_set=self.pa.array(list(allowed))).to_numpy(zero_copy_only=False),
                        dtype=bool)
        bad = ~ok if mask is None else mask & ~ok
        self.first(bad, f"{name} {{}} is not one of {', '.join(allowed)}", np.asarray(col.to_numpy(
            zero_copy_only=False), dtype=object))

    def floats(self, name: str) -> np.ndarray:
        """A numeric column as float64 (a missing value is NaN)."""
        col = self.table.column(name)
        if not (self.pa.types.is_floating(col.type) or self.pa.types.is_integer(col.type)):
            raise DatasetError(f"{self.where}: column {name} holds {col.type}, not numbers")
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)

    def costs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(every cost, the row of each, the number of costs of each row)``."""
        import pyarrow.compute as pc

        pa = self.pa
        col = self.table.column("costs")
        if not pa.types.is_list(col.type) or not (pa.types.is_floating(col.type.value_type)
                                                  or pa.types.is_integer(col.type.value_type)):
            raise DatasetError(f"{self.where}: column costs holds {col.type}, not lists of seconds")
        if col.null_count:
            self.first(np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool),
                       "costs is missing (want a list, empty for a failed config)")
        counts = np.asarray(pc.list_value_length(col).to_numpy(zero_copy_only=False), dtype=np.int64)
        costs = np.asarray(pc.list_flatten(col).to_numpy(zero_copy_only=False), dtype=np.float64)
        return costs, np.repeat(np.arange(len(counts)), counts), counts


def _extras(values: list[Any], where: str) -> list[dict[str, Any]]:
    """The ``extra`` column: per row a JSON object, or ``""`` for none."""
    out: list[dict[str, Any]] = []
    for i, text in enumerate(values):
        try:
            extra = json.loads(text) if text else {}
        except json.JSONDecodeError as err:
            raise DatasetError(f"{where}: row {i}: extra is not JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(extra, dict):
            raise DatasetError(f"{where}: row {i}: extra is a JSON {type(extra).__name__}, not an object")
        out.append(extra)
    return out


def _knob_values(space: KnobSpace, config: np.ndarray) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in space.to_dict(tuple(int(c) for c in config)).items()}


def _date(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))
