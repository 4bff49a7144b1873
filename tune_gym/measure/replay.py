"""Replay: exact lookup of configs in recorded measurements (deterministic, microseconds).

A dataset is a tuning-record file (:mod:`tune_gym.records`), typically an exhaustive
measurement of a compact space collected by ``scripts/collect_dataset.py``. Results carry the
recorded build and run seconds, so the environment's ``measure_secs`` is a simulated clock.
A config that the dataset does not hold is an error (never an invented number). The
reference throughput recorded with a task's data (:meth:`ReplayBackend.reference`)
normalizes rewards of replayed runs, so they are the same on every machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tune_gym.errors import TuneGymError
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["ReplayBackend"]


class ReplayBackend:
    """Serves recorded results. ``name = "replay"``.

    Args:
        dataset: record file(s) or records. When a config was recorded more than once, the
            first record wins.
    """

    name = "replay"

    def __init__(self, dataset: str | Path | Iterable[str | Path] | Iterable[object]) -> None:
        from tune_gym.records import Record, load_records

        items = [dataset] if isinstance(dataset, (str, Path)) else list(dataset)
        self.sources: list[str] = []
        self._table: dict[tuple[str, str, Config], MeasureResult] = {}
        self._references: dict[str, Reference] = {}
        for item in items:
            if isinstance(item, Record):
                records = [item]
            else:
                path = Path(item)  # type: ignore[arg-type]
                if not path.exists():
                    raise TuneGymError(f"replay dataset {path} does not exist")
                records = load_records(path)
                self.sources.append(str(path))
            for rec in records:
                self._table.setdefault((rec.task, rec.preset, tuple(rec.config)), rec.result)
                if rec.reference is not None:
                    self._references[rec.task] = rec.reference

    def tasks(self) -> dict[tuple[str, str], int]:
        """``{(task URI, preset): number of recorded configs}``."""
        out: dict[tuple[str, str], int] = {}
        for task, preset, _ in self._table:
            out[(task, preset)] = out.get((task, preset), 0) + 1
        return out

    def reference(self, task: Task) -> Reference | None:
        """The reference throughput recorded with the task's data (the last one), if any."""
        return self._references.get(task.uri)

    def covers(self, task: Task, space: KnobSpace) -> bool:
        """True when every config of the space is recorded (an exhaustive dataset)."""
        return self.tasks().get((task.uri, space.preset), 0) >= space.size

    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        out = []
        for cfg in configs:
            res = self._table.get((task.uri, space.preset, tuple(cfg)))
            if res is None:
                have = self.tasks().get((task.uri, space.preset), 0)
                raise TuneGymError(
                    f"replay: config {list(cfg)} of {task.uri} (preset {space.preset}) is not in the dataset "
                    f"{', '.join(self.sources) or '(in-memory)'}, which holds {have} configs of this task")
            out.append(res)
        return out

    def close(self) -> None:
        pass
