"""``tune_gym/Tune-v0``: propose a batch of configs, get them measured, see the results.

One episode is one tuning run of one task with a budget of unique trials. On replay,
``gymnasium.make_vec("tune_gym/Tune-v0", num_envs=N, ...)`` gives N of them stepped as arrays
(:mod:`tune_gym.envs.tune_vector`).

Action, by ``action_format``:
    ``"flat"`` (default): a ``MultiDiscrete`` of shape ``(batch_size * n_knobs,)``, the
        row-major flattening of the ``(batch_size, n_knobs)`` table of per-knob choice indices
        (the form stable-baselines3 policies can emit);
    ``"knobs"``: the same table as a 2-D ``MultiDiscrete`` of shape ``(batch_size, n_knobs)``;
    ``"index"``: ``(batch_size,)`` flat config indices in ``[0, space.size)`` (spaces of 2**63
        configs or more cannot use it).
In the two table forms, ``step`` accepts either shape; knobs that a row's sketch does not use
are ignored.

Observation (a ``Dict`` of fixed-shape float32 ``Box``es, usable by SB3's MultiInputPolicy;
every ``Box`` has finite bounds, and values beyond them are clipped to them):
    ``task``: task features (:mod:`tune_gym.features.task`), shape ``(17,)``, in [0, 64].
    The best config so far (before any measurement, sketch 0 with every knob at index 0),
    encoded by ``observation`` (default: the task's kind's, :func:`tune_gym.kinds.default_observation`:
    ``"sequence"`` on ``llvm`` and ``cuda``, ``"knobs"`` on a kind whose configs have no schedules
    and on a space replayed without TVM, ``backend_options={"spaces": "recorded"}``):
        ``"sequence"``: ``schedule``, the config as a TLP-style sequence of schedule
            primitives (:mod:`tune_gym.features.primitives`), shape ``(max_len, vec_len)``
            (``schedule_shape``; default 25 x 22 on CPUs, 32 x 40 on GPUs), each value through
            AutoTVM's ``take_log`` (:func:`tune_gym.features.loops.take_logs`: split factors and
            tokens become log2 magnitudes), in [-64, 64];
        ``"graph"``: MetaTune's loop graph of its kernel on the op family's super-graph
            template (:mod:`tune_gym.features.graph`; ``graph_template``, default
            :func:`~tune_gym.features.graph.template_for` of the task, built on first use and
            cached per process): ``graph_nodes`` ``(n_slots, feat_dim)``, ``graph_adjacency``
            ``(n_slots, n_slots)`` (``[src, dst]``) and ``graph_mask`` ``(n_slots,)``; all zeros
            for a config that does not schedule; node features in [-64, 64];
        ``"knobs"``: ``best_knobs``, its knob indices scaled to [0, 1], ``(n_knobs,)``.
    ``last_configs``: last batch's knob indices scaled to [0, 1], ``(batch_size, n_knobs)``.
    ``last_throughput``: last batch's throughput / reference throughput, ``(batch_size,)``
        (0 for failed configs and for unused rows), in [0, :attr:`TuneEnv.throughput_high`]:
        the most a device of the target kind can do (:func:`~tune_gym.measure.result.max_gflops`)
        over the reference.
    ``last_valid``: 1 where the config of the last batch ran, ``(batch_size,)``.
    ``progress``: ``[best throughput / reference, fraction of the budget used]``, the first in
        ``[0, throughput_high]``, the second in [0, 1].

Reward: the increase of the best-so-far normalized throughput, so an episode's return is
``best GFLOPS / reference GFLOPS``. The reference (``reward_norm``) defaults to PyTorch on the
same op on this host, measured in a separate quiet process as the median of several timings
(:func:`tune_gym.measure.reference.measure_reference`); a reference recorded with the data is
reused instead (the resumed log's, when it was measured on this host, or the replay
dataset's), so replayed and resumed runs get the same rewards. A return of 1.0 means "as fast
as the vendor library"; ``reward_norm="optimum"`` divides by the task's best known GFLOPS
instead, the best config of an exhaustive dataset (replay only: the data must hold every
config of the space, :meth:`ReplayBackend.covers <tune_gym.measure.replay.ReplayBackend.covers>`),
so a return of 1.0 means "found the optimum" on every task alike; ``reward_norm="none"`` makes
rewards raw GFLOPS, and a number sets the reference explicitly. ``env.unwrapped.reference``
holds the :class:`Reference` used (``None`` for "optimum", a number or "none"). A recorded
reference the reference audit marks as suspect (:mod:`tune_gym.datasets.reference_audit`: a
value timed on a busy host, far below what the op runs at) is refused with an error saying why,
unless ``allow_suspect_reference=True`` asks for it (then a warning says so, and
``info["reference_suspect"]`` holds the reason on every step; ``reward_norm="optimum"`` needs
no reference at all).

Episode rules (what an RL loop can rely on):
    * Budget: each *new* unique config costs one trial; a config already evaluated in this
      episode is served again at no cost (configs of the batch beyond the budget are not
      measured and are reported as skipped).
    * Every episode ends. ``terminated`` once every config of the space has been evaluated;
      ``truncated`` once ``budget`` trials are spent (the env's own rule) or after
      :data:`MAX_EPISODE_STEPS` steps (1024), the step limit registered with ``Tune-v0``
      (``max_episode_steps``: gymnasium's ``TimeLimit``, which also sets ``truncated``;
      ``gymnasium.make(..., max_episode_steps=N)`` sets another, ``-1`` none), whichever
      comes first. A budget can be spent within the limit only when ``budget <= batch_size x
      max_episode_steps``; raise the limit for larger budgets.
    * A step whose rows were all evaluated before in the episode (or are excluded by the
      space) spends no trial and measures nothing, but it is a step: it counts toward the
      step limit, and its reward is 0 (the best did not change). There is no other penalty,
      so an episode's return stays ``best / reference``; the cost of a wasted step is the
      step itself. ``info["status"]`` (lean) or ``info["outcomes"]`` (full) tell each row's fate.
    * ``reset(seed=...)`` draws nothing: the env is deterministic (the same actions give the
      same observations and rewards). ``reset(options=...)`` takes no options.

``info`` (``info="full"``, the default) carries ``outcomes``: one
:class:`tune_gym.session.Outcome` per proposed row (its canonical ``config``, ``status`` "new" /
"repeat" / "excluded" / "skipped" and its typed ``trial``, whose ``result`` is the
:class:`MeasureResult`; an excluded config, one the space rules out without building it, is no
trial and its ``result`` is an ``invalid`` failure; ``None`` when skipped); ``new_trials``: the
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

``info="lean"`` gives the same keys after ``reset`` and every ``step``, each a number or a
NumPy array, nothing to deep-copy (vector envs and SB3's ``DummyVecEnv`` copy ``info`` every
step): ``trials_used``, ``new_trials`` (how many trials the step added; at reset, the resumed
records), ``best_gflops``, ``reference_gflops``, ``clock``, ``measure_secs`` and ``status``, an
int8 array ``(batch_size,)`` of each row's outcome as an index into
:data:`tune_gym.session.STATUSES` (0 new, 1 repeat, 2 excluded, 3 skipped; -1 after reset).

All measured state lives in one :class:`tune_gym.session.TuningSession`
(``env.unwrapped.session``): dedupe, budget, cache, records and clock. Measurements are
reused across episodes of one env (and from a resumed log): a config measured in an earlier
episode still costs a trial in a new episode, with the same result, but is not measured
again; ``env.unwrapped.measured_count`` and ``wall_secs`` count what was really sent to the
backend.

Options are checked in the constructor (``batch_size`` and ``budget``: integers >= 1, not
bools or floats; ``backend``: a backend id or object): a bad one is a ``ValueError`` naming it
(:class:`tune_gym.options.OptionError`); so is an option ``gymnasium.make`` passes that the
env does not have (:func:`make_tune_env` lists them). ``close()`` is final: ``step()`` or ``reset()`` after it
raise gymnasium's ``ClosedEnvironmentError`` and measure and record nothing.

Records: with ``log=PATH`` every measurement is appended to a JSONL record file
(:mod:`tune_gym.records`) with the reference it was normalized by, fsynced per batch. With
``resume=True`` the records of the same task and preset already in that file are loaded
first: they count as evaluated (and as budget used) in the first episode and are never
measured again.
"""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError

