"""The native vector env of ``MultiTune-v0``: N episodes over a task set stepped as arrays.

``gymnasium.make_vec("tune_gym/MultiTune-v0", num_envs=N, ...)`` (the default mode) gives a
:class:`MultiTuneVectorEnv`: N sub-envs that behave as N ``MultiTune-v0`` (same options, same
observations, rewards, terminations, truncations, lean ``info``, ``task_index`` and
``action_mask``), each on its own task. Each task of the set has one replay engine, a
:class:`~tune_gym.envs.tune_vector.TuneVectorEnv` over all N sub-envs, of which it steps only
those currently on its task. A step decodes every sub-env's canonical rows at once, each with
its task's codec tables (:func:`~tune_gym.envs.canonical.nearest_choices` over the tasks'
stacked :attr:`~tune_gym.envs.canonical.CanonicalCodec.tables`), then runs each task's sub-envs
together in its engine. The engines share their per-sub-env state arrays (best, trials, last
batch, ...), so the observation and ``info`` read them without gathering; what is constant per
task (masks, task features, the canonical row of every recorded config) is made once and
looked up by each sub-env's task.

Tasks: the vector env draws each sub-env's task at every (auto)reset from one generator,
seeded by ``reset(seed=...)`` (an int, or a list of per-sub-env seeds, used together as the
generator's entropy), so the sequence of tasks differs from N separately seeded
``MultiTune-v0``; ``reset(options={"task": t})`` puts every reset sub-env on ``t``, and a list
of ``num_envs`` tasks (``None``: draw) one per sub-env. ``options={"reset_mask": mask}``
resets only the sub-envs where ``mask`` is True.

Options: ``MultiTune-v0``'s (:class:`~tune_gym.envs.multi_task.MultiTuneEnv`), ``num_envs``,
``max_episode_steps`` and ``autoreset_mode`` (as :class:`~tune_gym.envs.tune_vector.TuneVectorEnv`'s).
``env.action_masks()`` gives the masks of all sub-envs, ``(num_envs, batch_size * NVEC.sum())``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from tune_gym.envs import MAX_EPISODE_STEPS
from tune_gym.envs.canonical import N_SLOTS, NVEC, SLOT_NAMES, nearest_choices, pad_tables
from tune_gym.envs.multi_task import MultiTuneEnv, env_options, observation
from tune_gym.envs.tune_vector import TuneVectorEnv, episode_rules, vector_info
from tune_gym.errors import SpaceError
from tune_gym.options import OptionError, check_int, check_keys, show

__all__ = ["MultiTuneVectorEnv"]

#: The lean ``info`` keys and the per-sub-env state arrays of the engines that hold them.
_INFO = {"trials_used": "_trials", "new_trials": "_new", "best_gflops": "_best", "clock": "_clock",
         "measure_secs": "_measure_secs", "status": "_status"}
#: Per-sub-env state arrays that every engine shares (:meth:`MultiTuneVectorEnv._share_state`).
_SHARED = (*_INFO.values(), "_best_row", "_steps", "_last_tp", "_last_gflops", "_last_valid")


class MultiTuneVectorEnv(TuneVectorEnv):
    """``num_envs`` replayed ``MultiTune-v0`` episodes stepped together (see the module docstring).

    It is a :class:`TuneVectorEnv` in its stepping and autoreset rules only: the per-task
    replay is done by one ``TuneVectorEnv`` per task (``engines``), driven through the hooks
    every ``TuneVectorEnv`` subclass overrides or calls (``_step``, ``_reset``) and sharing their
    per-sub-env state arrays (:meth:`_share_state`): the class family's internals, not an API.

    Attributes:
        env: a ``MultiTune-v0`` made with the same options (its task set, codecs, spaces and
            task observations; never stepped).
        engines: the replay engine of each task of ``env.tasks``.
        task_index: each sub-env's current task (-1 before ``reset``).
        task_rng: the generator of the sub-envs' task draws (seeded by ``reset(seed=...)``; a resumed
            training run restores its state).
    """

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = MAX_EPISODE_STEPS,
                 autoreset_mode: str | AutoresetMode = "next_step", **options: Any) -> None:
        self.num_envs = n = check_int("num_envs", num_envs, 1)
        self.max_episode_steps, self.autoreset_mode = episode_rules(max_episode_steps, autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        check_keys("MultiTune-v0 vector env", options, env_options())
        if options.get("render_mode") is not None:
            raise OptionError("MultiTune-v0 vector env: option 'render_mode' is not available (it renders nothing)")
        self.env: MultiTuneEnv = MultiTuneEnv(**options)  # type: ignore[assignment]
        env = self.env
        self.engines = [TuneVectorEnv(n, None, task=e.task, preset=e.preset, backend=env.backend,
                                      batch_size=e.batch_size, budget=e.budget, reward_norm=e.reference_gflops,
                                      action_format="knobs") for e in env.envs]
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.observation_space = batch_space(env.observation_space, n)
        self.action_space = batch_space(env.action_space, n)
        self.render_mode = None
        self.spec = None
        self.closed = False
        self._share_state()
        # every task's recorded configs as canonical rows, one table (task t's rows from
        # _row_start[t]), then each task's default config's row (before any measurement)
        data_rows = [codec.encode(engine.recorded_configs)
                     for codec, engine in zip(env.codecs, self.engines)]
        self._row_start = np.cumsum([0] + [len(rows) for rows in data_rows[:-1]])
        self._default_at = sum(map(len, data_rows)) + np.arange(len(data_rows))
        self._rows = np.concatenate([*data_rows, np.stack(env.default_rows)])
        self._task_obs = np.stack(env.task_observations)
        self._masks = np.stack(env.task_masks)
        self._slot_index, self._choice_values = pad_tables([codec.tables for codec in env.codecs])
        self._references = np.array([e.reference_gflops for e in env.envs])
        self.task_index = np.full(n, -1, dtype=np.int64)
        self._last_rows = np.zeros((n, env.batch_size, N_SLOTS), dtype=np.int64)
        self.task_rng = np.random.default_rng()
        self._forced: list[int | None] = [None] * n  # tasks asked for by the reset being made
        self._ended = np.zeros(n, dtype=bool)
        self._started = False

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | list[int | None] | None = None,  # type: ignore[override]
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Start new episodes, each on a task drawn from the set (or ``options["task"]``); with
        ``options={"reset_mask": mask}`` only where ``mask`` is True."""
        self._check_open("reset")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        task = options.pop("task", None)
        check_keys("MultiTune-v0 reset", options, ())
        if mask is None:
            mask = np.ones(self.num_envs, dtype=bool)
        elif not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
            raise OptionError(f"reset_mask must be a bool array of shape ({self.num_envs},), got {show(mask)}")
        self._forced = self._forced_tasks(task)
        entropy = [s for s in seed if s is not None] if isinstance(seed, list) else seed
        if entropy is not None and entropy != []:
            self.task_rng = np.random.default_rng(entropy)
        try:
            self._reset(mask)
        finally:
            self._forced = [None] * self.num_envs
        self._started = True
        return self._obs(), self._info()

    def action_masks(self) -> np.ndarray:
        """Every sub-env's mask, ``(num_envs, batch_size * NVEC.sum())`` bools."""
        return self._masks[np.maximum(self.task_index, 0)]

    def close_extras(self, **kwargs: Any) -> None:
        for engine in self.engines:
            engine.close()
        self.env.close()

    # ------------------------------------------------------------------ internals
    def _forced_tasks(self, task: Any) -> list[int | None]:
        """The ``task`` reset option as one task index (or ``None``) per sub-env."""
        if task is None:
            return [None] * self.num_envs
        if isinstance(task, (list, tuple)):
            if len(task) != self.num_envs:
                raise OptionError(f"MultiTune-v0 reset: option 'task' as a list needs {self.num_envs} tasks (one per "
                                  f"sub-env, None to draw), got {len(task)}")
            return [None if t is None else self.env.find_task(t) for t in task]
        return [self.env.find_task(task)] * self.num_envs

    def _decode(self, actions: Any, stepping: np.ndarray) -> np.ndarray:
        """The checked canonical rows of the stepping sub-envs, ``(k, batch_size, N_SLOTS)``
        (decoded to configs per task in :meth:`_step`)."""
        b = self.env.batch_size
        arr = np.asarray(actions)
        if arr.dtype.kind not in "iu":
            raise SpaceError(f"actions dtype is {arr.dtype}; expected integer canonical values (e.g. np.int64)")
        shapes = ((self.num_envs, b * N_SLOTS), (self.num_envs, b, N_SLOTS))
        if arr.shape not in shapes:
            raise SpaceError(f"actions shape {arr.shape}; expected {' or '.join(map(str, shapes))} (num_envs x "
                             "batch_size x canonical slots)")
        rows = arr.reshape(self.num_envs, b, N_SLOTS).astype(np.int64)[stepping]
        bad = (rows < 0) | (rows >= NVEC)
        if bad.any():
            e, r, s = (int(i) for i in np.argwhere(bad)[0])
            raise SpaceError(f"sub-env {int(np.flatnonzero(stepping)[e])}: action row {r}: slot {SLOT_NAMES[s]!r}: "
                             f"value {rows[e, r, s]} out of range [0, {NVEC[s] - 1}]")
        return rows

    def _share_state(self) -> None:
        """Make the engines share their per-sub-env state arrays (:data:`_SHARED`): a sub-env is
        on one task at a time and an engine writes only the rows of the sub-envs it steps or
        resets, so each array holds every sub-env's state, read without gathering."""
        first = self.engines[0]
        for attr in _SHARED:
            for engine in self.engines[1:]:
                setattr(engine, attr, getattr(first, attr))

    def _step(self, envs: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step sub-envs ``envs`` with canonical rows ``table``: every row decoded at once (each
        with its sub-env's task's codec), then each task's sub-envs run in its engine."""
        rewards = np.zeros(len(envs), dtype=np.float64)
        terminated = np.zeros(len(envs), dtype=bool)
        truncated = np.zeros(len(envs), dtype=bool)
        tasks = self.task_index[envs]
        choices = nearest_choices(table, self._slot_index[tasks, None], self._choice_values[tasks, None])
        b = self.env.batch_size
        for t in np.unique(tasks):
            at = np.flatnonzero(tasks == t)
            codec, engine, group = self.env.codecs[t], self.engines[t], envs[at]
            k = codec.space.n_knobs
            configs = codec.space.check_table(choices[at, :, :k].reshape(-1, k))
            rewards[at], terminated[at], truncated[at] = engine._step(group, configs.reshape(len(at), b, k))
            self._last_rows[group] = codec.encode(configs).reshape(len(at), b, N_SLOTS)
        if self.max_episode_steps is not None:
            truncated |= ~terminated & (self.engines[0]._steps[envs] >= self.max_episode_steps)
        return rewards, terminated, truncated

    def _reset(self, mask: np.ndarray) -> None:
        """Start new episodes where ``mask`` is True, each on a drawn (or asked-for) task."""
        for i in np.flatnonzero(mask):
            forced = self._forced[i]
            self.task_index[i] = forced if forced is not None else int(self.task_rng.integers(len(self.env.tasks)))
        for t in np.unique(self.task_index[mask]):
            self.engines[t]._reset(mask & (self.task_index == t))
        self._last_rows[mask] = 0
        self._ended[mask] = False

    def _obs(self) -> np.ndarray:  # type: ignore[override]
        state, tasks = self.engines[0], np.maximum(self.task_index, 0)
        best = np.where(state._best_row >= 0, self._row_start[tasks] + state._best_row, self._default_at[tasks])
        return observation(self._task_obs[tasks], self._rows[best], self._last_rows, state._last_gflops,
                           state._last_valid, state._best, state._trials / self.env.budget)

    def _final_obs(self, ended: np.ndarray) -> np.ndarray:
        obs = self._obs()
        out = np.full(self.num_envs, None, dtype=object)
        for i in np.flatnonzero(ended):
            out[i] = obs[i]
        return out

    def _info(self, mask: np.ndarray | None = None) -> dict[str, Any]:
        """The lean info of every sub-env (or of those in ``mask``, zeros elsewhere), with
        ``task_index`` and ``action_mask``, in gymnasium's vector form."""
        state = self.engines[0]
        values = {key: getattr(state, attr).copy() for key, attr in _INFO.items()}
        values["reference_gflops"] = np.where(self.task_index >= 0, self._references[np.maximum(self.task_index, 0)],
                                              0.0)
        values["task_index"] = self.task_index.copy()
        values["action_mask"] = self.action_masks()
        return vector_info(values, mask, self.num_envs)

    def _check_open(self, call: str) -> None:
        if self.closed:
            from gymnasium.error import ClosedEnvironmentError

            raise ClosedEnvironmentError(f"MultiTune-v0 vector env is closed: {call}() after close()")

