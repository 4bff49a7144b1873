"""``contextual-sa``: AdaTune's tuner, a random forest + expected improvement + contextual SA.

Paper: Li et al., "AdaTune: Adaptive Tensor Program Compilation Made Efficient" (NeurIPS
2020); METHODS.md section 2. Per planning round:

1. refit a random forest (10 trees, max_features 10; :mod:`agents.models.rf`) on the knob
   features of every measured config (invalid configs count as throughput 0);
2. draw K=20 random unmeasured configs and set the contextual epsilon
   ``eps_t = clip(mean predictive std over them / best measured throughput, 0, 1)``;
3. simulated annealing maximizes the expected improvement (EI) over the best measured
   throughput; the top ``(1 - eps_t) * plan_size`` distinct unmeasured configs come first,
   the last ``eps_t * plan_size`` slots are random.

Target scale: the forest is trained on throughput divided by the best measured throughput
(GFLOPS / best GFLOPS, so the best is 1). EI is homogeneous of degree 1 and ``eps_t`` is a
ratio, so this is the same as working in GFLOPS up to one positive factor; what it fixes is
the scale seen by SA's acceptance rule ``exp(delta / T)`` with ``T`` falling from 1 to 0,
which then matches AutoTVM's max-normalized model outputs for every task, fast or slow.
(The authors' code used raw FLOP/s, which makes SA greedy from the first step.)

Defaults: plan_size 32 (the paper's runs) and the first plan random; SA with 64 persistent
parallel points (the authors' code uses ``2 * plan_size``), up to 500 steps, early stop 50.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np

from agents.base import register
from agents.model_based import (
    INVALID_OPTION,
    N_INIT,
    PLAN_SIZE,
    SA_EARLY_STOP,
    SA_POINTS,
    SA_STEPS,
    ModelGuidedAgent,
    make_sa,
)
from agents.models.features import KnobFeaturizer
from agents.models.rf import RandomForestModel, expected_improvement
from tune_gym.options import Int
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["ContextualSAAgent"]

#: The best measured throughput on the forest's target scale (throughput / best throughput).
_BEST = 1.0


@register("contextual-sa", "AdaTune: random forest + expected improvement + SA, uncertainty-driven random share")
class ContextualSAAgent(ModelGuidedAgent):
    """AdaTune's RF-EI tuner with contextual simulated annealing (options: ``tune-gym agents
    contextual-sa``; ``invalid="zero"`` is the authors' choice).

    Attributes:
        eps_t: the random share of the latest plan, set after each refit (1.0 until the
            first fit: the first plan is entirely random).
        best: the best measured throughput (GFLOPS) at the latest refit.
    """

    def __init__(self, plan_size: Annotated[int, PLAN_SIZE] = 32,
                 n_context: Annotated[int, Int(1, help="K, the random unmeasured configs whose mean predictive std "
                                                       "sets eps_t")] = 20,
                 n_trees: Annotated[int, Int(1, help="trees of the random forest")] = 10,
                 max_features: Annotated[int, Int(1, help="features each split of the forest considers")] = 10,
                 invalid: Annotated[str, INVALID_OPTION] = "zero", sa_points: Annotated[int, SA_POINTS] = 64,
                 sa_steps: Annotated[int, SA_STEPS] = 500, sa_early_stop: Annotated[int, SA_EARLY_STOP] = 50,
                 n_init: Annotated[int | None, N_INIT] = None) -> None:
        super().__init__(plan_size, 0.0, n_init, invalid, make_sa(sa_points, sa_steps, sa_early_stop))
        self.n_context = n_context
        self.n_trees = n_trees
        self.max_features = max_features

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.model = RandomForestModel(self.n_trees, self.max_features, seed=int(self.rng.integers(2**31)))
        self._knob = KnobFeaturizer(space)
        self.eps_t = 1.0
        self.best = 0.0

    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        """Refit the forest on ``y / max(y)`` and update :attr:`eps_t`."""
        self.best = float(y.max())
        if self.best <= 0:
            return False
        self.model.fit(self._knob(configs), y / self.best)
        self.eps_t = self.contextual_eps()
        return True

    def contextual_eps(self) -> float:
        """``clip(mean std of K random unmeasured configs / best, 0, 1)`` (Eq. 3 of the paper).

        Both are on the normalized target, where the best measured throughput is 1. Draws
        the K configs with the agent's generator; returns 0 when every config has been
        proposed.
        """
        sample = self.space.sample_unique(self.rng, self.n_context, exclude=self.proposed)
        if not sample:
            return 0.0
        _, std = self.model.predict(self._knob(sample))
        return float(np.clip(std.mean() / _BEST, 0.0, 1.0))

    def score(self, configs: np.ndarray) -> np.ndarray:
        """Expected improvement over the best measured throughput (1 on the normalized scale)."""
        mean, std = self.model.predict(self._knob(configs))
        return expected_improvement(mean, std, _BEST)

    def explore_fraction(self) -> float:
        return self.eps_t
