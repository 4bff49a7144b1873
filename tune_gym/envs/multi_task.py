"""``tune_gym/MultiTune-v0``: one policy, many tasks, one action and observation space.

Each episode is a ``Tune-v0`` episode (:mod:`tune_gym.envs.tune_env`: same budget, repeats,
wasted steps, termination and registered step limit, :data:`~tune_gym.envs.MAX_EPISODE_STEPS`)
of one task of a *task set*, replayed from the committed datasets without TVM. ``reset`` picks
the task: drawn uniformly with the env's generator (seeded by ``reset(seed=...)``), or named
by ``reset(options={"task": uri_or_id})``; a task outside the set is an ``OptionError`` naming
it and the set, and ``reset`` takes no other option.

Task set (options): ``split`` and ``part`` (a stored split, :mod:`tune_gym.envs.task_sets`:
``split="by-network-v1", part="train"``; ``part="all"`` is every part), or ``tasks``, a list
of task ids or URIs (with ``preset``; their datasets from the catalog). Neither: every task of
``by-host-v1`` (every exhaustively measured task of the committed data).

Action: ``batch_size`` rows of canonical values (:mod:`tune_gym.envs.canonical`), flattened:
``MultiDiscrete(np.tile(NVEC, batch_size))``. A value means the same in every task (slot 1 is
the unroll step, a tile slot the size of a tile relative to its loop), so tasks share a policy;
each row becomes the task's nearest config. Masks: ``env.action_masks()`` (what sb3-contrib's
MaskablePPO asks for) and ``info["action_mask"]``, a flat bool vector of ``batch_size *
NVEC.sum()``, allow only values some config of the current task has.

Observation: one float32 vector, the same layout for every task, bounded (values beyond a
bound are clipped), built only from what a tuner knows while it tunes (never the task's
optimum, which only an exhaustive dataset knows): the task's features
(:func:`tune_gym.features.task.task_features`, log2 counts divided by 16), the log2 extent of
the loop of each tile slot over 12 (0 for padding), the best config so far in canonical values
scaled to [0, 1] (before any measurement, the task's config with every knob at index 0), the
last batch's configs likewise, the last batch's GFLOPS over the best GFLOPS measured so far in
the episode (in [0, 1]; 0 for a config that failed or was not measured, and before anything
ran) and which ran, the best GFLOPS so far as ``log2(1 + GFLOPS) / 20`` (a fixed scale, in [0,
1]) and the fraction of the budget used. :data:`OBSERVATION_PARTS` names the parts in order;
:func:`observation` builds it (also for a trained policy outside the env, :mod:`agents.rl_policy`).

Reward: ``reward_norm="optimum"`` (default): throughput over the task's best known (the best
config of its exhaustive dataset), so a return of 1.0 means "found the optimum" on every task
and returns compare across tasks; the other values of ``Tune-v0`` work the same way.

``info``: ``Tune-v0``'s lean info of the episode's task, with ``task_index`` (the task's index
in ``env.unwrapped.tasks``) and ``action_mask``.
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError

from tune_gym.datasets.catalog import find_dataset
from tune_gym.envs.canonical import N_SLOTS, NVEC, SLOT_NAMES, CanonicalCodec
from tune_gym.envs.task_sets import TaskRef, load_split
from tune_gym.envs.tune_env import TuneEnv
from tune_gym.errors import SpaceError, TuneGymError
from tune_gym.features.task import TASK_FEATURE_DIM, TASK_FEATURE_NAMES, task_features
from tune_gym.measure.replay import ReplayBackend
from tune_gym.options import OptionError, check_int, check_keys, show
from tune_gym.space import PRESETS
from tune_gym.tasks.task import Task

__all__ = ["DEFAULT_SPLIT", "GFLOPS_LOG_SCALE", "OBSERVATION_PARTS", "MultiTuneEnv", "make_multi_tune_env",
           "observation", "observation_slices", "task_observation"]

#: The task set when neither ``split`` nor ``tasks`` is given (its part ``all``).
DEFAULT_SPLIT = "by-host-v1"
#: The best GFLOPS is observed as ``log2(1 + GFLOPS)`` over this (2**20 GFLOPS fill [0, 1]).
GFLOPS_LOG_SCALE = 20.0
#: Log2 counts of the task features are divided by this (so they lie in [0, 4]).
_LOG_SCALE = 16.0
#: Log2 loop extents of the tile slots are divided by this (extents up to 4096 fill [0, 1]).
_EXTENT_SCALE = 12.0


def _observation_parts(batch_size: int) -> tuple[tuple[str, int, float], ...]:
    """``(name, size, upper bound)`` of each part of the observation, in order."""
    return (("task", TASK_FEATURE_DIM, 64.0 / _LOG_SCALE), ("slot_extents", N_SLOTS, 1.0), ("best", N_SLOTS, 1.0),
            ("last_configs", batch_size * N_SLOTS, 1.0), ("last_relative", batch_size, 1.0),
            ("last_valid", batch_size, 1.0), ("best_log_gflops", 1, 1.0), ("budget_used", 1, 1.0))


def observation_slices(batch_size: int) -> dict[str, slice]:
    """Where each part of the observation lies in it, by name, for ``batch_size``."""
    out, start = {}, 0
    for name, size, _ in _observation_parts(batch_size):
        out[name] = slice(start, start + size)
        start += size
    return out


#: The observation's parts for the default batch size (``MultiTuneEnv.observation_parts`` has
#: the env's own): ``(name, size, upper bound)``.
OBSERVATION_PARTS = _observation_parts(8)
_TASK_SCALE = np.array([1 / _LOG_SCALE if name.startswith("log2_") else 1.0 for name in TASK_FEATURE_NAMES],
                       dtype=np.float32)


class MultiTuneEnv(gym.Env):
    """Tuning episodes over a task set with one action and observation space (see the module
    docstring).

    Attributes:
        tasks: the task set, a tuple of :class:`~tune_gym.envs.task_sets.TaskRef`.
        task_index: the current episode's task (index into ``tasks``; -1 before ``reset``).
        envs: the ``Tune-v0`` of each task (their episodes are the env's episodes).
        codecs: the canonical codec of each task's space.
        task_observations: each task's part of the observation (task features and slot extents).
        task_masks: each task's action mask (read-only; :meth:`action_masks` gives the current one).
        default_rows: each task's default config as canonical values (the "best so far" an
            episode observes before anything ran).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, split: str | None = None, part: str | None = None, tasks: list[str] | None = None,
                 preset: str = "compact", batch_size: int = 8, budget: int = 64,
                 reward_norm: str | float = "optimum", render_mode: str | None = None) -> None:
        batch_size = check_int("batch_size", batch_size, 1)
        if render_mode not in (None, "ansi"):
            raise OptionError(f"MultiTune-v0: render_mode must be None or 'ansi', not {show(render_mode)}")
        refs, self.set_name = _task_set(split, part, tasks, preset)
        self.tasks = refs
        self.batch_size, self.render_mode, self.closed = batch_size, render_mode, False
        self.backend = ReplayBackend([dataset_path(ref) for ref in refs], spaces="recorded")
        self.envs: list[TuneEnv] = []
        try:
            for ref in refs:
                self.envs.append(TuneEnv(task=ref.task, backend=self.backend, batch_size=batch_size, budget=budget,
                                         preset=ref.preset, action_format="knobs", reward_norm=reward_norm,
                                         observation="knobs", info="lean"))
            self.codecs = [CanonicalCodec(env.space) for env in self.envs]
        except BaseException:
            self.close()
            raise
        self.budget = self.envs[0].budget
        self.action_space = spaces.MultiDiscrete(np.tile(NVEC, batch_size))
        self.observation_parts = _observation_parts(batch_size)
        high = np.concatenate([np.full(size, bound, dtype=np.float32) for _, size, bound in self.observation_parts])
        self.observation_space = spaces.Box(np.zeros_like(high), high, dtype=np.float32)
        self.task_observations = [task_observation(env.task, codec) for env, codec in zip(self.envs, self.codecs)]
        self.task_masks = [_read_only(np.tile(codec.mask(), batch_size)) for codec in self.codecs]
        self.default_rows = [codec.encode(np.asarray(env.default_config))[0] for env, codec in
                              zip(self.envs, self.codecs)]
        self.task_index = -1
        self._last_rows = np.zeros((batch_size, N_SLOTS), dtype=np.int64)
        self._shown: tuple[Any, np.ndarray] = (None, self.default_rows[0])  # (best config, its row)

    # ------------------------------------------------------------------ the current task
    @property
    def env(self) -> TuneEnv:
        """The ``Tune-v0`` of the current episode's task."""
        if self.task_index < 0:
            raise gym.error.ResetNeeded("MultiTune-v0: call reset() first")
        return self.envs[self.task_index]

    @property
    def codec(self) -> CanonicalCodec:
        """The canonical vocabulary of the current task's space."""
        return self.codecs[max(self.task_index, 0)]

    def action_masks(self) -> np.ndarray:
        """The allowed values of every row of the action, a flat bool vector of
        ``batch_size * NVEC.sum()`` (sb3-contrib's MaskablePPO calls this), read-only (a task's
        masks never change: they are made once)."""
        return self.task_masks[max(self.task_index, 0)]

    def decode_action(self, action: Any) -> np.ndarray:
        """Check an action and return the current task's configs it means, ``(batch_size,
        n_knobs)`` knob indices (canonical); ``SpaceError`` names a bad row and slot."""
        return self.codec.decode(_check_action(action, self.batch_size))

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[override]
        """Start an episode of a task drawn from the set (or ``options={"task": ...}``)."""
        self._check_open("reset")
        options = options or {}
        check_keys("MultiTune-v0 reset", options, ("task",))
        super().reset(seed=seed)
        if "task" in options:
            self.task_index = self.find_task(options["task"])
        else:
            self.task_index = int(self.np_random.integers(len(self.tasks)))
        _, info = self.env.reset()
        self._last_rows[:] = 0
        self._shown = (None, self.default_rows[self.task_index])
        return self._obs(), self._info(info)

    def step(self, action: Any):  # type: ignore[override]
        self._check_open("step")
        env = self.env
        table = self.decode_action(action)  # canonical configs of the space: what Tune-v0's step checks
        reward, terminated, truncated, info = env.step_table(table)
        self._last_rows = self.codec.encode(table)
        return self._obs(), reward, terminated, truncated, self._info(info)

    def render(self) -> str | None:
        return self.env.render() if self.render_mode == "ansi" and self.task_index >= 0 else None

    def close(self) -> None:
        """Close every task's env (and the replay data); ``step`` and ``reset`` raise after it."""
        if self.closed:
            return
        self.closed = True
        for env in self.envs:
            env.close()
        self.backend.close()
        super().close()

    # ------------------------------------------------------------------ internals
    def find_task(self, task: Any) -> int:
        """The index in the set of a task named by ``reset(options={"task": ...})``."""
        try:
            uri = task.uri if isinstance(task, Task) else Task.parse(task).uri if isinstance(task, str) else None
        except TuneGymError as err:
            raise OptionError(f"MultiTune-v0 reset: option 'task': {err}") from None
        found = [i for i, ref in enumerate(self.tasks) if ref.task == uri]
        if not found:
            raise OptionError(f"MultiTune-v0 reset: task {show(task)} is not in the task set {self.set_name} "
                              f"({', '.join(ref.task for ref in self.tasks)})")
        return found[0]

    def _obs(self) -> np.ndarray:
        env, session = self.env, self.env.session
        best = session.best
        config = best.config if best is not None else None
        if config != self._shown[0]:  # the best changed: encode it (rarely)
            self._shown = (config, self.codec.encode(np.asarray(config))[0])
        return observation(self.task_observations[self.task_index], self._shown[1], self._last_rows,
                           env.last_gflops, env.last_valid, session.best_gflops, session.trials_used / env.budget)

    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        info["task_index"], info["action_mask"] = self.task_index, self.action_masks().copy()  # info is the caller's
        return info

    def _check_open(self, call: str) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"MultiTune-v0 is closed: {call}() after close(); make a new env")


