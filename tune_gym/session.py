"""The one owner of what a tuning run has measured: dedupe, budget, cache, records, clock.

Everything that gets configs measured goes through a :class:`TuningSession`: the
``Tune-v0`` and ``KnobWalk-v0`` environments, the dataset collector and, through the env,
the agents' run loop. Nothing else keeps its own "already measured" set::

    caller (env step / collector)  --canonical configs-->  TuningSession.evaluate
        dedupe against this run's trials (a repeat is free)
        excluded: a config the space itself rules out (KnobSpace.excluded) is no trial
        budget: configs beyond it are skipped, not measured
        cache: a config measured before in this session's life (or loaded from its record
               file) costs a trial but is not measured again
        Backend.measure(task, space, the rest)          # live | replay | ...
        records: every fresh measurement appended to the JSONL log, fsynced per batch
        clock: the simulated tuning time (recorded build + run seconds)
    <--  Evaluation: one Outcome per config, with its typed Trial

A *run* is one tuning run of the task (one ``Tune-v0`` episode): :meth:`TuningSession.new_run`
clears the run's trials and budget but keeps the cache, so a later run gets the same
results without measuring again. Configs are validated once, by whoever turns user input
into configs (``KnobSpace.check_table`` in an env's action decoding); the session takes
canonical configs as they are.

Example:
    >>> session = TuningSession(task, KnobSpace.for_task(task, "compact"), backend, budget=64,
    ...                         log="runs/dense.jsonl", resume=True)
    >>> ev = session.evaluate(space.sample_unique(rng, 8))
    >>> [o.status for o in ev.outcomes], session.best.gflops, session.clock
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["SOURCES", "STATUSES", "Evaluation", "Outcome", "Trial", "TuningSession"]

#: Where a trial's result came from: ``measured`` (measured by this session's backend, for
#: this trial or, served from the cache, earlier in the session's life) or ``records``
#: (loaded from the record file when the session resumed). Whether a config was really sent
#: to the backend in a call is :attr:`Evaluation.measured`: a trial's fields depend only on
#: the run, not on what earlier runs of the session measured, so same seed, same trials.
SOURCES = ("measured", "records")
#: What happened to one requested config: ``new`` (a new trial of this run), ``repeat``
#: (already a trial of this run: free), ``excluded`` (not a config of the space, which says
#: so without building it, :meth:`KnobSpace.excluded`: no trial, no budget, no time, answered
#: as an ``invalid`` failure, as Kernel Tuner never counts a config outside its restrictions),
#: ``skipped`` (the budget was spent: not evaluated).
STATUSES = ("new", "repeat", "excluded", "skipped")


@dataclass(frozen=True)
class Trial:
    """One unique evaluated config of a run.

    Attributes:
        index: position among the run's unique trials, from 1.
        config: the canonical config (per-knob choice indices).
        result: its measurement (failed configs have ``result.ok == False``, 0 GFLOPS).
        source: one of :data:`SOURCES`.
        clock: simulated tuning seconds of the run after this trial: the recorded build +
            run seconds of every trial so far (on replay, the seconds the dataset recorded).
    """

    index: int
    config: Config
    result: MeasureResult
    source: str
    clock: float

    @property
    def gflops(self) -> float:
        return self.result.gflops  # cached on the result

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def cost(self) -> float:
        """Build + run seconds of this trial's measurement."""
        return self.result.build_secs + self.result.run_secs


@dataclass(frozen=True)
class Outcome:
    """What :meth:`TuningSession.evaluate` did with one requested config.

    Attributes:
        config: the config as requested (canonical).
        status: one of :data:`STATUSES`.
        trial: the config's trial in this run (``None`` when excluded or skipped).
        failure: for an excluded config, its ``invalid`` result (why the space rules it out).
    """

    config: Config
    status: str
    trial: Trial | None
    failure: MeasureResult | None = None

    @property
    def result(self) -> MeasureResult | None:
        """The trial's result, the failure of an excluded config, ``None`` when skipped."""
        return self.trial.result if self.trial is not None else self.failure


