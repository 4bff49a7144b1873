"""The catalog of dataset files: where they live and which task each one holds.

Datasets are found in :func:`data_dirs`: the directories listed in ``TUNE_GYM_DATA``
(``os.pathsep``-separated), then the repository's ``benchmarks/datasets``
(:func:`tune_gym.locations.benchmarks_dir`: ``TUNE_GYM_BENCHMARKS``, else the source checkout's). Reading the
catalog opens only the Parquet footers (task, preset, rows, host), not the rows; each footer
is checked (:func:`tune_gym.datasets.dataset.read_footer`: its fields and its seal). A file
that is not a sound dataset (not Parquet, no footer, edited metadata, unsealed) is left out
with a warning naming it and why (:class:`CatalogWarning`); the other files are listed.

Datasets of a registered target kind live in the subfolder the kind names
(:attr:`tune_gym.kinds.TaskKind.data_subdir`, e.g. ``benchmarks/datasets/<subdir>/``).
:func:`catalog` lists only the top folders, so readers of the whole catalog (cost-model
trainers, transfer) never see such data; :func:`find_dataset` looks in the subfolder too for a
task on that target, so the replay backend and the leaderboard find them.

Example:
    >>> entry = find_dataset(Task.parse("resnet18:7"), "compact")
    >>> entry.path, entry.rows, entry.exhaustive
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gym import kinds
from tune_gym.datasets.dataset import DatasetError, read_footer
from tune_gym.locations import benchmarks_path
from tune_gym.tasks.task import Task

__all__ = ["CatalogEntry", "CatalogWarning", "catalog", "data_dirs", "find_dataset", "read_entry",
           "repo_datasets", "task_data_dirs"]

class CatalogWarning(UserWarning):
    """A file in a data directory that the catalog leaves out (the message names it and why)."""


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
    """Directories searched for datasets, in order: ``TUNE_GYM_DATA``'s, then the committed
    datasets (:func:`repo_datasets`)."""
    extra = [Path(p) for p in os.environ.get("TUNE_GYM_DATA", "").split(os.pathsep) if p]
    return [*extra, repo_datasets()]


def repo_datasets() -> Path:
    """The committed datasets: ``benchmarks/datasets`` (:func:`tune_gym.locations.benchmarks_dir`)."""
    return benchmarks_path("datasets")


def task_data_dirs(task: Task | str) -> list[Path]:
    """Directories searched for ``task``'s dataset: :func:`data_dirs`, then, for a registered
    target kind with a data subfolder, that subfolder of each."""
    task = task if isinstance(task, Task) else Task.parse(task)
    dirs = data_dirs()
    kind = kinds.get_kind(task.target.kind)
    sub = kind.data_subdir if kind is not None else None
    return [*dirs, *(d / sub for d in dirs)] if sub else dirs


def read_entry(path: str | os.PathLike[str]) -> CatalogEntry:
    """The catalog entry of one Parquet dataset (reads only its footer, checked and sealed).

    Raises:
        DatasetError: naming the file and what is wrong (:func:`~tune_gym.datasets.dataset.read_footer`).
    """
    path = Path(path)
    meta = read_footer(path)
    return CatalogEntry(path, meta["task"], meta["preset"], int(meta["rows"]), int(meta["space_size"]),
                        tuple(sorted(meta["hosts"])), meta)


def catalog(dirs: list[Path] | None = None) -> list[CatalogEntry]:
    """Every dataset in ``dirs`` (default :func:`data_dirs`), sorted by path; a file that is
    not a sound dataset is left out with a :class:`CatalogWarning` naming it and why."""
    out: list[CatalogEntry] = []
    for d in dirs if dirs is not None else data_dirs():
        if d.is_dir():
            for p in sorted(d.glob("*.parquet")):
                try:
                    out.append(read_entry(p))
                except DatasetError as err:
                    warnings.warn(f"catalog: skipped: {err}", CatalogWarning, stacklevel=2)
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
