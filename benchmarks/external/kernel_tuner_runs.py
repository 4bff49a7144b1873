"""Kernel Tuner's optimizers run in simulation mode on a measured space, as traces tune_gym can score.

One run = one Kernel Tuner 1.5 strategy, one seed, one budget, on one Kernel Tuner cache file
(an exhaustively measured space, e.g. the FAIR Benchmark Hub's). It goes through
``kernel_tuner.tune_kernel(..., cache=FILE, simulation_mode=True, strategy=..., quiet=True)``
with no GPU and no kernel source: the kernel name, problem size and parameters come from the
cache (read with :func:`tune_gym.external.kernel_tuner_io.read_cache`), the restrictions from
the T1 problem file when one is given (:func:`~tune_gym.external.kernel_tuner_io.read_problem`
first checks them against its restricted grammar; Kernel Tuner then parses the same strings,
as it does for any T1 file, which keeps its own ordering of the space, on which its random
choices depend). Kernel Tuner reads a private uncompressed copy of the cache (it cannot read
``.json.gz``, and it rewrites a cache file an interrupted run left unclosed).

The trace (:class:`StrategyTrace`) lists every configuration Kernel Tuner's runner returned, in
order (:class:`Evaluation`): its parameter values, its number in the
:class:`~tune_gym.external.kernel_tuner_io.ParamSpace`, its recorded time or failure (from the
file, checked against what Kernel Tuner itself saw), and the simulated clock.

What Kernel Tuner counts (measured on Kernel Tuner 1.5.0, partly by instrumenting its cost
function; ``tests/test_kernel_tuner_runs.py`` checks the trace against Kernel Tuner's own
results and the points on repeats, failures and the clock):

* **Repeats.** A strategy may ask for a configuration it has evaluated before; the simulation
  runner serves it again from the cache. It is returned to the strategy and appears in
  Kernel Tuner's results (status ``"repeat"`` here), but it does not count towards
  ``max_fevals`` and Kernel Tuner charges no compile, verification or benchmark time for it;
  here it is charged 0 s. (genetic_algorithm with ``max_fevals=100`` on the A100 convolution
  returns 200 results for 100 distinct configurations.) :attr:`StrategyTrace.trials` drops
  repeats: those are tune_gym's trials (a repeat is free there too).
* **Failures.** A configuration the cache records as failed (``CompilationFailedConfig``,
  ``RuntimeFailedConfig``) counts as one evaluation against ``max_fevals`` and is charged its
  recorded timings, like a successful one.
* **Restrictions.** A configuration outside the restricted space never reaches the runner:
  Kernel Tuner's cost function answers it as ``InvalidConfig`` without counting or charging
  it, and it is not in the trace (pso, seed 0, ``max_fevals=220`` on the A100 convolution:
  56 of its 350 proposals; its trace still holds 220 distinct configurations). A runner
  handed one is an error here (no strategy of Kernel Tuner 1.5 does that).
* **Clock.** Each first evaluation is charged
  :attr:`~tune_gym.external.kernel_tuner_io.ConfigRecord.charge_secs` (compile + verification
  + benchmark + framework seconds the file recorded), the charge of tune_gym's replay. Kernel
  Tuner's own simulated clock charges compile + verification + benchmark only and, with a
  ``time_limit``, adds the live wall-clock time of the run; here the budget's clock is
  replaced by the charges alone (:class:`_SimulatedBudget`), so a time limit is
  deterministic. Kernel Tuner checks the budget before each evaluation: the evaluation that
  crosses the time limit still runs, the next one does not.

Budgets: ``max_fevals`` (distinct configurations) and/or ``time_limit`` (simulated seconds);
both are handed to the strategy as Kernel Tuner's ``strategy_options`` (except to brute_force,
which refuses them and is stopped by the budget alone). Kernel Tuner strategies read
``max_fevals`` for their own schedules and fall back to their defaults without it
(bayes_opt and the local searches greedy_ils, greedy_mls, mls, ordered_greedy_mls stop after
100; random_sample samples 10% of the space), so a run on the time axis should give both.
Several strategies end before the budget by their own defaults (``ended == "strategy"``):
dual_annealing counts every call towards its ``maxfun`` (repeats and configurations outside
the space included), minimize, basinhopping, genetic_algorithm, pso and simulated_annealing
run out of iterations. Every other
hyperparameter is Kernel Tuner's default; :attr:`StrategyTrace.strategy_options` records them.

Determinism: the same (file, problem, strategy, seed, budget) gives the same trace. Kernel
Tuner's strategies draw from Python's :mod:`random` and NumPy's global generator: both are
seeded with the run's seed and restored afterwards. Two sources Kernel Tuner does not seed are
pinned for the run: scipy's ``LatinHypercube`` (diff_evo's and bayes_opt's initial samples)
takes a generator seeded from the run's seed, and bayes_opt's "multi-ultrafast" method, which
decides when to refit its model from wall-clock timings of its predictions and evaluations,
reads the run's simulated clock instead (predictions take no simulated time, evaluations their
charge; on a real GPU, where evaluations take seconds and predictions milliseconds, it refits
every round, and so it does here). Runs are therefore not thread-safe: one run at a time per
process. Strategies that iterate over sets of string parameter values also depend on Python's
hash seed (``PYTHONHASHSEED``); the Benchmark Hub's parameters are all integers.

Example::

    with KernelTunerSimulation("A100.json.gz", problem="convolution_milo.json") as sim:
        trace = sim.run("genetic_algorithm", seed=0, max_fevals=220)
    trace.times(), trace.clocks()   # per trial: kernel seconds (NaN: failed), simulated clock

Command line (wall seconds per run): ``python -m benchmarks.external.kernel_tuner_runs CACHE
--problem T1 --max-fevals 220 --seeds 3``.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import importlib.metadata
import io
import math
import numbers
import random
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from tune_gym.errors import TuneGymError
from tune_gym.external.kernel_tuner_io import (
    ConfigRecord,
    MeasuredSpace,
    Problem,
    read_cache,
    read_problem,
)

__all__ = [
    "DEFAULT_STRATEGY", "MULTI_OBJECTIVE_STRATEGIES", "NEWEST_STRATEGIES", "OPTIONAL_PACKAGE_STRATEGIES", "STATUSES",
    "STRATEGIES", "Evaluation", "KernelTunerRunError", "KernelTunerSimulation", "StrategyTrace", "main",
    "run_strategy", "strategy_options",
]

#: Kernel Tuner's default strategy (``tune_kernel`` without ``strategy``): every configuration in order.
DEFAULT_STRATEGY = "brute_force"
#: The newest strategies Kernel Tuner 1.5 ships ("Automated Algorithm Design For Auto-Tuning Optimizers").
NEWEST_STRATEGIES = ("hybrid_vndx", "adaptive_tabu_greywolf")
#: Kernel Tuner strategies that need several objectives (not run here: a cache has one).
MULTI_OBJECTIVE_STRATEGIES = ("nsga2", "nsga3")
#: Kernel Tuner strategies that need a package tune_gym does not install (not run here).
OPTIONAL_PACKAGE_STRATEGIES = {"skopt": "scikit-optimize", "pyatf_strategies": "pyATF"}
#: The single-objective strategies of Kernel Tuner 1.5 that run here, by Kernel Tuner's names
#: (every other strategy it ships).
STRATEGIES = (
    "adaptive_tabu_greywolf", "basinhopping", "bayes_opt", "brute_force", "diff_evo", "dual_annealing",
    "firefly_algorithm", "genetic_algorithm", "greedy_ils", "greedy_mls", "hybrid_vndx", "minimize", "mls",
    "ordered_greedy_mls", "pso", "random_sample", "simulated_annealing",
)
#: An evaluation's status: ``new`` (first evaluation: counted and charged) or ``repeat``
#: (served again from Kernel Tuner's cache: free).
STATUSES = ("new", "repeat")
#: Strategies that refuse budget options (they are stopped by the budget alone).
_NO_BUDGET_OPTIONS = ("brute_force",)
_MAX_SEED = 2**32 - 1  # NumPy's legacy seeding takes 32 bits
_KT_BUDGET_KEYS = ("max_fevals", "time_limit")


class KernelTunerRunError(TuneGymError):
    """A Kernel Tuner simulation run that cannot be set up: an unknown strategy, a bad budget
    or seed, or a cache that lacks configurations of its space."""


@dataclass(frozen=True)
class Evaluation:
    """One configuration Kernel Tuner evaluated, in the order it did.

    Attributes:
        step: position in Kernel Tuner's order, from 0 (repeats included).
        config: the parameter values, in the space's parameter order.
        index: its number in the :class:`~tune_gym.external.kernel_tuner_io.ParamSpace`.
        time_secs: the recorded kernel time (``None`` when it failed).
        error: tune_gym's error kind (``None`` when it ran), ``error_name`` the file's name for it.
        status: one of :data:`STATUSES`.
        charge_secs: what it added to the simulated clock (0 unless ``status == "new"``).
        clock_secs: the simulated clock after it.
    """

    step: int
    config: tuple[Any, ...]
    index: int
    time_secs: float | None
    error: str | None
    error_name: str
    status: str
    charge_secs: float
    clock_secs: float


@dataclass(frozen=True)
class StrategyTrace:
    """One Kernel Tuner run: what it was given and every configuration it evaluated.

    Attributes:
        strategy, seed, max_fevals, time_limit: the run (a budget is ``None`` when not given).
        strategy_options: what the strategy ran with: Kernel Tuner's defaults for its
            hyperparameters plus the budget options it was handed.
        evaluations: every evaluation in order (:class:`Evaluation`).
        ended: ``"max_fevals"`` or ``"time_limit"`` (the budget stopped it), ``"space"`` (every
            configuration evaluated) or ``"strategy"`` (it stopped by itself).
        source, sha256: the cache file and the SHA-256 of its bytes.
        device, kernel: as the cache names them.
        parameters: the parameter names (the order of :attr:`Evaluation.config`).
        space_size: the number of valid configurations.
        kernel_tuner_version: the installed ``kernel_tuner``.
    """

    strategy: str
    seed: int
    max_fevals: int | None
    time_limit: float | None
    strategy_options: dict[str, Any]
    evaluations: tuple[Evaluation, ...]
    ended: str
    source: str
    sha256: str
    device: str
    kernel: str
    parameters: tuple[str, ...]
    space_size: int
    kernel_tuner_version: str

    @property
    def trials(self) -> tuple[Evaluation, ...]:
        """The first evaluations (``status == "new"``): tune_gym's trials, each counted and charged once."""
        return tuple(e for e in self.evaluations if e.status == "new")

    def times(self) -> np.ndarray:
        """Each trial's kernel seconds, NaN where it failed (the form tune_gym's P metrics take)."""
        return np.array([math.nan if e.time_secs is None else e.time_secs for e in self.trials], dtype=float)

    def clocks(self) -> np.ndarray:
        """Each trial's simulated clock in seconds when its result is known."""
        return np.array([e.clock_secs for e in self.trials], dtype=float)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the run's fields and one list per :class:`Evaluation` field."""
        columns = {name: [getattr(e, name) for e in self.evaluations] for name in Evaluation.__dataclass_fields__}
        columns["config"] = [list(c) for c in columns["config"]]
        head = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "evaluations"}
        head["parameters"] = list(self.parameters)
        return {**head, "evaluations": columns}


