"""Knob spaces derived from MetaSchedule design spaces.

MetaSchedule describes the schedules of a task as a few *sketches*: traces of schedule
primitives in which some instructions sample a value (a loop's split factors, an unroll
step, a compute location). Each sampling instruction becomes one named :class:`Knob` with the
full list of its choices, and the sketches themselves become a ``sketch`` knob. A *config*
is a tuple of per-knob choice indices; knobs that the chosen sketch does not use are held at
index 0 (:meth:`KnobSpace.canonical`), so every config maps to exactly one program and
:attr:`KnobSpace.size` counts distinct programs.

Presets:
    ``full``: MetaSchedule's own schedule rules for the target (spaces of 1e8+ configs).
    ``compact``: a reduced rule set (two-level tiling, innermost factors <= 16 on CPU, fewer
    unroll steps) whose spaces have roughly 1e3-5e4 configs, small enough to measure
    exhaustively.
    ``medium`` (CPU only): ``compact`` with the reduction loops split too and innermost
    factors <= 64 (:func:`_medium_rules`): 5e3-2e4 configs on many CPU suite tasks (up to
    ~1.6e5 on the largest), for exhaustive datasets in which a search has more to find.

Example:
    >>> space = KnobSpace.for_task(Task.parse("resnet18:1"), preset="compact")
    >>> cfg = space.sample(np.random.default_rng(0), 1)[0]
    >>> space.to_dict(cfg)  # {"sketch": 0, "tile_f": (4, 16), ...}
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tune_gym import kinds
from tune_gym.errors import SpaceError
from tune_gym.tasks.task import Task
from tune_gym.tvm_support import ms, tvm

__all__ = ["PRESETS", "Config", "Knob", "KnobSpace", "RecordedSpace", "ScheduleFreeSpace", "perfect_tiles"]

Config = tuple[int, ...]
PRESETS = ("full", "compact", "medium")
#: Block annotation of MetaSchedule's weight layout preprocessing blocks (RewriteLayout).
LAYOUT_REWRITE_PREPROC = "meta_schedule.layout_rewrite_preproc"


@dataclass(frozen=True)
class Knob:
    """One tunable decision.

    Attributes:
        name: unique within the space (``tile_f``, ``unroll_explicit``, ``compute_at_pad_temp``).
        kind: ``split`` (choices are factor tuples), ``categorical`` (candidate numbers:
            ordered values such as unroll steps or block sizes), ``nominal`` (unordered
            values: strings, booleans or a mix of types, e.g. a Kernel Tuner parameter
            ``["shared", "global"]``; features treat them as one-hot), ``compute_at``
            (MetaSchedule location indices: -2 inline, -1 root, i >= 0 the i-th loop) or
            ``sketch`` (sketch indices).
        choices: every value the knob can take, in a fixed order.
    """

    name: str
    kind: str
    choices: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.choices)


@functools.cache
def perfect_tiles(extent: int, n: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered n-tuple of positive ints whose product is ``extent``, innermost <= limit.

    ``max_innermost <= 0`` means no limit (MetaSchedule's ``-1``). Order: lexicographic.
    """
    if n == 1:
        return ((extent,),) if max_innermost <= 0 or extent <= max_innermost else ()
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    out = []
    for d in divisors:
        for rest in perfect_tiles(extent // d, n - 1, max_innermost):
            out.append((d, *rest))
    return tuple(out)


def _cpu_rules(structure: str, max_innermost_factor: int) -> list[Any]:
    """The reduced CPU (``llvm``) rule set of ``compact`` and ``medium``: MetaSchedule's CPU
    rules with the given tiling ``structure`` and innermost-factor limit, two sketches (without
    and with a cache write at the outermost spatial tile) and four unroll steps."""
    m = ms()
    reuse = m.schedule_rule.ReuseType
    return [
        m.schedule_rule.InlineConstantScalars(),
        m.schedule_rule.AutoInline(
            into_producer=False, into_consumer=True, inline_const_tensor=True,
            disallow_if_then_else=True, require_injective=True, require_ordered=True,
            disallow_op=["tirx.exp"],
        ),
        m.schedule_rule.MultiLevelTiling(
            structure=structure, max_innermost_factor=max_innermost_factor,
            reuse_write=reuse(req="may", levels=[1], scope="global"),
        ),
        m.schedule_rule.ParallelizeVectorizeUnroll(
            max_jobs_per_core=16, max_vectorize_extent=64, unroll_max_steps=[0, 16, 64, 512],
            unroll_explicit=True,
        ),
    ]


def _compact_rules(kind: str) -> list[Any]:
    """``compact``: two-level spatial tiling ("SRS": reduction loops are not split), innermost
    factors <= 16 on CPUs; on GPUs "SSRS" bound to blocks and threads, innermost <= 4."""
    if kind == "llvm":
        return _cpu_rules("SRS", 16)
    m = ms()
    reuse = m.schedule_rule.ReuseType
    return [
        m.schedule_rule.InlineConstantScalars(),
        m.schedule_rule.AutoInline(
            into_producer=True, into_consumer=True, inline_const_tensor=True,
            disallow_if_then_else=False, require_injective=False, require_ordered=False,
        ),
        m.schedule_rule.MultiLevelTiling(
            structure="SSRS", tile_binds=["blockIdx.x", "threadIdx.x"], max_innermost_factor=4,
            reuse_write=reuse(req="must", levels=[2], scope="local"),
        ),
        m.schedule_rule.ParallelizeVectorizeUnroll(
            max_jobs_per_core=-1, max_vectorize_extent=-1, unroll_max_steps=[0, 64, 512],
            unroll_explicit=True,
        ),
        m.schedule_rule.AutoBind(),
    ]


def _medium_rules(kind: str) -> list[Any]:
    """``medium`` (CPUs only): ``compact`` plus a split of every reduction loop ("SRRS": spatial
    outer, reduction outer, reduction inner, spatial inner), innermost factors <= 64.

    The reduction split is the cache blocking of the reduction (``k`` of a dense, the input
    channels and kernel window of a conv) that ``compact`` lacks entirely. The limit 64 is
    MetaSchedule's own CPU default (that of ``full``): with two spatial levels the innermost
    spatial tile is both the vector and the register block, so it needs room for several
    AVX2/AVX-512 vectors (16-64 floats). With a third spatial level instead ("SSRS") the
    batch_matmul spaces have 54k+ configs; with a limit of 16 or 32 every dense space has
    fewer than 5k. These spaces have 5k-20k configs on 37 of the 96 CPU suite tasks, over
    conv2d, dense, depthwise conv2d and batch_matmul (docs/tasks.md, "Knob spaces").
    """
    if kind != "llvm":
        raise SpaceError(f"the medium preset has CPU (llvm) rules only, not {kind}; use compact or full")
    return _cpu_rules("SRRS", 64)


def _preset_rules(preset: str, kind: str) -> Any:
    """The schedule rules of a preset on a target kind (``full``: the kind's own defaults)."""
    if preset == "full":
        return kind
    return _compact_rules(kind) if preset == "compact" else _medium_rules(kind)


def _space_target(task: Task, preset: str, target: Any) -> Any:
    """The target the design space is generated for: ``target``, except for ``compact`` spaces on
    ``cuda`` GPUs of ``sm_80`` and up, which are generated as for ``sm_75``.

    On ``sm_80`` and up MetaSchedule's MultiLevelTiling adds software-pipeline stages for the
    shared-memory cache reads of a tile; the compact tiling has no cache reads, and TVM 0.27
    fails on it (``Cannot treat type tirx.For as type tirx.SeqStmt`` in AddAsyncPipeline)
    instead of skipping. Nothing else in these rules and postprocs depends on the architecture
    (the thread and shared-memory limits are the target's own), so the compact space of every
    architecture is the ``sm_75`` one; kernels are still built for the task's own ``arch``.
    """
    if task.target.kind != "cuda" or preset != "compact":
        return target
    opts = task.target.resolved()
    match = re.fullmatch(r"sm_(\d+)[af]?", str(opts.get("arch", "")))
    if match is None or int(match.group(1)) < 80:
        return target
    return tvm().target.Target({**opts, "arch": "sm_75"})


class KnobSpace:
    """The knobs of one task's design space, with encode/decode, sampling and validity.

    The space is that of the task's module (:meth:`Task.ir_module`), so it follows the task's
    ``weights`` option: with ``packed`` (the default on CPUs) the weights are marked
    ``layout_free_buffers`` and :meth:`apply` runs MetaSchedule's ``RewriteLayout`` postproc,
    which picks the weight layout the schedule reads best and adds a preprocessing block
    (annotated ``meta_schedule.layout_rewrite_preproc``) that converts the weights to it; the
    measurement backends remove that block before building and feed the kernel pre-packed
    weights, as MetaSchedule's builder does. With ``given`` the kernel reads the weights in
    the op's own layout. Knobs and sizes are the same in both modes (the postprocs do not
    sample), so a config means the same decisions in both.

    Build with :meth:`for_task` (cached per process). Not thread-safe for concurrent
    validity checks; the measurement backends use one space per process.
    """

    #: Whether a config has a TVM schedule (:meth:`trace`, :meth:`apply`); False for the spaces of
    #: registered target kinds that are not MetaSchedule spaces (:mod:`tune_gym.kinds`).
    has_schedules = True

    def __init__(self, task: Task, preset: str = "full", seed: int = 0) -> None:
        if preset not in PRESETS:
            raise SpaceError(f"unknown space preset {preset!r}; known: {', '.join(PRESETS)}")
        self.task = task
        self.preset = preset
        tv, m = tvm(), ms()
        self._tvm = tv
        self.mod = task.ir_module()
        self.target = task.target.tvm_target()
        kind = task.target.kind
        try:
            rules = _preset_rules(preset, kind)
        except SpaceError as err:
            raise SpaceError(f"{task.uri}: {err}") from None
        self._ctx = m.TuneContext(
            mod=self.mod, target=_space_target(task, preset, self.target),
            space_generator=m.space_generator.PostOrderApply(
                sch_rules=rules, postprocs=kind, mutator_probs={}
            ),
            num_threads=1, rand_state=seed,
        )
        schedules = self._ctx.generate_design_space()
        self._postprocs = list(self._ctx.space_generator.postprocs)
        self._loop_names = self._original_loop_names()
        self._traces: list[Any] = []  # sketch -> trace without postprocs
        self._sketch_knobs: list[list[tuple[int, Any]]] = []  # sketch -> [(knob idx, inst)]
        self.knobs: list[Knob] = []
        knob_index: dict[Knob, int] = {}
        if len(schedules) > 1:
            self.knobs.append(Knob("sketch", "sketch", tuple(range(len(schedules)))))
        for s, sch in enumerate(schedules):
            trace = sch.trace.simplified(remove_postproc=True)
            self._traces.append(trace)
            entries = []
            used_names: set[str] = set()
            for inst, knob in self._knobs_of(trace):
                name = knob.name
                if name in used_names:  # same loop sampled twice in one sketch
                    name = next(f"{name}_{i}" for i in itertools.count(2) if f"{name}_{i}" not in used_names)
                    knob = Knob(name, knob.kind, knob.choices)
                used_names.add(name)
                if knob not in knob_index:
                    if any(k.name == knob.name for k in self.knobs):  # same name, other choices
                        knob = Knob(f"{knob.name}.s{s}", knob.kind, knob.choices)
                    knob_index[knob] = len(self.knobs)
                    self.knobs.append(knob)
                entries.append((knob_index[knob], inst))
            self._sketch_knobs.append(entries)
        self._set_knobs(self.knobs, [({0} if self.n_sketches > 1 else set()) | {i for i, _ in entries}
                                     for entries in self._sketch_knobs])

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def for_task(cls, task: Task, preset: str = "full") -> KnobSpace:
        """The space of ``task`` (built once per process and preset).

        A task on a registered target kind (:mod:`tune_gym.kinds`) gets that kind's space,
        which need not be a MetaSchedule space.
        """
        kind = kinds.get_kind(task.target.kind)
        if kind is not None:
            return kinds.load(kind.space)(task, preset)  # type: ignore[no-any-return]
        return _cached_space(task, preset)

    def _init_one_sketch(self, task: Task, preset: str, knobs: Sequence[Knob]) -> None:
        """Set up a space of one sketch whose knobs are all active, without MetaSchedule.

        For spaces that are not MetaSchedule design spaces (those of registered target kinds,
        :mod:`tune_gym.kinds`): a subclass calls this instead of ``KnobSpace.__init__`` and
        overrides the schedule methods (:meth:`trace`, :meth:`to_schedule`, :meth:`apply`,
        :meth:`kernel_mod`, :meth:`is_valid`); checking, encoding, enumeration, sampling and
        neighbours then work as for any space. Flat indices are mixed radix over the knobs in
        order (the last knob varies fastest).
        """
        self.task = task
        self.preset = preset
        self._traces = [None]  # one sketch, no MetaSchedule trace
        self._sketch_knobs = [[]]
        self._set_knobs(knobs, [set(range(len(knobs)))])

    def _set_knobs(self, knobs: Sequence[Knob], active: Sequence[set[int]]) -> None:
        """Set the knobs and, per sketch, the knobs it uses (with the ``sketch`` knob when there
        are several sketches), and derive what every space computes from them: sizes, flat-index
        radices, ``dims`` and the active mask. Every way of making a space ends here."""
        self.knobs = list(knobs)
        self._active = [set(a) for a in active]
        self._sketch_sizes = [
            math.prod(len(self.knobs[i]) for i in sorted(a) if self.knobs[i].kind != "sketch")
            for a in self._active
        ]
        self.size = sum(self._sketch_sizes)
        # Per sketch, the knobs of its mixed-radix flat index (index() and config()), in order.
        self._radix_knobs = [[i for i in sorted(a) if self.knobs[i].kind != "sketch"] for a in self._active]
        self.names = [k.name for k in self.knobs]
        self.dims = np.array([len(k) for k in self.knobs], dtype=np.int64)
        self._scale = np.maximum(self.dims - 1, 1).astype(np.float32)  # divisor of normalized()
        mask = np.zeros((len(self._active), len(self.knobs)), dtype=bool)
        for s, used in enumerate(self._active):
            mask[s, sorted(used)] = True
        mask.setflags(write=False)
        self._active_mask = mask
        self._lock = threading.Lock()

    def to_json(self) -> dict[str, Any]:
        """What a config means in this space, as JSON: the task URI, preset, each knob's name,
        kind and choices, and per sketch the knobs it uses. :class:`RecordedSpace` rebuilds the
        space from it without TVM, with the same :func:`~tune_gym.datasets.space_fingerprint`."""
        return {
            "task": self.task.uri, "preset": self.preset,
            "knobs": [[k.name, k.kind, [list(c) if isinstance(c, tuple) else c for c in k.choices]]
                      for k in self.knobs],
            "active": [sorted(a) for a in self._active],
        }

    def _original_loop_names(self) -> dict[str, list[str]]:
        sch = self._tvm.s_tir.Schedule(self.mod)
        out = {}
        for block in sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []:
            name = sch.get(block).name_hint
            out[name] = [_short(sch.get(loop).loop_var.name) for loop in sch.get_loops(block)]
        return out

    def _knobs_of(self, trace: Any) -> Iterator[tuple[Any, Knob]]:
        """Yield (sampling instruction, Knob) for each decision of one sketch's trace."""
        rv_block: dict[Any, str] = {}
        rv_loop: dict[Any, str] = {}
        rv_annotation: dict[Any, str] = {}
        for inst in trace.insts:  # first pass: names of blocks, loops, annotation uses
            kind = inst.kind.name
            if kind == "GetSBlock":
                rv_block[inst.outputs[0]] = str(inst.attrs[0])
            elif kind == "GetLoops" and inst.inputs[0] in rv_block:
                names = self._loop_names.get(rv_block[inst.inputs[0]], [])
                for j, out in enumerate(inst.outputs):
                    rv_loop[out] = names[j] if j < len(names) else f"l{j}"
            elif kind == "Annotate" and len(inst.inputs) > 1:
                key = str(inst.attrs[0]).removeprefix("meta_schedule.")
                rv_annotation[inst.inputs[1]] = key
        decisions = trace.decisions
        for idx, inst in enumerate(trace.insts):
            if inst not in decisions:
                continue
            kind, decision = inst.kind.name, decisions[inst]
            if kind == "SamplePerfectTile":
                n, max_inner = int(inst.attrs[0]), int(inst.attrs[1])
                extent = math.prod(int(x) for x in decision)
                loop = rv_loop.get(inst.inputs[0], f"loop{idx}")
                yield inst, Knob(f"tile_{loop}", "split", perfect_tiles(extent, n, max_inner))
            elif kind == "SampleCategorical":
                candidates = tuple(int(c) for c in inst.attrs[0])
                name = rv_annotation.get(inst.outputs[0], f"categorical{idx}")
                yield inst, Knob(name, "categorical", candidates)
            elif kind == "SampleComputeLocation":
                named = next((rv_block[b] for b in inst.inputs if b in rv_block), None)
                block, locations = self._compute_locations(trace, inst)
                yield inst, Knob(f"compute_at_{named or block}", "compute_at", locations)
            else:
                raise SpaceError(f"{self.task}: unsupported sampling instruction {kind}")

    def _compute_locations(self, trace: Any, inst: Any) -> tuple[str, tuple[int, ...]]:
        """The block's name and the location indices MetaSchedule accepts for this instruction.

        ``SampleComputeLocation`` maps a decision that is not a valid location to the valid
        one before it (or to -1, the root) and records the decision it used, without changing
        the program. So: replay the trace up to the instruction once, then sample with every
        candidate -2 .. number of loops and collect the recorded decisions. The block is found
        by position (the replayed instruction and output that made it), so blocks made by the
        schedule itself (``rfactor``, cache stages) work as well as named ones.
        """
        k = list(trace.insts).index(inst)
        prefix = trace.insts[:k]
        decisions = {i: d for i, d in trace.decisions.items() if i in set(prefix)}
        sch = self._tvm.s_tir.Schedule(self.mod)
        self._tvm.s_tir.schedule.Trace(prefix, decisions).apply_to_schedule(sch, remove_postproc=True)
        replayed = list(sch.trace.insts)
        if len(replayed) != len(prefix):
            raise SpaceError(f"{self.task}: replaying {len(prefix)} instructions gave {len(replayed)}")
        source = inst.inputs[0]
        j, o = next((j, o) for j, p in enumerate(prefix) for o, out in enumerate(p.outputs) if out.same_as(source))
        rv = replayed[j].outputs[o]
        ok = set()
        for loc in range(-2, _count_loops(sch.mod) + 1):
            sch.sample_compute_location(rv, decision=loc)
            ok.add(int(sch.trace.decisions[sch.trace.insts[-1]]))
        return str(sch.get(rv).name_hint), tuple(sorted(ok))

    # ------------------------------------------------------------------ basic facts
    @property
    def n_knobs(self) -> int:
        return len(self.knobs)

    @property
    def n_sketches(self) -> int:
        return len(self._traces)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k.name}:{len(k)}" for k in self.knobs)
        return f"KnobSpace({self.task.uri}, preset={self.preset}, size={self.size}, knobs=[{knobs}])"

    def sketch_of(self, config: Config) -> int:
        return int(config[0]) if self.n_sketches > 1 else 0

    def active(self, config: Config) -> list[int]:
        """Indices of the knobs that the config's sketch uses."""
        return sorted(self._active[self.sketch_of(config)])

    @property
    def active_mask(self) -> np.ndarray:
        """``n_sketches x n_knobs`` read-only bool array: the knobs each sketch uses.

        Row ``s`` includes the ``sketch`` knob (when there is one) and every knob of sketch
        ``s``; vectorized searches index it with the sketch column of a config batch.
        """
        return self._active_mask

    @property
    def postprocs(self) -> tuple[Any, ...]:
        """The target's MetaSchedule postprocs that :meth:`apply` runs, in order (none for a
        space that is not a MetaSchedule space)."""
        return tuple(getattr(self, "_postprocs", ()))

    @property
    def sketch_sizes(self) -> tuple[int, ...]:
        """Number of distinct configs of each sketch (they sum to :attr:`size`); flat
        indices of sketch ``s`` start at ``sum(sketch_sizes[:s])``."""
        return tuple(self._sketch_sizes)

    def sketches(self, configs: np.ndarray) -> np.ndarray:
        """The sketch index of each row of an ``n x n_knobs`` config array."""
        configs = np.asarray(configs)
        return configs[:, 0].astype(np.int64) if self.n_sketches > 1 else np.zeros(len(configs), dtype=np.int64)

    # ------------------------------------------------------------------ validation / encoding
    def check(self, config: Sequence[Any]) -> Config:
        """Validate a config and return it canonical; raise SpaceError naming the bad knob."""
        if isinstance(config, np.ndarray):
            if config.ndim != 1:
                raise SpaceError(f"a config is a 1-D sequence of {self.n_knobs} knob indices, got shape {config.shape}")
            if config.dtype.kind == "f" and not np.all(np.isfinite(config)):
                bad = int(np.flatnonzero(~np.isfinite(config))[0])
                raise SpaceError(f"knob {self.names[bad]!r}: value {config[bad]} is not a finite index")
        if len(config) != self.n_knobs:
            raise SpaceError(
                f"config has {len(config)} values but the space has {self.n_knobs} knobs ({', '.join(self.names)})"
            )
        out = []
        for i, (knob, v) in enumerate(zip(self.knobs, config)):
            if isinstance(v, (bool, np.bool_)):
                raise SpaceError(f"knob {knob.name!r}: index must be an integer, got {v!r}")
            if isinstance(v, (float, np.floating)):
                if not math.isfinite(v) or v != int(v):
                    raise SpaceError(f"knob {knob.name!r}: index {v!r} is not an integer")
            elif not isinstance(v, (int, np.integer)):
                raise SpaceError(f"knob {knob.name!r}: index must be an integer, got {type(v).__name__} {v!r}")
            iv = int(v)
            if not 0 <= iv < len(knob):
                raise SpaceError(self._range_message(i, iv))
            out.append(iv)
        return self.canonical(out)

    def check_table(self, table: np.ndarray) -> np.ndarray:
        """Validate an ``n x n_knobs`` integer array of configs and return it canonical.

        The batch form of :meth:`check` for integer arrays (an env's action, every step):
        one NumPy range check and one masked select instead of a Python loop per value.
        ``[tuple(c) for c in space.check_table(t).tolist()]`` equals ``[space.check(c) for c in t]``.

        Returns:
            A new ``int64`` array: the rows canonical (:meth:`canonical`).

        Raises:
            SpaceError: the array is not ``n x n_knobs`` integers, or ``row r: knob 'name':
                index v out of range [0, d]`` for the first bad value in row-major order.
        """
        table = np.asarray(table)
        if table.ndim != 2 or table.shape[1] != self.n_knobs or table.dtype.kind not in "iu":
            raise SpaceError(f"expected an n x {self.n_knobs} integer array, got {table.dtype} of shape {table.shape}")
        out_of_range = (table < 0) | (table >= self.dims)
        if out_of_range.any():
            row, knob = (int(i) for i in np.argwhere(out_of_range)[0])
            raise SpaceError(f"row {row}: {self._range_message(knob, int(table[row, knob]))}")
        return np.where(self._active_mask[self.sketches(table)], table, 0).astype(np.int64, copy=False)

    def _range_message(self, knob: int, value: int) -> str:
        return f"knob {self.names[knob]!r}: index {value} out of range [0, {len(self.knobs[knob]) - 1}]"

    def canonical(self, config: Sequence[int] | np.ndarray) -> Config:
        """Set the knobs the config's sketch does not use to 0."""
        active = self._active[int(config[0]) if self.n_sketches > 1 else 0]
        return tuple(int(v) if i in active else 0 for i, v in enumerate(config))

    def to_dict(self, config: Config) -> dict[str, Any]:
        """``{knob name: value}`` for the active knobs (split values are factor tuples)."""
        return {self.knobs[i].name: self.knobs[i].choices[config[i]] for i in self.active(config)}

    def from_dict(self, values: dict[str, Any]) -> Config:
        """Inverse of :meth:`to_dict` (missing inactive knobs default to index 0)."""
        out = [0] * self.n_knobs
        for name, value in values.items():
            if name not in self.names:
                raise SpaceError(f"unknown knob {name!r}; knobs: {', '.join(self.names)}")
            i = self.names.index(name)
            choices = self.knobs[i].choices
            value = tuple(value) if isinstance(value, list) else value
            if value not in choices:
                raise SpaceError(f"knob {name!r}: value {value!r} is not one of its {len(choices)} choices")
            out[i] = choices.index(value)
        return self.check(out)

    def index(self, config: Config) -> int:
        """Flat index in [0, size): sketch offset + mixed radix over the sketch's knobs."""
        config = self.check(config)
        s = self.sketch_of(config)
        flat = 0
        for i in self._radix_knobs[s]:
            flat = flat * int(self.dims[i]) + config[i]
        return sum(self._sketch_sizes[:s]) + flat

    def config(self, index: int) -> Config:
        """Inverse of :meth:`index`."""
        if not 0 <= int(index) < self.size:
            raise SpaceError(f"flat index {index} out of range [0, {self.size - 1}]")
        rest = int(index)
        s = 0
        while rest >= self._sketch_sizes[s]:
            rest -= self._sketch_sizes[s]
            s += 1
        out = [0] * self.n_knobs
        if self.n_sketches > 1:
            out[0] = s
        for i in reversed(self._radix_knobs[s]):
            rest, out[i] = divmod(rest, int(self.dims[i]))
        return tuple(out)

    def __iter__(self) -> Iterator[Config]:
        """Every config in flat-index order."""
        return (self.config(i) for i in range(self.size))

    # ------------------------------------------------------------------ sampling / neighbours
    def sample(self, rng: np.random.Generator, n: int = 1) -> list[Config]:
        """``n`` configs drawn uniformly from the space (with replacement)."""
        if self.size < 2**62:
            return [self.config(int(i)) for i in rng.integers(0, self.size, size=n)]
        probs = np.array(self._sketch_sizes, dtype=float) / self.size
        out = []
        for _ in range(n):
            cfg = [int(rng.integers(0, d)) for d in self.dims]
            if self.n_sketches > 1:
                cfg[0] = int(rng.choice(self.n_sketches, p=probs))
            out.append(self.canonical(cfg))
        return out

    def sample_unique(self, rng: np.random.Generator, n: int, exclude: set[Config] | None = None) -> list[Config]:
        """Up to ``n`` distinct configs not in ``exclude`` (fewer only if the space runs out)."""
        exclude = set(exclude or ())
        remaining = self.size - len(exclude)
        n = min(n, max(0, remaining))
        out: list[Config] = []
        seen = set(exclude)
        if n > 0 and n > remaining // 4 and self.size <= 5_000_000:  # dense: draw from the rest
            pool = [c for c in self if c not in seen]
            for i in rng.permutation(len(pool))[:n]:
                out.append(pool[int(i)])
            return out
        while len(out) < n:
            for cfg in self.sample(rng, 2 * (n - len(out))):
                if cfg not in seen:
                    seen.add(cfg)
                    out.append(cfg)
                    if len(out) == n:
                        break
        return out

    def neighbours(self, config: Config) -> list[Config]:
        """Configs at Manhattan distance 1 in per-knob index (active knobs and the sketch)."""
        config = self.check(config)
        out = []
        for i in self.active(config):
            for step in (-1, 1):
                v = config[i] + step
                if 0 <= v < self.dims[i]:
                    cfg = list(config)
                    cfg[i] = v
                    cand = self.canonical(cfg)
                    if cand != config and cand not in out:
                        out.append(cand)
        return out

    def normalized(self, configs: Sequence[Config] | np.ndarray) -> np.ndarray:
        """Knob indices scaled to [0, 1] (``index / (choices - 1)``), shape ``n x n_knobs``."""
        arr = np.asarray(configs, dtype=np.float32).reshape(-1, self.n_knobs)
        return arr / self._scale

    # ------------------------------------------------------------------ schedules
    def trace(self, config: Config, check: bool = True) -> Any:
        """The sketch's trace with the config's decisions (no postprocessing).

        ``check=False`` skips validation for a config already made canonical by
        :meth:`check` (the measurement path validates once, where input enters).
        """
        if check:
            config = self.check(config)
        s = self.sketch_of(config)
        base = self._traces[s]
        decisions = dict(base.decisions.items())
        for k, inst in self._sketch_knobs[s]:
            knob = self.knobs[k]
            value = knob.choices[config[k]]
            decisions[inst] = list(value) if knob.kind == "split" else (
                config[k] if knob.kind == "categorical" else value)
        return self._tvm.s_tir.schedule.Trace(base.insts, decisions)

    def config_of_trace(self, trace: Any) -> Config:
        """The config whose decisions a trace of one of this space's sketches holds: the
        inverse of :meth:`trace`.

        The trace must start with one sketch's instructions (postprocessing may follow), and
        each of its tile and categorical decisions must be one of its knob's choices. Traces
        replayed or mutated from :meth:`design_space` by MetaSchedule (its search strategies
        and mutators: tile sizes, unroll steps, compute locations, thread bindings) qualify,
        postprocessed or not; a mutation of something that is not a knob (``MutateParallel``'s
        parallel extent, a constant of the sketch) does not.

        Compute locations: which loops a block may be computed at depends on the tiles, and a
        ``compute_at`` knob's choices are the locations valid with the sketch's own tiles;
        replaying a location that is not valid takes the valid one before it (see
        :meth:`_compute_locations`). A decision maps to the knob's first choice at or after it
        (its last choice when none is). So ``config_of_trace(to_schedule(c).trace)`` replays
        to the same program as ``c``; a location MetaSchedule sampled for other tiles replays to
        the same location unless a valid one lies between it and that choice (then to that
        deeper one: no config of the space holds the sampled location).

        Raises:
            SpaceError: the trace is no sketch of this space, or a tile or categorical decision
                is not one of its knob's choices (naming the knob).
        """
        insts = list(trace.insts)
        new_trace = self._tvm.s_tir.schedule.Trace
        sketch = next((s for s, n, sig in self._sketch_signatures
                       if len(insts) >= n and _signature(new_trace, insts[:n]) == sig), None)
        if sketch is None:
            raise SpaceError(f"{self.task.uri}: the trace is not one of the space's {self.n_sketches} sketches")
        n = len(self._traces[sketch].insts)
        decisions = trace.decisions
        sampled = [decisions[inst] for inst in insts[:n] if inst in decisions]
        out = [0] * self.n_knobs
        if self.n_sketches > 1:
            out[0] = sketch
        for (k, _), decision in zip(self._sketch_knobs[sketch], sampled, strict=True):
            knob = self.knobs[k]
            value = [int(x) for x in decision] if knob.kind == "split" else int(decision)
            if knob.kind == "categorical":  # the decision is the candidate's index
                index = int(decision)
            elif knob.kind == "compute_at":  # choices are sorted
                index = min(bisect.bisect_left(knob.choices, value), len(knob) - 1)
            else:
                index = self._choice_index[k].get(tuple(value), -1)  # type: ignore[arg-type]
            if not 0 <= index < len(knob):
                raise SpaceError(f"{self.task.uri}: knob {knob.name!r}: decision {value} is not one of its "
                                 f"{len(knob)} choices")
            out[k] = index
        return tuple(out)

    @functools.cached_property
    def _sketch_signatures(self) -> list[tuple[int, int, str]]:
        """``(sketch, number of instructions, signature)`` (:func:`_signature`) of each sketch,
        the longest first (so a sketch that begins with another sketch's instructions is tried
        before that one)."""
        new_trace = self._tvm.s_tir.schedule.Trace
        out = [(s, len(t.insts), _signature(new_trace, t.insts)) for s, t in enumerate(self._traces)]
        return sorted(out, key=lambda row: -row[1])

    @functools.cached_property
    def _choice_index(self) -> list[dict[Any, int]]:
        """Per knob, ``{choice: index}``."""
        return [{c: i for i, c in enumerate(knob.choices)} for knob in self.knobs]

    def design_space(self) -> list[Any]:
        """The sketches as a MetaSchedule design space: one ``tvm.s_tir.Schedule`` per sketch,
        in sketch order, whose trace is the sketch's (with the decisions MetaSchedule drew when
        it generated the space). What a MetaSchedule search strategy's ``pre_tuning`` takes;
        :meth:`config_of_trace` maps the traces it derives from them back to configs."""
        out = []
        for trace in self._traces:
            sch = self._tvm.s_tir.Schedule(self.mod)
            trace.apply_to_schedule(sch, remove_postproc=True)
            out.append(sch)
        return out

    def to_schedule(self, config: Config, check: bool = True) -> Any:
        """A ``tvm.s_tir.Schedule`` with the config applied (before postprocessing)."""
        sch = self._tvm.s_tir.Schedule(self.mod)
        self.trace(config, check).apply_to_schedule(sch, remove_postproc=True)
        return sch

    def apply(self, config: Config, check: bool = True) -> tuple[Any | None, str]:
        """Schedule + target postprocs. Returns ``(schedule, "")`` or ``(None, reason)``.

        ``check=False``: ``config`` is already canonical (see :meth:`trace`)."""
        try:
            sch = self.to_schedule(config, check)
        except SpaceError:
            raise
        except Exception as err:
            return None, f"schedule error: {str(err).strip().splitlines()[-1][:300]}"
        with self._lock:
            for p in self._postprocs:
                try:
                    if not p.apply(sch):
                        return None, f"rejected by postproc {type(p).__name__}"
                except Exception as err:
                    return None, f"postproc {type(p).__name__} failed: {str(err).strip()[:300]}"
        if self.task.packed:
            _annotate_preproc_as_stored(sch)
        return sch, ""

    def kernel_mod(self, config: Config, check: bool = True) -> Any | None:
        """The IRModule of the kernel that is built and timed for ``config`` (``None`` when
        the config does not schedule): :meth:`apply`'s module, and for packed weights without
        RewriteLayout's preprocessing blocks, which run once ahead of time, not in the kernel
        (as MetaSchedule's builder removes them)."""
        sch, _ = self.apply(config, check)
        if sch is None:
            return None
        if not self.task.packed:
            return sch.mod
        return self._tvm.s_tir.transform.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod)

    def is_valid(self, config: Config) -> bool:
        """True when the config schedules and passes the target's postprocs.

        On CUDA this includes ``VerifyGPUCode`` (threads per block, shared memory, ...), so
        it needs no GPU. On LLVM nearly every config is valid.
        """
        return self.apply(config)[0] is not None

    def excluded(self, config: Config) -> str | None:
        """Why ``config`` (knob indices in range) is not one of the space's :attr:`size` configs,
        when the space knows without building it; ``None`` otherwise.

        ``None`` here: every combination of a MetaSchedule space's knobs is one of its configs
        (an invalid one still counts). A space that enumerates its valid configs from
        restrictions (the Kernel Tuner spaces of :mod:`tune_gym.external`) names the broken
        restriction, and the replay backend answers such a config as ``invalid`` without data.
        """
        return None



