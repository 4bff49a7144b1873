"""Config features for cost models.

``knob``: per-knob values, vectorized through lookup tables (microseconds per config):
    split knobs -> log2 of each factor; categorical -> log2(1 + value); compute_at -> the
    location index; sketch -> one-hot. Task-specific (the columns are the task's knobs).
``loop``: loop-level statistics of the lowered, postprocessed program from MetaSchedule's
    ``PerStoreFeature`` extractor (per-store buffer access, arithmetic and loop-structure
    features, summed over stores): task-independent, so usable across tasks (transfer), but
    about a millisecond per config. Cached per (task, preset, config).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tune_gym.space import Config, KnobSpace

__all__ = ["LOOP_FEATURE_DIM", "KnobFeaturizer", "log_gflops", "loop_features"]


class KnobFeaturizer:
    """``configs (n x n_knobs int) -> features (n x d float32)`` via per-knob tables."""

    def __init__(self, space: KnobSpace) -> None:
        self.tables: list[np.ndarray] = []
        for knob in space.knobs:
            if knob.kind == "split":
                table = np.log2(np.asarray(knob.choices, dtype=np.float64))
            elif knob.kind == "categorical":
                table = np.log2(1.0 + np.asarray(knob.choices, dtype=np.float64))[:, None]
            elif knob.kind == "sketch":
                table = np.eye(len(knob))
            else:
                table = np.asarray(knob.choices, dtype=np.float64)[:, None]
            self.tables.append(table.astype(np.float32))
        self.dim = sum(t.shape[1] for t in self.tables)

    def __call__(self, configs: np.ndarray | Sequence[Config]) -> np.ndarray:
        idx = np.asarray(configs, dtype=np.int64).reshape(-1, len(self.tables))
        return np.concatenate([t[idx[:, j]] for j, t in enumerate(self.tables)], axis=1)


#: Width of :func:`loop_features` rows (PerStoreFeature with default settings).
LOOP_FEATURE_DIM = 164


@functools.lru_cache(maxsize=4)
def _extractor() -> Any:
    from tune_gym._tvm import ms

    return ms().feature_extractor.PerStoreFeature(extract_workload=False)


@functools.lru_cache(maxsize=4)
def _context(space: KnobSpace) -> Any:
    from tune_gym._tvm import ms

    return ms().TuneContext(mod=space.mod, target=space.target, num_threads=1)


_LOOP_CACHE: dict[tuple[str, str, Config], np.ndarray] = {}


def loop_features(space: KnobSpace, configs: Sequence[Config]) -> np.ndarray:
    """Task-independent loop features (n x LOOP_FEATURE_DIM); invalid configs give zeros.

    Each store's feature row is summed over the stores of the program, then passed through
    ``sign(x) * log2(1 + |x|)`` (the raw counts span many orders of magnitude).
    """
    from tune_gym._tvm import ms

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
