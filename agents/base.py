"""The agent interface (ask/tell), the agent registry, and the loop that drives a Tune-v0 env.

An agent decides what to measure and nothing else: the environment owns the budget, the
measurement cache and the records. To add an agent, write one module with a subclass of
:class:`Agent` and register it::

    @register("my-agent", "one-line description")
    class MyAgent(Agent):
        def propose(self, n): ...
        def observe(self, configs, results): ...

and add ``"my-agent": "agents.my_agent"`` to :data:`_MODULES` so ``make_agent("my-agent")``
imports it lazily (agents defined elsewhere register when their module is imported).

An agent of another package joins the registry through the entry-point group
:data:`ENTRY_POINT_GROUP` (``tune_gym.agents``) of that package's metadata::

    [project.entry-points."tune_gym.agents"]
    my-agent = "mypkg.mod:MyAgent"

The entry's name is the agent id; its class (an :class:`Agent` subclass; its docstring's first
line is the description) is imported only when the agent is asked for or all are listed, and
one that cannot be imported is listed by :func:`unavailable_agents` with the reason. A built-in
id wins: an entry point that reuses one is skipped with a warning.
"""

from __future__ import annotations

import importlib
import inspect
import time
import warnings
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, ClassVar

import numpy as np

from tune_gym.measure.result import MeasureResult
from tune_gym.options import OptionDoc, OptionError, check_keys, check_str, checked_options, option_table, show
from tune_gym.session import Trial
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["ENTRY_POINT_GROUP", "Agent", "EnvRunner", "NotApplicable", "RunResult", "agent_class", "list_agents",
           "make_agent", "on_request_agents", "option_names", "options_of", "register", "run", "unavailable_agents"]


class NotApplicable(ValueError):
    """Raised by :meth:`Agent.reset` when the agent cannot tune this task by design, not by a
    fault: e.g. a pretrained predictor whose training data never held the task's op. The
    benchmark runner records such a run as "not applicable" instead of failing the suite, and
    the leaderboard shows it as ``n/a``."""


class Agent:
    """Base class of search agents.

    Lifecycle: ``reset(space, task, seed)`` once per tuning run, then alternately
    ``propose(n)`` (up to ``n`` configs; fewer is fine, an empty list means "nothing more to
    try") and ``observe(configs, results)`` with what was measured. ``reset`` raises
    :class:`NotApplicable` for a task the agent is not built for.

    What has been measured is owned by the environment's :class:`tune_gym.session.TuningSession`
    (dedupe, budget, cache, records). An agent keeps only what it was told and what it asked
    for, in two base-class fields every agent shares: :attr:`seen` (``{config: result}`` it has
    observed, its models' training data) and :attr:`proposed` (every config it has proposed,
    so it never proposes one twice; the base class fills it from :meth:`observe` too).

    Options: the keyword parameters of a subclass's constructor, each declared once in its
    ``Annotated`` hint (:class:`tune_gym.options.Option`: check, allowed values, one-line help),
    e.g. ``pop_size: Annotated[int, Int(2, help="population size")] = 100``. Every subclass's
    constructor checks its declared arguments before its body runs
    (:func:`tune_gym.options.checked_options`); :func:`options_of` lists them.
    """

    name: ClassVar[str] = ""
    #: Whether the agent reads the TVM programs behind configs (traces, loop nests, MetaSchedule
    #: features): such an agent declines a task whose space has none (a registered target kind
    #: without schedules, :attr:`tune_gym.kinds.TaskKind.has_schedules`) with :class:`NotApplicable`.
    needs_schedules: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check the options declared in the subclass's constructor whenever it is called."""
        super().__init_subclass__(**kwargs)
        init = vars(cls).get("__init__")
        if init is not None and not hasattr(init, "__wrapped__"):
            cls.__init__ = checked_options(init)  # type: ignore[method-assign]

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        if self.needs_schedules and not space.has_schedules:
            raise NotApplicable(f"agent {self.name or type(self).__name__} needs TVM schedules; configs of target "
                                f"{task.target.kind} have none")
        self.space = space
        self.task = task
        self.rng = np.random.default_rng(seed)
        self.seen: dict[Config, MeasureResult] = {}
        self.proposed: set[Config] = set()

    def propose(self, n: int) -> list[Config]:
        raise NotImplementedError

    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for cfg, res in zip(configs, results):
            self.seen[cfg] = res
        self.proposed.update(configs)

    def describe(self) -> dict[str, Any]:
        """What decides this run's behaviour besides the agent's id, options and seed (e.g. the
        checkpoint a pretrained agent loaded in :meth:`reset`); JSON-serializable. The
        leaderboard records it with each run."""
        return {}

    def fresh(self, n: int, taken: AbstractSet[Config] = frozenset()) -> list[Config]:
        """Up to ``n`` distinct uniform random configs never proposed nor in ``taken``."""
        return self.space.sample_unique(self.rng, n, exclude=self.proposed | set(taken))