class KernelTunerSimulation:
    """A cache file prepared once for many Kernel Tuner simulation runs (a context manager).

    Args:
        cache: Kernel Tuner's cache (``.json`` or ``.json.gz``).
        problem: the T1 problem file (or its :class:`~tune_gym.external.kernel_tuner_io.Problem`)
            whose restrictions define the space; without it the space is every combination of
            the cache's parameter values, which the cache must then hold.

    Raises:
        KernelTunerFileError: a malformed cache or problem (naming the file and field).
        KernelTunerRunError: the cache lacks a configuration of the space (Kernel Tuner's
            simulation stops at the first one it meets), or its objective is not ``time``.
    """

    def __init__(self, cache: str | Path, problem: str | Path | Problem | None = None) -> None:
        if problem is not None and not isinstance(problem, Problem):
            problem = read_problem(problem)
        self.problem = problem
        self.measured = _read_complete(Path(cache), problem)
        self._dir = tempfile.TemporaryDirectory(prefix="tune_gym_kt_")
        self._cache_copy = _private_copy(Path(cache), self.measured.sha256, Path(self._dir.name))

    def __enter__(self) -> KernelTunerSimulation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the private copy of the cache (idempotent)."""
        self._dir.cleanup()

    def run(self, strategy: str, *, seed: int, max_fevals: int | None = None,
            time_limit: float | None = None) -> StrategyTrace:
        """Runs one strategy with one seed and budget; see the module documentation.

        Args:
            strategy: one of :data:`STRATEGIES`.
            seed: seeds every random choice of the run (0 to 2**32 - 1).
            max_fevals: at most this many distinct configurations (a positive int).
            time_limit: at most this many simulated seconds (positive); give at least one budget.
        """
        module = _strategy_module(strategy)
        _check_run(seed, max_fevals, time_limit)
        if not Path(self._dir.name).is_dir():
            raise KernelTunerRunError(f"{self.measured.path}: this simulation was closed")
        space = self.measured.space
        options = _budget_options(strategy, max_fevals, time_limit)
        driver = _Driver(module, self.measured, options, seed, max_fevals, time_limit)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            import kernel_tuner

            kernel_tuner.tune_kernel(
                self.measured.kernel, "", list(self.measured.problem_size or ()), [],
                {name: list(values) for name, values in zip(space.names, space.values)},
                restrictions=[r.source for r in space.restrictions] or None, cache=str(self._cache_copy),
                simulation_mode=True, strategy=driver, strategy_options={"max_fevals": max_fevals} if max_fevals
                else None, objective="time", objective_higher_is_better=False, quiet=True, verbose=False)
        return StrategyTrace(
            strategy=strategy, seed=seed, max_fevals=max_fevals, time_limit=time_limit,
            strategy_options=strategy_options(strategy, max_fevals=max_fevals, time_limit=time_limit),
            evaluations=tuple(driver.evaluations),
            ended=driver.ended(), source=self.measured.path, sha256=self.measured.sha256,
            device=self.measured.device, kernel=self.measured.kernel, parameters=tuple(space.names),
            space_size=len(space), kernel_tuner_version=importlib.metadata.version("kernel_tuner"))


def run_strategy(cache: str | Path, strategy: str, *, seed: int, max_fevals: int | None = None,
                 time_limit: float | None = None, problem: str | Path | Problem | None = None) -> StrategyTrace:
    """One run on one cache file (:meth:`KernelTunerSimulation.run`; prepare a
    :class:`KernelTunerSimulation` once for many runs on the same file)."""
    with KernelTunerSimulation(cache, problem) as sim:
        return sim.run(strategy, seed=seed, max_fevals=max_fevals, time_limit=time_limit)


def strategy_options(strategy: str, *, max_fevals: int | None = None,
                     time_limit: float | None = None) -> dict[str, Any]:
    """What ``strategy`` runs with under this budget (:attr:`StrategyTrace.strategy_options`):
    Kernel Tuner's default for each of its hyperparameters plus the budget options it is handed.
    Known without running it (importing the strategy's module only)."""
    module = _strategy_module(strategy)
    defaults = {k: v[1] for k, v in getattr(module, "_options", {}).items() if k not in _KT_BUDGET_KEYS}
    return {**defaults, **_budget_options(strategy, max_fevals, time_limit)}


def _budget_options(strategy: str, max_fevals: int | None, time_limit: float | None) -> dict[str, Any]:
    """The budget options handed to the strategy (none to those that refuse them)."""
    if strategy in _NO_BUDGET_OPTIONS:
        return {}
    return {k: v for k, v in (("max_fevals", max_fevals), ("time_limit", time_limit)) if v is not None}


# ---------------------------------------------------------------------------------------------
# Setup checks


def _strategy_module(name: Any) -> Any:
    """Kernel Tuner's module of strategy ``name``; KernelTunerRunError for any other name."""
    known = ", ".join(STRATEGIES)
    if isinstance(name, str) and name in MULTI_OBJECTIVE_STRATEGIES:
        raise KernelTunerRunError(f"strategy {name!r} is multi-objective; a cache has one objective "
                                  f"(strategies: {known})")
    if isinstance(name, str) and name in OPTIONAL_PACKAGE_STRATEGIES:
        raise KernelTunerRunError(f"strategy {name!r} needs the {OPTIONAL_PACKAGE_STRATEGIES[name]} package, which "
                                  f"is not installed here (strategies: {known})")
    if not isinstance(name, str) or name not in STRATEGIES:
        raise KernelTunerRunError(f"unknown Kernel Tuner strategy {name!r} (strategies: {known})")
    from kernel_tuner.interface import strategy_map

    return strategy_map[name]  # loaded on first attribute access


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_run(seed: Any, max_fevals: Any, time_limit: Any) -> None:
    if not _is_int(seed) or not 0 <= int(seed) <= _MAX_SEED:
        raise KernelTunerRunError(f"seed {seed!r} is not an integer in [0, {_MAX_SEED}]")
    if max_fevals is not None and (not _is_int(max_fevals) or int(max_fevals) < 1):
        raise KernelTunerRunError(f"max_fevals {max_fevals!r} is not a positive integer")
    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real)
                                   or not math.isfinite(time_limit) or time_limit <= 0):
        raise KernelTunerRunError(f"time_limit {time_limit!r} is not a positive number of seconds")
    if max_fevals is None and time_limit is None:
        raise KernelTunerRunError("no budget: give max_fevals and/or time_limit")