def task_observation(task: Task, codec: CanonicalCodec) -> np.ndarray:
    """The constant part of a task's observation: its features (log2 counts over 16) and the log2
    extent of each tile slot's loop over 12, clipped to their bounds, float32."""
    return np.concatenate([np.clip(task_features(task) * _TASK_SCALE, 0, 64.0 / _LOG_SCALE),
                           np.clip(codec.slot_extents / _EXTENT_SCALE, 0, 1)]).astype(np.float32)


def observation(task_obs: np.ndarray, best_row: np.ndarray, last_rows: np.ndarray, last_gflops: np.ndarray,
                last_valid: np.ndarray, best_gflops: np.ndarray | float, budget_used: np.ndarray | float,
                out: np.ndarray | None = None) -> np.ndarray:
    """``MultiTune-v0`` observations from their parts (:data:`OBSERVATION_PARTS`), float32.

    ``task_obs`` is the task's :func:`task_observation`; ``best_row`` the best config's
    canonical row and ``last_rows`` the last batch's (scaled here to [0, 1]); ``last_gflops``
    the last batch's GFLOPS (0 where nothing ran) and ``last_valid`` where a config ran, shown
    over ``best_gflops``, the best GFLOPS so far (which is also shown, on
    :data:`GFLOPS_LOG_SCALE`); ``budget_used`` the fraction of the budget spent. Every part may
    have leading dimensions (a vector env's sub-envs: ``task_obs`` ``(n, F)``, ``last_rows``
    ``(n, batch_size, N_SLOTS)``, ``best_gflops`` ``(n,)``, ...); written into ``out`` when
    given. The same function serves the env, its vector env and a trained policy outside them
    (:mod:`agents.rl_policy`), so they agree to the bit."""
    best = np.asarray(best_gflops, dtype=np.float64)
    lead, last_rows = best.shape, np.asarray(last_rows)
    f, b = task_obs.shape[-1], last_rows.shape[-2]
    if out is None:
        out = np.empty((*lead, f + (b + 1) * N_SLOTS + 2 * b + 2), dtype=np.float32)
    rows = f + N_SLOTS  # where the last batch's rows start
    tail = rows + b * N_SLOTS  # where its GFLOPS start
    out[..., :f] = task_obs
    out[..., f:rows] = np.asarray(best_row) / _ROW_SCALE
    out[..., rows:tail] = (last_rows / _ROW_SCALE).reshape(*lead, b * N_SLOTS)
    last_gflops = np.asarray(last_gflops, dtype=np.float64)
    ran = (np.asarray(last_valid) > 0) & (best[..., None] > 0)
    relative = np.divide(last_gflops, best[..., None], out=np.zeros_like(last_gflops), where=ran)
    out[..., tail:tail + b] = np.clip(relative, 0.0, 1.0)
    out[..., tail + b:tail + 2 * b] = last_valid
    out[..., tail + 2 * b] = np.minimum(np.log2(1.0 + np.maximum(best, 0.0)) / GFLOPS_LOG_SCALE, 1.0)
    out[..., tail + 2 * b + 1] = np.minimum(budget_used, 1.0)
    return out


