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
    The best config so far (before any measurement, sketch 0 with every knob at index 0),
    encoded by ``observation`` (default: the task's kind's, :func:`tune_gym.kinds.default_observation`:
    ``"sequence"`` on ``llvm`` and ``cuda``, ``"knobs"`` on a kind whose configs have no schedules):
        ``"sequence"``: ``schedule``, the config as a TLP-style sequence of schedule
            primitives (:mod:`tune_gym.features.primitives`), shape ``(max_len, vec_len)``
            (``schedule_shape``; default 25 x 22 on CPUs, 32 x 40 on GPUs);
        ``"graph"``: MetaTune's loop graph of its kernel on the op family's super-graph
            template (:mod:`tune_gym.features.graph`; ``graph_template``, default
            :func:`~tune_gym.features.graph.template_for` of the task, built on first use and
            cached per process): ``graph_nodes`` ``(n_slots, feat_dim)``, ``graph_adjacency``
            ``(n_slots, n_slots)`` (``[src, dst]``) and ``graph_mask`` ``(n_slots,)``; all zeros
            for a config that does not schedule;
        ``"knobs"``: ``best_knobs``, its knob indices scaled to [0, 1], ``(n_knobs,)``.
    ``last_configs``: last batch's knob indices scaled to [0, 1], ``(batch_size, n_knobs)``.
    ``last_throughput``: last batch's throughput / reference throughput, ``(batch_size,)``
        (0 for failed configs and for unused rows).
    ``last_valid``: 1 where the config of the last batch ran, ``(batch_size,)``.
    ``progress``: ``[best throughput / reference, fraction of the budget used]``.

