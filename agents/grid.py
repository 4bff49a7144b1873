"""``grid``: every config in flat-index order (AutoTVM's GridSearchTuner)."""

from __future__ import annotations

from typing import Annotated

from agents.base import Agent, register
from tune_gym.options import Int
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["GridAgent"]


@register("grid", "every config in flat-index order (exhaustive on compact spaces)")
class GridAgent(Agent):
    """Walks flat indices ``start, start + 1, ...``; stops at the end of the space."""

    def __init__(self, start: Annotated[int, Int(0, help="the first flat index walked")] = 0) -> None:
        self.start = start

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        if not 0 <= self.start < space.size:
            raise ValueError(f"grid start {self.start} out of range [0, {space.size - 1}]")
        self._next = self.start

    def propose(self, n: int) -> list[Config]:
        stop = min(self._next + n, self.space.size)
        out = [self.space.config(i) for i in range(self._next, stop)]
        self._next = stop
        return out
