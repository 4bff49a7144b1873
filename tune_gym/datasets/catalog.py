"""The catalog of dataset files: where they live and which task each one holds.

Datasets are found in :func:`data_dirs`: the directories listed in ``TUNE_GYM_DATA``
(``os.pathsep``-separated), then the repository's ``benchmarks/datasets``. Reading the
catalog opens only the Parquet footers (task, preset, rows, host), not the rows.

Datasets of a simulated target live in a subfolder named after its kind
(:data:`TARGET_SUBDIRS`: ``benchmarks/datasets/vta/``). :func:`catalog` lists only the top
folders, so readers of the whole catalog (cost-model trainers, transfer) never see simulated
data; :func:`find_dataset` looks in the subfolder too for a task on that target, so the replay
backend and the leaderboard find them.

Example:
    >>> entry = find_dataset(Task.parse("resnet18:7"), "compact")
    >>> entry.path, entry.rows, entry.exhaustive
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gym.datasets.dataset import _META_KEY, DatasetError, _pa
from tune_gym.tasks.task import Task

__all__ = ["TARGET_SUBDIRS", "CatalogEntry", "catalog", "data_dirs", "find_dataset", "task_data_dirs"]

_REPO_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets"
#: Target kind -> the subfolder of each data directory that holds its datasets (simulated
#: targets, kept out of :func:`catalog`'s default listing).
TARGET_SUBDIRS = {"vta": "vta"}


@dataclass(frozen=True)
class CatalogEntry:
    """One dataset file, as its footer describes it."""

    path: Path
    task: str
    preset: str
    rows: int
    space_size: int
    hosts: tuple[str, ...]
    meta: dict[str, Any]

    @property
    def exhaustive(self) -> bool:
        return self.rows >= self.space_size


def data_dirs() -> list[Path]:
    """Directories searched for datasets, in order (``TUNE_GYM_DATA`` first)."""
    extra = [Path(p) for p in os.environ.get("TUNE_GYM_DATA", "").split(os.pathsep) if p]
    return [*extra, _REPO_DATA]


def task_data_dirs(task: Task | str) -> list[Path]:
    """Directories searched for ``task``'s dataset: :func:`data_dirs`, then, for a target of
    :data:`TARGET_SUBDIRS`, that subfolder of each."""
    task = task if isinstance(task, Task) else Task.parse(task)
    dirs = data_dirs()
    sub = TARGET_SUBDIRS.get(task.target.kind)
    return [*dirs, *(d / sub for d in dirs)] if sub else dirs


def read_entry(path: str | os.PathLike[str]) -> CatalogEntry:
    """The catalog entry of one Parquet dataset (reads only its footer)."""
    _, pq = _pa()
    path = Path(path)
    try:
        raw = (pq.read_schema(path).metadata or {}).get(_META_KEY)
    except Exception as err:
        raise DatasetError(f"dataset {path} is not a readable Parquet file ({err})") from None
    if raw is None:
        raise DatasetError(f"dataset {path} has no tune_gym metadata: not a tune_gym dataset")
    meta = json.loads(raw)
    return CatalogEntry(path, meta["task"], meta["preset"], int(meta["rows"]), int(meta.get("space_size", 0)),
                        tuple(sorted(meta.get("hosts", {}))), meta)


def catalog(dirs: list[Path] | None = None) -> list[CatalogEntry]:
    """Every dataset in ``dirs`` (default :func:`data_dirs`), sorted by path."""
    out: list[CatalogEntry] = []
    for d in dirs if dirs is not None else data_dirs():
        if d.is_dir():
            out.extend(read_entry(p) for p in sorted(d.glob("*.parquet")))
    return out


def find_dataset(task: Task | str, preset: str, host: str | None = None) -> CatalogEntry | None:
    """The catalog's dataset of ``task`` and ``preset`` (optionally measured on ``host``);
    of several, the one with the most rows. Searches :func:`task_data_dirs` (a simulated
    target's subfolder too)."""
    task = task if isinstance(task, Task) else Task.parse(task)
    uri = task.uri
    found = [e for e in catalog(task_data_dirs(task))
             if e.task == uri and e.preset == preset and (host is None or host in e.hosts)]
    return max(found, key=lambda e: e.rows) if found else None
