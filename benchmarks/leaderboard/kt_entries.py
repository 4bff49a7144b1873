"""Kernel Tuner's strategies as leaderboard entries beside tune_gym's agents: ``kt:<strategy>``.

A suite lists them among its agents by Kernel Tuner's own strategy names with the prefix
``kt:`` (``agents = ["*", "kt:genetic_algorithm", "kt:pso"]``; the names are
:data:`benchmarks.external.kernel_tuner_runs.STRATEGIES`). They take no options: every
hyperparameter is Kernel Tuner's default.

One run of an entry is one Kernel Tuner 1.5 strategy in simulation mode on the task's own
files (the Kernel Tuner cache a ``kt`` task replays and its T1 problem), seeded with the run's
seed, with ``max_fevals`` = the run's trials budget and no time limit
(:class:`benchmarks.external.kernel_tuner_runs.KernelTunerSimulation`). Its trace becomes an
ordinary results line (:func:`benchmarks.leaderboard.runner.run_one`):

* **trials**: the configurations Kernel Tuner evaluated, in its order, each once (a repeat is
  free in Kernel Tuner and in tune_gym, so it is no trial; configurations outside the
  restrictions never reach Kernel Tuner's runner, so they are none either); each config is
  the ``kt`` space's knob indices of its parameter values;
* **numbers**: those configs replayed by a fresh :class:`tune_gym.session.TuningSession` on the
  task's replay data, as ``tune-gym validate`` replays every run, and checked against what the
  trace recorded (failed or not, and the simulated clock: both charge each configuration its
  recorded compile + verification + benchmark + framework seconds);
* **ended**: ``budget`` (the strategy used its ``max_fevals``), ``space`` (every
  configuration) or ``agent``: the strategy stopped by itself before its budget, as several do
  with Kernel Tuner's defaults (genetic_algorithm, pso, firefly_algorithm,
  simulated_annealing, basinhopping, minimize, dual_annealing run out of iterations;
  adaptive_tabu_greywolf and hybrid_vndx out of their own 5,000 evaluations, repeats
  included; see :mod:`benchmarks.external.kernel_tuner_runs`);
* **agent_info** (:func:`entry_info`): the strategy, the options it ran with and the Kernel
  Tuner version; **agent_secs**: the wall seconds of the Kernel Tuner run (the strategy and
  Kernel Tuner's own simulation).

**Restarts** (``kt:<strategy>+restarts``): the same strategy, run again with a new seed each
time it stops by itself before the budget, until the budget is spent. Several of Kernel Tuner's
strategies stop early with their defaults (``genetic_algorithm`` evaluates 9% of a 3,062-trial
budget), and a user with budget to spare would start again, not stop: this is the strongest use
of a strategy whose every hyperparameter stays Kernel Tuner's default. The first run is the
plain entry's (the run's seed), restart ``i`` takes the seed ``SeedSequence([seed, i])`` draws,
and each is handed the budget still left. The runs share one cache, as restarts in one tuning
session would: a configuration an earlier run evaluated is free and no trial when a later one
meets it again, so the trials are every run's new configurations in order, on one clock that
charges each once. The run ends at the budget, when every configuration is evaluated, or
(``agent``) after :data:`IDLE_RESTARTS` runs in a row that find nothing new.

Budgets: the one trials budget serves both axes, as for agents: the time axis scores the same
run against its simulated clock. On a task that is not a ``kt`` task an entry declines (the
line is ``not_applicable``, as an agent's that raises :class:`agents.NotApplicable`).

Validation (:mod:`benchmarks.leaderboard.validate`) checks an entry's line as an agent's: its
identity (``agent_info`` is :func:`entry_info` of its spec), its data, every trial replayed
against the file. Only a run reveals a strategy's configurations (there is no cheap first
batch), so a run that stopped early, and the sampled re-runs, run the strategy again (it is
deterministic) and must give the same configurations.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
import time
from pathlib import Path
from typing import Any

__all__ = ["IDLE_RESTARTS", "PREFIX", "RESTARTS", "entry_info", "is_entry", "refusal", "restarts", "run_entry",
           "strategy_of", "suite_problem"]

#: What marks a suite's agent entry as a Kernel Tuner strategy.
PREFIX = "kt:"
#: The suffix of an entry that restarts its strategy until the budget is spent (``kt:pso+restarts``).
RESTARTS = "+restarts"
#: Restarts in a row that find no new configuration before a restarted run gives up (``ended`` = ``agent``).
IDLE_RESTARTS = 3
#: The trace's end -> the results line's ``ended`` (:func:`benchmarks.leaderboard.runner.run_end`).
_ENDED = {"max_fevals": "budget", "space": "space", "strategy": "agent"}


def is_entry(name: str) -> bool:
    """True for a suite entry that names a Kernel Tuner strategy (``kt:...``)."""
    return name.startswith(PREFIX)


def restarts(name: str) -> bool:
    """True for an entry that restarts its strategy until the budget is spent (``kt:...+restarts``)."""
    return is_entry(name) and name.endswith(RESTARTS)


def strategy_of(name: str) -> str:
    """Kernel Tuner's name of the strategy of entry ``name``; ValueError naming the known ones."""
    from benchmarks.external.kernel_tuner_runs import STRATEGIES

    strategy = name[len(PREFIX):].removesuffix(RESTARTS) if is_entry(name) else ""
    if strategy not in STRATEGIES:
        raise ValueError(f"{name!r} is not a Kernel Tuner strategy entry; known: "
                         f"{', '.join(PREFIX + s for s in STRATEGIES)}, each also with {RESTARTS!r}")
    return strategy


