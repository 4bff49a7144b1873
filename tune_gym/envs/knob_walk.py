"""``tune_gym/KnobWalk-v0``: walk one task's knob space one index step per knob at a time.

This is the formulation of Chameleon (Ahn et al., "Chameleon: Adaptive Code Optimization
for Expedited Deep Neural Network Compilation", ICLR 2020): a reinforcement-learning agent
moves a config through the space and is rewarded with the (predicted or measured) score of
each config it visits, so a trained policy climbs towards high-scoring regions.

Observation: a float32 ``Box``, the current config's knob indices scaled to [0, 1]
(``index / (choices - 1)``, :meth:`KnobSpace.normalized`) followed by the task features of
:func:`tune_gym.features.task.task_features` (constant within an env; they let one policy
tell tasks apart).

Action: ``MultiDiscrete([3] * n_knobs)``; ``a - 1`` is the move of each knob, one of
{-1, 0, +1}. A move past either end of a knob is clipped (the knob stays), and the result is
made canonical (:meth:`KnobSpace.canonical`: knobs that the new config's sketch does not use
drop to index 0), so moving such a knob does nothing.

Reward (``reward``):
    ``"score"`` (default, Chameleon's choice): the score of the config reached by the step;
    ``"improvement"``: the score of the config reached minus the score of the config left,
        so an undiscounted episode return is ``score(last config) - score(start)``.
The score is ``reward_fn(configs)`` (e.g. a cost model's prediction, which is what
Chameleon uses; cached per config, so each config is predicted once per env) or, with a
``backend``, the measured GFLOPS of the config (0 for a failed one). Measurements go through a
:class:`tune_gym.session.TuningSession` (``env.session``), as in ``Tune-v0``: each config is
measured once per env, every new config costs one trial of ``budget`` (over the env's life,
across episodes: a walk is short, a tuning run is many walks), and with ``log=PATH`` every
measurement is appended to a record file (``resume=True`` loads it first). A step that would
need a measurement beyond the budget does not measure: it is ``truncated`` with reward 0 and
``info["skipped"] = True``.

Episode end:
    ``terminated`` once at least ``stuck_fraction`` (default 0.75, Chameleon) of the movable
    knobs are *stuck* in a step: their action was 0, or the move was clipped at an end of
    their range. Movable knobs are those the config's sketch uses that have more than one
    choice; a space with no movable knob ends every episode at once.
    ``truncated`` after ``max_steps`` steps (Chameleon: 500).

``info`` carries ``config`` (the canonical config now held), and after a step ``score``
(its score, ``None`` when skipped), ``moved`` (how many knobs changed) and, with a backend,
``trial`` (the config's typed :class:`tune_gym.session.Trial`, ``None`` when skipped).

The start config of an episode is ``start`` when given, otherwise a uniform random config
drawn from ``self.np_random`` (so ``reset(seed=...)`` fixes every random choice).
:func:`walk` is the transition rule itself, vectorized over many walkers; the ``rl-ppo``
agent uses it to roll a policy out from many starts at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tune_gym.features.task import TASK_FEATURE_DIM, TASK_FEATURE_HIGH, task_features
from tune_gym.measure import resolve_backend
from tune_gym.measure.base import Backend
from tune_gym.options import check_float, check_int
from tune_gym.session import TuningSession
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["KnobWalkEnv", "walk"]

RewardFn = Callable[[np.ndarray], np.ndarray]


def walk(space: KnobSpace, configs: np.ndarray, actions: np.ndarray,
         stuck_fraction: float = 0.75) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One KnobWalk step for each row of ``configs``.

    A movable knob (one the row's sketch uses, with more than one choice) is *stuck* in a
    step when its action is 0 or the move is clipped at either end of its range; a walker
    stops once at least ``stuck_fraction`` of its movable knobs are stuck (Chameleon's rule,
    75%), or at once when it has no movable knob.

    Args:
        space: the knob space.
        configs: ``n x n_knobs`` canonical configs (knob indices).
        actions: ``n x n_knobs`` actions in {0, 1, 2} (move ``action - 1``).
        stuck_fraction: the share of stuck movable knobs that stops a walker.

    Returns:
        ``(new configs, knobs whose index changed per row, stop flags)``.
    """
    configs = np.asarray(configs, dtype=np.int64).reshape(-1, space.n_knobs)
    actions = np.asarray(actions, dtype=np.int64).reshape(configs.shape)
    move = actions - 1
    wanted = configs + move
    new = np.clip(wanted, 0, space.dims - 1)
    movable = space.active_mask[space.sketches(configs)] & (space.dims > 1)[None, :]
    stuck = movable & ((move == 0) | (wanted != new))
    if space.n_sketches > 1:  # canonical: knobs the new sketch does not use drop to 0
        new = new * space.active_mask[new[:, 0]]
    moved = (new != configs).sum(axis=1)
    n_movable = movable.sum(axis=1)
    stop = (stuck.sum(axis=1) >= stuck_fraction * n_movable) | (n_movable == 0)
    return new, moved, stop


