"""The catalog of dataset files: where they live and which task each one holds.

Datasets are found in :func:`data_dirs`: the directories listed in ``TUNE_GYM_DATA``
(``os.pathsep``-separated), then the repository's ``benchmarks/datasets``. Reading the
catalog opens only the Parquet footers (task, preset, rows, host), not the rows.

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

__all__ = ["CatalogEntry", "catalog", "data_dirs", "find_dataset"]

_REPO_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets"


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
    of several, the one with the most rows."""
    uri = task.uri if isinstance(task, Task) else Task.parse(task).uri
    found = [e for e in catalog() if e.task == uri and e.preset == preset and (host is None or host in e.hosts)]
    return max(found, key=lambda e: e.rows) if found else None
