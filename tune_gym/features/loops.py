"""The loop nest of a scheduled program: every loop with its kind, extent, accesses and arithmetic.

One pass over the scheduled and postprocessed TIR of a :class:`~tune_gym.space.KnobSpace`
config (``space.kernel_mod(cfg)["main"]``: the kernel that is built and timed), after AutoTVM's
touch extractor (TVM ``src/autotvm/touch_extractor.{h,cc}``, ``feature_visitor.cc``). It is the
raw material of the loop-level encoders: AutoTVM's itervar features
(:mod:`agents.models.itervar`) and MetaTune's loop graph (:mod:`tune_gym.features.graph`).

For every loop (:class:`Loop`), in order of first occurrence:

* ``name`` (the loop variable, as MetaSchedule names it: ``ff_0``, ``nn_0_ff_0_fused``,
  ``ax0``, ``k_1_init``), ``length`` (extent; -1 when not constant), ``nest_level``
  (1 = outermost), ``parent`` (index of the enclosing loop, -1 at the top), ``blocks`` (the
  blocks below it, in visit order), ``topdown`` (product of the extents of the enclosing loops
  and itself) and ``bottomup`` (max over the touched buffers of ``count * reuse``);
* ``ann``: the loop kind, an index into :data:`ANNOTATIONS` (AutoTVM's ``AnnotationType``
  order): blockIdx.x/y/z, threadIdx.x/y/z, unrolled, vectorized, parallel, serial, vthread;
* float ``add``/``mul``/``div`` counts of the expressions whose innermost loop it is;
* ``unroll``: its ``pragma_auto_unroll_max_step`` annotation (MetaSchedule's unroll decision,
  on the outermost loop of a block; 0 where there is none);
* ``touch``: per buffer access below it (one key per access ``<buffer>_<k>``, the k-th access
  of that buffer in visit order, as AutoTVM names them), an :class:`Access`: ``stride`` (the
  loop variable's coefficient in the flattened index; 0 means the loop does not move through
  the buffer), ``mod`` (always -1 = none, as in AutoTVM), ``count`` (product of the extents of
  the loops at or below it that move through the buffer), ``reuse`` (same for the loops that
  do not), and ``thread_count`` / ``thread_reuse`` (count and reuse relative to the first loop
  below a parallel / thread level).

The nest also records the program's unroll pragmas (the largest
``pragma_auto_unroll_max_step`` and ``pragma_unroll_explicit`` annotations).

Differences from AutoTVM, forced by the IR: AutoTVM analysed a lowered, buffer-flattened
statement; here block iteration variables are replaced by their bindings and the buffer indices
flattened row-major, and ``stride`` is the exact linear coefficient (AutoTVM's parser read it
only from ``var * const`` patterns, 1 otherwise; floor division by ``c`` divides it, keeping it
at least 1).

Cost (measured, 2-core machine shared with other jobs, tvm 0.27): the walk takes about 1 ms per
config on resnet18:1 (full preset, 25-36 loops) and 0.3 ms on a 32x32x32 dense (compact), on
top of ``space.apply`` (11 ms and 1.2 ms). :func:`loop_nest` caches nests per (task, preset,
config) in one process-wide cache shared by every encoder.

Example:
    >>> space = KnobSpace.for_task(Task.parse("resnet18:1"), "compact")
    >>> nest = loop_nest(space, space.config(0))
    >>> [(loop.name, loop.length, ANNOTATIONS[loop.ann]) for loop in nest.loops[:2]]
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tune_gym.space import Config, KnobSpace

__all__ = ["ANNOTATIONS", "CACHE_LIMIT", "NEST_CACHE", "Access", "Loop", "LoopNest", "extract_loops", "loop_nest",
           "take_log", "take_logs"]

#: AutoTVM's ``AnnotationType`` order (``feature_visitor.h``), the loop-kind one-hot.
ANNOTATIONS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "unrolled", "vectorized", "parallel", "serial", "vthread")
_ANN = {name: i for i, name in enumerate(ANNOTATIONS)}
#: Entries a nest cache holds before it is cleared (AutoTVM's FeatureCache limit, xgboost_cost_model.py).
CACHE_LIMIT = 100_000


def take_log(x: float) -> float:
    """AutoTVM's ``take_log`` transform (touch_extractor.cc): ``log2(x + 1)``, negative ``x``
    to ``-log2(1 - x)``."""
    return -math.log2(1.0 - x) if x < 0 else math.log2(x + 1.0)


def take_logs(x: np.ndarray) -> np.ndarray:
    """:func:`take_log` of every element of an array (same shape and float dtype)."""
    return np.sign(x) * np.log2(1.0 + np.abs(x))


def _const(value: Any) -> int:
    """A buffer extent as int (1 when symbolic)."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    return int(value.value) if hasattr(value, "value") else 1