def suite_problem(name: str, options: dict[str, Any]) -> str | None:
    """What makes ``name`` with ``options`` a bad entry of a suite file, ``None`` when it is fine."""
    try:
        strategy_of(name)
    except ValueError as err:
        return str(err)
    if options:
        return (f"{name} takes no agent_options (Kernel Tuner strategies run with Kernel Tuner's defaults), "
                f"got {sorted(options)}")
    return None


def refusal(task: Any) -> str | None:
    """Why an entry declines ``task`` (``None``: it runs): only spaces measured with Kernel Tuner."""
    from tune_gym.external.task import KTTask

    if isinstance(task, KTTask):
        return None
    return "Kernel Tuner strategies run on kt tasks (spaces measured with Kernel Tuner) only"


def entry_info(name: str, budget: int) -> dict[str, Any]:
    """The ``agent_info`` of a run of entry ``name`` with a trials budget (as stored in JSON)."""
    from benchmarks.external.kernel_tuner_runs import strategy_options

    strategy = strategy_of(name)
    info = {"strategy": strategy, "strategy_options": strategy_options(strategy, max_fevals=budget),
            "kernel_tuner": importlib.metadata.version("kernel_tuner"),
            "hyperparameters": "Kernel Tuner's defaults"}
    if restarts(name):
        info["restarts"] = (f"until the budget; restart i seeded SeedSequence([seed, i]) with the budget left; one "
                            f"cache; gives up after {IDLE_RESTARTS} restarts in a row with nothing new")
    return json.loads(json.dumps(info))


