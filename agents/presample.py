"""``presample``: HW-aware, validity-driven initialization of AutoTVM (Rieber et al.).

Paper: "HW-Aware Initialization of DNN Auto-Tuning to Improve Exploration Time and
Robustness" (METHODS.md section 5). On targets that reject many configs (VTA buffers, GPU
thread and shared-memory limits), a random first batch wastes trials on invalid configs
and gives the cost model a poor start. The method adds three things to ``xgb-sa``:

1. **Presampling** (:func:`presample`, Algorithm 1 of the paper). Before any measurement,
   configs are only *classified* with the compile-time check :meth:`KnobSpace.is_valid`
   (no build, no timing, nothing counted against the budget). It starts from
   ``n_parallel`` random configs; every valid one adds its Manhattan-distance-1
   neighbours (:meth:`KnobSpace.neighbours`) to a candidate pool, every invalid one adds
   one random unclassified config; the next ``n_parallel`` configs are drawn from the pool
   and the pool starts afresh. Valid configs cluster, so this finds more of them than
   random checks. It stops when ``min(presample_limit, |space|)`` configs are classified.
2. **Initial batch E0** (:func:`farthest_points`). Up to ``n_valid`` (25) known-valid
   configs, then known-invalid ones up to ``n_init`` (50) in total, each half spread out by
   greedy farthest-point selection in Manhattan distance over knob indices: the first pick
   is random, each next pick maximizes its smallest distance to the configs already picked
   (ties: the largest sum of distances). The invalid half is picked given the valid half,
   so the whole batch is spread out. E0 is measured like any other batch; if it has fewer
   than ``plan_size`` configs (few presampled), random configs fill the plan.
3. **Biased simulated annealing**. The SA maximizes the XGBoost prediction plus a bias
   looked up per config: known-invalid configs get ``-1e6`` (never in the top-n), known
   valid ones ``+1`` (the paper's predictions lie in about [-7, 7], so +1 helps without
   overriding the model). A config whose measurement fails becomes known-invalid.

Defaults: those of the paper (batch / plan_size 50, presample limit 1000, E0 = 25 valid +
25 invalid) and AutoTVM's for the rest (``n_parallel`` 128 = AutoTVM's SA parallel size,
XGBoost and SA settings of :class:`~agents.xgb_sa.XGBSAAgent`, 5% random slots).

Deliberate deviation: the random slots of every later batch (and the fill of a short
E0) skip known-invalid configs too. The paper does not say what its random share does;
measuring a config that the compile-time check already rejected can only waste a trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import numpy as np

from agents.base import register
from agents.model_based import PLAN_SIZE
from agents.xgb_sa import XGBSAAgent
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Float, Int, check_int
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["PresampleAgent", "farthest_points", "presample"]


def presample(space: KnobSpace, rng: np.random.Generator, limit: int = 1000,
              n_parallel: int = 128) -> dict[Config, bool]:
    """Classify ``min(limit, space.size)`` configs as valid or not, seeking valid clusters.

    Args:
        space: the knob space; only :meth:`KnobSpace.is_valid` is called (no measurement).
        rng: the source of every random choice.
        limit: how many configs to classify (capped by the space size).
        n_parallel: configs classified per round.

    Returns:
        ``{config: is valid}`` in the order the configs were classified.
    """
    limit = min(limit, space.size)
    classified: dict[Config, bool] = {}
    batch = space.sample_unique(rng, min(n_parallel, limit))
    while len(classified) < limit:
        pool: dict[Config, None] = {}  # an insertion-ordered set, so draws are reproducible
        n_invalid = 0
        for cfg in batch:
            if len(classified) >= limit:
                break
            classified[cfg] = space.is_valid(cfg)
            if classified[cfg]:
                pool.update(dict.fromkeys(space.neighbours(cfg)))
            else:
                n_invalid += 1
        candidates = [c for c in pool if c not in classified]
        candidates += space.sample_unique(rng, n_invalid, exclude=set(classified) | set(candidates))
        if not candidates:  # every neighbour is classified already: continue from random configs
            candidates = space.sample_unique(rng, n_parallel, exclude=set(classified))
        batch = [candidates[int(i)] for i in rng.permutation(len(candidates))[:n_parallel]]
    return classified


def farthest_points(candidates: Sequence[Config], k: int, rng: np.random.Generator,
                    chosen: Sequence[Config] = ()) -> list[Config]:
    """Greedily pick ``k`` of ``candidates`` far apart in Manhattan distance (knob indices).

    Each pick maximizes the smallest distance to everything chosen so far (``chosen`` plus
    earlier picks), breaking ties by the largest sum of those distances. With nothing
    chosen yet, the first pick is random.

    Returns:
        The picks in order (``min(k, len(candidates))`` of them).
    """
    k = min(k, len(candidates))
    if k <= 0:
        return []
    cands = np.asarray(candidates, dtype=np.int64)
    min_d = np.full(len(cands), np.inf)
    sum_d = np.zeros(len(cands))
    taken = np.zeros(len(cands), dtype=bool)

    def add(point: np.ndarray) -> None:
        d = np.abs(cands - point).sum(axis=1)
        np.minimum(min_d, d, out=min_d)
        np.add(sum_d, d, out=sum_d)

    for point in np.asarray(chosen, dtype=np.int64).reshape(-1, cands.shape[1]):
        add(point)
    picks: list[int] = []
    for _ in range(k):
        if not picks and len(chosen) == 0:
            i = int(rng.integers(len(cands)))
        else:
            open_min = np.where(taken, -1.0, min_d)
            best = np.flatnonzero(open_min == open_min.max())
            i = int(best[np.argmax(sum_d[best])])
        picks.append(i)
        taken[i] = True
        add(cands[i])
    return [tuple(int(v) for v in cands[i]) for i in picks]


def _row_keys(configs: np.ndarray | Sequence[Config], n_knobs: int) -> np.ndarray:
    """One opaque key per config row (its bytes), so set membership can be vectorized."""
    rows = np.ascontiguousarray(np.asarray(configs, dtype=np.int64).reshape(-1, n_knobs))
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()


@register("presample", "Rieber et al.: validity presampling, spread-out valid/invalid first batch, biased xgb-sa")
class PresampleAgent(XGBSAAgent):
    """``xgb-sa`` with validity presampling, a curated first batch and biased SA. Options:
    ``tune-gym agents presample`` (``plan_size`` 50 is the paper's batch; the others of
    :class:`~agents.xgb_sa.XGBSAAgent` pass on through ``**kwargs``).

    Attributes (after ``reset``):
        presampled: ``{config: is valid}`` from presampling.
        n_presampled: how many configs presampling classified.
        n_valid_found: how many of them are valid.
        known_valid, known_invalid: the validity known so far (presampling plus failed
            measurements).
        initial_batch: the first batch E0 (``None`` until it is planned).
    """

    def __init__(self, plan_size: Annotated[int, PLAN_SIZE] = 50,
                 presample_limit: Annotated[int, Int(0, help="configs classified valid or invalid before tuning "
                                                             "(capped by the space size)")] = 1000,
                 n_parallel: Annotated[int, Int(1, help="configs classified per presampling round")] = 128,
                 n_valid: Annotated[int, Int(0, help="most known-valid configs in the first batch (at most "
                                                     "n_init)")] = 25,
                 n_init: Annotated[int, Int(0, help="size of the first batch; the model is fitted once this many "
                                                    "configs are measured")] = 50,
                 invalid_bias: Annotated[float, Float(help="added to the model's score of known-invalid configs "
                                                           "during SA")] = -1e6,
                 valid_bias: Annotated[float, Float(help="added to the model's score of known-valid configs during "
                                                         "SA")] = 1.0,
                 **kwargs: object) -> None:
        super().__init__(plan_size=plan_size, n_init=n_init, **kwargs)  # type: ignore[arg-type]
        self.presample_limit = presample_limit
        self.n_parallel = n_parallel
        self.n_valid = check_int("n_valid (at most n_init)", n_valid, 0, self.n_init)
        self.invalid_bias = invalid_bias
        self.valid_bias = valid_bias

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.presampled = presample(space, self.rng, self.presample_limit, self.n_parallel)
        self.n_presampled = len(self.presampled)
        self.n_valid_found = sum(self.presampled.values())
        self.known_valid = {c for c, ok in self.presampled.items() if ok}
        self.known_invalid = {c for c, ok in self.presampled.items() if not ok}
        self._bias_keys: tuple[np.ndarray, np.ndarray] | None = None  # (valid, invalid) row keys
        self.initial_batch: list[Config] | None = None

    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        super().observe(configs, results)
        failed = {c for c, r in zip(configs, results) if not r.ok}
        if failed - self.known_invalid:
            self.known_invalid |= failed
            self.known_valid -= failed
            self._bias_keys = None

    def select_initial(self) -> list[Config]:
        """E0: up to ``n_valid`` spread-out known-valid configs, then known-invalid up to ``n_init``."""
        valid = [c for c in self.presampled if c in self.known_valid and c not in self.proposed]
        invalid = [c for c in self.presampled if c in self.known_invalid and c not in self.proposed]
        chosen = farthest_points(valid, self.n_valid, self.rng)
        return chosen + farthest_points(invalid, self.n_init - len(chosen), self.rng, chosen=chosen)

    def _make_plan(self, size: int) -> list[Config]:
        if self.initial_batch is None:
            self.initial_batch = self.select_initial()
            return self.initial_batch + self._random(max(0, size - len(self.initial_batch)), set(self.initial_batch))
        return super()._make_plan(size)

    def _random(self, n: int, taken: set[Config] | None = None) -> list[Config]:
        return super()._random(n, (taken or set()) | self.known_invalid)

    def bias(self, configs: np.ndarray) -> np.ndarray:
        """``invalid_bias`` for known-invalid rows, ``valid_bias`` for known-valid ones, else 0."""
        if self._bias_keys is None:
            k = self.space.n_knobs
            self._bias_keys = (np.sort(_row_keys(sorted(self.known_valid), k)),
                               np.sort(_row_keys(sorted(self.known_invalid), k)))
        keys = _row_keys(configs, self.space.n_knobs)
        out = np.zeros(len(keys))
        out[np.isin(keys, self._bias_keys[0])] = self.valid_bias
        out[np.isin(keys, self._bias_keys[1])] = self.invalid_bias
        return out

    def score(self, configs: np.ndarray) -> np.ndarray:
        return super().score(configs) + self.bias(configs)
