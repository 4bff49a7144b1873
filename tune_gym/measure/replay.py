"""Replay: exact, vectorised lookup of configs in recorded measurements.

The data are datasets (:mod:`tune_gym.datasets`: Parquet files collected by ``tune-gym
collect``) or tuning-record files (JSONL). With no data given, the backend finds each
task's dataset in the catalog (:func:`tune_gym.datasets.catalog.find_dataset`) the first
time the task is measured. Each (task, preset) becomes a sorted array of mixed-radix config
keys, so a batch is one ``searchsorted``; results are built once, when the data is loaded.

Results carry the recorded build and run seconds, so a session's clock is simulated tuning
time. A config the data does not hold is an error naming it (never an invented number),
unless a ``fallback`` backend (e.g. a surrogate fitted on the same data) is given: then the
fallback answers it. The one exception: a config its space itself rules out
(:meth:`KnobSpace.excluded`, e.g. one that breaks a restriction of a space defined by
parameters and restrictions) is an ``invalid`` failure that costs no time, as a tuner that
checks restrictions before compiling never builds it. The reference throughput recorded with
a task's data (:meth:`ReplayBackend.reference`) normalizes rewards of replayed runs, so they
are the same on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np

from tune_gym.datasets.source import DATA, SPACES_OPTION
from tune_gym.errors import TuneGymError
from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Check, OptionError, checked_options, show
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["ReplayBackend", "ReplayTable"]


class ReplayTable:
    """The recorded results of one (task, preset), keyed for vectorised lookup: ``keys``, the
    sorted mixed-radix keys (``config @ weights``) of the recorded configs, and ``results``, their
    results in the same order."""

    def __init__(self, space: KnobSpace, datasets: Sequence[Any]) -> None:
        self.datasets = list(datasets)
        dims = [int(d) for d in space.dims]
        weights = [1] * len(dims)
        for i in range(len(dims) - 2, -1, -1):
            weights[i] = weights[i + 1] * dims[i + 1]
        if weights and weights[0] * dims[0] >= 2**63:  # pragma: no cover - no such space today
            raise TuneGymError(f"replay: the space of {space.task.uri} has too many knob combinations to key")
        self.weights = np.array(weights, dtype=np.int64)
        keys, results = [], []
        for ds in self.datasets:  # earlier data wins when a config is recorded twice
            keys.append(ds.configs.astype(np.int64) @ self.weights)
            results.extend(ds.results)
        all_keys = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
        unique, first = np.unique(all_keys, return_index=True)
        self.keys = unique
        self.results = [results[i] for i in first]

    def lookup(self, configs: Sequence[Config]) -> tuple[list[MeasureResult | None], np.ndarray]:
        """The result of each config (``None`` where not recorded) and the missing rows."""
        keys = np.asarray(configs, dtype=np.int64).reshape(len(configs), -1) @ self.weights
        pos = np.searchsorted(self.keys, keys)
        pos[pos == len(self.keys)] = 0
        found = self.keys[pos] == keys if len(self.keys) else np.zeros(len(keys), dtype=bool)
        out = [self.results[p] if f else None for p, f in zip(pos.tolist(), found.tolist())]
        return out, np.flatnonzero(~found)


def _check_fallback(name: str, fallback: Any) -> Any:
    """``ReplayBackend``'s ``fallback``: a backend object or ``None`` (:func:`tune_gym.measure.make_backend`
    also takes a backend id, which it makes)."""
    from tune_gym.measure import is_backend

    if fallback is not None and not is_backend(fallback):
        raise OptionError(f"{name} must be a backend object or None, got {show(fallback)}")
    return fallback


class ReplayBackend(Backend):
    """Serves recorded results. ``name = "replay"``.

    Options (declared in the signature; the table: :func:`tune_gym.measure.backend_options`).
    ``fallback``: without one, a config the data does not hold is an error. ``spaces="recorded"``
    rebuilds each dataset's space from its stored description (:mod:`tune_gym.datasets.spaces`);
    :meth:`recorded_space` gives that space, and ``Tune-v0`` uses it (it then observes ``knobs``:
    such a space has no schedules to encode).
    """

    name = "replay"

    @checked_options(who="replay")
    def __init__(self, dataset: Annotated[Any, DATA] = None,
                 fallback: Annotated[Any, Check(_check_fallback, "backend object or None; by id: 'surrogate' or 'live'",
                                                help="answers configs the data does not hold (by id: made with "
                                                     "fallback_options, a surrogate on the same data)")] = None,
                 spaces: Annotated[str, SPACES_OPTION] = "task") -> None:
        from tune_gym.datasets.source import DataSource

        self.fallback = fallback
        self.data = DataSource(dataset, "replay", spaces)
        self._tables: dict[tuple[str, str], ReplayTable] = {}

    @property
    def sources(self) -> list[str]:
        return self.data.sources

    def datasets(self, task: Task, preset: str) -> list[Any]:
        """The datasets that serve ``task``'s ``preset`` space (loading them from the catalog
        on first use when the backend was made without data)."""
        return self.data.datasets(task, preset)

    def recorded_space(self, task: Task, preset: str) -> KnobSpace | None:
        """With ``spaces="recorded"``, the space ``task``'s ``preset`` data was recorded under
        (loading the data); ``None`` otherwise, or when the data holds none of the task."""
        if self.data.spaces != "recorded":
            return None
        datasets = self.datasets(task, preset)
        return datasets[0].space if datasets else None

    def table(self, task: Task, space: KnobSpace) -> ReplayTable:
        """The recorded results of ``task``'s ``space``, keyed (built once, when first asked for)."""
        key = (task.uri, space.preset)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = ReplayTable(space, self.datasets(task, space.preset))
        return table

    def tasks(self) -> dict[tuple[str, str], int]:
        """``{(task URI, preset): number of recorded configs}`` of the data loaded so far."""
        return {key: len(np.unique(np.concatenate([d.configs for d in dss]), axis=0)) if dss else 0
                for key, dss in self.data.loaded.items()}

    def reference(self, task: Task, preset: str | None = None) -> Reference | None:
        """The reference throughput recorded with the task's data (that of ``preset`` first), if any."""
        return self.data.reference(task, preset)

    def covers(self, task: Task, space: KnobSpace) -> bool:
        """True when every config of the space is recorded (an exhaustive dataset)."""
        return len(self.table(task, space).keys) >= space.size

    def optimum(self, task: Task, space: KnobSpace) -> float | None:
        """The best recorded GFLOPS of the space when the data covers it (:meth:`covers`): the
        task's optimum; ``None`` when the data is not exhaustive or no config of it ran."""
        if not self.covers(task, space):
            return None
        best = max((r.gflops for r in self.table(task, space).results if r.ok), default=0.0)
        return best if best > 0 else None

    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        if not len(configs):
            return []
        table = self.table(task, space)
        out, missing = table.lookup(configs)
        if missing.size:
            missing = self._answer_excluded(task, space, configs, missing, out)
        if missing.size:
            if self.fallback is None:
                cfg = list(configs[int(missing[0])])
                raise TuneGymError(
                    f"replay: config {cfg} of {task.uri} (preset {space.preset}) is not in the dataset "
                    f"{self.data.describe()}, which holds {len(table.keys)} configs of this task "
                    f"({missing.size} of the {len(configs)} requested are missing); configure a surrogate fallback "
                    "to answer unrecorded configs")
            answers = self.fallback.measure(task, space, [configs[int(i)] for i in missing])
            for i, res in zip(missing.tolist(), answers):
                out[i] = res
        return out  # type: ignore[return-value]

    @staticmethod
    def _answer_excluded(task: Task, space: KnobSpace, configs: Sequence[Config], missing: np.ndarray,
                         out: list[MeasureResult | None]) -> np.ndarray:
        """Answer the missing configs that ``space`` rules out (an ``invalid`` failure, no time
        spent) in ``out``; returns the rows still missing."""
        left = []
        for i in missing.tolist():
            why = space.excluded(configs[i])
            if why is None:
                left.append(i)
            else:
                out[i] = MeasureResult.failure("invalid", f"{why} (outside the space: never built)", task.flops)
        return np.asarray(left, dtype=np.int64)

    def close(self) -> None:
        if self.fallback is not None:
            self.fallback.close()

