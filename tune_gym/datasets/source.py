"""Where a data-driven backend (replay, surrogate) gets its datasets from.

Given data (paths to ``.parquet`` datasets or ``.jsonl`` record files, :class:`Dataset`
objects, tuning records, or a list of these) it serves exactly that; given ``None`` it finds
each task's dataset in the catalog (:mod:`tune_gym.datasets.catalog`) the first time the task
is asked for. A task of a registered target kind that supplies its own data
(:attr:`tune_gym.kinds.TaskKind.dataset`, e.g. files measured by another tool) gets that dataset
instead of the catalog's. A reference read from a catalog footer is checked as
:func:`~tune_gym.datasets.load_dataset` checks it (sealed, within the target's bounds).

Which space a dataset is checked against (``spaces``): ``"task"`` (the default), the task's
space today, built with TVM; ``"recorded"``, the space the dataset was recorded under, from its
stored description (:func:`tune_gym.datasets.spaces.recorded_space`: no TVM when the
description is stored). Record files (JSONL) carry no fingerprint: their space is the task's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tune_gym import kinds
from tune_gym.errors import TuneGymError
from tune_gym.measure.reference import Reference
from tune_gym.options import Check, Choice, OptionError, check_choice, show
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["DATA", "SPACES", "SPACES_OPTION", "DataSource", "check_data"]

#: What a dataset is checked against (see the module docstring).
SPACES = ("task", "recorded")


def check_data(name: str, data: Any) -> Any:
    """A backend's ``dataset`` option: ``None`` (the catalog), a path, a
    :class:`~tune_gym.datasets.Dataset`, a record, or a list of these (the files are read, and
    checked, by :class:`DataSource`)."""
    from tune_gym.datasets import Dataset
    from tune_gym.records import Record

    one = (str, os.PathLike, Dataset, Record)
    if data is None or isinstance(data, one) or (isinstance(data, (list, tuple)) and all(isinstance(d, one)
                                                                                       for d in data)):
        return data
    raise OptionError(f"{name} must be a path, a Dataset, records or a list of them, or None (the catalog), "
                      f"got {show(data)}")


# The data options of the backends that read datasets (replay, surrogate), declared once.
DATA = Check(check_data, "path, Dataset, records, a list of them, or None",
             help="the data: .parquet datasets or .jsonl record files (None: each task's dataset in the catalog)")
SPACES_OPTION = Choice(SPACES, help="the space the data is checked against: the task's today ('task', built with "
                                    "TVM) or the one it was recorded under ('recorded', without TVM)")


class DataSource:
    """The datasets of a backend, by (task URI, preset).

    Args:
        data: what to serve (see the module docstring); ``None`` = the catalog.
        who: the backend's name, for error messages.
        spaces: ``"task"`` or ``"recorded"`` (see the module docstring).
    """

    def __init__(self, data: Any = None, who: str = "replay", spaces: str = "task") -> None:
        from tune_gym.datasets import Dataset
        from tune_gym.records import Record, load_records

        self.who = who
        self.spaces = check_choice("spaces", spaces, SPACES)
        self.sources: list[str] = []
        self.use_catalog = data is None
        self.loaded: dict[tuple[str, str], list[Any]] = {}
        items = [] if data is None else [data] if isinstance(data, (str, Path, Dataset, Record)) else list(data)
        records: list[Any] = []
        for item in items:
            if isinstance(item, Record):
                records.append(item)
            elif isinstance(item, Dataset):
                self._add(item)
            else:
                path = Path(item)
                if not path.exists():
                    raise TuneGymError(f"{who} dataset {path} does not exist")
                self.sources.append(str(path))
                if path.suffix == ".jsonl":
                    records.extend(load_records(path))
                else:
                    self._add(self._load(path))
        for task, preset in dict.fromkeys((r.task, r.preset) for r in records):
            ds = Dataset.from_records(records, task=task, preset=preset)
            ds.check(f"{who} records of {task} (preset {preset})")
            self._add(ds)

    def _add(self, ds: Any) -> None:
        """Keep ``ds`` under its (task, preset); with recorded spaces, the datasets of one key
        must share their space (else the same indices would mean other configs)."""
        from tune_gym.datasets import DatasetError, space_fingerprint

        same = self.loaded.setdefault((ds.task.uri, ds.preset), [])
        if self.spaces == "recorded" and same and space_fingerprint(same[0].space) != space_fingerprint(ds.space):
            raise DatasetError(f"{self.who}: {ds.source} and {same[0].source} hold {ds.task.uri} (preset {ds.preset}) "
                               "recorded under different knob spaces; serve one of them")
        same.append(ds)

    def _load(self, path: Path, task: Task | None = None, preset: str | None = None) -> Any:
        """Load a dataset file, checked against the space :attr:`spaces` says."""
        from tune_gym.datasets import load_dataset
        from tune_gym.datasets.dataset import read_footer, task_of
        from tune_gym.datasets.spaces import recorded_space

        if self.spaces == "task":
            return load_dataset(path, KnobSpace.for_task(task, preset) if task is not None and preset else None)
        footer = read_footer(path)
        task = task or task_of(footer, path)
        return load_dataset(path, recorded_space(task, preset or footer["preset"], footer["fingerprint"]))

    def datasets(self, task: Task, preset: str) -> list[Any]:
        """The datasets of ``task``'s ``preset`` space (in catalog mode, on first use: the task's
        kind's own data if it supplies some, else the catalog's; an error saying how to collect
        one when the catalog has none)."""
        key = (task.uri, preset)
        kind = kinds.get_kind(task.target.kind)
        if key not in self.loaded and self.use_catalog and kind is not None and kind.dataset is not None:
            ds = kinds.load(kind.dataset)(task, preset)
            self.sources.append(str(ds.source))
            self._add(ds)
        if key not in self.loaded and self.use_catalog:
            from tune_gym.datasets.catalog import find_dataset, task_data_dirs

            entry = find_dataset(task, preset)
            if entry is None:
                raise TuneGymError(
                    f"{self.who}: no dataset of {task.uri} (preset {preset}) in "
                    f"{', '.join(map(str, task_data_dirs(task)))}; "
                    f"collect one with `tune-gym collect {task.uri} --preset {preset}` or pass dataset=")
            self.sources.append(str(entry.path))
            self._add(self._load(entry.path, task, preset))
        return self.loaded.get(key, [])

    def reference(self, task: Task, preset: str | None = None) -> Reference | None:
        """The reference throughput recorded with the task's data, if any.

        The reference of the dataset of ``preset`` comes first (the same task has one dataset
        per preset, each with the reference measured when it was collected), then any other
        dataset of the task; among several, the one with the most rows. The answer depends
        only on the data, never on which datasets this source happened to load first. In
        catalog mode footers are read without loading rows; a kind's own data of the task
        (:attr:`tune_gym.kinds.TaskKind.dataset`) is loaded (its first measurement needs it)."""
        kind = kinds.get_kind(task.target.kind)
        if self.use_catalog and preset is not None and kind is not None and kind.dataset is not None:
            self.datasets(task, preset)
        found: list[tuple[bool, int, str, Reference]] = []
        for (uri, pre), dss in self.loaded.items():
            if uri == task.uri:
                found += [(pre != preset, -len(ds), str(ds.source), ds.reference) for ds in dss
                          if ds.reference is not None]
        if self.use_catalog:
            from tune_gym.datasets.catalog import catalog, task_data_dirs

            for entry in catalog(task_data_dirs(task)):
                refs = entry.meta.get("references", {})
                if entry.task == task.uri and refs:
                    host = next((h for h in entry.hosts if h in refs), next(iter(refs)))
                    found.append((entry.preset != preset, -entry.rows, str(entry.path),
                                  _checked_reference(refs[host], task, entry.path)))
        return min(found, key=lambda f: f[:3])[3] if found else None

    def describe(self) -> str:
        """The loaded sources for error messages."""
        return ", ".join(self.sources) or "(in-memory)"


def _checked_reference(ref: Any, task: Task, path: Path) -> Reference:
    """A catalog footer's reference, checked for the task's target (DatasetError naming the file),
    with the reference audit's verdict."""
    from tune_gym.datasets import DatasetError
    from tune_gym.datasets.reference_audit import audited

    try:
        out = Reference.from_json(ref)
        out.check(task.target.kind)
    except ValueError as err:
        raise DatasetError(f"dataset {path}: its reference: {err}") from None
    return audited(task.uri, out)
