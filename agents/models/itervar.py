"""AutoTVM's loop-level ("itervar") features of a scheduled program.

A port of AutoTVM's itervar features (``python/tvm/autotvm/feature.py``;
``get_itervar_feature_flatten(sch, args, take_log=True)``) over the loop nest of a
:class:`~tune_gym.space.KnobSpace` config's kernel, as :mod:`tune_gym.features.loops` walks it
(AutoTVM's touch extractor, ported there; that module documents each loop's fields).

Per loop, in order of first occurrence: ``length``, ``nest_level`` (not logged), ``topdown``
and ``bottomup``; the loop kind one-hot in AutoTVM's ``AnnotationType`` order
(:data:`ANNOTATIONS`); float ``add``/``mul``/``div`` counts; then per buffer access slot
(``<buffer>_<k>``) ``stride``, ``mod``, ``count``, ``reuse``, ``thread_count``, ``thread_reuse``.

Numbers go through AutoTVM's ``take_log`` transform ``x -> log2(x + 1)``, negative ``x ->
-log2(1 - x)``; ``nest_level`` and the one-hot stay raw. AutoTVM appends the config's "other
options" (its unroll knobs) raw; here they are read from the program: the largest
``pragma_auto_unroll_max_step`` and ``pragma_unroll_explicit`` annotations.

Differences from AutoTVM: those of the walk (:mod:`tune_gym.features.loops`), and the layout.
AutoTVM concatenated each loop's touched accesses (sorted by name) and zero-padded rows of
different lengths; here each space gets a fixed :class:`ItervarLayout` (a number of loop rows
and one slot per access name, probed from a few configs of every sketch), so a column always
means the same loop position and access; untouched slots, absent loops and invalid configs are
zeros, extra loops are dropped.

Cost (measured, 2-core machine shared with other jobs, tvm 0.27): the walk itself takes
1.05 ms per config on resnet18:1 (full preset, 25-36 loops) and 0.29 ms on a 32x32x32 dense
(compact), on top of ``space.apply`` (11.0 ms and 1.2 ms): 12.0 ms and 1.6 ms per uncached
config; a cached row costs 6-17 us. Nests are cached per (task, preset, config) in the
process-wide :data:`~tune_gym.features.loops.NEST_CACHE`, shared with the other loop encoders,
and rows per featurizer, as AutoTVM cached them per config index (``FeatureCache``, cleared at
100,000).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tune_gym.features.loops import ANNOTATIONS, CACHE_LIMIT, NEST_CACHE, extract_loops, loop_nest, take_log
from tune_gym.features.loops import LoopNest as RawItervar
from tune_gym.space import Config, KnobSpace

__all__ = ["ANNOTATIONS", "LOOP_WIDTH", "TOUCH_WIDTH", "ItervarFeaturizer", "ItervarLayout", "RawItervar", "extract",
           "raw_itervar"]

#: Values per loop before the access slots: length, nest level, topdown, bottomup, one-hot, add/mul/div.
LOOP_WIDTH = 4 + len(ANNOTATIONS) + 3
#: Values per access slot: stride, mod, count, reuse, thread_count, thread_reuse.
TOUCH_WIDTH = 6
#: Values appended per program: max ``pragma_auto_unroll_max_step``, max ``pragma_unroll_explicit``.
OTHER_WIDTH = 2
#: Itervar features of one PrimFunc (scheduled, postprocessed), before layout.
extract = extract_loops


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
            row[:4] = (take_log(loop.length), loop.nest_level, take_log(loop.topdown), take_log(loop.bottomup))
            row[4 + loop.ann] = 1.0
            row[4 + len(ANNOTATIONS): LOOP_WIDTH] = (take_log(loop.add), take_log(loop.mul), take_log(loop.div))
            for key, p in loop.touch.items():
                j = slot.get(key)
                if j is not None:
                    row[j: j + TOUCH_WIDTH] = [take_log(v) for v in (p.stride, p.mod, p.count, p.reuse,
                                                                   p.thread_count, p.thread_reuse)]
        out[-OTHER_WIDTH:] = raw.other
        return out


#: The nests behind the rows: the process-wide :data:`tune_gym.features.loops.NEST_CACHE`.
_RAW_CACHE = NEST_CACHE


def raw_itervar(space: KnobSpace, config: Config) -> RawItervar | None:
    """The features of one config before layout (``None`` when it does not schedule), cached
    per (task, preset, config) (:func:`tune_gym.features.loops.loop_nest`)."""
    return loop_nest(space, config, _RAW_CACHE)


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
