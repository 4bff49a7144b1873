"""AutoTVM's loop-level ("itervar") features of a scheduled program.

A port of AutoTVM's touch extractor (TVM ``src/autotvm/touch_extractor.{h,cc}``,
``src/autotvm/feature_visitor.cc``, ``python/tvm/autotvm/feature.py``;
``get_itervar_feature_flatten(sch, args, take_log=True)``) to the scheduled and postprocessed
TIR of a :class:`~tune_gym.space.KnobSpace` config (``space.kernel_mod(cfg)["main"]``: the kernel
that is built and timed).

For every loop, in order of first occurrence:

* ``length`` (extent; -1 when not constant), ``nest_level`` (1 = outermost, not logged),
  ``topdown`` (product of the extents of the enclosing loops and itself) and ``bottomup``
  (max over the touched buffers of ``count * reuse``, see below);
* the loop kind one-hot in AutoTVM's ``AnnotationType`` order (:data:`ANNOTATIONS`):
  blockIdx.x/y/z, threadIdx.x/y/z, unrolled, vectorized, parallel, serial, vthread;
* float ``add``/``mul``/``div`` counts of the expressions whose innermost loop it is;
* per buffer access below it (one slot per access ``<buffer>_<k>``, the k-th access of that
  buffer in visit order, as AutoTVM names them): ``stride`` (the loop variable's coefficient in
  the flattened index; 0 means the loop does not move through the buffer), ``mod`` (always
  -1 = none, as in AutoTVM, whose parser never sets it), ``count`` (product of the extents of
  the loops at or below it that move through the buffer), ``reuse`` (same for the loops that
  do not), and ``thread_count`` / ``thread_reuse`` (count and reuse relative to the first
  loop below a parallel / thread level).

Numbers go through AutoTVM's ``take_log`` transform ``x -> log2(x + 1)``, negative ``x ->
-log2(1 - x)``; ``nest_level`` and the one-hot stay raw. AutoTVM appends the config's "other
options" (its unroll knobs) raw; here they are read from the program: the largest
``pragma_auto_unroll_max_step`` and ``pragma_unroll_explicit`` annotations.

Differences from AutoTVM, forced by the IR: AutoTVM analysed a lowered, buffer-flattened
statement (``ana_lower``); here block iteration variables are replaced by their bindings and
the buffer indices flattened row-major, and ``stride`` is the exact linear coefficient
(AutoTVM's parser read it only from ``var * const`` patterns, 1 otherwise; floor division by
``c`` divides it, keeping it at least 1). AutoTVM concatenated each loop's touched accesses
(sorted by name) and zero-padded rows of different lengths; here each space gets a fixed
:class:`ItervarLayout` (a number of loop rows and one slot per access name, probed from a few
configs of every sketch), so a column always means the same loop position and access;
untouched slots, absent loops and invalid configs are zeros, extra loops are dropped.

Cost (measured, 2-core dev machine shared with other jobs, tvm 0.27): the walk itself takes
1.05 ms per config on resnet18:1 (full preset, 25-36 loops) and 0.29 ms on a 32x32x32 dense
(compact), on top of ``space.apply`` (11.0 ms and 1.2 ms): 12.0 ms and 1.6 ms per uncached
config; a cached row costs 6-17 us. Rows are cached per (task, preset, config) and per
featurizer, as AutoTVM cached them per config index (``FeatureCache``, cleared at 100,000).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tune_gym.space import Config, KnobSpace

__all__ = ["ANNOTATIONS", "LOOP_WIDTH", "TOUCH_WIDTH", "ItervarFeaturizer", "ItervarLayout", "RawItervar", "extract",
           "raw_itervar"]

#: AutoTVM's ``AnnotationType`` order (``feature_visitor.h``), the loop-kind one-hot.
ANNOTATIONS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "unrolled", "vectorized", "parallel", "serial", "vthread")
_ANN = {name: i for i, name in enumerate(ANNOTATIONS)}
#: Values per loop before the access slots: length, nest level, topdown, bottomup, one-hot, add/mul/div.
LOOP_WIDTH = 4 + len(ANNOTATIONS) + 3
#: Values per access slot: stride, mod, count, reuse, thread_count, thread_reuse.
TOUCH_WIDTH = 6
#: Values appended per program: max ``pragma_auto_unroll_max_step``, max ``pragma_unroll_explicit``.
OTHER_WIDTH = 2
#: AutoTVM's FeatureCache is cleared when it holds this many entries (xgboost_cost_model.py).
CACHE_LIMIT = 100_000


def _trans(x: float) -> float:
    """AutoTVM's ``take_log`` transform (touch_extractor.cc)."""
    return -math.log2(1.0 - x) if x < 0 else math.log2(x + 1.0)


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
class _Touch:
    stride: int = 0
    mod: int = -1
    count: int = 1
    reuse: int = 1
    thread_count: int = 0
    thread_reuse: int = 0


