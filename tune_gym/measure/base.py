"""The Backend protocol: ``measure(task, configs) -> results``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """Something that turns configs of a task into measurements.

    Backends measure what they are given; dedupe, caching, budgets and records live in
    :class:`tune_gym.session.TuningSession` so every backend gets them for free. A backend
    may also offer ``reference(task) -> Reference | None``: the reference throughput that was
    recorded with its data (the replay backend does).
    """

    name: str

    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        """Measure ``configs`` (canonical, distinct) of ``task``; one result per config, in order."""
        ...

    def close(self) -> None:
        """Release worker processes and other resources."""
        ...