class KnobWalkEnv(gym.Env):
    """Chameleon's knob-walking environment for one task (see the module docstring).

    Args:
        task: the task (a :class:`Task`, a URI or a network-task string).
        preset: knob-space preset (``"compact"``, ``"medium"`` or ``"full"``).
        reward_fn: ``configs (n x n_knobs int array) -> scores (n,)``, e.g. a cost model's
            prediction. Exactly one of ``reward_fn`` and ``backend`` must be given.
        backend: a measurement backend (or its id, ``"live"`` / ``"replay"``, built with
            ``backend_options``); the score is then the measured GFLOPS.
        backend_options: options of a backend given by id (e.g. ``{"dataset": PATH}``).
        budget: unique measured configs over the env's life (``None``: no limit); backend only.
        log: record file of the measurements (``None``: none); backend only.
        resume: load ``log``'s records first (they are not measured again); backend only.
        max_steps: steps after which an episode is truncated (500, Chameleon).
        start: the start config of every episode; ``None`` draws a random one per episode.
        stuck_fraction: an episode ends once at least this share of the movable knobs are
            stuck in a step (0.75, Chameleon; see :func:`walk`).
        reward: ``"score"`` (the new config's score, Chameleon) or ``"improvement"``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        task: Task | str,
        preset: str = "compact",
        reward_fn: RewardFn | None = None,
        backend: str | Backend | None = None,
        backend_options: dict[str, Any] | None = None,
        max_steps: int = 500,
        start: Sequence[int] | None = None,
        stuck_fraction: float = 0.75,
        reward: str = "score",
        budget: int | None = None,
        log: str | Path | None = None,
        resume: bool = False,
    ) -> None:
        if (reward_fn is None) == (backend is None):
            raise ValueError("give exactly one of reward_fn (predicted scores) and backend (measured GFLOPS)")
        if reward not in ("score", "improvement"):
            raise ValueError(f"reward must be 'score' or 'improvement', not {reward!r}")
        max_steps = check_int("max_steps", max_steps, 1)
        stuck_fraction = check_float("stuck_fraction", stuck_fraction, 0.0, 1.0)
        budget = check_int("budget", budget, 1, none=True)
        self.task = task if isinstance(task, Task) else Task.parse(task)
        self.preset = preset
        self.space = KnobSpace.for_task(self.task, preset)
        self.reward_fn = reward_fn
        self.backend: Backend | None = None
        self.session: TuningSession | None = None
        self._owns_backend = False
        if backend is not None:
            self.backend, self._owns_backend = resolve_backend(backend, backend_options)
            self.session = TuningSession(self.task, self.space, self.backend, budget=budget, log=log, resume=resume)
        elif budget is not None or log is not None or resume or backend_options:
            raise ValueError("budget, log, resume and backend_options apply only with a backend")
        self.max_steps = max_steps
        self.start = None if start is None else self.space.check(start)
        self.stuck_fraction = stuck_fraction
        self.reward = reward

        k = self.space.n_knobs
        self.action_space = spaces.MultiDiscrete(np.full(k, 3, dtype=np.int64))
        low = np.zeros(k + TASK_FEATURE_DIM, dtype=np.float32)
        high = np.concatenate([np.ones(k), np.full(TASK_FEATURE_DIM, TASK_FEATURE_HIGH)]).astype(np.float32)
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self._task_features = task_features(self.task)
        self._predicted: dict[Config, float] = {}
        self._config: Config = self.space.canonical([0] * k)
        self._steps = 0

    # ------------------------------------------------------------------ helpers
    def observation(self, configs: np.ndarray | Sequence[Config]) -> np.ndarray:
        """Observations of a batch of configs, ``n x (n_knobs + TASK_FEATURE_DIM)`` float32."""
        knobs = self.space.normalized(configs)
        feats = np.broadcast_to(self._task_features, (len(knobs), TASK_FEATURE_DIM))
        return np.concatenate([knobs, feats], axis=1).astype(np.float32)

    def score(self, config: Config) -> float | None:
        """The predicted (cached) or measured score of one canonical config; ``None`` when
        measuring it would exceed the budget."""
        if self.session is None:
            if config not in self._predicted:
                batch = np.asarray([config], dtype=np.int64)
                self._predicted[config] = float(np.asarray(self.reward_fn(batch)).reshape(-1)[0])  # type: ignore[misc]
            return self._predicted[config]
        outcome = self.session.evaluate([config]).outcomes[0]
        if outcome.status == "excluded":  # not a config of the space: no trial, scores nothing
            return 0.0
        return None if outcome.trial is None else outcome.trial.gflops

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        self._config = self.start if self.start is not None else self.space.sample(self.np_random, 1)[0]
        self._steps = 0
        return self.observation([self._config])[0], {"config": self._config}

    def step(self, action: Any):  # type: ignore[override]
        action = np.asarray(action)
        valid = action.shape == (self.space.n_knobs,) and action.dtype.kind in "iu"
        if not valid or not np.all((action >= 0) & (action <= 2)):
            raise ValueError(f"action must be {self.space.n_knobs} integers in {{0, 1, 2}}, got {action!r}")
        new, moved, stop = walk(self.space, np.asarray([self._config]), action[None, :], self.stuck_fraction)
        old, self._config = self._config, tuple(int(v) for v in new[0])
        self._steps += 1
        value = self.score(self._config)
        info: dict[str, Any] = {"config": self._config, "score": value, "moved": int(moved[0])}
        if self.session is not None:
            info["trial"] = self.session.trial(self._config)
        if value is None:  # the budget is spent: nothing measured, the episode ends here
            info["skipped"] = True
            return self.observation([self._config])[0], 0.0, False, True, info
        previous = self.score(old) if self.reward == "improvement" else 0.0
        reward = value - (previous or 0.0) if self.reward == "improvement" else value
        terminated = bool(stop[0])
        truncated = not terminated and self._steps >= self.max_steps
        return self.observation([self._config])[0], float(reward), terminated, truncated, info

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        if self._owns_backend and self.backend is not None:
            self.backend.close()
        super().close()