@dataclass(frozen=True)
class Evaluation:
    """The result of one :meth:`TuningSession.evaluate` call.

    Attributes:
        outcomes: one per requested config, in order.
        new: the trials this call added to the run, in order.
        measured: how many configs were sent to the backend.
        wall_secs: wall seconds spent in the backend.
    """

    outcomes: tuple[Outcome, ...]
    new: tuple[Trial, ...]
    measured: int
    wall_secs: float

    @property
    def cost(self) -> float:
        """Simulated seconds of the new trials (their recorded build + run seconds)."""
        return sum(t.cost for t in self.new)


class TuningSession:
    """Measured state of tuning one task (see the module docstring).

    Args:
        task: the task.
        space: its knob space (any preset).
        backend: what measures configs.
        budget: unique trials per run (``None``: no limit).
        log: JSONL record file every fresh measurement is appended to (``None``: none). It is
            opened (and locked against other writers) here, until :meth:`close`.
        resume: load the log's records of this task and preset first: they enter the cache
            and become the first trials of the first run (nothing in them is measured again).
            Each is checked against the task and space (:func:`tune_gym.records.load_records`).

    Raises:
        RecordError: ``log`` is not a record log, another writer holds it, or (``resume``) one
            of its lines is not a valid record of it (naming ``file:line``).
        reference: the reference throughput written into each record (``None``: none).
    """

    def __init__(self, task: Task, space: KnobSpace, backend: Backend, budget: int | None = None,
                 log: str | Path | None = None, resume: bool = False, reference: Reference | None = None) -> None:
        if budget is not None and budget < 1:
            raise ValueError(f"budget must be >= 1 (or None for no limit), got {budget}")
        if space.task != task:
            raise ValueError(f"space is for {space.task.uri}, not {task.uri}")
        self.task = task
        self.space = space
        self.backend = backend
        self.budget = budget
        self.reference = reference
        self.log = Path(log) if log is not None else None
        self._writer: Any = None
        self._cache: dict[Config, MeasureResult] = {}
        self._from_records: set[Config] = set()
        self.resumed: list[Any] = []  # records of this task and preset loaded from the log
        if self.log is not None:
            self._open_log(resume)
        self.measured_count = 0  # configs sent to the backend over the session's life
        self.wall_secs = 0.0  # wall seconds spent in the backend over the session's life
        self._first_run = True
        self.new_run()

    # ------------------------------------------------------------------ state
    def new_run(self) -> list[Trial]:
        """Start a run: no trials, the full budget, the clock at 0; the cache is kept.

        The first run starts with the resumed records as its trials (they count against the
        budget, in file order). Returns the run's initial trials.
        """
        self.trials: list[Trial] = []
        self._by_config: dict[Config, Trial] = {}
        self.clock = 0.0
        self._best: Trial | None = None
        if self._first_run:
            self._first_run = False
            for cfg in dict.fromkeys(r.config for r in self.resumed):
                self._add(cfg, self._cache[cfg], "records")
        return list(self.trials)

    @property
    def trials_used(self) -> int:
        return len(self.trials)

    @property
    def budget_left(self) -> int | None:
        return None if self.budget is None else max(0, self.budget - len(self.trials))

    @property
    def exhausted(self) -> bool:
        """True when the run's budget is spent."""
        return self.budget is not None and len(self.trials) >= self.budget

    @property
    def space_done(self) -> bool:
        """True when every config of the space is a trial of this run."""
        return len(self.trials) >= self.space.size

    @property
    def best(self) -> Trial | None:
        """The run's trial with the highest GFLOPS (the first one on ties); ``None`` before
        any config ran."""
        return self._best

    @property
    def best_gflops(self) -> float:
        """GFLOPS of :attr:`best` (0.0 before any config ran)."""
        return self._best.gflops if self._best is not None else 0.0

    def trial(self, config: Config) -> Trial | None:
        """This run's trial of ``config``, if any."""
        return self._by_config.get(config)

    @property
    def measured(self) -> Mapping[Config, MeasureResult]:
        """Every result the session knows (measured in its life or loaded from records), read-only."""
        return MappingProxyType(self._cache)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, configs: Sequence[Config]) -> Evaluation:
        """Evaluate canonical configs: dedupe, budget, cache, measure the rest, record.

        A config already a trial of this run is a free ``repeat``; one the space rules out is
        ``excluded`` (no trial, no budget, no time); a new one becomes a trial while the budget
        lasts (``skipped`` beyond it); only new trials that the cache does not hold are sent to
        the backend, in one call, and appended to the log.
        """
        plan: list[tuple[Config, str]] = []
        new: dict[Config, None] = {}
        failures: dict[Config, MeasureResult] = {}
        for cfg in configs:
            if cfg in self._by_config or cfg in new:
                plan.append((cfg, "repeat"))
            elif cfg in failures or (why := self.space.excluded(cfg)) is not None:
                if cfg not in failures:
                    failures[cfg] = MeasureResult.failure("invalid", f"{why} (outside the space: not a trial)",
                                                          self.task.flops)
                plan.append((cfg, "excluded"))
            elif self.budget is not None and len(self.trials) + len(new) >= self.budget:
                plan.append((cfg, "skipped"))
            else:
                new[cfg] = None
                plan.append((cfg, "new"))
        to_measure = [c for c in new if c not in self._cache]
        wall = 0.0
        if to_measure:
            start = time.perf_counter()
            results = self.backend.measure(self.task, self.space, to_measure)
            wall = time.perf_counter() - start
            if len(results) != len(to_measure):
                raise RuntimeError(f"backend {self.backend.name} returned {len(results)} results "
                                   f"for {len(to_measure)} configs")
            self.measured_count += len(to_measure)
            self.wall_secs += wall
            for cfg, res in zip(to_measure, results):
                self._cache[cfg] = res
            self._write(zip(to_measure, results))
        added = tuple(self._add(cfg, self._cache[cfg], self._source(cfg)) for cfg in new)
        outcomes = tuple(Outcome(cfg, status, self._by_config.get(cfg), failures.get(cfg)) for cfg, status in plan)
        return Evaluation(outcomes, added, len(to_measure), wall)

    def _source(self, config: Config) -> str:
        return "records" if config in self._from_records else "measured"

    def _add(self, config: Config, result: MeasureResult, source: str) -> Trial:
        self.clock += result.build_secs + result.run_secs
        trial = Trial(len(self.trials) + 1, config, result, source, self.clock)
        self.trials.append(trial)
        self._by_config[config] = trial
        if result.ok and (self._best is None or trial.gflops > self._best.gflops):
            self._best = trial
        return trial

    def _open_log(self, resume: bool) -> None:
        """Open the record log for appending (taking its lock: a second writer of the log fails
        here, before anything is measured) and, with ``resume``, load its records of this task
        and preset, each checked against the task and space."""
        from tune_gym.records import RecordWriter, load_records

        assert self.log is not None
        self._writer = RecordWriter(self.log)
        if not resume:
            return
        try:
            self.resumed = [r for r in load_records(self.log, task=self.task.uri) if r.preset == self.space.preset]
        except BaseException:
            self.close()
            raise
        for rec in self.resumed:
            self._cache.setdefault(rec.config, rec.result)
            self._from_records.add(rec.config)

    def _write(self, items: Iterable[tuple[Config, MeasureResult]]) -> None:
        if self.log is None:
            return
        from tune_gym.records import Record, RecordWriter

        if self._writer is None:  # used again after close(): open (and lock) the log again
            self._writer = RecordWriter(self.log)
        self._writer.append([Record.create(self.space, cfg, res, self.backend.name, self.reference)
                             for cfg, res in items])

    def close(self) -> None:
        """Close the record file (the backend belongs to whoever made it)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> TuningSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