def _read_complete(cache: Path, problem: Problem | None) -> MeasuredSpace:
    measured = read_cache(cache, problem)
    if measured.missing:
        first = measured.space.config(measured.missing[0])
        hint = "" if problem is not None else " (give the T1 problem file: its restrictions define the space)"
        raise KernelTunerRunError(f"{cache}: cache lacks {len(measured.missing)} of the {len(measured.space)} "
                                  f"configurations of its space, first {first}{hint}")
    if measured.objective != "time":
        raise KernelTunerRunError(f"{cache}: objective: {measured.objective!r}; runs here minimize 'time'")
    if not measured.kernel:
        raise KernelTunerRunError(f"{cache}: kernel_name: missing (Kernel Tuner checks the cache against it)")
    return measured


def _private_copy(cache: Path, sha256: str, folder: Path) -> Path:
    """The cache uncompressed into ``folder``, checked to be the bytes that were read."""
    raw = cache.read_bytes()
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise KernelTunerRunError(f"{cache}: the file changed while it was being read")
    copy = folder / "cache.json"
    copy.write_bytes(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return copy


# ---------------------------------------------------------------------------------------------
# The run


@functools.cache
def _simulated_budget_class() -> type:
    """Kernel Tuner's budget with the simulated clock only (built once, on first use: importing
    Kernel Tuner takes seconds)."""
    from kernel_tuner.util import TuningBudget

    class _SimulatedBudget(TuningBudget):  # type: ignore[misc]
        """Time spent = the charges of the evaluations so far (no wall clock)."""

        def __init__(self, time_limit: float | None, max_fevals: int) -> None:
            super().__init__(time_limit, max_fevals)
            self.simulated_secs = 0.0

        def charge(self, secs: float) -> None:
            self.simulated_secs += secs

        def get_time_spent(self) -> timedelta:
            return timedelta(seconds=self.simulated_secs)

    return _SimulatedBudget


@dataclass
class _Driver:
    """Handed to ``tune_kernel`` as a user-defined strategy: sets up the run (options, budget,
    seeds) on the searchspace and runner Kernel Tuner built, then runs the real strategy with
    a runner that records each evaluation and charges the clock."""

    module: Any
    measured: MeasuredSpace
    options: dict[str, Any]
    seed: int
    max_fevals: int | None
    time_limit: float | None
    evaluations: list[Evaluation] = field(default_factory=list)
    budget: Any = None
    _seen: set[int] = field(default_factory=set)

    def __hash__(self) -> int:  # tune_kernel looks the strategy up in its strategy map
        return id(self)

    def tune(self, searchspace: Any, runner: Any, tuning_options: Any) -> list[dict[str, Any]]:
        from kernel_tuner.interface import Options
        from kernel_tuner.util import StopCriterionReached

        self._check_space(searchspace)
        limit = min(self.max_fevals or searchspace.size, searchspace.size)
        self.budget = _simulated_budget_class()(self.time_limit, limit)
        tuning_options["budget"] = self.budget
        tuning_options.strategy_options = Options(self.options)
        if self.time_limit is not None:
            tuning_options["time_limit"] = self.time_limit
        tracing = _TracingRunner(runner, self)
        with _seeded(self.seed), _pinned_unseeded_sources(self.seed, self.budget):
            try:
                results = self.module.tune(searchspace, tracing, tuning_options)
            except StopCriterionReached:
                results = []
        # brute_force returns the runner's list as is, with None for what the budget skipped
        return [r for r in results if r is not None]

    def _check_space(self, searchspace: Any) -> None:
        """Kernel Tuner's space must be tune_gym's: the same valid configurations."""
        space = self.measured.space
        ours = {tuple(space.config(i).values()) for i in range(len(space))}
        if searchspace.size != len(space) or set(map(tuple, searchspace.list)) != ours:
            raise KernelTunerRunError(f"{self.measured.path}: Kernel Tuner's space holds {searchspace.size} "
                                      f"configurations, the restrictions as read here {len(space)}")

    def record(self, element: tuple[Any, ...], result: Mapping[str, Any]) -> None:
        """Adds one evaluation Kernel Tuner's runner returned, and charges the clock."""
        space = self.measured.space
        index = space.find(dict(zip(space.names, element)))
        if index is None:
            raise RuntimeError(f"{self.measured.path}: Kernel Tuner's runner was handed {element}, which is "
                               f"outside the space")
        rec = self.measured.records[index]
        assert rec is not None  # the cache holds every configuration (_read_complete)
        _check_result(rec, result, element, self.measured.path)
        status, charge = ("repeat", 0.0) if index in self._seen else ("new", rec.charge_secs)
        self._seen.add(index)
        self.budget.charge(charge)
        self.evaluations.append(Evaluation(
            step=len(self.evaluations), config=tuple(element), index=index, time_secs=rec.time_secs, error=rec.error,
            error_name=rec.error_name, status=status, charge_secs=charge, clock_secs=self.budget.simulated_secs))

    def ended(self) -> str:
        if self.budget is None:
            return "strategy"
        unique = sum(e.status == "new" for e in self.evaluations)
        if unique >= self.budget.max_fevals:
            return "space" if unique >= len(self.measured.space) else "max_fevals"
        if self.time_limit is not None and self.budget.get_time_spent() > self.budget.time_limit:
            return "time_limit"
        return "strategy"


def _check_result(rec: ConfigRecord, result: Mapping[str, Any], element: tuple[Any, ...], where: str) -> None:
    """What Kernel Tuner saw must be what the file records (the same file, read twice)."""
    error = result.get("__error__")
    if rec.ok:
        seen = result.get("time")
        ok = error is None and isinstance(seen, numbers.Real) and math.isclose(
            float(seen) / 1e3, rec.time_secs or 0.0, rel_tol=1e-9)
    else:
        ok = error is not None and str(error) == rec.error_name
    if not ok:
        raise RuntimeError(f"{where}: Kernel Tuner saw {result.get('time')!r} for {element}, the file records "
                           f"{rec.time_secs if rec.ok else rec.error_name!r}")


class _TracingRunner:
    """Kernel Tuner's simulation runner, one configuration at a time (so the budget is checked
    before each), recording every result it returns."""

    def __init__(self, inner: Any, driver: _Driver) -> None:
        self._inner = inner
        self._driver = driver

    def run(self, parameter_space: Any, tuning_options: Any) -> list[dict[str, Any] | None]:
        out: list[dict[str, Any] | None] = []
        for element in parameter_space:
            result = self._inner.run([element], tuning_options)[0]
            if result is not None:
                self._driver.record(tuple(element), result)
            out.append(result)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Python's and NumPy's global generators seeded for the run, restored after it."""
    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


@contextlib.contextmanager
def _pinned_unseeded_sources(seed: int, budget: Any) -> Iterator[None]:
    """scipy's LatinHypercube seeded from the run's seed, and bayes_opt's timer on the simulated
    clock, for the run (see the module documentation)."""
    import scipy.stats.qmc as qmc
    from kernel_tuner.strategies import bayes_opt

    rng = np.random.default_rng(seed)
    original = qmc.LatinHypercube

    class SeededLatinHypercube(original):  # type: ignore[misc, valid-type]
        def __init__(self, d: int, **kwargs: Any) -> None:
            kwargs.setdefault("rng", rng)
            super().__init__(d, **kwargs)

    clock = SimpleNamespace(perf_counter=lambda: budget.simulated_secs,
                            perf_counter_ns=lambda: round(budget.simulated_secs * 1e9))
    with contextlib.ExitStack() as stack:
        for owner, name, value in ((qmc, "LatinHypercube", SeededLatinHypercube),
                                   (bayes_opt, "LatinHypercube", SeededLatinHypercube), (bayes_opt, "time", clock)):
            stack.enter_context(_attribute(owner, name, value))
        yield


@contextlib.contextmanager
def _attribute(owner: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


# ---------------------------------------------------------------------------------------------
# Command line: time runs


def main(argv: list[str] | None = None) -> int:
    """Runs strategies on one cache file and prints one line per run: wall seconds, trials,
    evaluations, why it ended, the simulated clock and the best time found."""
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m benchmarks.external.kernel_tuner_runs", description=main.__doc__)
    parser.add_argument("cache", help="Kernel Tuner cache file (.json or .json.gz)")
    parser.add_argument("--problem", help="T1 problem file (its restrictions define the space)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated (default: all)")
    parser.add_argument("--max-fevals", type=int, help="distinct configurations per run")
    parser.add_argument("--time-limit", type=float, help="simulated seconds per run")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0 .. N-1 (default 1)")
    args = parser.parse_args(argv)
    import kernel_tuner  # noqa: F401  (its import takes seconds: not part of the first run's time)

    try:
        with KernelTunerSimulation(args.cache, args.problem) as sim:
            for strategy in args.strategies.split(","):
                for seed in range(args.seeds):
                    start = time.perf_counter()
                    trace = sim.run(strategy, seed=seed, max_fevals=args.max_fevals, time_limit=args.time_limit)
                    wall = time.perf_counter() - start
                    best = np.nanmin(trace.times()) if np.isfinite(trace.times()).any() else math.nan
                    print(f"{strategy:24s} seed {seed:3d}  {wall:8.2f} s  trials {len(trace.trials):5d}  "
                          f"evaluations {len(trace.evaluations):6d}  ended {trace.ended:10s}  "
                          f"clock {trace.clocks()[-1] if trace.trials else 0.0:10.1f} s  best {best * 1e3:.4f} ms",
                          flush=True)
    except TuneGymError as e:
        parser.exit(2, f"error: {e}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
