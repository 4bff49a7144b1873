"""The Backend base class: ``measure(task, space, configs) -> results``, and what else a backend offers.

Every backend subclasses :class:`Backend` (live, replay, surrogate, rpc, ``vta-sim``): it must
implement :meth:`~Backend.measure`; every other method has a default here that says "this
backend has nothing to tell", so callers (``Tune-v0``, the dataset collector, the leaderboard)
call them directly instead of probing which methods an object has. A backend object that does
not subclass it is accepted when it offers every method of :data:`BACKEND_METHODS`
(:func:`tune_gym.measure.is_backend`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the measure modules import this one: only types from them here
    from tune_gym.measure.reference import Reference
    from tune_gym.measure.result import MeasureResult
    from tune_gym.space import Config, KnobSpace
    from tune_gym.tasks.task import Task

__all__ = ["BACKEND_METHODS", "Backend"]


class Backend(ABC):
    """Something that turns configs of a task into measurements.

    Backends measure what they are given; dedupe, caching, budgets and records live in
    :class:`tune_gym.session.TuningSession` so every backend gets them for free.

    Attributes:
        name: the backend's id (``"live"``, ``"replay"``, ...), as results and messages name it.
        simulated: True when nothing is measured on this machine (a model answers); the dataset
            collector then records the backend as the rows' host and marks the data simulated.
    """

    name: str = ""
    simulated: bool = False

    @abstractmethod
    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        """Measure ``configs`` (canonical, distinct) of ``task``; one result per config, in order."""

    def close(self) -> None:
        """Release worker processes and other resources (default: nothing to release)."""
        return None

    def reference(self, task: Task, preset: str | None = None) -> Reference | None:
        """The reference throughput this backend's data holds for ``task`` (that of ``preset``
        first); ``None`` (the default) when it has none, and the caller measures one."""
        return None

    def datasets(self, task: Task, preset: str) -> list[Any]:
        """The datasets that answer ``task``'s ``preset`` space (default: none, nothing recorded)."""
        return []

    def recorded_space(self, task: Task, preset: str) -> KnobSpace | None:
        """The space ``task``'s ``preset`` data was recorded under, when the backend serves
        that instead of the task's space today; ``None`` (the default) otherwise."""
        return None

    def covers(self, task: Task, space: KnobSpace) -> bool:
        """True when the backend's data holds every config of ``space`` (default: False)."""
        return False

    def optimum(self, task: Task, space: KnobSpace) -> float | None:
        """The best GFLOPS of ``space`` when the backend knows it (exhaustive data, see
        :meth:`covers`); ``None`` (the default) otherwise."""
        return None


#: The methods a backend object offers (a :class:`Backend` subclass inherits the defaults).
BACKEND_METHODS = ("measure", "close", "reference", "datasets", "recorded_space", "covers", "optimum")
