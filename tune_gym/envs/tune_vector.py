"""The native vector env of ``Tune-v0`` for replay: N episodes stepped as arrays.

``gymnasium.make_vec("tune_gym/Tune-v0", num_envs=N, vectorization_mode="vector_entry_point",
task=..., ...)`` (the default mode: ``Tune-v0`` registers this class as its vector entry point)
gives a :class:`TuneVectorEnv`: N sub-envs that behave exactly as N copies of ``Tune-v0`` made
with the same options in gymnasium's ``SyncVectorEnv``, with the same observations, rewards,
terminations, truncations (the registered step limit included) and lean ``info``, but
stepped as a few NumPy operations over all sub-envs instead of N Python steps, and without
TVM: the data is served against the space it was recorded under
(``backend_options={"spaces": "recorded"}``, the default here; :mod:`tune_gym.datasets.spaces`).

How a step runs, for all sub-envs at once: the actions are checked and made canonical
(:func:`~tune_gym.envs.tune_env.decode_actions`); each config becomes its mixed-radix key and
its row of the replayed data by one ``searchsorted`` over the data's sorted keys (a precomputed
index); per sub-env, a boolean row mask is the set of configs evaluated in the episode, so a
repeat is a lookup; a config repeated within a batch is found by comparing the batch's keys
pairwise; the budget admits new configs in row order by a cumulative sum. A config the data
does not hold is an error naming it (as on ``Tune-v0`` with a replay backend), raised before
any sub-env changes.

What the sub-envs share and what they can be (a clear ``OptionError`` otherwise): one task and
one set of options (those of ``Tune-v0``); ``backend`` ``"replay"`` (or a
:class:`~tune_gym.measure.replay.ReplayBackend` without a fallback); ``observation="knobs"``;
``info="lean"`` (the only form, the default here); no ``log`` or ``resume``. Options proper to
the vector env: ``num_envs``; ``max_episode_steps`` (set by ``make_vec`` from the registration,
:data:`~tune_gym.envs.tune_env.MAX_EPISODE_STEPS`; ``-1`` or ``None``: no step limit); and
``autoreset_mode``, gymnasium's ``"next_step"`` (default, as ``SyncVectorEnv``'s: the step
after an episode ends resets that sub-env and ignores its action) or ``"same_step"`` (the
ending step resets it at once and returns the reset observation, the final one in
``info["final_obs"]``, its info in ``info["final_info"]``; SB3's convention,
:class:`tune_gym.envs.sb3.SB3VecEnv`). ``metadata["autoreset_mode"]`` says which.
``reset(options={"reset_mask": mask})`` resets only the sub-envs where the mask is True.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from tune_gym.envs.tune_env import MAX_EPISODE_STEPS, TuneEnv, decode_actions, env_options, progress, throughputs
from tune_gym.measure.replay import ReplayBackend
from tune_gym.options import OptionError, check_choice, check_int, check_keys, show

__all__ = ["TuneVectorEnv"]

#: Status codes of lean ``info["status"]`` (indices into :data:`tune_gym.session.STATUSES`).
_NEW, _REPEAT, _EXCLUDED, _SKIPPED = range(4)
#: ``Tune-v0`` options the vector env cannot take, and why.
_REFUSED = {"log": "records need one session per sub-env", "resume": "records need one session per sub-env",
            "render_mode": "it renders nothing", "graph_template": "it observes 'knobs'",
            "schedule_shape": "it observes 'knobs'"}
AUTORESET = ("next_step", "same_step")


class TuneVectorEnv(VectorEnv):
    """``num_envs`` replayed ``Tune-v0`` episodes stepped together (see the module docstring).

    Args:
        num_envs: number of sub-envs.
        max_episode_steps: steps after which a sub-env's episode is truncated (``None`` or -1:
            none); ``make_vec`` passes the registered limit.
        autoreset_mode: ``"next_step"`` or ``"same_step"`` (or the :class:`AutoresetMode`).
        **options: ``Tune-v0``'s options (:class:`~tune_gym.envs.tune_env.TuneEnv`), shared by
            every sub-env.

    Attributes:
        env: a ``Tune-v0`` made with the same options, which the vector env takes its task,
            space, reference, checks and spaces from (it is never stepped).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = MAX_EPISODE_STEPS,
                 autoreset_mode: str | AutoresetMode = "next_step", **options: Any) -> None:
        self.num_envs = check_int("num_envs", num_envs, 1)
        self.max_episode_steps, self.autoreset_mode = episode_rules(max_episode_steps, autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        self.env = _prototype(options)
        env, space = self.env, self.env.space
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.observation_space = batch_space(env.observation_space, self.num_envs)
        self.action_space = batch_space(env.action_space, self.num_envs)
        self.render_mode = None
        self.spec = None
        self.closed = False
        table = env.backend.table(env.task, space)  # type: ignore[attr-defined]
        if not len(table.keys):
            env.close()
            raise OptionError(f"Tune-v0 vector env: the replay data holds no config of {env.task.uri} (preset "
                              f"{env.preset})")
        self._keys, self._weights = table.keys, table.weights
        self._gflops = np.array([r.gflops for r in table.results], dtype=np.float64)
        self._ok = np.array([r.ok for r in table.results], dtype=bool)
        self._cost = np.array([r.build_secs + r.run_secs for r in table.results], dtype=np.float64)
        #: every config of the replay data as knob indices, one row per data row (the data's order)
        self.recorded_configs = (self._keys[:, None] // self._weights) % space.dims
        # each recorded config's knobs scaled to [0, 1], by row (the best_knobs observation)
        self._knobs = space.normalized(self.recorded_configs)
        self._row_of_key = _dense_index(self._keys, int(self._weights[0] * space.dims[0]) if len(space.dims) else 1)
        self._task_obs = np.broadcast_to(env.task_obs, (self.num_envs, len(env.task_obs)))
        self._default_knobs = space.normalized([env.default_config])[0]
        self._reference = np.full(self.num_envs, env.reference_gflops)
        self._plain = _rules_nothing_out(space)
        n, b, k = self.num_envs, env.batch_size, space.n_knobs
        self._best_knobs = np.zeros((n, k), dtype=np.float32)
        self._seen = np.zeros((n, len(self._keys)), dtype=bool)  # per sub-env: data rows that are trials
        self._trials = np.zeros(n, dtype=np.int64)
        self._best = np.zeros(n, dtype=np.float64)
        self._best_row = np.full(n, -1, dtype=np.int64)
        self._clock = np.zeros(n, dtype=np.float64)
        self._steps = np.zeros(n, dtype=np.int64)
        self._last_configs = np.zeros((n, b, k), dtype=np.float32)
        self._last_tp = np.zeros((n, b), dtype=np.float32)
        self._last_gflops = np.zeros((n, b), dtype=np.float64)  # raw (MultiTune-v0 observes them)
        self._last_valid = np.zeros((n, b), dtype=np.float32)
        self._status = np.full((n, b), -1, dtype=np.int8)
        self._new = np.zeros(n, dtype=np.int64)
        self._measure_secs = np.zeros(n, dtype=np.float64)
        self._ended = np.zeros(n, dtype=bool)  # next_step: reset at the next step
        self._started = False

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start new episodes (``seed`` draws nothing: the env is deterministic); with
        ``options={"reset_mask": mask}`` only where ``mask`` is True."""
        self._check_open("reset")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        check_keys("Tune-v0 reset", options, ())
        if mask is None:
            mask = np.ones(self.num_envs, dtype=bool)
        elif not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
            raise OptionError(f"reset_mask must be a bool array of shape ({self.num_envs},), got {show(mask)}")
        super().reset(seed=seed if isinstance(seed, int) else None)
        self._reset(mask)
        self._started = True
        return self._obs(), self._info()

    def step(self, actions: Any) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self._check_open("step")
        if not self._started:
            raise ResetNeeded("Tune-v0 vector env: call reset() before step()")
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        resetting = self._ended.copy() if self.autoreset_mode == AutoresetMode.NEXT_STEP else np.zeros(n, dtype=bool)
        stepping = ~resetting
        if stepping.any():  # the actions of sub-envs being reset are not used (nor checked)
            table = self._decode(actions, stepping)
            envs = np.flatnonzero(stepping)
            rewards[envs], terminated[envs], truncated[envs] = self._step(envs, table)
        self._reset(resetting)
        info = self._info()
        ended = terminated | truncated
        if self.autoreset_mode == AutoresetMode.SAME_STEP and ended.any():
            info["final_obs"], info["_final_obs"] = self._final_obs(ended), ended.copy()
            info["final_info"], info["_final_info"] = self._info(ended), ended.copy()
            self._reset(ended)
            info.update(self._info())
        self._ended = ended
        return self._obs(), rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()

    # ------------------------------------------------------------------ internals
    def _decode(self, actions: Any, stepping: np.ndarray) -> np.ndarray:
        """The checked, canonical configs of the sub-envs where ``stepping`` is True,
        ``(stepping.sum(), batch_size, n_knobs)`` (:func:`~tune_gym.envs.tune_env.decode_actions`)."""
        return decode_actions(self.env.space, self.env.action_format, self.env.batch_size, actions, self.num_envs,
                              None if stepping.all() else stepping)

    def _step(self, envs: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Evaluate ``table`` (``len(envs) x batch x knobs``, canonical) in sub-envs ``envs``, as
        each one's :meth:`TuningSession.evaluate <tune_gym.session.TuningSession.evaluate>`
        would; returns their rewards, terminations and truncations."""
        env, space = self.env, self.env.space
        keys = table @ self._weights
        if self._row_of_key is not None:  # a direct index: key -> row (-1: not recorded)
            pos = self._row_of_key[keys]
            found = pos >= 0
            pos = np.maximum(pos, 0)
        else:
            pos = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
            found = self._keys[pos] == keys
        excluded = self._excluded(table, found)
        seen = found & self._seen[envs[:, None], pos]  # a trial of this episode already
        b = keys.shape[1]
        leader = (keys[:, :, None] == keys[:, None, :]).argmax(axis=2)  # first row with the same config
        first = leader == np.arange(b)
        candidate = first & ~seen & ~excluded
        admitted = candidate & (self._trials[envs, None] + np.cumsum(candidate, axis=1) <= env.budget)
        if (admitted & ~found).any():  # not recorded: the replay backend's error names the config
            e, r = (int(i) for i in np.argwhere(admitted & ~found)[0])
            env.backend.measure(env.task, space, [tuple(int(v) for v in table[e, r])])
            raise AssertionError("the replay backend answered a config its data does not hold")
        trial = np.take_along_axis(admitted | seen, leader, axis=1)  # a trial after this step (repeats too)
        new = admitted  # a first occurrence that became a trial
        status = np.where(new, _NEW, np.where(trial, _REPEAT, np.where(excluded, _EXCLUDED, _SKIPPED)))
        gflops = np.where(trial, self._gflops[pos], 0.0)
        ok = trial & self._ok[pos]
        # the session's order: trials are added row by row; the best changes on a strictly better one
        before = self._best[envs].copy()
        candidates = np.where(new & ok, gflops, -np.inf)
        top = candidates.max(axis=1)
        better = top > np.where(self._best_row[envs] >= 0, before, -np.inf)
        rows = np.where(better, pos[np.arange(len(envs)), candidates.argmax(axis=1)], self._best_row[envs])
        self._best_row[envs] = rows
        self._best[envs] = np.where(better, top, before)
        if better.any():
            self._best_knobs[envs[better]] = self._knobs[rows[better]]
        costs = np.where(new, self._cost[pos], 0.0)
        self._clock[envs] = np.cumsum(np.concatenate([self._clock[envs, None], costs], axis=1), axis=1)[:, -1]
        self._measure_secs[envs] = np.cumsum(costs, axis=1)[:, -1]
        self._new[envs] = new.sum(axis=1)
        self._trials[envs] += self._new[envs]
        self._seen[np.repeat(envs, b)[new.ravel()], pos[new]] = True
        self._last_tp[envs] = throughputs(gflops, env.reference_gflops, env.throughput_high)
        self._last_gflops[envs] = gflops
        self._last_valid[envs] = ok
        self._last_configs[envs] = space.normalized(table.reshape(-1, space.n_knobs)).reshape(table.shape)
        self._status[envs] = status
        self._steps[envs] += 1
        reward = (self._best[envs] - before) / env.reference_gflops
        terminated = self._trials[envs] >= space.size
        truncated = ~terminated & (self._trials[envs] >= env.budget)
        if self.max_episode_steps is not None:
            truncated |= self._steps[envs] >= self.max_episode_steps
        return reward, terminated, truncated

    def _excluded(self, table: np.ndarray, found: np.ndarray) -> np.ndarray:
        """Where the space rules a config out (asked only for configs the data lacks, of a
        space that rules configs out)."""
        out = np.zeros(found.shape, dtype=bool)
        if self._plain or found.all():
            return out
        for e, r in np.argwhere(~found):
            out[e, r] = self.env.space.excluded(tuple(int(v) for v in table[e, r])) is not None
        return out

    def _reset(self, mask: np.ndarray) -> None:
        """Start new episodes in the sub-envs where ``mask`` is True."""
        if not mask.any():
            return
        self._seen[mask] = False
        self._best_knobs[mask] = self._default_knobs
        for array, value in ((self._trials, 0), (self._best, 0.0), (self._best_row, -1), (self._clock, 0.0),
                             (self._steps, 0), (self._last_configs, 0.0), (self._last_tp, 0.0),
                             (self._last_gflops, 0.0), (self._last_valid, 0.0), (self._status, -1), (self._new, 0),
                             (self._measure_secs, 0.0)):
            array[mask] = value
        self._ended[mask] = False

    def _obs(self) -> dict[str, np.ndarray]:
        env = self.env
        return {
            "task": self._task_obs.copy(),
            "best_knobs": self._best_knobs.copy(),
            "last_configs": self._last_configs.copy(),
            "last_throughput": self._last_tp.copy(),
            "last_valid": self._last_valid.copy(),
            "progress": progress(self._best, env.reference_gflops, env.throughput_high, self._trials, env.budget),
        }

    def _final_obs(self, ended: np.ndarray) -> np.ndarray:
        """``info["final_obs"]`` (same-step autoreset): each ended sub-env's last observation."""
        obs = self._obs()
        out = np.full(self.num_envs, None, dtype=object)
        for i in np.flatnonzero(ended):
            out[i] = {key: value[i] for key, value in obs.items()}
        return out

    def _info(self, mask: np.ndarray | None = None) -> dict[str, Any]:
        """The lean info of every sub-env (or of those in ``mask``, zeros elsewhere), in
        gymnasium's vector form: each key an array, ``_key`` where it is set."""
        values = {"trials_used": self._trials, "new_trials": self._new, "best_gflops": self._best,
                  "reference_gflops": self._reference, "clock": self._clock, "measure_secs": self._measure_secs,
                  "status": self._status}
        return vector_info(values, mask, self.num_envs)

    def _check_open(self, call: str) -> None:
        if self.closed:
            from gymnasium.error import ClosedEnvironmentError

            raise ClosedEnvironmentError(f"Tune-v0 vector env is closed: {call}() after close()")


def episode_rules(max_episode_steps: int | None, autoreset_mode: str | AutoresetMode
                  ) -> tuple[int | None, AutoresetMode]:
    """A vector env's step limit (``None`` for none: -1 or None given) and autoreset mode, checked;
    :class:`OptionError` names a bad one."""
    limit = check_int("max_episode_steps", max_episode_steps, -1, none=True)
    if limit == 0:
        raise OptionError("max_episode_steps must be an integer >= 1, or -1 or None for no step limit, got 0")
    mode = autoreset_mode.name.lower() if isinstance(autoreset_mode, AutoresetMode) else autoreset_mode
    mode = check_choice("autoreset_mode", mode, AUTORESET)
    return (None if limit in (None, -1) else limit), AutoresetMode[mode.upper()]


def vector_info(values: dict[str, np.ndarray], mask: np.ndarray | None, num_envs: int) -> dict[str, Any]:
    """``values`` (one array per key, a row per sub-env) as gymnasium's vector ``info``: each key
    a copy of its array, and ``_key`` the sub-envs it is set for (``mask``; all when ``None``), with
    the rows of the others zeroed."""
    info: dict[str, Any] = {}
    for key, value in values.items():
        if mask is None:
            info[key], info[f"_{key}"] = value.copy(), np.ones(num_envs, dtype=bool)
        else:
            info[key] = np.where(mask.reshape(-1, *[1] * (value.ndim - 1)), value, 0).astype(value.dtype)
            info[f"_{key}"] = mask.copy()
    return info


#: Most keys a direct key -> row index holds (int32, 16 MB); larger spaces are searched.
_DENSE_INDEX_KEYS = 1 << 22


def _dense_index(keys: np.ndarray, n_keys: int) -> np.ndarray | None:
    """``index[key]`` = the data row of ``key`` (-1 when not recorded), for spaces of at most
    :data:`_DENSE_INDEX_KEYS` knob combinations; ``None`` for larger ones."""
    if n_keys > _DENSE_INDEX_KEYS:
        return None
    index = np.full(n_keys, -1, dtype=np.int32)
    index[keys] = np.arange(len(keys), dtype=np.int32)
    return index


def _rules_nothing_out(space: Any) -> bool:
    """True when the space's :meth:`~tune_gym.space.KnobSpace.excluded` is the base one (every
    in-range config is a config of the space), so it need not be asked."""
    from tune_gym.space import KnobSpace

    return type(space).excluded is KnobSpace.excluded


def _prototype(options: dict[str, Any]) -> TuneEnv:
    """The ``Tune-v0`` the sub-envs copy (see :class:`TuneVectorEnv`), options checked."""
    check_keys("Tune-v0 vector env", options, env_options())
    for name, why in _REFUSED.items():
        if options.get(name) not in (None, False):
            raise OptionError(f"Tune-v0 vector env: option {name!r} is not available ({why}); use "
                              "vectorization_mode='sync' for it")
    if options.get("observation", "knobs") != "knobs":
        raise OptionError(f"Tune-v0 vector env: observation must be 'knobs', not {show(options['observation'])} "
                          "(use vectorization_mode='sync' for the others)")
    if options.get("info", "lean") != "lean":
        raise OptionError(f"Tune-v0 vector env: info must be 'lean', not {show(options['info'])}")
    backend = options.get("backend", "replay")
    if backend != "replay" and not isinstance(backend, ReplayBackend):
        raise OptionError(f"Tune-v0 vector env: backend must be 'replay' or a ReplayBackend, not {show(backend)} "
                          "(use vectorization_mode='sync' for other backends)")
    backend_options = options.get("backend_options")
    if backend == "replay":
        backend_options = {"spaces": "recorded", **(backend_options or {})}
    env = TuneEnv(**{**options, "backend": backend, "backend_options": backend_options, "observation": "knobs",
                     "info": "lean"})
    if getattr(env.backend, "fallback", None) is not None:
        env.close()
        raise OptionError("Tune-v0 vector env: the replay backend must have no fallback (it serves recorded "
                          "configs only)")
    return env
