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
``host``           :func:`tune_gym.records.host_id` of the measuring machine
``tvm``            TVM version
``reference_gflops``  the PyTorch reference throughput recorded with it
``extra``          backend details (JSON, may be empty)
=================  ==========================================================================

The file's metadata (key ``tune_gym``, JSON) holds the schema version, the task URI and
preset, the space's :func:`space_fingerprint` and size, the task's FLOPs, the host
fingerprint(s), the full reference measurement(s), how the data was collected (commands,
dates, duration) and a SHA-256 checksum of the rows. :func:`load_dataset` refuses a file
of another schema version, a space that no longer matches, or rows whose checksum does not
match, each with a message saying which and what to do. Record files (JSONL) convert both
ways (:meth:`Dataset.from_records`, :meth:`Dataset.to_records`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.errors import TuneGymError
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["DATASET_SCHEMA", "MODES", "Dataset", "DatasetError", "load_dataset", "space_fingerprint"]

#: Version of the Parquet layout; bump it when columns or metadata change meaning.
DATASET_SCHEMA = 1
#: How a row was collected (the ``mode`` column).
MODES = ("exhaustive", "random", "exploration", "records")
_META_KEY = b"tune_gym"


class DatasetError(TuneGymError):
    """A dataset file that cannot be used: wrong schema, changed space, bad checksum, bad rows."""


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


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise DatasetError("datasets need pyarrow: pip install pyarrow") from err
    return pa, pq


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
        from tune_gym.records import host_fingerprint, host_id

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
        """The reference measured on the dataset's (first) host, if recorded."""
        refs = self.meta.get("references", {})
        return Reference.from_json(refs[self.host[0]]) if self.host and self.host[0] in refs else None

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
            "modes": {m: self.mode.count(m) for m in sorted(set(self.mode))},
            "hosts": {h: self.meta.get("hosts", {}).get(h, {}).get("cpu", "") for h in self.hosts},
            "first": _date(float(self.time.min())) if len(self) else "",
            "last": _date(float(self.time.max())) if len(self) else "",
            "measure_hours": round(float(self.build_secs.sum() + self.run_secs.sum()) / 3600, 2),
        }

    # ------------------------------------------------------------------ Parquet
    def _table(self) -> Any:
        pa, _ = _pa()
        k = self.configs.shape[1]
        cols = {
            "config": pa.FixedSizeListArray.from_arrays(pa.array(self.configs.reshape(-1), pa.int32()), k),
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

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the dataset to ``path`` (Parquet, zstd), atomically (a temp file, then rename)."""
        _, pq = _pa()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        table = self._table()
        meta = {**self.meta, "schema": DATASET_SCHEMA, "task": self.task.uri, "preset": self.preset,
                "rows": len(self), "checksum": _checksum(table)}
        table = table.replace_schema_metadata({_META_KEY: json.dumps(meta, sort_keys=True).encode()})
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd", compression_level=9)
        os.replace(tmp, path)
        self.meta = {k: v for k, v in meta.items() if k not in ("schema", "task", "preset", "rows")}
        self.source = str(path)
        return path


def load_dataset(path: str | os.PathLike[str], space: KnobSpace | None = None, verify: bool = True) -> Dataset:
    """Read a dataset file, refusing what cannot be trusted.

    Args:
        path: a ``.parquet`` dataset, or a ``.jsonl`` record file (converted on the fly; record
            files carry no fingerprint or checksum, so only their records are checked).
        space: the space it will be used with (default: the task's space today); its
            fingerprint must match the one the data was collected under.
        verify: check the checksum (on by default; it reads every row once).

    Raises:
        DatasetError: a missing or unreadable file, another schema version, a changed space,
            or a checksum that does not match, with what to do.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"dataset {path} does not exist")
    if path.suffix == ".jsonl":
        from tune_gym.records import load_records

        ds = Dataset.from_records(load_records(path))
        ds.source = str(path)
        return ds
    _, pq = _pa()
    try:
        table = pq.read_table(path)
    except Exception as err:
        raise DatasetError(f"dataset {path} is not a readable Parquet file ({type(err).__name__}: {err})") from None
    raw = (table.schema.metadata or {}).get(_META_KEY)
    if raw is None:
        raise DatasetError(f"dataset {path} is a Parquet file without tune_gym metadata: not a tune_gym dataset")
    meta = json.loads(raw)
    if meta.get("schema") != DATASET_SCHEMA:
        raise DatasetError(
            f"dataset {path} has schema version {meta.get('schema')!r}; this tune_gym reads version {DATASET_SCHEMA}. "
            "Use the tune_gym release that wrote it, or re-export its records with this one "
            "(tune-gym dataset convert)")
    task = Task.from_uri(meta["task"])
    preset = meta["preset"]
    if verify and _checksum(table.replace_schema_metadata(None)) != meta.get("checksum"):
        raise DatasetError(
            f"dataset {path}: checksum mismatch: its rows are not the rows it was written with (the file was edited "
            "or corrupted). Restore it (e.g. `git checkout -- FILE`) or collect it again with `tune-gym collect`")
    space = space or KnobSpace.for_task(task, preset)
    if (space.task.uri, space.preset) != (task.uri, preset):
        raise DatasetError(f"dataset {path} holds {task.uri} (preset {preset}), not {space.task.uri} "
                           f"(preset {space.preset})")
    current = space_fingerprint(space)
    if meta.get("fingerprint") != current:
        raise DatasetError(
            f"dataset {path} was collected for a knob space with fingerprint {meta.get('fingerprint')} "
            f"({meta.get('space_size')} configs, knobs {', '.join(meta.get('knobs', []))}); the space of "
            f"{task.uri} (preset {preset}) is now {current} ({space.size} configs, knobs {', '.join(space.names)}): "
            f"the space changed (another TVM or space code), so its indices mean other schedules. Collect it again: "
            f"tune-gym collect {task.uri} --preset {preset}")
    cols = table.to_pydict()
    n = table.num_rows
    configs = np.array(table.column("config").combine_chunks().flatten(), dtype=np.int32).reshape(n, space.n_knobs)
    meta = {k: v for k, v in meta.items() if k not in ("schema", "task", "preset", "rows")}
    return Dataset(
        task=task, preset=preset, configs=configs,
        costs=[tuple(c) for c in cols["costs"]], error=list(cols["error"]), error_msg=list(cols["error_msg"]),
        build_secs=np.asarray(cols["build_secs"], dtype=np.float64),
        run_secs=np.asarray(cols["run_secs"], dtype=np.float64), time=np.asarray(cols["time"], dtype=np.float64),
        mode=list(cols["mode"]), host=list(cols["host"]), tvm=list(cols["tvm"]),
        reference_gflops=np.asarray(cols["reference_gflops"], dtype=np.float64),
        extra=[json.loads(x) if x else {} for x in cols["extra"]], meta=meta, source=str(path),
    )


def _knob_values(space: KnobSpace, config: np.ndarray) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in space.to_dict(tuple(int(c) for c in config)).items()}


def _checksum(table: Any) -> str:
    """SHA-256 of the rows: every column's values in a canonical text form, in column order."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name)
        if hasattr(col.type, "value_type") and str(col.type).startswith("dictionary"):
            col = col.cast(col.type.value_type)
        h.update(name.encode())
        h.update(json.dumps(col.to_pylist(), allow_nan=True).encode())
    return h.hexdigest()


def _date(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))