#: Canonical values are divided by these to lie in [0, 1].
_ROW_SCALE = (NVEC - 1).astype(np.float32)


def _task_set(split: str | None, part: str | None, tasks: list[str] | None,
              preset: str) -> tuple[tuple[TaskRef, ...], str]:
    """The task set the options name, and how to name it in messages."""
    if tasks is not None:
        if split is not None or part is not None:
            raise OptionError("MultiTune-v0: give either tasks or split (and part), not both")
        if preset not in PRESETS:
            raise OptionError(f"MultiTune-v0: preset must be one of {', '.join(PRESETS)}, not {show(preset)}")
        if isinstance(tasks, str) or not tasks:
            raise OptionError(f"MultiTune-v0: tasks must be a non-empty list of task ids or URIs, not {show(tasks)}")
        try:
            uris = [Task.parse(t).uri for t in tasks]
        except TuneGymError as err:
            raise OptionError(f"MultiTune-v0: option 'tasks': {err}") from None
        refs = tuple(TaskRef(uri, preset) for uri in dict.fromkeys(uris))
        return refs, "given by tasks="
    split = split if split is not None else DEFAULT_SPLIT
    part = part if part is not None else "all"
    loaded = load_split(split)
    refs = loaded.tasks(part)
    if len({ref.task for ref in refs}) != len(refs):
        raise OptionError(f"MultiTune-v0: split {split} part {part} holds a task twice (from two hosts)")
    return refs, f"{split} part {part}"


