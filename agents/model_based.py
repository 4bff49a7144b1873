"""The model-guided loop shared by every cost-model agent: fit -> search -> select.

:class:`ModelGuidedAgent` owns the loop; a subclass says what differs:

* :meth:`fit` trains its cost model on ``(configs, throughputs)`` measured so far;
* :meth:`score` maps a batch of configs (``n x n_knobs`` int array) to a score to maximize
  (a predicted throughput, an acquisition value, ...);
* :meth:`search` finds high-scoring unmeasured configs (default: simulated annealing over
  :meth:`score`, AutoTVM's search), and :meth:`explore_fraction` sets how many slots of a
  batch are random (default: the constant ``eps``).

Until ``n_init`` configs are measured (or while the model cannot be fitted, e.g. all
measurements failed) batches are random. Invalid / failed configs reach the model as
throughput 0 (``invalid="zero"``, AutoTVM's choice) or are left out (``invalid="drop"``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from agents import pretrained
from agents.base import Agent
from agents.optimizers.sa import SimulatedAnnealing
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Check, Choice, Float, Int, OptionError, show
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["CHECKPOINT", "EPS", "INVALID", "INVALID_OPTION", "N_INIT", "PLAN_SIZE", "SA_EARLY_STOP", "SA_POINTS",
           "SA_STEPS", "ModelGuidedAgent", "PretrainedAgent", "check_checkpoint", "make_sa"]

#: Values of the ``invalid`` option: failed configs reach the model as throughput 0, or not at all.
INVALID = ("zero", "drop")


def check_checkpoint(name: str, checkpoint: Any) -> str:
    """A pretrained agent's ``checkpoint`` option: ``"auto"``, a path or a checkpoint name (as text)."""
    if not isinstance(checkpoint, (str, os.PathLike)) or not str(checkpoint):
        raise OptionError(f"{name} must be 'auto', a path or a checkpoint name, got {show(checkpoint)}")
    return str(checkpoint)


def _check_sa(name: str, sa: Any) -> Any:
    if sa is not None and not isinstance(sa, SimulatedAnnealing):
        raise OptionError(f"{name} must be a SimulatedAnnealing or None, got {type(sa).__name__}")
    return sa


# The options the model-guided agents share, declared once (each agent's signature sets its default).
PLAN_SIZE = Int(1, help="configs per plan; the model is refitted after each plan")
EPS = Float(0.0, 1.0, help="random share of each plan")
N_INIT = Int(0, none=True, help="measurements before the first model fit (None: plan_size)")
INVALID_OPTION = Choice(INVALID, help="failed configs reach the model as throughput 0 ('zero') or not at all ('drop')")
SA_POINTS = Int(1, help="parallel points of the simulated annealing")
SA_STEPS = Int(0, help="most simulated-annealing steps per search")
SA_EARLY_STOP = Int(1, help="simulated-annealing steps without a change of the top configs before it stops")
CHECKPOINT = Check(check_checkpoint, "'auto', a path or a checkpoint name",
                   help="'auto' (the committed checkpoint trained on the most rows without this task), a path, "
                        "or a file name in agents/checkpoints/")


class PretrainedAgent:
    """What the agents that start from a committed checkpoint share (mixed in before their
    :class:`~agents.base.Agent` base): resolving their ``checkpoint`` option for a task, loading
    the model once per file, and naming the file with its SHA-256 in :meth:`describe`."""

    checkpoint: str
    checkpoint_path: Path

    def load_checkpoint(self, task_uri: str, pick: Callable[[str], Path], kind: str, model: str) -> Any:
        """The ``model`` (a sidecar's model class) of the checkpoint the ``checkpoint`` option
        names for ``task_uri`` (:func:`agents.pretrained.checkpoint_path`; ``pick`` chooses for
        ``"auto"``, ``kind`` names the model in messages), shared between runs
        (:func:`agents.pretrained.cached_model`): copy it before changing it."""
        self.checkpoint_path = pretrained.checkpoint_path(self.checkpoint, task_uri, pick, kind)
        return pretrained.cached_model(model, str(self.checkpoint_path.resolve()))

    def describe(self) -> dict[str, Any]:
        path = self.checkpoint_path.resolve()
        return {"checkpoint": path.name, "sha256": pretrained.sha256(str(path))}


