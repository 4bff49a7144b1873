"""Simulated annealing over a knob space, guided by a batch scoring function (AutoTVM style).

Each step changes one random active knob of every parallel point to a random value, scores
all new points in one call, and accepts each with probability ``exp((new - old) / T)``;
``T`` falls linearly from ``temp[0]`` to ``temp[1]`` over ``max_steps``. The search stops
early after ``early_stop`` steps without a change in the top-``n`` set, and returns the
``n`` best distinct configs it visited that are not in ``exclude``. Points persist between
calls when ``persistent`` (AutoTVM keeps them across tuning rounds).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from tune_gym.space import Config, KnobSpace

__all__ = ["SimulatedAnnealing", "random_walk"]

Scorer = Callable[[np.ndarray], np.ndarray]


def random_walk(space: KnobSpace, points: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Change one random active knob of each row to a different random value (canonical)."""
    points = points.copy()
    n, k = points.shape
    mask = space.active_mask[space.sketches(points)] & (space.dims > 1)[None, :]
    has = mask.any(axis=1)
    pick = np.argmax(np.where(mask, rng.random((n, k)), -1.0), axis=1)
    dims = space.dims[pick]
    shift = rng.integers(1, np.maximum(dims, 2))  # a different value: (old + shift) mod dims
    rows = np.flatnonzero(has)
    points[rows, pick[rows]] = (points[rows, pick[rows]] + shift[rows]) % dims[rows]
    if space.n_sketches > 1:  # a sketch change: zero the knobs the new sketch does not use
        points *= space.active_mask[points[:, 0]]
    return points


@dataclass
class SimulatedAnnealing:
    """AutoTVM's model-guided SA. Defaults: 128 points, 500 steps, early stop 50, T 1 -> 0."""

    n_points: int = 128
    max_steps: int = 500
    early_stop: int = 50
    temp: tuple[float, float] = (1.0, 0.0)
    persistent: bool = True
    points: np.ndarray | None = field(default=None, repr=False)

    def search(self, space: KnobSpace, score: Scorer, n: int, rng: np.random.Generator,
               exclude: AbstractSet[Config] = frozenset(), init: list[Config] | None = None) -> list[Config]:
        """The ``n`` highest-scoring distinct configs visited, none of them in ``exclude``."""
        if self.points is None or not self.persistent or self.points.shape[1] != space.n_knobs:
            start = list(init or [])[: self.n_points]
            start += space.sample(rng, self.n_points - len(start))
            self.points = np.asarray(start, dtype=np.int64)
        points = self.points
        scores = score(points)
        heap: list[tuple[float, Config]] = []  # min-heap of the best n
        in_heap: set[Config] = set()

        def offer(pts: np.ndarray, vals: np.ndarray) -> bool:
            changed = False
            for p, v in zip(pts, vals):
                cfg = tuple(int(x) for x in p)
                if cfg in in_heap or cfg in exclude:
                    continue
                if len(heap) < n:
                    heapq.heappush(heap, (float(v), cfg))
                elif v > heap[0][0]:
                    in_heap.discard(heapq.heapreplace(heap, (float(v), cfg))[1])
                else:
                    continue
                in_heap.add(cfg)
                changed = True
            return changed

        offer(points, scores)
        t0, t1 = self.temp
        idle = 0
        for step in range(self.max_steps):
            temp = t0 + (t1 - t0) * step / max(1, self.max_steps)
            cand = random_walk(space, points, rng)
            cand_scores = score(cand)
            with np.errstate(over="ignore"):
                accept = rng.random(len(points)) < np.exp(np.minimum(0.0, cand_scores - scores) / max(temp, 1e-9))
            accept |= cand_scores >= scores
            points = np.where(accept[:, None], cand, points)
            scores = np.where(accept, cand_scores, scores)
            idle = 0 if offer(cand[accept], cand_scores[accept]) else idle + 1
            if idle >= self.early_stop:
                break
        self.points = points
        return [cfg for _, cfg in sorted(heap, reverse=True)]