def dataset_path(ref: TaskRef) -> str:
    """The catalog's dataset of ``ref`` (its task, preset and host)."""
    entry = find_dataset(ref.task, ref.preset, ref.host)
    if entry is None:
        host = f" measured on host {ref.host}" if ref.host else ""
        raise OptionError(f"MultiTune-v0: no dataset of {ref.task} (preset {ref.preset}){host} in the catalog "
                          "(tune-gym datasets lists them)")
    return str(entry.path)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _check_action(action: Any, batch_size: int) -> np.ndarray:
    """An action as ``(batch_size, N_SLOTS)`` int64 canonical values; ``SpaceError`` names the
    problem (dtype, shape, or the row and slot of a value out of range)."""
    arr = np.asarray(action)
    if arr.dtype.kind not in "iu":
        raise SpaceError(f"action dtype is {arr.dtype}; expected integer canonical values (e.g. np.int64)")
    if arr.shape not in ((batch_size * N_SLOTS,), (batch_size, N_SLOTS)):
        raise SpaceError(f"action shape {arr.shape}; expected ({batch_size * N_SLOTS},) or ({batch_size}, {N_SLOTS}) "
                         "(batch_size x canonical slots)")
    rows = arr.reshape(batch_size, N_SLOTS).astype(np.int64)
    bad = (rows < 0) | (rows >= NVEC)
    if bad.any():
        row, slot = (int(i) for i in np.argwhere(bad)[0])
        raise SpaceError(f"action row {row}: slot {SLOT_NAMES[slot]!r}: value {rows[row, slot]} out of range "
                         f"[0, {NVEC[slot] - 1}]")
    return rows


def env_options() -> tuple[str, ...]:
    """The options of ``MultiTune-v0`` (:class:`MultiTuneEnv`'s constructor arguments)."""
    return tuple(inspect.signature(MultiTuneEnv.__init__).parameters)[1:]


def make_multi_tune_env(**options: Any) -> MultiTuneEnv:
    """``MultiTune-v0``'s entry point: :class:`MultiTuneEnv` after refusing an option it does
    not have (``OptionError`` listing its options)."""
    check_keys("MultiTune-v0", options, env_options())
    return MultiTuneEnv(**options)