def make_sa(sa_points: int, sa_steps: int, sa_early_stop: int, persistent: bool = True) -> SimulatedAnnealing:
    """The simulated annealing of an agent's ``sa_points``, ``sa_steps`` and ``sa_early_stop``
    options (declared :data:`SA_POINTS`, :data:`SA_STEPS`, :data:`SA_EARLY_STOP`)."""
    return SimulatedAnnealing(n_points=sa_points, max_steps=sa_steps, early_stop=sa_early_stop, persistent=persistent)


class ModelGuidedAgent(Agent):
    """Base class: ``propose`` = exploit (search over the model) + explore (random)."""

    def __init__(self, plan_size: Annotated[int, PLAN_SIZE] = 64, eps: Annotated[float, EPS] = 0.05,
                 n_init: Annotated[int | None, N_INIT] = None, invalid: Annotated[str, INVALID_OPTION] = "zero",
                 sa: Annotated[SimulatedAnnealing | None,
                               Check(_check_sa, "SimulatedAnnealing or None", help="the search")] = None) -> None:
        self.plan_size = plan_size
        self.eps = eps
        self.n_init = self.plan_size if n_init is None else n_init
        self.invalid: str = invalid
        self.sa = sa or SimulatedAnnealing()

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.fitted = False
        self._plan: list[Config] = []
        self._new_since_fit = 0
        self.sa.points = None

    # ------------------------------------------------------------------ to override
    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        """Train the model on ``configs`` (n x n_knobs) and throughputs ``y`` (GFLOPS).

        Returns False when it cannot be fitted yet (then batches stay random).
        """
        raise NotImplementedError

    def score(self, configs: np.ndarray) -> np.ndarray:
        """Scores (higher is better) of ``configs``, an ``n x n_knobs`` int array."""
        raise NotImplementedError

    def search(self, n: int) -> list[Config]:
        """Up to ``n`` unmeasured, unproposed configs with high scores.

        AutoTVM's search: simulated annealing whose parallel points start random in the
        first round and persist between rounds (``sa.persistent``).
        """
        return self.sa.search(self.space, self.score, n, self.rng, exclude=self.proposed)

    def explore_fraction(self) -> float:
        return self.eps

    # ------------------------------------------------------------------ the loop
    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        new = sum(1 for c in configs if c not in self.seen)
        super().observe(configs, results)
        self._new_since_fit += new

    def training_data(self) -> tuple[np.ndarray, np.ndarray]:
        items = [(c, r.gflops) for c, r in self.seen.items() if r.ok or self.invalid == "zero"]
        if not items:
            return np.zeros((0, self.space.n_knobs), dtype=np.int64), np.zeros(0)
        configs, y = zip(*items)
        return np.asarray(configs, dtype=np.int64), np.asarray(y, dtype=np.float64)

    def _top_measured(self, k: int) -> list[Config]:
        ranked = sorted(((r.gflops, c) for c, r in self.seen.items() if r.ok), reverse=True)
        return [c for _, c in ranked[:k]]

    def propose(self, n: int) -> list[Config]:
        """Serve up to ``n`` configs of the current plan; when it runs out, refit and plan
        ``plan_size`` more.

        The plan size is the agent's, whatever batch the caller asks for: with ``n`` above
        what is left of the plan, only the rest of the plan is returned (the caller measures
        fewer configs this step), so the model refits every ``plan_size`` trials and the random
        share of a plan stays ``eps * plan_size`` as in the method's paper.
        """
        if not self._plan:
            self._plan = self._make_plan(self.plan_size)
        out, self._plan = self._plan[:n], self._plan[n:]
        self.proposed.update(out)
        return out

    def _make_plan(self, size: int) -> list[Config]:
        if len(self.seen) >= self.n_init and (not self.fitted or self._new_since_fit > 0):
            configs, y = self.training_data()
            self.fitted = bool(len(y)) and self.fit(configs, y)
            self._new_since_fit = 0
        if not self.fitted:
            return self._random(size)
        n_random = round(float(np.clip(self.explore_fraction(), 0.0, 1.0)) * size)
        plan = self.search(size - n_random)
        plan = [c for c in plan if c not in self.proposed]
        taken = set(plan)
        return plan + self._random(size - len(plan), taken)  # the random slots come last

    def _random(self, n: int, taken: set[Config] | None = None) -> list[Config]:
        return self.fresh(n, taken or set())
