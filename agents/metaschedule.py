"""``metaschedule``: MetaSchedule's own search (TVM's ``tune_tir``) as an agent.

TVM's tuner for a task is an evolutionary search over the traces of its design space, guided by
an XGBoost model of MetaSchedule's per-store program features. Here TVM's own objects do that
work, driven from outside through their public interfaces, on the space's sketches
(:meth:`~tune_gym.space.KnobSpace.design_space`); the agent turns the search's candidates into
configs (:meth:`~tune_gym.space.KnobSpace.config_of_trace`) and proposes them through
``Tune-v0`` like every agent, so it runs on the live, replay and surrogate backends.

TVM's parts (apache-tvm 0.27, ``tvm.s_tir.meta_schedule``), with TVM's defaults:

* search: ``EvolutionarySearch`` (C++), called as TVM's task scheduler calls it
  (``pre_tuning``, ``generate_measure_candidates``, ``notify_runner_results``): an initial
  population of ``population_size`` 512 traces, ``init_measured_ratio`` 0.2 of them the best
  measured ones, the rest replayed from the sketches with fresh random decisions (at least
  ``init_min_unmeasured`` 50 of them, up to ``max_fail_count`` 5 failed sampling rounds);
  ``genetic_num_iters`` 4 generations, each mutating a trace drawn in proportion to its
  predicted score with probability ``genetic_mutate_prob`` 0.85 (up to
  ``genetic_max_fail_count`` 10 tries); the best predicted candidates the search has not
  picked before form the batch, ``eps_greedy`` 0.05 of it random members of the initial
  population. 64 candidates per iteration (``tune_tir``'s ``num_trials_per_iter``).
* mutators: the target's defaults (``Mutator.create``), acting on traces. On ``llvm``:
  ``MutateTileSize`` 0.9 (split knobs), ``MutateComputeLocation`` 0.05 (``compute_at`` knobs),
  ``MutateUnroll`` 0.03 (the unroll knob); on ``cuda``: ``MutateTileSize`` 0.9,
  ``MutateUnroll`` 0.08, ``MutateThreadBinding`` 0.02 (categorical knobs).
  ``MutateParallel`` (llvm, 0.02) is left out: it changes the parallel extent, a constant of
  the sketch that no knob holds, so its traces have no config. TVM's mutator sampler shares
  ``genetic_mutate_prob`` among the remaining mutators in proportion to their weights
  (``MakeMutatorSampler``: tile size 0.9/0.98 of it, and so on).
* database: ``MemoryDatabase``; each batch's measurements are committed as the
  ``AddToDatabase`` callback commits them (a failure with 1e10 s), which is where the initial
  population's measured traces come from.
* cost model: ``XGBModel`` on ``PerStoreFeature`` (164 features per buffer store; the
  program's prediction is the sum over its stores), squared error weighted by the normalized
  throughput, ``XGBConfig`` max_depth 10, gamma 0.001, min_child_weight 0, eta 0.2, seed 43,
  early stopping after 50 rounds without a better training p-rmse, ``average_peak_n`` 32;
  ``num_warmup_samples`` 100 (until then it scores randomly); adaptive training (it refits
  only once the data grew by a fifth since the last fit). Updated after each batch, as the
  ``UpdateCostModel`` callback does.

Re-stated or decided here:

* Random numbers: TVM's model draws its warm-up scores from NumPy's global generator; here they
  come from the agent's seeded generator. TVM searches on all physical cores, one random stream
  per thread, with work handed to whichever thread is free, so a seed does not repeat a run;
  ``num_threads=1`` (default) does. XGBoost trains on ``nthread`` 1 thread (TVM: all physical
  cores), as ``xgb-sa`` does.
* What is learned: a candidate becomes the config whose decisions it holds; a compute location
  that MetaSchedule sampled for other tiles than the sketch's own may have no config, and maps
  to the nearest deeper one (:meth:`~tune_gym.space.KnobSpace.config_of_trace`). The cost
  model and the database learn the program of the config that was measured (the config's
  schedule with the target's postprocs), not the candidate's.
* Repeats: TVM's search remembers only its own picks. A candidate whose config was proposed
  before (e.g. records the env loaded) is dropped from the batch; a batch left empty makes the
  search run again, up to ``num_empty_iters_before_early_stop`` 5 times in a row, after which
  the agent proposes nothing and the run ends, as TVM ends the task.
* Budget and batches: the env owns the budget (the search is given no trial limit); the env may
  ask for fewer configs at a time than a batch, and the batch is served in pieces. A config
  without a program (rejected by the postprocs: never a candidate of TVM's search, but possibly
  in the env's records) is left out of the database and the model.

Tasks without TVM programs (registered kinds such as ``vta`` and ``kt``) are declined with
:class:`~agents.base.NotApplicable`: the search, the mutators and the features all act on TVM
traces, and a knobs-only stand-in would not be MetaSchedule.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np

from agents.base import Agent, register
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Float, Int
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["DEFAULTS", "EMPTY_ITERS_BEFORE_STOP", "MUTATORS_LEFT_OUT", "MetaScheduleAgent"]

#: TVM 0.27's defaults of what the agent's options set: ``EvolutionarySearch.__init__``,
#: ``XGBModel.__init__`` and ``tune_tir``'s ``num_trials_per_iter`` (``plan_size``).
#: ``tests/test_agent_metaschedule.py`` checks them against TVM's signatures.
DEFAULTS: dict[str, int | float] = {
    "plan_size": 64, "population_size": 512, "init_measured_ratio": 0.2, "init_min_unmeasured": 50,
    "max_fail_count": 5, "genetic_num_iters": 4, "genetic_mutate_prob": 0.85, "genetic_max_fail_count": 10,
    "eps_greedy": 0.05, "num_warmup_samples": 100,
}
#: Default mutators of a target that act on no knob (see the module docstring).
MUTATORS_LEFT_OUT = ("MutateParallel",)
#: ``EvolutionarySearch``'s ``num_empty_iters_before_early_stop`` (read-only from Python).
EMPTY_ITERS_BEFORE_STOP = 5
#: ``AddToDatabase``'s run time of a failed measurement, seconds.
FAILED_SECS = 1e10


@register("metaschedule", "MetaSchedule (tune_tir): TVM's evolutionary search + XGBoost on per-store features")
class MetaScheduleAgent(Agent):
    """TVM's MetaSchedule search (see the module docstring). Options: ``tune-gym agents
    metaschedule``; the defaults are TVM's (``tune_tir``, ``EvolutionarySearch``, ``XGBModel``)
    except the thread counts (1, reproducible; TVM: all physical cores, not reproducible)."""

    needs_schedules = True

    def __init__(self, plan_size: Annotated[int, Int(1, help="candidates per search iteration (tune_tir's "
                                                             "num_trials_per_iter)")] = 64,
                 population_size: Annotated[int, Int(1, help="the search's initial population of traces")] = 512,
                 init_measured_ratio: Annotated[float, Float(0.0, 1.0, help="share of that population taken from "
                                                                            "the best measured")] = 0.2,
                 init_min_unmeasured: Annotated[int, Int(0, help="fewest traces replayed with fresh random "
                                                                 "decisions")] = 50,
                 max_fail_count: Annotated[int, Int(1, help="failed sampling rounds allowed")] = 5,
                 genetic_num_iters: Annotated[int, Int(0, help="generations of mutation")] = 4,
                 genetic_mutate_prob: Annotated[float, Float(0.0, 1.0, help="probability of mutating a drawn "
                                                                            "trace")] = 0.85,
                 genetic_max_fail_count: Annotated[int, Int(0, help="tries per mutation")] = 10,
                 eps_greedy: Annotated[float, Float(0.0, 1.0, help="share of each batch taken from random members "
                                                                   "of the initial population")] = 0.05,
                 num_warmup_samples: Annotated[int, Int(0, help="measurements before the cost model's scores are "
                                                                "used")] = 100,
                 num_threads: Annotated[int, Int(1, help="threads of the search and the feature "
                                                         "extraction")] = 1,
                 nthread: Annotated[int, Int(1, help="XGBoost threads")] = 1) -> None:
        self.plan_size = plan_size
        self.search_options = {
            "population_size": population_size, "init_measured_ratio": init_measured_ratio,
            "init_min_unmeasured": init_min_unmeasured, "max_fail_count": max_fail_count,
            "genetic_num_iters": genetic_num_iters, "genetic_mutate_prob": genetic_mutate_prob,
            "genetic_max_fail_count": genetic_max_fail_count, "eps_greedy": eps_greedy,
        }
        self.num_warmup_samples = num_warmup_samples
        self.num_threads = num_threads
        self.nthread = nthread

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)  # declines a task without TVM schedules
        from tune_gym.tvm_support import ms

        m = ms()
        kind = task.target.kind
        mutators = {mut: float(p) for mut, p in m.Mutator.create(kind).items()
                    if type(mut).__name__ not in MUTATORS_LEFT_OUT}
        self.search = m.search_strategy.EvolutionarySearch(**self.search_options)
        self.context = m.TuneContext(
            mod=space.mod, target=space.target,
            space_generator=m.space_generator.PostOrderApply(sch_rules=[], postprocs=kind, mutator_probs=mutators),
            search_strategy=self.search, num_threads=self.num_threads, rand_state=int(self.rng.integers(2**31)))
        self.database = m.database.MemoryDatabase()
        self.workload = self.database.commit_workload(space.mod)
        self.model = _seeded_xgb_model()(
            np.random.default_rng(int(self.rng.integers(2**31))), num_warmup_samples=self.num_warmup_samples,
            config=_xgb_config(nthread=self.nthread))
        self.search.pre_tuning(2**31 - 1, self.plan_size, space.design_space(), self.database, self.model)
        self._plan: list[Config] = []
        self._pending: list[tuple[Config, MeasureResult]] = []  # measured, not yet told to TVM's objects
        self._ended = False  # the search gave up (TVM ends the task)

    # ------------------------------------------------------------------ ask / tell
    def propose(self, n: int) -> list[Config]:
        """Up to ``n`` configs of the current batch; when it is used up, the search makes the
        next one (after TVM's objects have learned the last one's measurements)."""
        if not self._plan and not self._ended:
            self._plan = self._next_batch()
            self._ended = not self._plan
        out, self._plan = self._plan[:n], self._plan[n:]
        self.proposed.update(out)
        return out

    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        self._pending += [(c, r) for c, r in zip(configs, results) if c not in self.seen]
        super().observe(configs, results)

    # ------------------------------------------------------------------ TVM's loop
    def _next_batch(self) -> list[Config]:
        """Tell TVM's objects what was measured, then run the search until it gives configs
        not proposed before (at most ``EMPTY_ITERS_BEFORE_STOP`` times)."""
        self._commit_pending()
        for _ in range(EMPTY_ITERS_BEFORE_STOP):
            candidates = self.search.generate_measure_candidates()
            if candidates is None:
                return []
            batch: list[Config] = []
            for cand in candidates:
                cfg = self.space.config_of_trace(cand.sch.trace)
                if cfg not in self.proposed and cfg not in batch:
                    batch.append(cfg)
            if batch:
                return batch
        return []

    def _commit_pending(self) -> None:
        """What ``tune_tir`` does after a batch is measured: the AddToDatabase and UpdateCostModel
        callbacks, then ``notify_runner_results``."""
        from tune_gym.tvm_support import ms

        m = ms()
        pending, self._pending = self._pending, []
        candidates, results = [], []
        for cfg, res in pending:
            cand = self._candidate(cfg)
            if cand is None:  # no program: never one of TVM's candidates
                continue
            run_secs = [float(c) for c in res.costs] if res.ok else None
            candidates.append(cand)
            results.append(m.runner.RunnerResult(run_secs, None if res.ok else (res.error_msg or str(res.error))))
            self.database.commit_tuning_record(m.database.TuningRecord(  # the trace before postprocessing
                self.space.trace(cfg, check=False), self.workload, run_secs or [FAILED_SECS], self.space.target,
                cand.args_info))
        if candidates:
            self.model.update(self.context, candidates, results)
            self.search.notify_runner_results(candidates, results)

    def _candidate(self, config: Config) -> Any | None:
        """The ``MeasureCandidate`` of a config's postprocessed schedule (``None`` when rejected)."""
        from tune_gym.tvm_support import ms

        sch, _ = self.space.apply(config)
        if sch is None:
            return None
        m = ms()
        return m.MeasureCandidate(sch, m.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


@functools.cache
def _seeded_xgb_model() -> Any:
    """TVM's ``XGBModel`` whose warm-up scores come from a given NumPy generator instead of
    NumPy's global one (a TVM ``derived_object`` class: ``cls(rng, **XGBModel options)``)."""
    from tvm.ir.utils import derived_object

    from tune_gym.tvm_support import ms

    base = ms().cost_model.XGBModel._cls

    class SeededXGBModel(base):  # type: ignore[misc, valid-type]
        def __init__(self, rng: np.random.Generator, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.rng = rng

        def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
            if self.data_size >= self.num_warmup_samples and self.booster is not None:
                return super().predict(context, candidates)  # type: ignore[no-any-return]
            return self.rng.uniform(0.0, 1.0, size=len(candidates))

    return derived_object(SeededXGBModel)


def _xgb_config(**changes: Any) -> Any:
    """TVM's default ``XGBConfig`` with ``changes``."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    return XGBConfig()._replace(**changes)