_REGISTRY: dict[str, tuple[str, str]] = {}  # id -> (module:attr, description)
#: Where each built-in agent lives; a module is imported only when one of its agents is asked
#: for (or when all are listed), so a missing optional dependency affects only its agents.
_MODULES: dict[str, str] = {
    "random": "agents.random", "grid": "agents.grid", "ga": "agents.ga", "xgb-sa": "agents.xgb_sa",
    "xgb-sa-transfer": "agents.xgb_sa", "contextual-sa": "agents.contextual_sa", "batch-bo": "agents.batch_bo",
    "presample": "agents.presample", "rl-ppo": "agents.rl", "tlp-sa": "agents.tlp_sa", "one-shot": "agents.one_shot",
    "meta-bo": "agents.meta_bo", "meta-bo-evo": "agents.meta_bo_evo", "metaschedule": "agents.metaschedule",
}
#: Built-in agents made only when asked for by id, never listed (:func:`list_agents`, a suite's
#: ``"*"``): they need an option without a default, such as a trained policy's checkpoint.
_ON_REQUEST: dict[str, str] = {"rl-policy": "agents.rl_policy"}
_UNAVAILABLE: dict[str, str] = {}  # id -> why its module could not be imported
#: The entry-point group other packages declare agents in (see the module docstring).
ENTRY_POINT_GROUP = "tune_gym.agents"


def register(agent_id: str, description: str) -> Callable[[type[Agent]], type[Agent]]:
    """Class decorator adding an agent to the registry (registering an id twice is an error)."""

    def deco(cls: type[Agent]) -> type[Agent]:
        target = f"{cls.__module__}:{cls.__qualname__}"
        if agent_id in _REGISTRY and _REGISTRY[agent_id][0] != target:
            raise ValueError(f"agent id {agent_id!r} is already registered by {_REGISTRY[agent_id][0]}")
        _REGISTRY[agent_id] = (target, description)
        cls.name = agent_id
        return cls

    return deco


def _entry_points() -> dict[str, EntryPoint]:
    """``{agent id: entry point}`` of the agents other packages declare (:data:`ENTRY_POINT_GROUP`),
    without importing them; one that reuses a built-in id is skipped with a warning."""
    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in _MODULES or entry.name in _ON_REQUEST:
            warnings.warn(f"{ENTRY_POINT_GROUP} entry point {entry.name!r} ({entry.value}) skipped: {entry.name!r} is "
                          "a built-in agent, which wins; declare the agent under another name", stacklevel=3)
        else:
            found.setdefault(entry.name, entry)
    return found