class ScheduleFreeSpace(KnobSpace):
    """A knob space whose configs have no TVM program behind them (a registered kind's space:
    the simulated VTA, a space measured with Kernel Tuner). ``has_schedules`` is False and the
    schedule methods raise :class:`SpaceError` with :attr:`no_schedule_hint`, which says what
    to use instead. Subclasses build their own knobs (they do not call ``KnobSpace.__init__``)."""

    has_schedules = False
    #: Follows "<task URI>: "; ends where "a config has no TVM <what>" would go (``{what}``).
    no_schedule_hint = "a config has no TVM {what}"

    def _no_schedule(self, what: str) -> SpaceError:
        return SpaceError(f"{self.task.uri}: {self.no_schedule_hint.format(what=what)}")

    def trace(self, config: Config, check: bool = True) -> Any:
        raise self._no_schedule("trace")

    def to_schedule(self, config: Config, check: bool = True) -> Any:
        raise self._no_schedule("schedule")

    def config_of_trace(self, trace: Any) -> Config:
        raise self._no_schedule("trace")

    def design_space(self) -> list[Any]:
        raise self._no_schedule("design space")

    def apply(self, config: Config, check: bool = True) -> tuple[Any | None, str]:
        raise self._no_schedule("schedule")

    def kernel_mod(self, config: Config, check: bool = True) -> Any | None:
        raise self._no_schedule("kernel module")


