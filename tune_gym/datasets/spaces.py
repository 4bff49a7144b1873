"""Knob-space descriptions, so that replay needs no TVM.

Building a task's knob space runs MetaSchedule: importing TVM and generating the design space
take about 10 s, in every process (each worker of a vector env pays it again). Replaying
recorded measurements needs only what a config means (the knobs, their choices and which
knobs each sketch uses), which a space's description (:meth:`KnobSpace.to_json`) holds and
:class:`~tune_gym.space.RecordedSpace` rebuilds without TVM.

Descriptions are stored one per space as ``<fingerprint>.json``, named by the
:func:`~tune_gym.datasets.dataset.space_fingerprint` that every dataset's footer records:
first the repository's, for the committed datasets (``benchmarks/datasets/spaces/``, written
by ``scripts/describe_spaces.py``), then the user store (``$XDG_CACHE_HOME/tune_gym/spaces``,
by default ``~/.cache/tune_gym/spaces``). A file is used only when the space it describes has
the fingerprint it is named by, so it cannot pass another space off as a dataset's; a file
that does not is skipped.

:func:`recorded_space` is what a replay backend made with ``spaces="recorded"`` checks a
dataset against: the stored description of the space the dataset was recorded under or, when
no store has one, the task's space built with TVM (its description is then written to the
user store, so the next process needs no TVM). Spaces of registered target kinds
(:mod:`tune_gym.kinds`) need no TVM and are built directly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tune_gym import kinds
from tune_gym.datasets.catalog import repo_datasets
from tune_gym.datasets.dataset import DatasetError, space_fingerprint
from tune_gym.errors import SpaceError
from tune_gym.space import KnobSpace, RecordedSpace
from tune_gym.tasks.task import Task

__all__ = ["find_space", "read_space", "recorded_space", "repo_spaces", "store_dirs", "write_space"]

_MAX_FILE = 1 << 20  # bytes of a description (the largest full space's is about 5 KB)


def repo_spaces() -> Path:
    """The repository's descriptions, those of the committed datasets: ``benchmarks/datasets/spaces``."""
    return repo_datasets() / "spaces"


def store_dirs() -> list[Path]:
    """Directories searched for ``<fingerprint>.json``, in order; the last is the user store."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tune_gym" / "spaces"
    return [repo_spaces(), cache]


def read_space(path: str | os.PathLike[str]) -> RecordedSpace:
    """The space a description file describes, checked against the fingerprint it is named by.

    Raises:
        DatasetError: naming the file: not JSON, not a description, or a space with another
            fingerprint than its name.
    """
    path = Path(path)
    try:
        if path.stat().st_size > _MAX_FILE:
            raise DatasetError(f"space description {path} is larger than {_MAX_FILE} bytes")
        space = RecordedSpace(json.loads(path.read_text()))
    except (OSError, ValueError, SpaceError) as err:  # JSONDecodeError is a ValueError
        raise DatasetError(f"space description {path}: {err}") from None
    found = space_fingerprint(space)
    if found != path.stem:
        raise DatasetError(f"space description {path} describes a space of fingerprint {found}, not {path.stem}")
    return space


def find_space(fingerprint: str, task: Task, preset: str) -> RecordedSpace | None:
    """The stored space of ``fingerprint`` (first accepted file of :func:`store_dirs`), if it is
    ``task``'s ``preset`` space; ``None`` when no store has one."""
    for directory in store_dirs():
        path = directory / f"{fingerprint}.json"
        if not path.is_file():
            continue
        try:
            space = read_space(path)
        except DatasetError:
            continue  # skipped: a later store may hold a good one, else the space is built again
        if (space.task.uri, space.preset) == (task.uri, preset):
            return space
    return None


def write_space(space: KnobSpace, directory: str | os.PathLike[str] | None = None) -> Path:
    """Write ``space``'s description as ``<fingerprint>.json`` into ``directory`` (default: the
    user store), atomically; returns the path."""
    directory = Path(directory) if directory is not None else store_dirs()[-1]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{space_fingerprint(space)}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(space.to_json(), separators=(",", ":")) + "\n")
    os.replace(tmp, path)
    return path


def recorded_space(task: Task, preset: str, fingerprint: str) -> KnobSpace:
    """The space data of ``task``'s ``preset`` recorded under ``fingerprint`` is served against:
    a registered kind's space; else the stored description (:func:`find_space`); else the
    task's space built with TVM, whose description is written to the user store when it has
    that fingerprint (a store that cannot be written is left as it is: the next process
    builds the space again). A space with another fingerprint is returned as it is, so that
    loading the data refuses it with the usual message."""
    if kinds.get_kind(task.target.kind) is not None:
        return KnobSpace.for_task(task, preset)
    stored = find_space(fingerprint, task, preset)
    if stored is not None:
        return stored
    space = KnobSpace.for_task(task, preset)
    if space_fingerprint(space) == fingerprint:
        try:
            write_space(space)
        except OSError:
            pass
    return space
