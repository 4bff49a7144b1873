"""``meta-bo-evo``: ``meta-bo`` early, MetaSchedule's evolutionary search late.

Why: in the live comparisons with MetaSchedule's ``tune_tir`` (``benchmarks/vs_metaschedule_study.py``,
docs/results.md), ``meta-bo`` leads at 128 trials on most runs and loses the lead by 512, because its
search stops finding better kernels (in 10 of 15 two-core runs its last improvement came by trial
300) while MetaSchedule's evolutionary search keeps mutating the best measured programs (its last
improvement after trial 330 in 13 of 15). This agent keeps each part where it is strong:

* **Early: ``meta-bo``** (:class:`~agents.meta_bo.MetaBOAgent`, every option of it, same seed, same
  proposals): the meta-learned cost model's first plans and the GP batch BO.
* **The switch**: once at least ``min_trials`` configs are measured and the best throughput has not
  risen by more than ``min_gain`` (relative) over the last ``patience`` measurements, the agent
  hands the rest of the run to the evolutionary search, for good. The BO's plan in progress is
  dropped (its unserved configs were never proposed).
* **Late: MetaSchedule's search** (:class:`~agents.metaschedule.MetaScheduleAgent`: TVM's
  ``EvolutionarySearch``, mutators and ``XGBModel`` on per-store features, TVM's defaults), made
  at the switch and told every measurement so far, in the order they were made: its database's
  best traces seed its initial population (``init_measured_ratio``), its cost model trains on all
  of them, and it never proposes a config measured before. Its random numbers come from a stream
  of their own (spawned from the run's seed), so the early part is exactly ``meta-bo``'s run.
  If the search gives up (TVM ends a task after 5 empty iterations), ``meta-bo`` plans again.

``describe()`` records the trial of the switch (``switched_at``, ``None`` if it never came) with
the checkpoint, so each run says how its budget was split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np

from agents.base import register
from agents.meta_bo import MetaBOAgent
from agents.metaschedule import MetaScheduleAgent
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Float, Int
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["MetaBOEvoAgent"]


@register("meta-bo-evo", "meta-bo, then MetaSchedule's evolutionary search from its measurements once meta-bo stalls")
class MetaBOEvoAgent(MetaBOAgent):
    """``meta-bo`` until it stalls, then TVM's evolutionary search (see the module docstring).
    Options: ``tune-gym agents meta-bo-evo`` (``meta-bo``'s, plus the switch and the search's)."""

    def __init__(self, patience: Annotated[int, Int(1, help="measurements without a gain of the best before the "
                                                            "switch")] = 64,
                 min_trials: Annotated[int, Int(0, help="fewest measurements before the switch")] = 128,
                 min_gain: Annotated[float, Float(0.0, help="relative rise of the best that counts as a gain")] = 0.01,
                 evo_plan_size: Annotated[int, Int(1, help="the search's candidates per iteration (TVM: 64)")] = 64,
                 evo_population_size: Annotated[int, Int(1, help="the search's initial population (TVM: 512)")] = 512,
                 evo_num_iters: Annotated[int, Int(0, help="the search's generations of mutation (TVM: 4)")] = 4,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.patience = patience
        self.min_trials = min_trials
        self.min_gain = min_gain
        self.evo_options = {"plan_size": evo_plan_size, "population_size": evo_population_size,
                            "genetic_num_iters": evo_num_iters}

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        # the search's own stream: meta-bo's draws stay those of a meta-bo run with this seed
        self._evo_seed = int(np.random.SeedSequence(seed).spawn(1)[0].generate_state(1)[0] >> 1)
        self.evo: MetaScheduleAgent | None = None
        self.switched_at: int | None = None
        self._best = 0.0
        self._since_gain = 0

    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        fresh = [r for c, r in zip(configs, results) if c not in self.seen]
        super().observe(configs, results)
        for res in fresh:  # a failure's throughput is 0: never a gain
            if res.gflops > self._best * (1.0 + self.min_gain):
                self._best, self._since_gain = res.gflops, 0
            else:
                self._best = max(self._best, res.gflops)
                self._since_gain += 1
        if self.evo is not None:
            self.evo.observe(configs, results)

    def stalled(self) -> bool:
        """Whether the switch is due: enough measurements, none of the last ``patience`` a gain."""
        return len(self.seen) >= self.min_trials and self._since_gain >= self.patience

    def propose(self, n: int) -> list[Config]:
        if self.evo is None and self.stalled():
            self._switch()
        if self.evo is not None:
            out = self.evo.propose(n)
            if out:
                self.proposed.update(out)
                return out
        return super().propose(n)

    def _switch(self) -> None:
        """Make the evolutionary search and tell it every measurement so far."""
        evo = MetaScheduleAgent(**self.evo_options)  # TVM's defaults for the rest
        evo.reset(self.space, self.task, seed=self._evo_seed)
        evo.observe(list(self.seen), list(self.seen.values()))
        evo.proposed.update(self.proposed)
        self.evo, self.switched_at = evo, len(self.seen)
        self._plan = []  # meta-bo's plan in progress: never served, so never proposed

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "switched_at": self.switched_at}
