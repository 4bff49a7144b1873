"""``tune_gym/Tune-v0``: propose a batch of configs, get them measured, see the results.

One episode is one tuning run of one task with a budget of unique trials.

Action, by ``action_format``:
    ``"flat"`` (default): a ``MultiDiscrete`` of shape ``(batch_size * n_knobs,)``, the
        row-major flattening of the ``(batch_size, n_knobs)`` table of per-knob choice indices
        (the form stable-baselines3 policies can emit);
    ``"knobs"``: the same table as a 2-D ``MultiDiscrete`` of shape ``(batch_size, n_knobs)``;
    ``"index"``: ``(batch_size,)`` flat config indices in ``[0, space.size)`` (spaces of 2**63
        configs or more cannot use it).
In the two table forms, ``step`` accepts either shape; knobs that a row's sketch does not use
are ignored.

Observation (a ``Dict`` of fixed-shape float32 ``Box``es, usable by SB3's MultiInputPolicy):
    ``task``: task features (:mod:`tune_gym.features.task`), shape ``(17,)``.
    ``schedule``: the best config so far as a TLP-style sequence of schedule primitives
        (:mod:`tune_gym.features.primitives`), shape ``(max_len, vec_len)``; before any
        measurement, sketch 0 with every knob at index 0.
    ``last_configs``: last batch's knob indices scaled to [0, 1], ``(batch_size, n_knobs)``.
    ``last_throughput``: last batch's throughput / reference throughput, ``(batch_size,)``
        (0 for failed configs and for unused rows).
    ``last_valid``: 1 where the config of the last batch ran, ``(batch_size,)``.
    ``progress``: ``[best throughput / reference, fraction of the budget used]``.

Reward: the increase of the best-so-far normalized throughput, so an episode's return is
``best GFLOPS / reference GFLOPS``. The reference (``reward_norm``) defaults to PyTorch on the
same op on this host (:func:`tune_gym.measure.reference.torch_gflops`), so a return of 1.0
means "as fast as the vendor library"; ``reward_norm="none"`` makes rewards raw GFLOPS, and
a number sets the reference explicitly.

Budget: each *new* unique config costs one trial; a config already evaluated in this episode
is served from the cache at no cost. ``truncated`` once ``budget`` trials are spent (configs of
the batch beyond the budget are not measured and are reported as skipped);
``terminated`` once every config of the space has been evaluated.

``info`` carries, per proposed config: the canonical config, its :class:`MeasureResult`
(``None`` if skipped beyond the budget), ``cached`` (already evaluated earlier in this episode,
so free); plus ``new_trials`` and ``measure_secs``, the build + run seconds of this step's new
trials as measured (for a replay backend, the recorded seconds: a simulated clock).

Measurements are also reused across episodes of one env (and from a resumed log): a config
measured in an earlier episode still costs a trial in a new episode, with the same result,
but is not measured again. ``env.unwrapped.measured_count`` and ``wall_secs`` count what
was really sent to the backend.

Records: with ``log=PATH`` every measurement is appended to a JSONL record file
(:mod:`tune_gym.records`), fsynced per batch. With ``resume=True`` the records of the same task
and preset already in that file are loaded first: they count as evaluated (and as budget
used) in the first episode and are never measured again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tune_gym.errors import SpaceError
from tune_gym.features.task import TASK_FEATURE_DIM, task_features
from tune_gym.measure.base import Backend
from tune_gym.measure.cache import MeasureCache
from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["TuneEnv"]


class TuneEnv(gym.Env):
    """Batch-proposal tuning environment for one task (see the module docstring)."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        task: Task | str = "resnet18:1",
        backend: str | Backend = "live",
        batch_size: int = 8,
        budget: int = 64,
        preset: str = "full",
        action_format: str = "flat",
        reward_norm: str | float = "torch",
        log: str | Path | None = None,
        resume: bool = False,
        backend_options: dict[str, Any] | None = None,
        schedule_shape: tuple[int, int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        from tune_gym.features.primitives import default_shape

        self.task = task if isinstance(task, Task) else Task.parse(task)
        if batch_size < 1 or budget < 1:
            raise ValueError(f"batch_size ({batch_size}) and budget ({budget}) must be >= 1")
        if action_format not in ("flat", "knobs", "index"):
            raise ValueError(f"action_format must be 'flat', 'knobs' or 'index', not {action_format!r}")
        self.space = KnobSpace.for_task(self.task, preset)
        self.preset = preset
        self.batch_size = batch_size
        self.budget = budget
        self.action_format = action_format
        self.render_mode = render_mode
        self._owns_backend = isinstance(backend, str)  # close() closes only a backend it made
        if isinstance(backend, str):
            from tune_gym.measure import make_backend

            backend = make_backend(backend, **(backend_options or {}))
        elif backend_options:
            raise ValueError("backend_options apply only when backend is given by name")
        self.backend = backend
        self.reference_gflops = self._reference(reward_norm)
        self.cache = MeasureCache()
        self._log_path = Path(log) if log is not None else None
        self._writer: Any = None
        self._resumed: dict[Config, MeasureResult] = {}
        if self._log_path is not None and resume:
            self._resumed = self._load_log()

        n, k = batch_size, self.space.n_knobs
        if action_format == "knobs":
            self.action_space = spaces.MultiDiscrete(np.tile(self.space.dims, (n, 1)))
        elif action_format == "flat":
            self.action_space = spaces.MultiDiscrete(np.tile(self.space.dims, n))
        else:
            if self.space.size >= 2**63:
                raise ValueError(f"space of {self.space.size} configs is too large for action_format='index'")
            self.action_space = spaces.MultiDiscrete(np.full(n, self.space.size, dtype=np.int64))
        # TLP's default GPU length (20) would crop full CUDA traces (24-31 primitives).
        default = (32, 40) if self.task.target.is_gpu else default_shape(self.task.target.kind)
        self._sched_shape = tuple(schedule_shape or default)
        unit = lambda shape: spaces.Box(0.0, 1.0, shape=shape, dtype=np.float32)
        free = lambda shape, low=-np.inf: spaces.Box(low, np.inf, shape=shape, dtype=np.float32)
        self.observation_space = spaces.Dict({
            "task": free((TASK_FEATURE_DIM,)),
            "schedule": free(self._sched_shape),
            "last_configs": unit((n, k)),
            "last_throughput": free((n,), 0.0),
            "last_valid": unit((n,)),
            "progress": free((2,), 0.0),
        })
        self._task_features = task_features(self.task)
        self._first_episode = True
        self.wall_secs = 0.0  # wall seconds spent in backend.measure over the env's life
        self.measured_count = 0  # configs sent to the backend over the env's life
        self._reset_state()

    # ------------------------------------------------------------------ helpers
    def _reference(self, reward_norm: str | float) -> float:
        if isinstance(reward_norm, (int, float)) and not isinstance(reward_norm, bool):
            if reward_norm <= 0:
                raise ValueError(f"reward_norm must be > 0, got {reward_norm}")
            return float(reward_norm)
        if reward_norm == "none":
            return 1.0
        if reward_norm == "torch":
            from tune_gym.measure.reference import torch_gflops

            return torch_gflops(self.task)
        raise ValueError(f"reward_norm must be 'torch', 'none' or a positive number, not {reward_norm!r}")

    def _load_log(self) -> dict[Config, MeasureResult]:
        from tune_gym.records import load_records

        out = {}
        assert self._log_path is not None
        for rec in load_records(self._log_path, task=self.task.uri):
            if rec.preset == self.preset:
                out[self.space.check(rec.config)] = rec.result
        return out

    def _reset_state(self) -> None:
        self._seen: dict[Config, MeasureResult] = {}
        self._best_gflops = 0.0
        self._best_config: Config | None = None
        self._last_configs = np.zeros((self.batch_size, self.space.n_knobs), dtype=np.float32)
        self._last_tp = np.zeros(self.batch_size, dtype=np.float32)
        self._last_valid = np.zeros(self.batch_size, dtype=np.float32)

    def _absorb(self, config: Config, result: MeasureResult) -> None:
        self._seen[config] = result
        if result.gflops > self._best_gflops:
            self._best_gflops, self._best_config = result.gflops, config

    @property
    def trials_used(self) -> int:
        return len(self._seen)

    @property
    def evaluated(self) -> dict[Config, MeasureResult]:
        """``{config: result}`` of every trial of the current episode (a copy)."""
        return dict(self._seen)

    @property
    def best(self) -> tuple[Config | None, float]:
        """``(best config, its GFLOPS)`` of the current episode."""
        return self._best_config, self._best_gflops

    def _obs(self) -> dict[str, np.ndarray]:
        from tune_gym.features.primitives import encode_trace

        cfg = self._best_config if self._best_config is not None else self.space.canonical([0] * self.space.n_knobs)
        return {
            "task": self._task_features.copy(),
            "schedule": encode_trace(self.space.trace(cfg), *self._sched_shape),
            "last_configs": self._last_configs.copy(),
            "last_throughput": self._last_tp.copy(),
            "last_valid": self._last_valid.copy(),
            "progress": np.array([self._best_gflops / self.reference_gflops, self.trials_used / self.budget],
                                 dtype=np.float32),
        }

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {"trials_used": self.trials_used, "budget": self.budget, "best_gflops": self._best_gflops,
                "best_config": self._best_config, "reference_gflops": self.reference_gflops, **extra}

    def decode_action(self, action: Any) -> list[Config]:
        """Validate an action and return its configs (canonical); ValueError names the problem."""
        arr = np.asarray(action)
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)):
                bad = np.argwhere(~np.isfinite(arr))[0]
                flat = int(np.ravel_multi_index(tuple(bad), arr.shape))
                row, col = divmod(flat, self.space.n_knobs)
                where = f"row {row}" if self.action_format == "index" else f"row {row}, knob {self.space.names[col]!r}"
                raise SpaceError(f"action contains a non-finite value at {where}")
            raise SpaceError(f"action dtype is {arr.dtype}; expected integer indices (e.g. np.int64)")
        if arr.dtype.kind not in "iu":
            raise SpaceError(f"action dtype is {arr.dtype}; expected integer indices (e.g. np.int64)")
        if self.action_format == "index":
            if arr.shape != (self.batch_size,):
                raise SpaceError(f"action shape {arr.shape}; expected ({self.batch_size},) flat indices")
            bad = np.flatnonzero((arr < 0) | (arr >= self.space.size))
            if bad.size:
                raise SpaceError(
                    f"action row {bad[0]}: flat index {arr[bad[0]]} out of range [0, {self.space.size - 1}]")
            return [self.space.config(int(i)) for i in arr]
        expected = (self.batch_size, self.space.n_knobs)
        if arr.shape == (self.batch_size * self.space.n_knobs,):
            arr = arr.reshape(expected)
        if arr.shape != expected:
            raise SpaceError(
                f"action shape {arr.shape}; expected {expected} or ({expected[0] * expected[1]},) "
                f"(batch_size x knobs: {', '.join(self.space.names)})")
        out = []
        for row, values in enumerate(arr):
            try:
                out.append(self.space.check(values))
            except SpaceError as err:
                raise SpaceError(f"action row {row}: {err}") from None
        return out

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        self._reset_state()
        if self._first_episode:
            for cfg, res in self._resumed.items():
                self.cache.put(self.task.uri, self.preset, cfg, res)
                self._absorb(cfg, res)
            self._first_episode = False
        return self._obs(), self._info(resumed=len(self._seen))

    def step(self, action: Any):  # type: ignore[override]
        configs = self.decode_action(action)
        before = self._best_gflops
        uri, preset = self.task.uri, self.preset
        # New trials: configs not yet evaluated in this episode, within the budget.
        new: list[Config] = []
        skipped: set[Config] = set()
        for cfg in configs:
            if cfg in self._seen or cfg in new:
                continue
            if self.trials_used + len(new) >= self.budget:
                skipped.add(cfg)
                continue
            new.append(cfg)
        repeats = {cfg for cfg in configs if cfg in self._seen}
        # Only what no earlier episode (or resumed log) has measured goes to the backend.
        to_measure = [cfg for cfg in new if self.cache.get(uri, preset, cfg) is None]
        start = time.perf_counter()
        measured = self.backend.measure(self.task, self.space, to_measure) if to_measure else []
        self.wall_secs += time.perf_counter() - start
        self.measured_count += len(to_measure)
        if len(measured) != len(to_measure):
            raise RuntimeError(
                f"backend {self.backend.name} returned {len(measured)} results for {len(to_measure)} configs")
        for cfg, fresh in zip(to_measure, measured):
            self.cache.put(uri, preset, cfg, fresh)
        if measured and self._log_path is not None:
            self._write(to_measure, measured)
        for cfg in new:
            self._absorb(cfg, self.cache.get(uri, preset, cfg))  # type: ignore[arg-type]

        per_config = []
        for row, cfg in enumerate(configs):
            res: MeasureResult | None = None if cfg in skipped else self._seen[cfg]
            per_config.append({"config": cfg, "result": res, "cached": cfg in repeats, "skipped": cfg in skipped})
            self._last_tp[row] = (res.gflops if res is not None else 0.0) / self.reference_gflops
            self._last_valid[row] = float(res is not None and res.ok)
        self._last_configs = self.space.normalized(configs)
        reward = (self._best_gflops - before) / self.reference_gflops
        terminated = self.trials_used >= self.space.size
        truncated = not terminated and self.trials_used >= self.budget
        cost = sum(self._seen[c].build_secs + self._seen[c].run_secs for c in new)
        info = self._info(results=per_config, new_trials=len(new), measure_secs=cost)
        return self._obs(), float(reward), terminated, truncated, info

    def _write(self, configs: list[Config], results: list[MeasureResult]) -> None:
        from tune_gym.records import Record, RecordWriter

        if self._writer is None:
            assert self._log_path is not None
            self._writer = RecordWriter(self._log_path)
        self._writer.append([Record.create(self.space, cfg, res, self.backend.name)
                             for cfg, res in zip(configs, results)])

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        cfg, gflops = self.best
        return (f"{self.task.uri} trials {self.trials_used}/{self.budget} best {gflops:.2f} GFLOPS "
                f"({gflops / self.reference_gflops:.2f}x reference) {self.space.to_dict(cfg) if cfg else ''}")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._owns_backend:
            self.backend.close()
        super().close()
