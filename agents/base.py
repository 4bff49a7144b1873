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
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["Agent", "RunResult", "Trial", "list_agents", "make_agent", "register", "run"]


class Agent:
    """Base class of search agents.

    Lifecycle: ``reset(space, task, seed)`` once per tuning run, then alternately
    ``propose(n)`` (up to ``n`` configs; an empty list means "nothing more to try") and
    ``observe(configs, results)`` with what was measured.
    """

    name: ClassVar[str] = ""

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        self.space = space
        self.task = task
        self.rng = np.random.default_rng(seed)
        self.seen: dict[Config, MeasureResult] = {}

    def propose(self, n: int) -> list[Config]:
        raise NotImplementedError

    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for cfg, res in zip(configs, results):
            self.seen[cfg] = res


_REGISTRY: dict[str, tuple[str, str]] = {}  # id -> (module:attr, description)
#: Where each built-in agent lives; a module is imported only when one of its agents is asked
#: for (or when all are listed), so a missing optional dependency affects only its agents.
_MODULES: dict[str, str] = {
    "random": "agents.random", "grid": "agents.grid", "ga": "agents.ga", "xgb-sa": "agents.xgb_sa",
    "xgb-sa-transfer": "agents.xgb_sa", "contextual-sa": "agents.contextual_sa", "batch-bo": "agents.batch_bo",
    "presample": "agents.presample", "rl-ppo": "agents.rl",
}
_UNAVAILABLE: dict[str, str] = {}  # id -> why its module could not be imported


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


def _import(agent_id: str) -> None:
    """Import the module of a built-in agent; ImportError says what to install."""
    module = _MODULES[agent_id]
    try:
        importlib.import_module(module)
    except ImportError as err:
        missing = err.name or "its dependencies"
        raise ImportError(f"agent {agent_id!r} needs {missing!r}, which is not installed: "
                          f"pip install {missing}") from err


def list_agents() -> dict[str, str]:
    """``{agent id: description}`` of every available agent (unavailable ones are skipped)."""
    for agent_id in _MODULES:
        if agent_id not in _REGISTRY:
            try:
                _import(agent_id)
            except ImportError as err:
                _UNAVAILABLE[agent_id] = str(err)
    return {k: v[1] for k, v in sorted(_REGISTRY.items())}


def make_agent(agent_id: str, **options: Any) -> Agent:
    """Instantiate an agent by id with its options.

    Raises:
        ValueError: unknown id or bad options.
        ImportError: the agent's optional dependency is missing (names what to install).
    """
    if agent_id not in _REGISTRY and agent_id in _MODULES:
        _import(agent_id)
    if agent_id not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(_MODULES))
        raise ValueError(f"unknown agent {agent_id!r}; known agents: {', '.join(known)}")
    module, _, attr = _REGISTRY[agent_id][0].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    try:
        return cls(**options)
    except TypeError as err:
        raise ValueError(f"agent {agent_id!r}: bad options {options}: {err}") from None


@dataclass
class Trial:
    """One evaluated config of a run (``index`` counts unique trials from 1)."""

    index: int
    config: Config
    result: MeasureResult
    cached: bool
    wall: float


@dataclass
class RunResult:
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


def run(agent: Agent, env: Any, seed: int | None = None,
        callback: Callable[[list[Trial]], None] | None = None) -> RunResult:
    """Drive a ``tune_gym/Tune-v0`` env with ``agent`` until the budget or the space runs out.

    Agents may propose fewer configs than the env's batch size; the batch is padded by
    repeating its last config, which costs nothing (an evaluated config is served from the
    env's cache). ``callback`` gets the trials of each step.
    """
    base = env.unwrapped
    start = time.perf_counter()
    _, info = env.reset(seed=seed)
    agent.reset(base.space, base.task, seed)
    result = RunResult(base.task, agent.name or type(agent).__name__)
    seen: set[Config] = set()
    if info.get("resumed"):  # records loaded from a log: let the agent learn from them
        prior = list(base.evaluated.items())
        agent.observe([c for c, _ in prior], [r for _, r in prior])
        for cfg, res in prior:
            seen.add(cfg)
            result.trials.append(Trial(len(result.trials) + 1, cfg, res, True, time.perf_counter() - start))
    while True:
        configs = [base.space.check(c) for c in agent.propose(base.batch_size)][: base.batch_size]
        if not configs:
            break
        padded = configs + [configs[-1]] * (base.batch_size - len(configs))
        if base.action_format == "index":
            action = np.array([base.space.index(c) for c in padded], dtype=np.int64)
        else:
            action = np.array(padded, dtype=np.int64).reshape(base.action_space.shape)
        _, _, terminated, truncated, info = env.step(action)
        entries = info["results"][: len(configs)]
        done_cfgs: list[Config] = []
        done_res: list[MeasureResult] = []
        new_trials: list[Trial] = []
        for entry in entries:
            if entry["result"] is None:
                continue
            done_cfgs.append(entry["config"])
            done_res.append(entry["result"])
            if entry["config"] not in seen:
                seen.add(entry["config"])
                new_trials.append(Trial(len(result.trials) + len(new_trials) + 1, entry["config"],
                                        entry["result"], entry["cached"], time.perf_counter() - start))
        agent.observe(done_cfgs, done_res)
        result.trials.extend(new_trials)
        if callback is not None:
            callback(new_trials)
        if terminated or truncated:
            break
    result.seconds = time.perf_counter() - start
    return result
