"""Measurement cache: a config measured once is served from here for the rest of the run."""

from __future__ import annotations

from collections.abc import Iterable

from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config

__all__ = ["MeasureCache"]


class MeasureCache:
    """``(task URI, preset, config) -> MeasureResult``, filled by measurements and records."""

    def __init__(self) -> None:
        self._data: dict[tuple[str, str, Config], MeasureResult] = {}

    def get(self, task: str, preset: str, config: Config) -> MeasureResult | None:
        return self._data.get((task, preset, tuple(config)))

    def put(self, task: str, preset: str, config: Config, result: MeasureResult) -> None:
        self._data[(task, preset, tuple(config))] = result

    def update(self, items: Iterable[tuple[str, str, Config, MeasureResult]]) -> None:
        for task, preset, config, result in items:
            self.put(task, preset, config, result)

    def configs(self, task: str, preset: str) -> list[Config]:
        return [c for (t, p, c) in self._data if t == task and p == preset]

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: tuple[str, str, Config]) -> bool:
        return key in self._data