class RecordedSpace(ScheduleFreeSpace):
    """A knob space rebuilt from its description (:meth:`KnobSpace.to_json`), without TVM.

    It has the knobs, sketches, sizes, flat indices and checks of the space it describes (the
    same :func:`~tune_gym.datasets.space_fingerprint`), which is all that replaying recorded
    measurements needs; it has no schedules (building those is what takes TVM). Replay can
    serve a dataset against the space it was recorded under this way
    (:mod:`tune_gym.datasets.spaces`).

    Raises:
        SpaceError: the description is not one (a missing field, a knob that is not
            ``[name, kind, choices]``, a sketch that names no knob).
    """

    no_schedule_hint = ("this space was rebuilt from its description, without TVM, and has no {what}; "
                        "KnobSpace.for_task(task, preset) builds the space with its schedules")

    def __init__(self, description: dict[str, Any]) -> None:
        try:
            task = Task.parse(description["task"])
            preset = description["preset"]
            knobs = [Knob(str(name), str(kind), tuple(tuple(c) if isinstance(c, list) else c for c in choices))
                     for name, kind, choices in description["knobs"]]
            active = [{int(i) for i in used} for used in description["active"]]
        except (KeyError, TypeError, ValueError) as err:
            raise SpaceError(f"not a knob space description ({type(err).__name__}: {err})") from None
        if preset not in PRESETS:
            raise SpaceError(f"unknown space preset {preset!r}; known: {', '.join(PRESETS)}")
        known = set(range(len(knobs)))
        if not active or any(not used <= known for used in active) or any(not k.choices for k in knobs):
            raise SpaceError("not a knob space description: a sketch uses a knob that does not exist, or a knob "
                             "has no choices")
        self.task = task
        self.preset = preset
        self._traces = [None] * len(active)  # no MetaSchedule trace: n_sketches only
        self._sketch_knobs = [[] for _ in active]
        self._set_knobs(knobs, active)