def _load_entry_point(agent_id: str, entry: EntryPoint) -> None:
    """Import an entry-point agent's class and register it under the entry's name.

    Raises:
        ImportError: the class cannot be imported or is no :class:`Agent` subclass (naming the
            entry point).
    """
    where = f"agent {agent_id!r} (entry point {entry.value} of group {ENTRY_POINT_GROUP})"
    try:
        cls = entry.load()
    except Exception as err:  # a broken plugin must not break the registry
        raise ImportError(f"{where} cannot be imported: {type(err).__name__}: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise ImportError(f"{where} is {cls!r}, not a subclass of agents.base.Agent")
    doc = (inspect.getdoc(cls) or "").strip().splitlines()
    try:
        register(agent_id, doc[0] if doc else f"{entry.value} (entry point)")(cls)
    except ValueError as err:  # the id is registered by another class already
        raise ImportError(f"{where}: {err}") from None


def _import(agent_id: str) -> None:
    """Import the module of a built-in agent, or an entry-point agent's class; ImportError says
    what to install (or what is wrong with the entry point)."""
    if agent_id not in _MODULES and agent_id not in _ON_REQUEST:
        _load_entry_point(agent_id, _entry_points()[agent_id])
        return
    module = _MODULES.get(agent_id) or _ON_REQUEST[agent_id]
    try:
        importlib.import_module(module)
    except ImportError as err:
        missing = err.name or "its dependencies"
        raise ImportError(f"agent {agent_id!r} needs {missing!r}, which is not installed: "
                          f"pip install {missing}") from err


def list_agents() -> dict[str, str]:
    """``{agent id: description}`` of every available agent, built-in and entry-point ones
    (unavailable ones are skipped)."""
    for agent_id in [*_MODULES, *_entry_points()]:
        if agent_id not in _REGISTRY:
            try:
                _import(agent_id)
            except ImportError as err:
                _UNAVAILABLE[agent_id] = str(err)
    return {k: v[1] for k, v in sorted(_REGISTRY.items()) if k not in _ON_REQUEST}


def on_request_agents() -> tuple[str, ...]:
    """The ids of the built-in agents made only by id (never listed; see :data:`_ON_REQUEST`)."""
    return tuple(sorted(_ON_REQUEST))


def agent_classes() -> dict[str, tuple[str, str]]:
    """``{agent id: ("module:Class", description)}`` of every available agent, on-request ones
    included (the documentation site makes a page of each)."""
    list_agents()
    for agent_id in _ON_REQUEST:
        try:
            _import(agent_id)
        except ImportError as err:
            _UNAVAILABLE[agent_id] = str(err)
    return dict(sorted(_REGISTRY.items()))


def unavailable_agents() -> dict[str, str]:
    """``{agent id: why it cannot be imported}`` of built-in agents missing a dependency."""
    list_agents()
    return dict(_UNAVAILABLE)


def make_agent(agent_id: str, **options: Any) -> Agent:
    """Instantiate an agent by id with its options.

    Raises:
        ValueError: unknown id, or bad options (an :class:`~tune_gym.options.OptionError`
            naming the agent, the option, its value and what is allowed; each agent checks its
            options, type and range, in its constructor).
        ImportError: the agent's optional dependency is missing (names what to install).
    """
    cls = agent_class(agent_id)
    check_keys(f"agent {agent_id!r}: bad options", options, option_names(cls))
    try:
        return cls(**options)
    except TypeError as err:  # a constructor that takes options its signature does not list
        raise OptionError(f"agent {agent_id!r}: bad options {show(options, 200)}: {err}") from None
    except ValueError as err:  # OptionError and the agents' own checks, named
        raise OptionError(f"agent {agent_id!r}: {err}") from None


def option_names(cls: type) -> list[str]:
    """The keyword options of an agent class: its constructor's parameters, and those of its
    bases' constructors where it passes ``**kwargs`` on."""
    return [row.name for row in option_table(cls)]


def options_of(agent_id: str) -> list[OptionDoc]:
    """The options table of an agent (name, default, allowed values, help; see
    :func:`tune_gym.options.option_table`), from its constructor's declarations.

    Raises:
        OptionError: unknown id. ImportError: the agent's dependency is missing.
    """
    return option_table(agent_class(agent_id))


def agent_class(agent_id: str) -> type[Agent]:
    """The class of an agent id (importing its module).

    Raises:
        OptionError: unknown id. ImportError: the agent's dependency is missing.
    """
    check_str("agent id", agent_id)
    builtin = agent_id in _MODULES or agent_id in _ON_REQUEST
    plugins = _entry_points() if agent_id not in _REGISTRY and not builtin else {}
    if agent_id not in _REGISTRY and (builtin or agent_id in plugins):
        _import(agent_id)
    if agent_id not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(_MODULES) | set(_ON_REQUEST) | set(plugins))
        raise OptionError(f"unknown agent {show(agent_id)}; known agents: {', '.join(known)}")
    module, _, attr = _REGISTRY[agent_id][0].partition(":")
    cls: type[Agent] = getattr(importlib.import_module(module), attr)
    return cls


@dataclass
class RunResult:
    """The trials of one tuning run, as the environment's session recorded them.

    Attributes:
        task: the task tuned.
        agent: the agent's id.
        trials: the run's unique trials in order (:class:`tune_gym.session.Trial`; ``source``
            says which were measured now and which came from records or the cache).
        seconds: wall seconds of the run.
    """

    task: Task
    agent: str
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.result.ok]
        return max(ok, key=lambda t: t.result.gflops) if ok else None

    def best_so_far(self) -> np.ndarray:
        """Best GFLOPS after each unique trial."""
        return np.maximum.accumulate([t.result.gflops for t in self.trials]) if self.trials else np.zeros(0)