from tune_gym import kinds
from tune_gym.envs import MAX_EPISODE_STEPS
from tune_gym.errors import SpaceError
from tune_gym.features.task import TASK_FEATURE_DIM, TASK_FEATURE_HIGH, task_features
from tune_gym.measure import resolve_backend
from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import max_gflops
from tune_gym.options import OptionError, check_bool, check_choice, check_int, check_keys
from tune_gym.session import STATUSES, Trial, TuningSession
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

if TYPE_CHECKING:
    from tune_gym.features.graph import GraphTemplate

__all__ = ["INFOS", "MAX_EPISODE_STEPS", "OBSERVATIONS", "TuneEnv", "decode_actions", "env_options",
           "make_tune_env"]

#: Accepted values of ``observation`` (see the module docstring).
OBSERVATIONS = ("sequence", "graph", "knobs")
#: Accepted values of ``info`` (see the module docstring).
INFOS = ("full", "lean")
#: Bound of the log-scaled observation values (``task``, ``schedule``, ``graph_nodes``): log2 of
#: counts below 2**64.
LOG_HIGH = 64.0
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
        info: str = "full",
    ) -> None:
        self.task = task if isinstance(task, Task) else Task.parse(task)
        batch_size = check_int("batch_size", batch_size, 1)
        budget = check_int("budget", budget, 1)
        resume = check_bool("resume", resume)
        self.allow_suspect_reference = check_bool("allow_suspect_reference", allow_suspect_reference)
        if action_format not in ("flat", "knobs", "index"):
            raise ValueError(f"action_format must be 'flat', 'knobs' or 'index', not {action_format!r}")
        if observation is not None and (not isinstance(observation, str) or observation not in OBSERVATIONS):
            raise ValueError(f"observation must be one of {', '.join(map(repr, OBSERVATIONS))}, not {observation!r}")
        if schedule_shape is not None and observation != "sequence":
            raise ValueError(f"schedule_shape applies to observation='sequence' only, not {observation!r}")
        if graph_template is not None and observation != "graph":
            raise ValueError(f"graph_template applies to observation='graph' only, not {observation!r}")
        _check_reward_norm(reward_norm)
        self.info_mode = check_choice("info", info, INFOS)
        self.preset = preset
        self.batch_size = batch_size
        self.budget = budget
        self.action_format = action_format
        self.render_mode = render_mode
        self.closed = False  # set by close(): no step or reset after it
        self.backend, self._owns_backend = resolve_backend(backend, backend_options)
        try:
            self._setup(preset, observation, schedule_shape, graph_template, reward_norm, log, resume)
        except BaseException:  # a bad option found late, a host too busy to time PyTorch: release both
            if getattr(self, "session", None) is not None:
                self.session.close()
            if self._owns_backend:
                self.backend.close()
            raise

    def _setup(self, preset: str, observation: str | None, schedule_shape: tuple[int, int] | None,
               graph_template: GraphTemplate | dict[str, Any] | None, reward_norm: str | float,
               log: str | Path | None, resume: bool) -> None:
        """The rest of the constructor, after the backend exists (which may supply the space)."""
        from tune_gym.features.primitives import default_shape

        space = self.backend.recorded_space(self.task, preset)  # replay with spaces="recorded": no TVM
        self.space = space if space is not None else KnobSpace.for_task(self.task, preset)
        if observation is None:
            observation = kinds.default_observation(self.task) if self.space.has_schedules else "knobs"
        if observation != "knobs" and not self.space.has_schedules:
            raise ValueError(f"{self.task.uri}: configs of this space have no TVM schedule to encode (a simulated "
                             f"target, or a space replayed without TVM); use observation='knobs', not {observation!r}")
        self.graph_template = template = self._graph_template(graph_template) if observation == "graph" else None
        self.observation = observation
        budget, n, k = self.budget, self.batch_size, self.space.n_knobs
        self.session = TuningSession(self.task, self.space, self.backend, budget=budget, log=log, resume=resume)
        self.reference = self._reference(reward_norm)  # may raise (a busy host): __init__ releases
        self.session.reference = self.reference
        self.reference_gflops = self._reference_gflops(reward_norm)
        self.throughput_high = throughput_high(self.task, self.reference_gflops)

        if self.action_format == "knobs":
            self.action_space = spaces.MultiDiscrete(np.tile(self.space.dims, (n, 1)))
        elif self.action_format == "flat":
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
        box = lambda low, high, shape: spaces.Box(np.float32(low), np.float32(high), shape=shape, dtype=np.float32)
        if template is not None:
            slots, width = template.n_slots, template.feat_dim
            best = {"graph_nodes": box(-LOG_HIGH, LOG_HIGH, (slots, width)),
                    "graph_adjacency": box(0, 1, (slots, slots)), "graph_mask": box(0, 1, (slots,))}
        elif observation == "knobs":
            best = {"best_knobs": box(0, 1, (k,))}
        else:
            best = {"schedule": box(-LOG_HIGH, LOG_HIGH, self._sched_shape)}
        self.observation_space = spaces.Dict({
            "task": box(0, TASK_FEATURE_HIGH, (TASK_FEATURE_DIM,)),
            **best,
            "last_configs": box(0, 1, (n, k)),
            "last_throughput": box(0, self.throughput_high, (n,)),
            "last_valid": box(0, 1, (n,)),
            "progress": spaces.Box(np.zeros(2, np.float32), np.array([self.throughput_high, 1], np.float32),
                                   dtype=np.float32),
        })
        #: The ``task`` observation (the task's features, clipped to the observation bounds).
        self.task_obs = np.clip(task_features(self.task), 0, TASK_FEATURE_HIGH)
        #: The config the best-config observations show before any measurement.
        self.default_config = self.space.canonical([0] * k)
        entry_bytes = sum(4 * math.prod(b.shape) for b in best.values())
        self._encoding_limit = max(8, _ENCODING_CACHE_BYTES // max(1, entry_bytes))
        self._encodings: dict[Config, dict[str, np.ndarray]] = {}  # config -> best-config keys, see _encoding
        self._session_fresh = True  # the session's first run (with resumed records) not yet used
        self._clear_last()

    # ------------------------------------------------------------------ helpers
    def _reference_gflops(self, reward_norm: str | float) -> float:
        """What rewards are divided by (see the module docstring)."""
        if self.reference is not None:
            return self.reference.gflops
        if reward_norm == "none":
            return 1.0
        if reward_norm == "optimum":
            best = self.backend.optimum(self.task, self.space)
            if best is None:
                why = (f"the {self.backend.name} backend's data does not hold them all (not an exhaustive dataset)"
                       if not self.backend.covers(self.task, self.space) else "none of them ran")
                raise OptionError(f"reward_norm='optimum' needs replay data holding every config of {self.task.uri} "
                                  f"(preset {self.preset}, {self.space.size} configs), one of which ran, but {why}; "
                                  "use 'torch', 'none' or a number")
            return best
        return float(reward_norm)

    def _reference(self, reward_norm: str | float) -> Reference | None:
        """The reference of ``reward_norm="torch"``: recorded with the data if possible."""
        if reward_norm != "torch":
            return None
        from tune_gym.host import host_id
        from tune_gym.records import recorded_reference

        resumed = self.session.resumed  # host_id() reads the TVM version: asked only when there are records
        recorded = recorded_reference(resumed, self.task, host=host_id()) if resumed else None
        if recorded is None:
            recorded = self.backend.reference(self.task, self.space.preset)  # the data's, if the backend has one
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
        self._last_gflops = np.zeros(self.batch_size, dtype=np.float64)  # raw, 0 where nothing ran
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
            return {"graph_nodes": np.clip(graph["nodes"][0], -LOG_HIGH, LOG_HIGH),
                    "graph_adjacency": graph["adjacency"][0], "graph_mask": graph["mask"][0]}
        if self.observation == "knobs":
            return {"best_knobs": self.space.normalized([config])[0]}
        from tune_gym.features.loops import take_logs
        from tune_gym.features.primitives import encode_trace

        trace = encode_trace(self.space.trace(config, check=False), *self._sched_shape)
        return {"schedule": np.clip(take_logs(trace), -LOG_HIGH, LOG_HIGH).astype(np.float32)}

    def _obs(self) -> dict[str, np.ndarray]:
        best_cfg, best_gflops = self.best
        return {
            "task": self.task_obs.copy(),
            **{key: value.copy() for key, value in
               self._encoding(best_cfg if best_cfg is not None else self.default_config).items()},
            "last_configs": self._last_configs.copy(),
            "last_throughput": self._last_tp.copy(),
            "last_valid": self._last_valid.copy(),
            "progress": progress(float(best_gflops), self.reference_gflops, self.throughput_high, self.trials_used,
                                 self.budget),
        }

    def _info(self, status: np.ndarray | None = None, **full: Any) -> dict[str, Any]:
        """The step's or reset's ``info`` (see the module docstring): ``full`` holds the keys
        only the full form has (outcomes, trials); ``status`` is the rows' outcomes (lean)."""
        best_cfg, best_gflops = self.best
        if self.info_mode == "lean":
            new = full.get("new_trials", ())
            return {"trials_used": self.trials_used, "new_trials": len(new), "best_gflops": best_gflops,
                    "reference_gflops": self.reference_gflops, "clock": self.session.clock,
                    "measure_secs": float(full.get("measure_secs", 0.0)),
                    "status": status if status is not None else np.full(self.batch_size, -1, dtype=np.int8)}
        best = self.session.best
        return {"trials_used": self.trials_used, "budget": self.budget, "best_gflops": best_gflops,
                "best_secs": best.result.mean if best is not None else math.inf, "best_config": best_cfg,
                "reference_gflops": self.reference_gflops,
                "reference_suspect": self.reference.suspect if self.reference is not None else "",
                "flops_nominal": self.task.flops_nominal,
                "clock": self.session.clock, **full}

    def decode_action(self, action: Any) -> list[Config]:
        """Validate an action and return its configs (canonical); ValueError names the problem."""
        return _configs(self._decode(action))

    def _decode(self, action: Any) -> np.ndarray:
        """:meth:`decode_action`'s configs as a canonical ``(batch_size, n_knobs)`` int64 table."""
        return decode_actions(self.space, self.action_format, self.batch_size, action)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[override]
        """Start an episode (a tuning run). The first one starts with the resumed records as
        its trials (``info["resumed"]``); later ones start empty and reuse measurements."""
        self._check_open("reset")
        check_keys("Tune-v0 reset", options or {}, ())
        super().reset(seed=seed)
        self._clear_last()
        trials = self.session.trials if self._session_fresh else self.session.new_run()
        self._session_fresh = False
        return self._obs(), self._info(resumed=len(trials), new_trials=tuple(trials))

    def step(self, action: Any):  # type: ignore[override]
        self._check_open("step")
        reward, terminated, truncated, info = self._advance(self._decode(action))
        return self._obs(), reward, terminated, truncated, info

    def step_table(self, table: np.ndarray) -> tuple[float, bool, bool, dict[str, Any]]:
        """:meth:`step` with the batch given as a checked, canonical ``(batch_size, n_knobs)``
        table of knob indices (:meth:`KnobSpace.check_table`), returning everything but the
        observation: ``(reward, terminated, truncated, info)``. For an env that builds its own
        observation (``MultiTune-v0``), which then does not pay for this one's."""
        self._check_open("step")
        return self._advance(table)

    @property
    def last_gflops(self) -> np.ndarray:
        """The last step's GFLOPS per config of the batch (0 where nothing ran; read-only view)."""
        return _read_only_view(self._last_gflops)

    @property
    def last_valid(self) -> np.ndarray:
        """1.0 where the last step's config ran and 0.0 elsewhere, per config of the batch (read-only view)."""
        return _read_only_view(self._last_valid)

    def _advance(self, table: np.ndarray) -> tuple[float, bool, bool, dict[str, Any]]:
        """Evaluate a checked, canonical ``(batch_size, n_knobs)`` table: :meth:`step` but the
        observation."""
        configs = _configs(table)
        before = self.session.best_gflops
        self._session_fresh = False
        ev = self.session.evaluate(configs)
        trials = [outcome.trial for outcome in ev.outcomes]  # None where excluded or skipped
        gflops = np.array([t.gflops if t is not None else 0.0 for t in trials], dtype=np.float64)
        self._last_gflops = gflops
        throughputs(gflops, self.reference_gflops, self.throughput_high, out=self._last_tp)
        self._last_valid[:] = [t is not None and t.ok for t in trials]
        self._last_configs = self.space.normalized(table)
        reward = (self.session.best_gflops - before) / self.reference_gflops
        terminated = self.session.space_done
        truncated = not terminated and self.session.exhausted
        status = np.array([_STATUS_CODE[o.status] for o in ev.outcomes], dtype=np.int8) \
            if self.info_mode == "lean" else None
        info = self._info(status, outcomes=ev.outcomes, new_trials=ev.new, measure_secs=ev.cost)
        return float(reward), terminated, truncated, info

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


def _read_only_view(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _check_reward_norm(reward_norm: Any) -> None:
    if isinstance(reward_norm, (int, float)) and not isinstance(reward_norm, bool):
        if not reward_norm > 0 or not np.isfinite(reward_norm):
            raise ValueError(f"reward_norm must be a finite number > 0, got {reward_norm}")
    elif reward_norm not in ("torch", "optimum", "none"):
        raise ValueError(f"reward_norm must be 'torch', 'optimum', 'none' or a positive number, not {reward_norm!r}")


#: ``info["status"]`` code of each :data:`tune_gym.session.STATUSES` entry (lean info).
_STATUS_CODE = {status: i for i, status in enumerate(STATUSES)}


def throughput_high(task: Task, reference_gflops: float) -> float:
    """The bound of throughput observations: the most a device of the task's target kind can
    do (:func:`~tune_gym.measure.result.max_gflops`) over the reference, at most float32's
    largest number (so the bound stays finite)."""
    return min(max_gflops(task.target.kind) / reference_gflops, float(np.finfo(np.float32).max))


def throughputs(gflops: np.ndarray, reference_gflops: float, high: float, out: np.ndarray | None = None) -> np.ndarray:
    """Throughput observations: ``gflops / reference``, clipped to ``[0, high]``, float32 (any
    shape; written into ``out`` when given)."""
    if out is None:
        out = np.empty(np.shape(gflops), dtype=np.float32)
    return np.minimum(gflops / reference_gflops, high, out=out)


def progress(best_gflops: np.ndarray | float, reference_gflops: float, high: float, trials_used: np.ndarray | int,
             budget: int) -> np.ndarray:
    """The ``progress`` observation(s): ``[best / reference, fraction of the budget used]``,
    clipped to ``[0, high]`` and [0, 1], float32, shape ``(*best_gflops.shape, 2)``. One env's
    (Python numbers) takes a scalar path: the same float64 arithmetic, without array overhead."""
    if isinstance(best_gflops, float) and isinstance(trials_used, int):
        return np.array([min(best_gflops / reference_gflops, high), min(trials_used / budget, 1.0)], dtype=np.float32)
    out = np.empty((*np.shape(best_gflops), 2), dtype=np.float32)
    out[..., 0] = np.minimum(best_gflops / reference_gflops, high)  # as throughputs() rounds it
    out[..., 1] = np.minimum(trials_used / budget, 1.0)
    return out


def decode_actions(space: KnobSpace, action_format: str, batch_size: int, action: Any,
                   n_envs: int | None = None, only: np.ndarray | None = None) -> np.ndarray:
    """Check actions of ``Tune-v0`` and return their configs, canonical, as int64 knob indices.

    ``action`` is one env's action (``n_envs`` None; returns ``(batch_size, n_knobs)``) or a
    vector env's actions, one per sub-env (returns ``(n_envs, batch_size, n_knobs)``, or only
    the sub-envs where the bool mask ``only`` is True: the others' actions are not used). The
    checks are array-wide (one range check and one masked select for all rows); ``"index"``
    actions are decoded one row at a time.

    Raises:
        SpaceError: a ``ValueError`` naming the problem: shape, dtype, a non-finite value or an
            index out of range, with its row and knob (and sub-env).
    """
    one = n_envs is None
    lead = () if one else (n_envs,)
    what = "action" if one else "actions"
    if isinstance(action, (list, tuple)) and _holds_bool(action):
        raise SpaceError(f"{what} holds a bool; expected integer indices (e.g. np.int64)")
    try:
        arr = np.asarray(action)
    except ValueError as err:  # a ragged nested list
        raise SpaceError(f"{what} is not a rectangular array of integer indices ({err})") from None
    k = space.n_knobs
    cols = 1 if action_format == "index" else k
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))
        if bad.size:
            env, rest = divmod(int(bad[0]), batch_size * cols) if not one else (0, int(bad[0]))
            row, col = divmod(rest, cols)
            named = "" if action_format == "index" else f", knob {space.names[col]!r}"
            where = f"row {row}{named}" if one else f"sub-env {env}, row {row}{named}"
            raise SpaceError(f"{what} contains a non-finite value at {where}")
        raise SpaceError(f"{what} dtype is {arr.dtype}; expected integer indices (e.g. np.int64)")
    if arr.dtype.kind not in "iu":
        raise SpaceError(f"{what} dtype is {arr.dtype}; expected integer indices (e.g. np.int64)")
    shapes = [(*lead, batch_size)] if action_format == "index" else [(*lead, batch_size, k), (*lead, batch_size * k)]
    if arr.shape not in shapes:
        knobs = " flat indices" if action_format == "index" else f" (batch_size x knobs: {', '.join(space.names)})"
        raise SpaceError(f"{what} shape {arr.shape}; expected {' or '.join(map(str, shapes))}{knobs}")
    ids = np.flatnonzero(only) if only is not None else np.arange(1 if one else arr.shape[0])
    rows = (arr[only] if only is not None else arr).reshape(-1, cols)
    if action_format == "index":
        bad = np.flatnonzero((rows[:, 0] < 0) | (rows[:, 0] >= space.size))
        if bad.size:
            env, r = divmod(int(bad[0]), batch_size)
            raise SpaceError(f"{_prefix(int(ids[env]), one)}action row {r}: flat index {rows[bad[0], 0]} out of "
                             f"range [0, {space.size - 1}]")
        table = np.array([space.config(int(i)) for i in rows[:, 0]], dtype=np.int64).reshape(-1, k)
    else:
        try:
            table = space.check_table(rows)
        except SpaceError:  # an index out of range: name its sub-env, row and knob
            row, knob = (int(i) for i in np.argwhere((rows < 0) | (rows >= space.dims))[0])
            env, r = divmod(row, batch_size)
            raise SpaceError(f"{_prefix(int(ids[env]), one)}action row {r}: knob {space.names[knob]!r}: index "
                             f"{rows[row, knob]} out of range [0, {space.dims[knob] - 1}]") from None
    return table.reshape(batch_size, k) if one else table.reshape(len(ids), batch_size, k)


def _prefix(env: int, one: bool) -> str:
    return "" if one else f"sub-env {env}: "


def env_options() -> tuple[str, ...]:
    """The options of ``Tune-v0`` (:class:`TuneEnv`'s constructor arguments)."""
    return tuple(inspect.signature(TuneEnv.__init__).parameters)[1:]


def make_tune_env(**options: Any) -> TuneEnv:
    """``Tune-v0``'s entry point: :class:`TuneEnv` with ``options``, after refusing an option it
    does not have (``OptionError``: ``Tune-v0: unknown option 'bugdet'; its options: ...``),
    which would otherwise be a ``TypeError`` from deep inside ``gymnasium.make``."""
    check_keys("Tune-v0", options, env_options())
    return TuneEnv(**options)


def _configs(table: np.ndarray) -> list[Config]:
    """The rows of a config table as configs (tuples of Python ints)."""
    return [tuple(row) for row in table.tolist()]


def _holds_bool(items: Any) -> bool:
    """True when a (nested) list or tuple holds a bool (NumPy would silently make it 0/1)."""
    return any(isinstance(v, (bool, np.bool_)) or (isinstance(v, (list, tuple)) and _holds_bool(v)) for v in items)
