"""Task sets and named splits of ``MultiTune-v0``, stored as data.

A split family is one JSON file in ``tune_gym/envs/splits/`` (installed with the package),
named ``<name>-v<version>.json``::

    {"name": "by-network", "version": 1, "description": "...", "preset": "compact",
     "parts": {"train": [{"id": "resnet18:0", "task": "op://conv2d_nchw-v1/...?target=llvm",
                          "host": "2d10b741c5ee"}, ...],
               "validation": [...], "test": [...]}}

Each entry is a task URI, the suite id it has (checked to resolve to that URI, so the file
reads by id and cannot silently drift) and the host whose measurements serve it (the dataset of
that task, preset and host in the catalog, :func:`tune_gym.datasets.catalog.find_dataset`).
A version is never edited once published: a changed split is a new version.

The splits that ship (``tune_gym.envs.task_sets.list_splits()``):
    ``by-network-v1``: train on some networks' layers, test on other networks';
    ``by-op-v1``: train on some operators, test on others;
    ``by-host-v1``: train on one host's data, test on another host's;
    ``medium-by-network-v1``: ``by-network`` on the exhaustive ``medium`` spaces, where search has
    more to find (train ResNet-18, validate BERT-base, test MobileNet-v2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gym.errors import TuneGymError
from tune_gym.space import PRESETS
from tune_gym.tasks.task import Task

__all__ = ["PARTS", "SPLITS_DIR", "Split", "SplitError", "TaskRef", "list_splits", "load_split"]

#: Where the split files live (package data).
SPLITS_DIR = Path(__file__).resolve().parent / "splits"
#: The parts every split has; ``"all"`` (not stored) is their union.
PARTS = ("train", "validation", "test")


class SplitError(TuneGymError):
    """A split that does not exist or a split file that is not one (the message names it)."""


@dataclass(frozen=True)
class TaskRef:
    """One task of a task set: its URI, the preset of its space and the host of its data
    (``None``: whichever host the catalog's largest dataset of it has)."""

    task: str
    preset: str
    host: str | None = None


@dataclass(frozen=True)
class Split:
    """A split family: ``parts[part]`` is the tasks of ``train``, ``validation`` or ``test``."""

    name: str
    version: int
    description: str
    parts: dict[str, tuple[TaskRef, ...]]

    @property
    def id(self) -> str:
        """``<name>-v<version>``, what :func:`load_split` takes."""
        return f"{self.name}-v{self.version}"

    def tasks(self, part: str) -> tuple[TaskRef, ...]:
        """The tasks of ``part`` (one of :data:`PARTS`, or ``"all"``: every part's, in order)."""
        if part == "all":
            return tuple(ref for name in PARTS for ref in self.parts[name])
        if part not in self.parts:
            raise SplitError(f"split {self.id} has parts {', '.join(PARTS)} (and 'all'), not {part!r}")
        return self.parts[part]


def list_splits() -> list[str]:
    """The ids of the stored splits, sorted."""
    return sorted(path.stem for path in SPLITS_DIR.glob("*.json"))


def load_split(name: str) -> Split:
    """The split ``name`` (``"by-network-v1"``), read and checked.

    Raises:
        SplitError: no such split (naming the ones there are), or the file is not a split
            (naming the file and the field).
    """
    path = SPLITS_DIR / f"{name}.json"
    if not isinstance(name, str) or "/" in name or not path.is_file():
        raise SplitError(f"no split {name!r}; the splits: {', '.join(list_splits())}")
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise SplitError(f"split file {path}: not JSON ({err})") from None
    return _parse(data, path)


def _parse(data: Any, path: Path) -> Split:
    """Check a split file's content; every error names ``path`` and the field."""
    def fail(what: str) -> SplitError:
        return SplitError(f"split file {path}: {what}")

    if not isinstance(data, dict):
        raise fail("not a JSON object")
    missing = [key for key in ("name", "version", "description", "preset", "parts") if key not in data]
    if missing:
        raise fail(f"missing field {missing[0]!r}")
    name, version, preset, parts = data["name"], data["version"], data["preset"], data["parts"]
    if isinstance(version, bool) or not isinstance(version, int) or f"{name}-v{version}" != path.stem:
        raise fail(f"name {name!r} and version {version!r} do not match the file name {path.name}")
    if preset not in PRESETS:
        raise fail(f"preset {preset!r} is not one of {', '.join(PRESETS)}")
    if not isinstance(parts, dict) or sorted(parts) != sorted(PARTS):
        raise fail(f"'parts' must hold exactly {', '.join(PARTS)}")
    out: dict[str, tuple[TaskRef, ...]] = {}
    seen: dict[tuple[str, str | None], str] = {}
    for part in PARTS:
        entries = parts[part]
        if not isinstance(entries, list) or not entries:
            raise fail(f"parts.{part} must be a non-empty list of tasks")
        refs = []
        for i, entry in enumerate(entries):
            ref = _entry(entry, preset, lambda what, i=i, part=part: fail(f"parts.{part}[{i}]: {what}"))
            if (ref.task, ref.host) in seen:
                raise fail(f"parts.{part}[{i}]: task {ref.task} is also in parts.{seen[ref.task, ref.host]}")
            seen[ref.task, ref.host] = part
            refs.append(ref)
        out[part] = tuple(refs)
    return Split(str(name), version, str(data["description"]), out)


def _entry(entry: Any, preset: str, fail: Any) -> TaskRef:
    """One task entry of a split file, checked (``fail(what)`` makes the error)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("task"), str):
        raise fail("not an object with a 'task' URI")
    unknown = sorted(set(entry) - {"id", "task", "host"})
    if unknown:
        raise fail(f"unknown field {unknown[0]!r} (fields: id, task, host)")
    try:
        uri = Task.parse(entry["task"]).uri
        by_id = Task.parse(entry["id"]).uri if "id" in entry else uri
    except (TuneGymError, ValueError) as err:
        raise fail(str(err)) from None
    if uri != entry["task"] or by_id != uri:
        raise fail(f"id {entry.get('id')!r} and task {entry['task']!r} are not the same canonical task URI")
    host = entry.get("host")
    if host is not None and not isinstance(host, str):
        raise fail(f"host must be a string, not {host!r}")
    return TaskRef(uri, preset, host)
