"""Config features for cost models.

``knob``: per-knob values, vectorized through lookup tables (microseconds per config):
    split knobs -> log2 of each factor; categorical (numbers) -> ``sign(v) * log2(1 + |v|)``
    (``log2(1 + v)`` for the non-negative values MetaSchedule samples); nominal (strings,
    booleans: unordered) -> one-hot over the knob's choices; compute_at -> the location index;
    sketch -> one-hot. The columns are the task's knobs; the knob *values*
    (tile sizes, unroll steps) mean the same in every task of one op family, so
    :meth:`KnobFeaturizer.from_knobs` maps another task's records onto them by knob name
    (AutoTVM's "knob" features, ``ConfigEntity.get_flatten_feature``, need equal templates).
``itervar``: AutoTVM's loop-level features, see :mod:`agents.models.itervar`.
``loop``: loop-level statistics of the lowered, postprocessed program from MetaSchedule's
    ``PerStoreFeature`` extractor (per-store buffer access, arithmetic and loop-structure
    features, summed over stores; the ``metaschedule`` agent's model reads the same rows per
    store and sums its predictions instead): task-independent, so usable across tasks
    (transfer), but slow: 20 ms of CPU per uncached config on resnet18:1 (full), 11 of them
    ``space.apply`` and 8.5 TVM's extraction, and 10 ms on resnet18:7 (compact), measured with
    ``python -m benchmarks.feature_cost`` on a 2-core Zen 4 host shared with other jobs. Cached
    per (task, preset, config).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from tune_gym.space import Config, Knob, KnobSpace

__all__ = ["LOOP_FEATURE_DIM", "KnobFeaturizer", "knob_width", "log_gflops", "loop_features"]


def knob_width(knob: Knob) -> int:
    """Feature columns of a knob: one per split factor, one per choice of a sketch or nominal
    knob (one-hot), else one."""
    if knob.kind == "split":
        return len(knob.choices[0])
    return len(knob) if knob.kind in ("sketch", "nominal") else 1


def knob_values(kind: str, values: Sequence[Any], width: int, choices: Sequence[Any] = ()) -> np.ndarray:
    """Feature rows of knob values (``len(values) x width``); NaN where a value does not fit.

    ``choices``: the knob's choices, which a nominal knob's one-hot columns stand for (a value
    matches a choice of the same type only: ``1``, ``1.0`` and ``True`` are three values)."""
    out = np.full((len(values), width), np.nan)
    column = {(type(c), c): j for j, c in enumerate(choices)} if kind == "nominal" else {}
    for i, v in enumerate(values):
        if v is None:
            continue
        if kind == "split":
            factors = np.asarray(v, dtype=np.float64).reshape(-1)
            if factors.size == width and np.all(factors > 0):
                out[i] = np.log2(factors)
        elif kind == "sketch":
            out[i] = 0.0
            if 0 <= int(v) < width:
                out[i, int(v)] = 1.0
        elif kind == "nominal":
            j = column.get((type(v), v)) if isinstance(v, Hashable) else None
            if j is not None and j < width:
                out[i] = 0.0
                out[i, j] = 1.0
        elif kind == "categorical":
            out[i, 0] = math.copysign(math.log2(1.0 + abs(float(v))), float(v))
        else:
            out[i, 0] = float(v)
    return out


class KnobFeaturizer:
    """``configs (n x n_knobs int) -> features (n x d float32)`` via per-knob tables.

    Args:
        space: the knobs.
        inactive_nan: features of knobs that a config's sketch does not use are NaN
            (XGBoost's "missing") instead of the values of index 0; records of other tasks
            (:meth:`from_knobs`) hold only the active knobs, so transfer needs this.
    """

    def __init__(self, space: KnobSpace, inactive_nan: bool = False) -> None:
        self.space = space
        self.inactive_nan = inactive_nan
        self.tables: list[np.ndarray] = []
        self.widths: list[int] = []
        for knob in space.knobs:
            width = knob_width(knob)
            self.tables.append(knob_values(knob.kind, knob.choices, width, knob.choices).astype(np.float32))
            self.widths.append(width)
        self.dim = sum(self.widths)
        self._nan_mask = np.repeat(~space.active_mask, self.widths, axis=1)  # sketch x feature columns

    def __call__(self, configs: np.ndarray | Sequence[Config]) -> np.ndarray:
        idx = np.asarray(configs, dtype=np.int64).reshape(-1, len(self.tables))
        out = np.concatenate([t[idx[:, j]] for j, t in enumerate(self.tables)], axis=1)
        if self.inactive_nan and self.space.n_sketches > 1:
            out[self._nan_mask[self.space.sketches(idx)]] = np.nan
        return out

    def from_knobs(self, knobs: Sequence[dict[str, Any]]) -> np.ndarray:
        """Features of configs given as ``{knob name: value}`` (a record's ``knobs``), possibly
        of another task: knobs are matched by name; a knob the dict lacks, or whose value
        does not fit (another number of split factors), is NaN (missing)."""
        cols = [knob_values(k.kind, [d.get(k.name) for d in knobs], w, k.choices)
                for k, w in zip(self.space.knobs, self.widths)]
        return np.concatenate(cols, axis=1).astype(np.float32) if cols else np.zeros((len(knobs), 0), np.float32)


#: Width of :func:`loop_features` rows (PerStoreFeature with default settings).
LOOP_FEATURE_DIM = 164


@functools.lru_cache(maxsize=4)
def _extractor() -> Any:
    from tune_gym.tvm_support import ms

    return ms().feature_extractor.PerStoreFeature(extract_workload=False)


@functools.lru_cache(maxsize=4)
def _context(space: KnobSpace) -> Any:
    from tune_gym.tvm_support import ms

    return ms().TuneContext(mod=space.mod, target=space.target, num_threads=1)


_LOOP_CACHE: dict[tuple[str, str, Config], np.ndarray] = {}


def loop_features(space: KnobSpace, configs: Sequence[Config]) -> np.ndarray:
    """Task-independent loop features (n x LOOP_FEATURE_DIM); invalid configs give zeros.

    Each store's feature row is summed over the stores of the program, then passed through
    ``sign(x) * log2(1 + |x|)`` (the raw counts span many orders of magnitude).
    """
    from tune_gym.tvm_support import ms

    m = ms()
    out = np.zeros((len(configs), LOOP_FEATURE_DIM), dtype=np.float32)
    todo, schedules = [], []
    for i, cfg in enumerate(configs):
        key = (space.task.uri, space.preset, tuple(cfg))
        if key in _LOOP_CACHE:
            out[i] = _LOOP_CACHE[key]
            continue
        sch, _ = space.apply(cfg)
        if sch is None:
            _LOOP_CACHE[key] = out[i]
            continue
        todo.append((i, key))
        schedules.append(m.MeasureCandidate(sch, m.arg_info.ArgInfo.from_prim_func(sch.mod["main"])))
    if schedules:
        feats = _extractor().extract_from(_context(space), schedules)
        for (i, key), f in zip(todo, feats):
            arr = f.numpy().sum(axis=0)
            row = np.sign(arr) * np.log2(1.0 + np.abs(arr))
            out[i, : min(LOOP_FEATURE_DIM, row.size)] = row[:LOOP_FEATURE_DIM]
            _LOOP_CACHE[key] = out[i].copy()
    return out


def log_gflops(gflops: np.ndarray | Sequence[float]) -> np.ndarray:
    """``log2(1 + GFLOPS)``: a target scale on which tree models and GPs behave."""
    return np.log2(1.0 + np.asarray(gflops, dtype=np.float64))