def _parallel_level(ann: int) -> int:
    """AutoTVM's ``ParallelLevel``: 2 for blockIdx, 1 for threadIdx and parallel, else 0."""
    if ann <= 2:
        return 2
    if ann <= 5 or ann == _ANN["parallel"]:
        return 1
    return 0


@dataclass
class Access:
    """How one loop moves through one buffer access below it (see the module docstring)."""

    stride: int = 0
    mod: int = -1
    count: int = 1
    reuse: int = 1
    thread_count: int = 0
    thread_reuse: int = 0


@dataclass
class Loop:
    """One loop of the nest (see the module docstring for each field)."""

    name: str
    length: int
    nest_level: int
    ann: int
    topdown: int
    parent: int = -1
    bottomup: int = -1
    add: int = 0
    mul: int = 0
    div: int = 0
    unroll: int = 0
    touch: dict[str, Access] = field(default_factory=dict)
    blocks: list[str] = field(default_factory=list)


@dataclass
class LoopNest:
    """One program's loops, in order of first occurrence, and its unroll pragmas."""

    loops: list[Loop]
    other: tuple[float, float]

    @property
    def keys(self) -> set[str]:
        """The access names (``<buffer>_<k>``) touched by any loop."""
        return {k for loop in self.loops for k in loop.touch}