def _annotate_preproc_as_stored(sch: Any) -> None:
    """Re-annotate RewriteLayout's preprocessing blocks with ``1`` instead of ``True``.

    MetaSchedule's JSON database writes the annotation value ``True`` as ``1``, so a schedule
    compiled from an exported record (``compile_tir``) would differ from the measured one in
    that value alone; with ``1`` here both are the same module. Any value marks the block.
    """
    todo = [sch.get_sblock("root")]
    while todo:
        for rv in sch.get_child_blocks(todo.pop()):
            todo.append(rv)
            value = sch.get(rv).annotations.get(LAYOUT_REWRITE_PREPROC)
            if value is not None and type(value) is not int:
                sch.unannotate(rv, LAYOUT_REWRITE_PREPROC)
                sch.annotate(rv, LAYOUT_REWRITE_PREPROC, 1)


def _signature(trace_type: Any, insts: Sequence[Any]) -> str:
    """What identifies a sketch's instructions whatever their decisions: the instructions
    printed without decisions (kinds, attributes, constants, and which earlier result each
    input is, e.g. which loop a cache stage is computed at)."""
    return str(trace_type(list(insts), {}))


def _count_loops(mod: Any) -> int:
    """Number of loops in the module's main function (an upper bound for location indices)."""
    count = 0
    for line in mod.script().splitlines():
        head = line.strip()
        if head.startswith("for ") and " in " in head:
            count += head[4:head.index(" in ")].count(",") + 1
    return count


def _has_root(sch: Any) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:
        return False


def _short(name: str) -> str:
    """``ff`` -> ``f``, ``yy`` -> ``y``, ``rc`` -> ``rc``, ``i0`` -> ``i0``."""
    return name[0] if len(name) > 1 and len(set(name)) == 1 else name


@functools.lru_cache(maxsize=64)
def _cached_space(task: Task, preset: str) -> KnobSpace:
    return KnobSpace(task, preset)