def run_entry(spec: Any, task: Any, space: Any, backend: Any) -> tuple[list[Any], dict[str, Any], float, str | None]:
    """Run entry ``spec.agent`` on ``task``: ``(trials, agent_info, seconds, None)``, or
    ``([], {}, 0.0, why)`` when it declines the task (see the module docstring)."""
    from benchmarks.leaderboard.runner import run_end
    from tune_gym.session import TuningSession

    why = refusal(task)
    if why is not None:
        return [], {}, 0.0, why
    sim = _simulation(task.data_file, task.digest, task.problem_file)
    strategy = strategy_of(spec.agent)
    start = time.perf_counter()
    if restarts(spec.agent):
        kept, clocks, ended, parameters = _restarted(sim, strategy, spec.seed, spec.budget)
    else:
        trace = sim.run(strategy, seed=spec.seed, max_fevals=spec.budget)
        kept, ended, parameters = list(trace.trials), _ENDED[trace.ended], trace.parameters
        clocks = [e.clock_secs for e in kept]
    secs = time.perf_counter() - start
    configs = [space.from_dict(dict(zip(parameters, e.config))) for e in kept]
    trials = list(TuningSession(task, space, backend, budget=spec.budget).evaluate(configs).new)
    where = f"{task.uri}: {spec.agent} seed {spec.seed}"
    _check_against_trace(trials, kept, clocks, parameters, where)
    if ended != run_end(len(trials), spec.budget, space.size):
        raise RuntimeError(f"{where}: Kernel Tuner's run ended by {ended!r} after {len(trials)} configurations "
                           f"(budget {spec.budget}, space {space.size})")
    return trials, entry_info(spec.agent, spec.budget), secs, None


def _restarted(sim: Any, strategy: str, seed: int, budget: int) -> tuple[list[Any], list[float], str, tuple[str, ...]]:
    """``strategy`` run and restarted until ``budget`` new configurations (see the module docstring):
    the kept evaluations in order, the shared clock after each, how the whole run ended (a results
    line's ``ended``) and the parameter names."""
    import numpy as np

    kept: list[Any] = []
    clocks: list[float] = []
    seen: set[int] = set()
    clock, idle, i = 0.0, 0, 0
    while True:
        run_seed = seed if i == 0 else int(np.random.SeedSequence([seed, i]).generate_state(1)[0])
        trace = sim.run(strategy, seed=run_seed, max_fevals=budget - len(kept))
        new = [e for e in trace.trials if e.index not in seen]
        for e in new:
            seen.add(e.index)
            clock += e.charge_secs
            kept.append(e)
            clocks.append(clock)
        i += 1
        idle = 0 if new else idle + 1
        if len(kept) >= budget:
            return kept, clocks, "budget", trace.parameters
        if len(kept) >= trace.space_size:
            return kept, clocks, "space", trace.parameters
        if idle >= IDLE_RESTARTS:
            return kept, clocks, "agent", trace.parameters


def _check_against_trace(trials: list[Any], evaluations: list[Any], clocks: list[float],
                         parameters: tuple[str, ...], where: str) -> None:
    """The replayed trials are Kernel Tuner's evaluations: one per configuration, failed where Kernel
    Tuner saw a failure, on the same simulated clock (a RuntimeError names the first that is not)."""
    if len(trials) != len(evaluations):
        raise RuntimeError(f"{where}: {len(evaluations)} configurations in Kernel Tuner's trace, {len(trials)} "
                           f"trials on replay")
    for trial, ev, clock in zip(trials, evaluations, clocks):
        if trial.result.ok != (ev.error is None) or not math.isclose(trial.clock, clock, rel_tol=1e-9):
            raise RuntimeError(f"{where}: trial {trial.index} ({dict(zip(parameters, ev.config))}) replays as "
                               f"{'ok' if trial.result.ok else trial.result.error} at clock {trial.clock} s; Kernel "
                               f"Tuner saw {ev.error or 'ok'} at {clock} s")


@functools.lru_cache(maxsize=2)
def _simulation(cache: Path, digest: str, problem: Path) -> Any:
    """A prepared simulation per (cache, problem) and process (runs of one task follow each other;
    an evicted one removes its private copy of the cache when it is collected). Kernel Tuner is
    imported here, so its import (seconds) is not counted as the first run's compute."""
    import kernel_tuner  # noqa: F401

    from benchmarks.external.kernel_tuner_runs import KernelTunerSimulation

    sim = KernelTunerSimulation(cache, problem)
    if sim.measured.sha256[:16] != digest:
        sim.close()
        raise RuntimeError(f"{cache} changed since its task was made (digest {digest}, now "
                           f"{sim.measured.sha256[:16]}); make the task again")
    return sim