class _Walker:
    """The touch extractor: one pass over a PrimFunc body (AutoTVM's TouchExtractor)."""

    def __init__(self) -> None:
        from tune_gym.tvm_support import tvm

        tv = tvm()
        t, e, s = tv.tirx, tv.ir.prim.expr, tv.s_tir
        self.T, self.E, self.S = t, e, s
        self.load = tv.ir.expr.TensorLoad  # tvm 0.27's BufferLoad
        self.loops: dict[int, Loop] = {}  # loop var handle -> features, in visit order
        self.position: dict[int, int] = {}  # loop var handle -> index in visit order
        self.stack: list[int] = []
        self.topdown = 1
        self.counter: dict[str, int] = {}
        self.env: dict[int, dict[int, int]] = {}  # block var handle -> {loop handle: coefficient}
        self.unroll = [0.0, 0.0]
        self.arith = {e.Add: "add", e.Sub: "add", e.Mul: "mul", e.Div: "div", e.Mod: "div"}
        self.binary = (e.FloorDiv, e.FloorMod, e.Min, e.Max, e.EQ, e.NE, e.LT, e.LE, e.GT, e.GE, e.And, e.Or)

    # ------------------------------------------------------------------ loops
    def enter(self, handle: int, name: str, length: int, ann: int, unroll: int) -> None:
        parent = self.position[self.stack[-1]] if self.stack else -1
        self.stack.append(handle)
        self.topdown *= length
        self.position[handle] = len(self.loops)
        self.loops[handle] = Loop(name, length, len(self.stack), ann, self.topdown, parent, unroll=unroll)

    def exit(self) -> None:
        handle = self.stack[-1]
        me = self.loops[handle]
        for key, pat in me.touch.items():  # update count and reuse of the loops above (and self)
            for h in self.stack:
                upper = self.loops[h].touch[key]
                if pat.stride != 0:
                    upper.count *= me.length
                else:
                    upper.reuse *= me.length
        self.stack.pop()
        if me.length != 0:
            self.topdown //= me.length
        me.bottomup = max((p.count * p.reuse for p in me.touch.values()), default=-1)
        level = _parallel_level(me.ann)
        if self.stack and _parallel_level(self.loops[self.stack[-1]].ann) == level + 1:
            for key, pat in me.touch.items():  # the base of the parallel level above
                for h in self.stack:
                    if _parallel_level(self.loops[h].ann) == level + 1:
                        upper = self.loops[h].touch[key]
                        upper.thread_reuse, upper.thread_count = -pat.reuse, -pat.count
        for pat in me.touch.values():
            if pat.thread_count < 0:
                pat.thread_count = pat.count // -pat.thread_count
                pat.thread_reuse = pat.reuse // -pat.thread_reuse

    # ------------------------------------------------------------------ memory
    def mem(self, buffer: Any, indices: Sequence[Any]) -> None:
        name = str(buffer.name)
        k = self.counter.get(name, 0)
        self.counter[name] = k + 1
        key = f"{name}_{k}"
        shape = [_const(d) for d in buffer.shape]
        coef: dict[int, int] = {}
        stride = 1
        for dim, idx in zip(reversed(shape), reversed(list(indices))):
            for h, c in self.linear(idx).items():
                coef[h] = coef.get(h, 0) + c * stride
            stride *= max(dim, 1)
        for h in self.stack:
            self.loops[h].touch[key] = Access(stride=coef.get(h, 0))

    def linear(self, e: Any) -> dict[int, int]:
        """``{loop handle: coefficient}`` of an index expression (block vars substituted)."""
        E = self.E
        t = type(e)
        if t is E.Var:
            h = e.__chandle__()
            if h in self.env:
                return self.env[h]
            return {h: 1} if h in self.loops else {}
        if t is E.IntImm:
            return {}
        if t is E.Add or t is E.Sub:
            out = dict(self.linear(e.a))
            sign = 1 if t is E.Add else -1
            for h, c in self.linear(e.b).items():
                out[h] = out.get(h, 0) + sign * c
            return {h: c for h, c in out.items() if c != 0}
        if t is E.Mul:
            a, b = e.a, e.b
            if type(b) is E.IntImm:
                return {h: c * int(b.value) for h, c in self.linear(a).items()}
            if type(a) is E.IntImm:
                return {h: c * int(a.value) for h, c in self.linear(b).items()}
            out = dict(self.linear(a))
            out.update(self.linear(b))
            return out
        if t is E.FloorDiv or t is E.Div:
            b = e.b
            d = abs(int(b.value)) if type(b) is E.IntImm and int(b.value) != 0 else 1
            return {h: (c // d if abs(c) >= d else (1 if c > 0 else -1)) for h, c in self.linear(e.a).items()}
        if t is E.FloorMod or t is E.Mod or t is E.Cast:
            return self.linear(e.a if t is not E.Cast else e.value)
        return {}

    # ------------------------------------------------------------------ statements
    def stmt(self, n: Any) -> None:
        T, S = self.T, self.S
        t = type(n)
        if t is T.For:
            ext = n.extent
            length = int(ext.value) if type(ext) is self.E.IntImm else -1
            kind = int(n.kind)
            if kind == 4:  # thread binding
                tag = str(n.thread_binding.thread_tag) if n.thread_binding is not None else ""
                ann = _ANN.get(tag, _ANN["vthread"] if tag.startswith("vthread") else _ANN["parallel"])
            else:
                ann = _ANN[("serial", "parallel", "vectorized", "unrolled")[kind]] if kind < 4 else _ANN["serial"]
            annotations = n.annotations
            unroll = 0
            if annotations:
                for i, key in enumerate(("pragma_auto_unroll_max_step", "pragma_unroll_explicit")):
                    if key in annotations:
                        self.unroll[i] = max(self.unroll[i], float(int(annotations[key])))
                unroll = int(annotations.get("pragma_auto_unroll_max_step", 0))
            var = n.loop_var
            self.enter(var.__chandle__(), str(var.name), length, ann, unroll)
            self.stmt(n.body)
            self.exit()
        elif t is T.SeqStmt:
            for x in n.seq:
                self.stmt(x)
        elif t is S.SBlockRealize:
            block = n.block
            name = str(block.name_hint)
            for h in self.stack:
                self.loops[h].blocks.append(name)
            for iv, value in zip(block.iter_vars, n.iter_values):
                self.env[iv.var.__chandle__()] = self.linear(value)
            self.stmt(block)
        elif t is S.SBlock:
            if n.init is not None:
                self.stmt(n.init)
            self.stmt(n.body)
        elif t is T.BufferStore:
            self.mem(n.buffer, n.indices)
            self.expr(n.value)
        elif t is T.IfThenElse:
            self.expr(n.condition)
            self.stmt(n.then_case)
            if n.else_case is not None:
                self.stmt(n.else_case)
        elif t is T.Evaluate:
            self.expr(n.value)
        else:  # AttrStmt, Bind, AllocBuffer, DeclBuffer, ...: their value and body
            value = getattr(n, "value", None)
            if value is not None and not isinstance(value, (int, float, str)):
                self.expr(value)
            body = getattr(n, "body", None)
            if body is not None:
                self.stmt(body)

    def expr(self, e: Any) -> None:
        E = self.E
        t = type(e)
        kind = self.arith.get(t)
        if kind is not None:
            if self.stack and str(e.ty).startswith("float"):
                loop = self.loops[self.stack[-1]]
                setattr(loop, kind, getattr(loop, kind) + 1)
            self.expr(e.a)
            self.expr(e.b)
        elif t is self.load:
            self.mem(e.source, e.indices)
            for i in e.indices:
                self.expr(i)
        elif t is E.Var or t is E.IntImm or t is E.FloatImm:
            return
        elif t in self.binary:
            self.expr(e.a)
            self.expr(e.b)
        elif t is E.Select:
            self.expr(e.condition)
            self.expr(e.true_value)
            self.expr(e.false_value)
        elif t is E.Cast or t is E.Broadcast:
            self.expr(e.value)
        elif t is E.Not:
            self.expr(e.a)
        elif t is E.Ramp:
            self.expr(e.base)
        elif t is E.Let:
            self.expr(e.value)
            self.expr(e.body)
        else:
            for arg in getattr(e, "args", ()) or ():  # Call
                if not isinstance(arg, (int, float, str)) and hasattr(arg, "ty"):
                    self.expr(arg)


def extract_loops(func: Any) -> LoopNest:
    """The loop nest of one PrimFunc (scheduled and postprocessed).

    Args:
        func: a ``tvm.tirx.PrimFunc``, e.g. ``space.kernel_mod(config)["main"]``.

    Returns:
        The :class:`LoopNest`: loops in order of first occurrence, and the unroll pragmas.
    """
    walker = _Walker()
    walker.stmt(func.body)
    return LoopNest(list(walker.loops.values()), (walker.unroll[0], walker.unroll[1]))


#: The process-wide cache of :func:`loop_nest`: ``(task uri, preset, config) -> nest or None``.
NEST_CACHE: dict[tuple[str, str, Config], LoopNest | None] = {}


def loop_nest(space: KnobSpace, config: Config,
              cache: MutableMapping[tuple[str, str, Config], LoopNest | None] | None = None) -> LoopNest | None:
    """The loop nest of one config's kernel, cached per (task, preset, config).

    Args:
        space: the config's space.
        config: a config of ``space`` (knob indices).
        cache: where nests are kept (default :data:`NEST_CACHE`); cleared when it holds
            :data:`CACHE_LIMIT` entries.

    Returns:
        The nest of ``space.kernel_mod(config)["main"]`` (for packed weights, without the
        layout rewrite that runs once ahead of time), or ``None`` when the config does not
        schedule or a postproc rejects it. Treat it as read-only: it is shared.
    """
    cache = NEST_CACHE if cache is None else cache
    key = (space.task.uri, space.preset, tuple(int(v) for v in config))
    if key not in cache:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        mod = space.kernel_mod(key[2])
        cache[key] = None if mod is None else extract_loops(mod["main"])
    return cache[key]
