"""``one-shot``: One-Shot Tuner's compile step: one search with a frozen predictor, one validation.

One-Shot Tuner (Ryu, Park & Sung, CC 2022) moves all learning before compilation: a predictor
(:mod:`agents.models.oneshot`) is trained once on sampled tasks (PGS + EBS data,
``scripts/collect_pgs.py``, ``scripts/train_oneshot.py``). Tuning a task is then:

1. one simulated-annealing search over the predictor's scores (the paper's settings: 512
   parallel points, at most 160 steps, early stop after 50 steps without a change in the top-k);
2. measure its top ``k = 64`` distinct configs, keep the fastest;
3. stop: :meth:`propose` returns nothing more, the predictor is never updated.

A run therefore measures at most ``k`` configs, whatever the budget; a leaderboard compares it
at its own trial count. The search is the first :meth:`propose` call; measuring results are
observed (the base class keeps them) but change nothing.

Checkpoints: ``checkpoint="auto"`` picks, among the ``OneShotModel`` checkpoints in
``agents/checkpoints/``, the one trained on the most rows whose training tasks do not include
the task being tuned; ``checkpoint=PATH`` loads that file
(``checkpoint=NAME``: a file in ``agents/checkpoints/``). A task whose op the checkpoint never
saw (its sidecar lists ``ops``) is refused with :class:`agents.base.NotApplicable`, which says so
(the leaderboard shows such a task as ``n/a``). A predictor trained on ``full`` spaces scores
``compact`` ones too: :class:`agents.models.oneshot.KnobColumns` places their knob values in the
full space's columns by tiling level.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from agents import pretrained
from agents.base import Agent, NotApplicable, register
from agents.model_based import CHECKPOINT, SA_EARLY_STOP, SA_POINTS, SA_STEPS, PretrainedAgent, make_sa
from agents.pretrained import CHECKPOINT_DIR
from tune_gym.options import Int
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["OneShotAgent", "pick_oneshot_checkpoint"]


def pick_oneshot_checkpoint(task_uri: str | Iterable[str], directory: Path = CHECKPOINT_DIR) -> Path:
    """The One-Shot checkpoint in ``directory`` with the most training rows trained on none of
    ``task_uri`` (one URI or several); see :func:`agents.pretrained.pick_checkpoint`.

    Raises:
        FileNotFoundError: there is none.
    """
    return pretrained.pick_checkpoint("OneShotModel", task_uri, directory, train_hint="scripts/train_oneshot.py")


@functools.lru_cache(maxsize=8)
def _featurizer(task: Task, preset: str, shape: tuple[int, int]) -> Any:
    from agents.models.oneshot import OneShotFeaturizer

    return OneShotFeaturizer(KnobSpace.for_task(task, preset), shape)


@register("one-shot", "One-Shot Tuner: pretrained predictor, one SA search, measure the top 64, stop")
class OneShotAgent(PretrainedAgent, Agent):
    """See the module docstring; options: ``tune-gym agents one-shot`` (defaults: the paper's)."""

    needs_schedules = True

    def __init__(self, checkpoint: Annotated[str, CHECKPOINT] = "auto",
                 k: Annotated[int, Int(1, help="configs measured: the top k of the one search")] = 64,
                 sa_points: Annotated[int, SA_POINTS] = 512, sa_steps: Annotated[int, SA_STEPS] = 160,
                 sa_early_stop: Annotated[int, SA_EARLY_STOP] = 50) -> None:
        self.checkpoint = checkpoint
        self.k = k
        self.sa = make_sa(sa_points, sa_steps, sa_early_stop, persistent=False)

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.model = self.load_checkpoint(task.uri, pick_oneshot_checkpoint, "One-Shot", "OneShotModel")
        why = self.model.not_covered(task.op)
        if why is not None:
            raise NotApplicable(f"the One-Shot checkpoint {self.checkpoint_path.name} was {why}")
        self._features = _featurizer(task, space.preset, self.model.shape)
        self._picks: list[Config] | None = None
        self._scores: dict[bytes, float] = {}
        self.predictions = 0  # configs predicted (distinct)

    def score(self, configs: np.ndarray) -> np.ndarray:
        """The frozen predictor's scores, each distinct config predicted once per run (the search
        revisits configs often: on a compact space of 640 configs, 512 points x 160 steps)."""
        configs = np.asarray(configs, dtype=np.int64)
        rows, inverse = np.unique(configs, axis=0, return_inverse=True)
        keys = [r.tobytes() for r in rows]
        new = [i for i, k in enumerate(keys) if k not in self._scores]
        if new:
            self.predictions += len(new)
            for i, v in zip(new, self.model.predict(*self._features(rows[new]))):
                self._scores[keys[i]] = float(v)
        return np.array([self._scores[k] for k in keys])[inverse.reshape(-1)]

    def propose(self, n: int) -> list[Config]:
        if self._picks is None:  # the one search
            self._picks = self.sa.search(self.space, self.score, self.k, self.rng)
        out = [c for c in self._picks if c not in self.proposed][:n]
        self.proposed.update(out)
        return out