@dataclass
class _Loop:
    name: str
    length: int
    nest_level: int
    ann: int
    topdown: int
    bottomup: int = -1
    add: int = 0
    mul: int = 0
    div: int = 0
    touch: dict[str, _Touch] = field(default_factory=dict)


@dataclass
class RawItervar:
    """One program's features before layout: loop rows, per-loop access patterns, pragmas."""

    loops: list[_Loop]
    other: tuple[float, float]

    @property
    def keys(self) -> set[str]:
        return {k for loop in self.loops for k in loop.touch}


class _Walker:
    """The touch extractor: one pass over a PrimFunc body (AutoTVM's TouchExtractor)."""

    def __init__(self) -> None:
        from tune_gym._tvm import tvm

        tv = tvm()
        t, e, s = tv.tirx, tv.ir.prim.expr, tv.s_tir
        self.T, self.E, self.S = t, e, s
        self.load = tv.ir.expr.TensorLoad  # tvm 0.27's BufferLoad
        self.loops: dict[int, _Loop] = {}  # loop var handle -> features, in visit order
        self.stack: list[int] = []
        self.skip: list[int] = []
        self.topdown = 1
        self.counter: dict[str, int] = {}
        self.env: dict[int, dict[int, int]] = {}  # block var handle -> {loop handle: coefficient}
        self.unroll = [0.0, 0.0]
        self.arith = {e.Add: "add", e.Sub: "add", e.Mul: "mul", e.Div: "div", e.Mod: "div"}
        self.binary = (e.FloorDiv, e.FloorMod, e.Min, e.Max, e.EQ, e.NE, e.LT, e.LE, e.GT, e.GE, e.And, e.Or)

    # ------------------------------------------------------------------ loops
    def enter(self, handle: int, name: str, length: int, ann: int) -> None:
        self.stack.append(handle)
        self.topdown *= length
        self.loops[handle] = _Loop(name, length, len(self.stack), ann, self.topdown)

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
            self.loops[h].touch[key] = _Touch(stride=coef.get(h, 0))

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
            if annotations:
                for i, key in enumerate(("pragma_auto_unroll_max_step", "pragma_unroll_explicit")):
                    if key in annotations:
                        self.unroll[i] = max(self.unroll[i], float(int(annotations[key])))
            var = n.loop_var
            self.enter(var.__chandle__(), str(var.name), length, ann)
            self.stmt(n.body)
            self.exit()
        elif t is T.SeqStmt:
            for x in n.seq:
                self.stmt(x)
        elif t is S.SBlockRealize:
            block = n.block
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


def extract(func: Any) -> RawItervar:
    """Itervar features of one PrimFunc (scheduled, postprocessed), before layout."""
    walker = _Walker()
    walker.stmt(func.body)
    return RawItervar(list(walker.loops.values()), (walker.unroll[0], walker.unroll[1]))


