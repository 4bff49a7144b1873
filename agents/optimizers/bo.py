"""Batch Bayesian optimization over a discrete knob space: the candidate pool and the q-batch.

BoTorch optimizes acquisition functions over continuous boxes; a knob space is a finite set
of integer configs, so :mod:`agents.batch_bo` optimizes over a finite *candidate pool*
instead:

* :func:`candidate_pool` collects unmeasured configs worth scoring: caller-supplied ones
  (e.g. the result of simulated annealing on a single-point acquisition), the Manhattan
  distance-1 neighbours of the best measured configs, and uniform random configs to fill
  the pool (so a batch can still leave the neighbourhood of the incumbents);
  :func:`refined_pool` is the pool the BO agents score: simulated annealing from the best
  measured configs supplies the first quarter;
* :func:`greedy_q_batch` picks ``q`` of them by *sequential greedy* selection with a batch
  (MC) acquisition function such as ``qLogExpectedImprovement``: step ``j`` scores the
  remaining candidates jointly with the ``j`` already picked ones (BoTorch's
  ``X_pending``) and keeps the best. This is the algorithm of BoTorch's
  ``optimize_acqf_discrete``, returning pool *indices* (two configs may share an encoding
  under a custom featurizer) and optionally restricting the joint steps to a shortlist of
  the best single-point candidates. Every evaluation is a batched tensor call over up to
  ``chunk`` candidates, as MetaTune's search batches its acquisition queries on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

import numpy as np
import torch
from botorch.acquisition import AcquisitionFunction

from agents.optimizers.sa import Scorer, SimulatedAnnealing
from tune_gym.space import Config, KnobSpace

__all__ = ["candidate_pool", "greedy_q_batch", "refined_pool"]


def candidate_pool(space: KnobSpace, rng: np.random.Generator, size: int, anchors: Sequence[Config] = (),
                   extra: Sequence[Config] = (), exclude: AbstractSet[Config] = frozenset()) -> list[Config]:
    """Up to ``size`` distinct configs, none in ``exclude``, in a deterministic order.

    Order of preference: ``extra`` first, then the distance-1 neighbours of each anchor (in
    the anchors' order), then uniform random configs until the pool holds ``size`` configs
    (or the space runs out).
    """
    pool: list[Config] = []
    taken = set(exclude)
    for cfg in [*extra, *(n for a in anchors for n in space.neighbours(a))]:
        if len(pool) >= size:
            break
        if cfg not in taken:
            taken.add(cfg)
            pool.append(cfg)
    return pool + space.sample_unique(rng, size - len(pool), exclude=taken)


def refined_pool(space: KnobSpace, sa: SimulatedAnnealing, score: Scorer, rng: np.random.Generator, size: int,
                 top: list[Config], n_anchors: int, exclude: AbstractSet[Config] = frozenset()) -> list[Config]:
    """:func:`candidate_pool` of ``size`` configs whose ``extra`` are the ``size // 4`` best configs
    simulated annealing finds over ``score``, started from ``top`` (the best measured configs,
    best first), and whose anchors are the first ``n_anchors`` of ``top``; none in ``exclude``."""
    refined = sa.search(space, score, size // 4, rng, exclude=exclude, init=top)
    return candidate_pool(space, rng, size, anchors=top[:n_anchors], extra=refined, exclude=exclude)


def greedy_q_batch(acqf: AcquisitionFunction, X: torch.Tensor, q: int, shortlist: int | None = None,
                   chunk: int = 512) -> list[int]:
    """Indices of ``min(q, len(X))`` distinct rows of ``X`` chosen by sequential greedy selection.

    Args:
        acqf: a batch acquisition function supporting ``set_X_pending`` (any BoTorch MC
            acquisition); its pending points are restored afterwards.
        X: ``n x d`` candidate encodings.
        q: batch size.
        shortlist: when given, the first step scores every candidate alone and the later
            steps consider only the ``shortlist`` candidates with the highest single-point
            values (a candidate adds at most its own expected improvement to a batch, so the
            rest rarely win; this bounds the cost of the joint steps).
        chunk: candidates per acquisition call (bounds memory: each call builds a joint
            posterior of ``chunk x (picked + 1)`` points).

    Ties go to the candidate listed first, so the choice is deterministic given the values.
    """
    if q <= 0 or not len(X):
        return []
    base_pending = acqf.X_pending

    def evaluate(rows: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([acqf(X[part].unsqueeze(-2)) for part in rows.split(chunk)])

    rows = torch.arange(len(X), device=X.device)
    values = evaluate(rows)
    if shortlist is not None and shortlist < len(rows):
        rows = rows[torch.sort(values, descending=True, stable=True).indices[:max(shortlist, q)]]
        rows = torch.sort(rows).values
    picked = [int(torch.argmax(values))]
    try:
        while len(picked) < min(q, len(X)):
            pending = X[picked] if base_pending is None else torch.cat([base_pending, X[picked]])
            acqf.set_X_pending(pending)
            rows = rows[rows != picked[-1]]
            picked.append(int(rows[int(torch.argmax(evaluate(rows)))]))
    finally:
        acqf.set_X_pending(base_pending)
    return picked