Reward: the increase of the best-so-far normalized throughput, so an episode's return is
``best GFLOPS / reference GFLOPS``. The reference (``reward_norm``) defaults to PyTorch on the
same op on this host, measured in a separate quiet process as the median of several timings
(:func:`tune_gym.measure.reference.measure_reference`); a reference recorded with the data is
reused instead (the resumed log's, when it was measured on this host, or the replay
dataset's), so replayed and resumed runs get the same rewards. A return of 1.0 means "as fast
as the vendor library"; ``reward_norm="none"`` makes rewards raw GFLOPS, and a number sets the
reference explicitly. ``env.unwrapped.reference`` holds the :class:`Reference` used (``None``
for a number or "none"). A recorded reference the reference audit marks as suspect
(:mod:`tune_gym.datasets.reference_audit`: a value timed on a busy host, far below what the op
runs at) is refused with an error saying why, unless ``allow_suspect_reference=True`` asks for
it (then a warning says so, and ``info["reference_suspect"]`` holds the reason on every step).

Budget: each *new* unique config costs one trial; a config already evaluated in this episode
is served again at no cost. ``truncated`` once ``budget`` trials are spent (configs of the
batch beyond the budget are not measured and are reported as skipped); ``terminated`` once
every config of the space has been evaluated.

``info`` carries ``outcomes``: one :class:`tune_gym.session.Outcome` per proposed row (its
canonical ``config``, ``status`` "new" / "repeat" / "excluded" / "skipped" and its typed
``trial``, whose ``result`` is the :class:`MeasureResult`; an excluded config, one the space
rules out without building it, is no trial and its ``result`` is an ``invalid`` failure;
``None`` when skipped); ``new_trials``: the
:class:`tune_gym.session.Trial` objects this step added; ``measure_secs``: their recorded build
+ run seconds (on a replay backend, the recorded seconds: a simulated clock); ``clock``: the
episode's simulated seconds so far; and ``trials_used``, ``budget``, ``best_gflops``,
``best_secs`` (the best config's mean seconds per call, ``inf`` before one ran),
``best_config``, ``reference_gflops``, ``reference_suspect`` (the audit's reason, ``""`` when
the reference is not marked), ``flops_nominal``. ``flops_nominal`` is True for a task
without a FLOP count to trust (:attr:`Task.flops_nominal`, e.g. a Kernel Tuner space): its
"GFLOPS" (``best_gflops``, ``reference_gflops``, throughputs in the observation) are a nominal
count divided by the time per call, so rewards still rank configs by time, but they are no
throughput; ``best_secs`` is then the number to read.

All measured state lives in one :class:`tune_gym.session.TuningSession`
(``env.unwrapped.session``): dedupe, budget, cache, records and clock. Measurements are
reused across episodes of one env (and from a resumed log): a config measured in an earlier
episode still costs a trial in a new episode, with the same result, but is not measured
again; ``env.unwrapped.measured_count`` and ``wall_secs`` count what was really sent to the
backend.

Options are checked in the constructor (``batch_size`` and ``budget``: integers >= 1, not
bools or floats; ``backend``: a backend id or object): a bad one is a ``ValueError`` naming it
(:class:`tune_gym.options.OptionError`). ``close()`` is final: ``step()`` or ``reset()`` after it
raise gymnasium's ``ClosedEnvironmentError`` and measure and record nothing.

Records: with ``log=PATH`` every measurement is appended to a JSONL record file
(:mod:`tune_gym.records`) with the reference it was normalized by, fsynced per batch. With
``resume=True`` the records of the same task and preset already in that file are loaded
first: they count as evaluated (and as budget used) in the first episode and are never
measured again.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError

from tune_gym import kinds
from tune_gym.errors import SpaceError
from tune_gym.features.task import TASK_FEATURE_DIM, task_features
from tune_gym.measure import resolve_backend
from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.options import check_bool, check_int
from tune_gym.session import Trial, TuningSession
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

if TYPE_CHECKING:
    from tune_gym.features.graph import GraphTemplate

__all__ = ["OBSERVATIONS", "TuneEnv"]

#: Accepted values of ``observation`` (see the module docstring).
OBSERVATIONS = ("sequence", "graph", "knobs")
#: Bytes of encoded best-config observations kept per env (see :meth:`TuneEnv._encoding`).
_ENCODING_CACHE_BYTES = 2 * 2**20


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
        observation: str | None = None,
        graph_template: GraphTemplate | dict[str, Any] | None = None,
        allow_suspect_reference: bool = False,
    ) -> None:
        from tune_gym.features.primitives import default_shape

        self.task = task if isinstance(task, Task) else Task.parse(task)
        if observation is None:
            observation = kinds.default_observation(self.task)
        batch_size = check_int("batch_size", batch_size, 1)
        budget = check_int("budget", budget, 1)
        resume = check_bool("resume", resume)
        self.allow_suspect_reference = check_bool("allow_suspect_reference", allow_suspect_reference)
        if action_format not in ("flat", "knobs", "index"):
            raise ValueError(f"action_format must be 'flat', 'knobs' or 'index', not {action_format!r}")
        if not isinstance(observation, str) or observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {', '.join(map(repr, OBSERVATIONS))}, not {observation!r}")
        if schedule_shape is not None and observation != "sequence":
            raise ValueError(f"schedule_shape applies to observation='sequence' only, not {observation!r}")
        if graph_template is not None and observation != "graph":
            raise ValueError(f"graph_template applies to observation='graph' only, not {observation!r}")
        _check_reward_norm(reward_norm)
        self.space = KnobSpace.for_task(self.task, preset)
        if observation != "knobs" and not self.space.has_schedules:
            raise ValueError(f"{self.task.uri}: configs of this space have no TVM schedule to encode (a simulated "
                             f"target); use observation='knobs', not {observation!r}")
        self.graph_template = template = self._graph_template(graph_template) if observation == "graph" else None
        self.preset = preset
        self.batch_size = batch_size
        self.budget = budget
        self.action_format = action_format
        self.observation = observation
        self.render_mode = render_mode
        self.backend, self._owns_backend = resolve_backend(backend, backend_options)
        self.session = TuningSession(self.task, self.space, self.backend, budget=budget, log=log, resume=resume)
        try:
            self.reference = self._reference(reward_norm)
        except BaseException:  # e.g. a host too busy to time PyTorch: release the record file and backend
            self.session.close()
            if self._owns_backend:
                self.backend.close()
            raise
        self.session.reference = self.reference
        self.reference_gflops = self.reference.gflops if self.reference is not None else (
            1.0 if reward_norm == "none" else float(reward_norm))

        n, k = batch_size, self.space.n_knobs
        if action_format == "knobs":
            self.action_space = spaces.MultiDiscrete(np.tile(self.space.dims, (n, 1)))
        elif action_format == "flat":
            self.action_space = spaces.MultiDiscrete(np.tile(self.space.dims, n))
        else:
            if self.space.size >= 2**63:
                raise ValueError(f"space of {self.space.size} configs is too large for action_format='index'")
            self.action_space = spaces.MultiDiscrete(np.full(n, self.space.size, dtype=np.int64))
        # TLP's default GPU length (20) would crop full CUDA traces (24-31 primitives). Only the
        # sequence observation has a shape (a simulated target has no trace to encode).
        default = (32, 40) if self.task.target.is_gpu else (
            default_shape(self.task.target.kind) if observation == "sequence" else (0, 0))
        self._sched_shape = tuple(schedule_shape or default)
        unit = lambda shape: spaces.Box(0.0, 1.0, shape=shape, dtype=np.float32)
        free = lambda shape, low=-np.inf: spaces.Box(low, np.inf, shape=shape, dtype=np.float32)
        if template is not None:
            slots, width = template.n_slots, template.feat_dim
            best = {"graph_nodes": free((slots, width)), "graph_adjacency": unit((slots, slots)),
                    "graph_mask": unit((slots,))}
        elif observation == "knobs":
            best = {"best_knobs": unit((k,))}
        else:
            best = {"schedule": free(self._sched_shape)}
        self.observation_space = spaces.Dict({
            "task": free((TASK_FEATURE_DIM,)),
            **best,
            "last_configs": unit((n, k)),
            "last_throughput": free((n,), 0.0),
            "last_valid": unit((n,)),
            "progress": free((2,), 0.0),
        })
        self._task_features = task_features(self.task)
        self._default_config = self.space.canonical([0] * k)  # shown before any measurement
        entry_bytes = sum(4 * math.prod(box.shape) for box in best.values())
        self._encoding_limit = max(8, _ENCODING_CACHE_BYTES // max(1, entry_bytes))
        self._encodings: dict[Config, dict[str, np.ndarray]] = {}  # config -> best-config keys, see _encoding
        self._session_fresh = True  # the session's first run (with resumed records) not yet used
        self.closed = False  # set by close(): no step or reset after it
        self._clear_last()

    # ------------------------------------------------------------------ helpers
    def _reference(self, reward_norm: str | float) -> Reference | None:
        """The reference of ``reward_norm="torch"``: recorded with the data if possible."""
        if reward_norm != "torch":
            return None
        from tune_gym.records import host_id, recorded_reference

        recorded = recorded_reference(self.session.resumed, self.task, host=host_id())
        if recorded is None and hasattr(self.backend, "reference"):
            import inspect

            ref = self.backend.reference  # the data's reference for this preset, if the backend tells presets apart
            by_preset = len(inspect.signature(ref).parameters) > 1
            recorded = ref(self.task, self.space.preset) if by_preset else ref(self.task)
        if recorded is not None:
            return self._checked_suspect(recorded)
        from tune_gym.measure.reference import measure_reference

        return measure_reference(self.task)

    def _checked_suspect(self, ref: Reference) -> Reference:
        """``ref``, unless the reference audit marks it suspect and the env was not asked to use
        such a reference (``allow_suspect_reference``): then a ValueError saying why."""
        if not ref.suspect:
            return ref
        what = (f"{self.task.uri}: the recorded PyTorch reference ({ref.gflops:.2f} GFLOPS, host {ref.host}) is "
                f"marked suspect by the reference audit: {ref.suspect}")
        if not self.allow_suspect_reference:
            raise ValueError(f"{what}. Rewards normalized by it would be off: pass reward_norm=<GFLOPS> or 'none', or "
                             "allow_suspect_reference=True to use it anyway (tune-gym tune --allow-suspect-reference)")
        warnings.warn(f"{what}; normalizing rewards by it as asked (allow_suspect_reference=True)", stacklevel=3)
        return ref

    def _graph_template(self, given: GraphTemplate | dict[str, Any] | None) -> GraphTemplate:
        """The template of ``observation="graph"``: ``given`` (checked) or the task family's."""
        from tune_gym.features.graph import GraphTemplate, template_for

        if given is None:
            return template_for(self.task)
        template = given if isinstance(given, GraphTemplate) else GraphTemplate.from_dict(given)
        if (template.family, template.target) != (self.task.op, self.task.target.kind):
            raise ValueError(f"graph_template is for {template.family} on {template.target}, but the task "
                             f"{self.task.uri} is {self.task.op} on {self.task.target.kind}")
        return template

    def _clear_last(self) -> None:
        self._last_configs = np.zeros((self.batch_size, self.space.n_knobs), dtype=np.float32)
        self._last_tp = np.zeros(self.batch_size, dtype=np.float32)
        self._last_valid = np.zeros(self.batch_size, dtype=np.float32)

    @property
    def trials_used(self) -> int:
        return self.session.trials_used

    @property
    def trials(self) -> list[Trial]:
        """The typed trials of the current episode, in order (a copy)."""
        return list(self.session.trials)

    @property
    def best(self) -> tuple[Config | None, float]:
        """``(best config, its GFLOPS)`` of the current episode."""
        best = self.session.best
        return (best.config if best is not None else None), self.session.best_gflops

    @property
    def measured_count(self) -> int:
        """Configs sent to the backend over the env's life."""
        return self.session.measured_count

    @property
    def wall_secs(self) -> float:
        """Wall seconds spent in the backend over the env's life."""
        return self.session.wall_secs

    def _encoding(self, config: Config) -> dict[str, np.ndarray]:
        """The best-config keys of the observation for ``config`` (read-only arrays: copy them).

        Encoding walks the config's TVM trace (``sequence``, about a millisecond) or schedules
        and walks its kernel (``graph``, 2-30 ms): more than ten times the rest of a replayed
        step. The observation shows the best config, which rarely changes, so encodings are
        cached (about 2 MB per env; the oldest config is dropped first).
        """
        encoded = self._encodings.get(config)
        if encoded is None:
            if len(self._encodings) >= self._encoding_limit:
                del self._encodings[next(iter(self._encodings))]
            encoded = self._encode(config)
            for array in encoded.values():
                array.setflags(write=False)
            self._encodings[config] = encoded
        return encoded

    def _encode(self, config: Config) -> dict[str, np.ndarray]:
        if self.graph_template is not None:
            from tune_gym.features.graph import encode_graphs

            graph = encode_graphs(self.graph_template, self.space, [config])
            return {"graph_nodes": graph["nodes"][0], "graph_adjacency": graph["adjacency"][0],
                    "graph_mask": graph["mask"][0]}
        if self.observation == "knobs":
            return {"best_knobs": self.space.normalized([config])[0]}
        from tune_gym.features.primitives import encode_trace

        return {"schedule": encode_trace(self.space.trace(config, check=False), *self._sched_shape)}

    def _obs(self) -> dict[str, np.ndarray]:
        best_cfg, best_gflops = self.best
        return {
            "task": self._task_features.copy(),
            **{key: value.copy() for key, value in
               self._encoding(best_cfg if best_cfg is not None else self._default_config).items()},
            "last_configs": self._last_configs.copy(),
            "last_throughput": self._last_tp.copy(),
            "last_valid": self._last_valid.copy(),
            "progress": np.array([best_gflops / self.reference_gflops, self.trials_used / self.budget],
                                 dtype=np.float32),
        }

    def _info(self, **extra: Any) -> dict[str, Any]:
        best_cfg, best_gflops = self.best
        best = self.session.best
        return {"trials_used": self.trials_used, "budget": self.budget, "best_gflops": best_gflops,
                "best_secs": best.result.mean if best is not None else math.inf, "best_config": best_cfg,
                "reference_gflops": self.reference_gflops,
                "reference_suspect": self.reference.suspect if self.reference is not None else "",
                "flops_nominal": self.task.flops_nominal,
                "clock": self.session.clock, **extra}

    def decode_action(self, action: Any) -> list[Config]:
        """Validate an action and return its configs (canonical); ValueError names the problem."""
        return _configs(self._decode(action))

    def _decode(self, action: Any) -> np.ndarray:
        """:meth:`decode_action`'s configs as a canonical ``(batch_size, n_knobs)`` int64 table."""
        if isinstance(action, (list, tuple)) and _holds_bool(action):
            raise SpaceError("action holds a bool; expected integer indices (e.g. np.int64)")
        try:
            arr = np.asarray(action)
        except ValueError as err:  # a ragged nested list
            raise SpaceError(f"action is not a rectangular array of integer indices ({err})") from None
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)):
                bad = np.argwhere(~np.isfinite(arr))[0]
                flat = int(np.ravel_multi_index(tuple(bad), arr.shape)) if arr.ndim else 0
                if self.action_format == "index":
                    where = f"row {flat}"
                else:
                    row, col = divmod(flat, self.space.n_knobs)
                    where = f"row {row}, knob {self.space.names[col]!r}"
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
            return np.array([self.space.config(int(i)) for i in arr], dtype=np.int64)
        expected = (self.batch_size, self.space.n_knobs)
        if arr.shape == (self.batch_size * self.space.n_knobs,):
            arr = arr.reshape(expected)
        if arr.shape != expected:
            raise SpaceError(
                f"action shape {arr.shape}; expected {expected} or ({expected[0] * expected[1]},) "
                f"(batch_size x knobs: {', '.join(self.space.names)})")
        try:
            return self.space.check_table(arr)  # "row r: knob 'name': index v out of range [0, d]"
        except SpaceError as err:
            raise SpaceError(f"action {err}") from None

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[override]
        """Start an episode (a tuning run). The first one starts with the resumed records as
        its trials (``info["resumed"]``); later ones start empty and reuse measurements."""
        self._check_open("reset")
        super().reset(seed=seed)
        self._clear_last()
        trials = self.session.trials if self._session_fresh else self.session.new_run()
        self._session_fresh = False
        return self._obs(), self._info(resumed=len(trials), new_trials=tuple(trials))

    def step(self, action: Any):  # type: ignore[override]
        self._check_open("step")
        table = self._decode(action)
        configs = _configs(table)
        before = self.session.best_gflops
        self._session_fresh = False
        ev = self.session.evaluate(configs)
        trials = [outcome.trial for outcome in ev.outcomes]  # None where excluded or skipped
        self._last_tp[:] = [(t.gflops if t is not None else 0.0) / self.reference_gflops for t in trials]
        self._last_valid[:] = [t is not None and t.ok for t in trials]
        self._last_configs = self.space.normalized(table)
        reward = (self.session.best_gflops - before) / self.reference_gflops
        terminated = self.session.space_done
        truncated = not terminated and self.session.exhausted
        info = self._info(outcomes=ev.outcomes, new_trials=ev.new, measure_secs=ev.cost)
        return self._obs(), float(reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        cfg, gflops = self.best
        best = self.session.best
        score = f"{best.result.mean * 1e3:.4g} ms per call" if self.task.flops_nominal and best is not None \
            else f"{gflops:.2f} GFLOPS"
        return (f"{self.task.uri} trials {self.trials_used}/{self.budget} best {score} "
                f"({gflops / self.reference_gflops:.2f}x reference) {self.space.to_dict(cfg) if cfg else ''}")

    def close(self) -> None:
        """End the env for good: close the record file and a backend made by the env. A closed
        env measures and records nothing more (``step`` and ``reset`` raise); closing it again
        does nothing."""
        if self.closed:
            return
        self.closed = True
        self.session.close()
        if self._owns_backend:
            self.backend.close()
        super().close()

    def _check_open(self, call: str) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Tune-v0 for {self.task.uri} is closed: {call}() after close() measures "
                                         f"and records nothing; make a new env")


def _check_reward_norm(reward_norm: Any) -> None:
    if isinstance(reward_norm, (int, float)) and not isinstance(reward_norm, bool):
        if not reward_norm > 0 or not np.isfinite(reward_norm):
            raise ValueError(f"reward_norm must be a finite number > 0, got {reward_norm}")
    elif reward_norm not in ("torch", "none"):
        raise ValueError(f"reward_norm must be 'torch', 'none' or a positive number, not {reward_norm!r}")


def _configs(table: np.ndarray) -> list[Config]:
    """The rows of a config table as configs (tuples of Python ints)."""
    return [tuple(row) for row in table.tolist()]


def _holds_bool(items: Any) -> bool:
    """True when a (nested) list or tuple holds a bool (NumPy would silently make it 0/1)."""
    return any(isinstance(v, (bool, np.bool_)) or (isinstance(v, (list, tuple)) and _holds_bool(v)) for v in items)