@dataclass(frozen=True)
class ItervarLayout:
    """Fixed columns for one space: ``n_loops`` loop rows, one slot per access name.

    Width: ``n_loops * (LOOP_WIDTH + TOUCH_WIDTH * len(keys)) + OTHER_WIDTH``.
    """

    n_loops: int
    keys: tuple[str, ...]

    @property
    def dim(self) -> int:
        return self.n_loops * (LOOP_WIDTH + TOUCH_WIDTH * len(self.keys)) + OTHER_WIDTH

    @classmethod
    def probe(cls, space: KnobSpace, n: int = 8, seed: int = 0) -> ItervarLayout:
        """The layout covering the first config of every sketch and ``n`` seeded random configs.

        Loop counts vary a little between configs (compute-at locations, fused parallel
        loops); a config with more loops than probed loses its extra rows. AutoTVM has no
        counterpart (its templates fix the loop structure); ``n=8`` keeps probing cheap
        (0.26 s on resnet18:1, full preset).
        """
        offsets = np.cumsum((0, *space.sketch_sizes[:-1]))
        configs = [space.config(int(o)) for o in offsets] + space.sample(np.random.default_rng(seed), n)
        raws = [r for r in (raw_itervar(space, c) for c in configs) if r is not None]
        return cls(max((len(r.loops) for r in raws), default=0),
                   tuple(sorted(set().union(*(r.keys for r in raws))) if raws else ()))

    def flatten(self, raw: RawItervar | None) -> np.ndarray:
        """The fixed-width row of one program (zeros for ``None``, an invalid config)."""
        width = LOOP_WIDTH + TOUCH_WIDTH * len(self.keys)
        out = np.zeros(self.dim, dtype=np.float32)
        if raw is None:
            return out
        slot = {k: LOOP_WIDTH + TOUCH_WIDTH * j for j, k in enumerate(self.keys)}
        for i, loop in enumerate(raw.loops[: self.n_loops]):
            row = out[i * width: (i + 1) * width]
            row[:4] = (_trans(loop.length), loop.nest_level, _trans(loop.topdown), _trans(loop.bottomup))
            row[4 + loop.ann] = 1.0
            row[4 + len(ANNOTATIONS): LOOP_WIDTH] = (_trans(loop.add), _trans(loop.mul), _trans(loop.div))
            for key, p in loop.touch.items():
                j = slot.get(key)
                if j is not None:
                    row[j: j + TOUCH_WIDTH] = [_trans(v) for v in (p.stride, p.mod, p.count, p.reuse,
                                                                   p.thread_count, p.thread_reuse)]
        out[-OTHER_WIDTH:] = raw.other
        return out


_RAW_CACHE: dict[tuple[str, str, Config], RawItervar | None] = {}


def raw_itervar(space: KnobSpace, config: Config) -> RawItervar | None:
    """The features of one config before layout (``None`` when it does not schedule), cached
    per (task, preset, config)."""
    key = (space.task.uri, space.preset, tuple(config))
    if key not in _RAW_CACHE:
        if len(_RAW_CACHE) >= CACHE_LIMIT:
            _RAW_CACHE.clear()
        mod = space.kernel_mod(config)  # packed weights: without the ahead-of-time layout rewrite
        _RAW_CACHE[key] = None if mod is None else extract(mod["main"])
    return _RAW_CACHE[key]


class ItervarFeaturizer:
    """``configs (n x n_knobs int) -> itervar features (n x layout.dim float32)``, cached.

    Args:
        space: the configs' space.
        layout: the columns (default: :meth:`ItervarLayout.probe` of ``space``).
    """

    def __init__(self, space: KnobSpace, layout: ItervarLayout | None = None) -> None:
        self.space = space
        self.layout = layout or ItervarLayout.probe(space)
        self.dim = self.layout.dim
        self._rows: dict[Config, np.ndarray] = {}

    def __call__(self, configs: np.ndarray | Sequence[Config]) -> np.ndarray:
        idx = np.asarray(configs, dtype=np.int64).reshape(-1, self.space.n_knobs)
        out = np.empty((len(idx), self.dim), dtype=np.float32)
        for i, c in enumerate(idx):
            cfg = tuple(int(v) for v in c)
            row = self._rows.get(cfg)
            if row is None:
                if len(self._rows) >= CACHE_LIMIT:
                    self._rows.clear()
                row = self._rows[cfg] = self.layout.flatten(raw_itervar(self.space, cfg))
            out[i] = row
        return out