#: Steps in a row without a new trial (the agent proposed only repeats or configs the space
#: excludes) after which :class:`EnvRunner` ends the run: it would otherwise never end.
MAX_IDLE_STEPS = 64


class EnvRunner:
    """Drives one ``tune_gym/Tune-v0`` env with one agent, one batch per :meth:`step`.

    :func:`run` loops over it until the env is done; a network's task scheduler
    (:mod:`agents.network`) holds one per task and decides which steps next.

    Each step asks the agent for up to the env's batch size (or ``limit``); an agent with a
    smaller plan proposes fewer, and the batch is padded by repeating its last config, which
    the env's session serves again for free. The env validates the configs (once) and its
    session decides what is new, measured, excluded or skipped; the agent observes every config
    of the batch that was evaluated or excluded. ``callback`` gets the new trials of each step. A
    run ends after :data:`MAX_IDLE_STEPS` steps in a row that added no trial.
    """

    def __init__(self, agent: Agent, env: Any, seed: int | None = None,
                 callback: Callable[[Sequence[Trial]], None] | None = None) -> None:
        self.agent, self.env, self.seed, self.callback = agent, env, seed, callback
        self.base = env.unwrapped
        self.result = RunResult(self.base.task, agent.name or type(agent).__name__)
        self.done = False
        self._started = False
        self._idle = 0  # steps in a row that added no trial (only repeats or excluded configs)

    def start(self) -> list[Trial]:
        """Reset the env and the agent; returns the trials loaded from records (the agent has
        observed them)."""
        _, info = self.env.reset(seed=self.seed)
        self.agent.reset(self.base.space, self.base.task, self.seed)
        self._started = True
        prior: tuple[Trial, ...] = info.get("new_trials", ())
        if prior:  # records loaded from a log: let the agent learn from them
            self.agent.observe([t.config for t in prior], [t.result for t in prior])
            self.result.trials.extend(prior)
        self.done = self.base.session.exhausted or self.base.session.space_done
        return list(prior)

    def step(self, limit: int | None = None, first: Sequence[Config] = ()) -> list[Trial]:
        """One batch of at most ``limit`` new configs (default: the env's batch size); returns
        the new trials and sets :attr:`done` when the agent, the budget or the space ran out.

        ``first``: configs that go ahead of the agent's proposals in this batch (a network's
        configs carried from other kernels, :mod:`agents.transfer`); the agent proposes the rest
        and observes their results like its own."""
        if not self._started:
            self.start()
        if self.done:
            return []
        base = self.base
        n = base.batch_size if limit is None else max(1, min(limit, base.batch_size))
        configs = list(dict.fromkeys(first))[:n]
        if len(configs) < n:
            proposed = self.agent.propose(n - len(configs))[: n - len(configs)]
            if not proposed and not configs:
                self.done = True
                return []
            configs += [c for c in proposed if c not in configs]
        padded = list(configs) + [configs[-1]] * (base.batch_size - len(configs))
        if base.action_format == "index":
            action = np.array([base.space.index(c) for c in padded], dtype=np.int64)
        else:
            action = np.array(padded, dtype=np.int64).reshape(base.action_space.shape)
        _, _, terminated, truncated, info = self.env.step(action)
        evaluated = [o for o in info["outcomes"][: len(configs)] if o.result is not None]
        self.agent.observe([o.config for o in evaluated], [o.result for o in evaluated])
        new = list(info["new_trials"])
        self.result.trials.extend(new)
        if self.callback is not None:
            self.callback(new)
        self._idle = 0 if new else self._idle + 1
        self.done = bool(terminated or truncated) or self._idle >= MAX_IDLE_STEPS
        return new


def run(agent: Agent, env: Any, seed: int | None = None,
        callback: Callable[[Sequence[Trial]], None] | None = None) -> RunResult:
    """Drive a ``tune_gym/Tune-v0`` env with ``agent`` until the budget or the space runs out
    (:class:`EnvRunner`, step after step)."""
    start = time.perf_counter()
    runner = EnvRunner(agent, env, seed, callback)
    runner.start()
    while not runner.done:
        runner.step()
    runner.result.seconds = time.perf_counter() - start
    return runner.result
