"""``tlp-sa``: a pretrained TLP ranking model guiding AutoTVM's simulated annealing.

TLP (Zhai et al., ASPLOS 2023) scores a config from its schedule-primitive sequence
(:mod:`tune_gym.features.primitives`, encoded through the vectorised
:class:`~tune_gym.features.primitives.SequenceEncoder`), so one model, trained offline on other
tasks' datasets, ranks the configs of any task. The search loop is ``xgb-sa``'s
(:class:`~agents.model_based.ModelGuidedAgent`): plans of ``plan_size`` configs, 5% random, SA
over the model's scores. Differences from ``xgb-sa``:

* the first plan is already model-guided (the pretrained model needs no measurements);
* after each plan the model is fine-tuned on the task's own measurements (label = throughput /
  the task's best so far, failures 0), starting again from the pretrained weights each time, so
  the model after a plan depends only on the measurements, not on the order of refits.
  ``fine_tune="decoder"`` (default) trains the decoder head only, with the shared backbone frozen
  (what TLP's cross-task transfer keeps); ``"all"`` trains backbone and head; ``"none"`` keeps
  the pretrained model frozen.

Checkpoints live in ``agents/checkpoints/`` (weights + JSON sidecar listing the dataset files
and tasks they were trained on). ``checkpoint="auto"`` (default) picks, among them, the one
trained on the most rows that never saw the task being tuned, so a leaderboard run never ranks a
task with a model fitted on that task's own table; ``checkpoint=PATH`` loads that file
(``checkpoint=NAME``: a file in ``agents/checkpoints/``).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from agents import pretrained
from agents.base import register
from agents.model_based import (
    CHECKPOINT,
    EPS,
    PLAN_SIZE,
    SA_EARLY_STOP,
    SA_POINTS,
    SA_STEPS,
    ModelGuidedAgent,
    PretrainedAgent,
    make_sa,
)
from agents.pretrained import CHECKPOINT_DIR
from tune_gym.options import Choice, Int, Str
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["CHECKPOINT_DIR", "TLPSAAgent", "pick_checkpoint"]

FINE_TUNE = ("decoder", "all", "none")


def pick_checkpoint(task_uri: str | Iterable[str], directory: Path = CHECKPOINT_DIR) -> Path:
    """The TLP checkpoint in ``directory`` trained on the most rows without ``task_uri`` (one task
    URI, or several: trained on none of them); see :func:`agents.pretrained.pick_checkpoint`.

    Raises:
        FileNotFoundError: no checkpoint, or every one was trained on one of these tasks.
    """
    return pretrained.pick_checkpoint("TLPModel", task_uri, directory,
                                      train_hint="scripts/train_tlp.py --holdout NETWORK")


@functools.lru_cache(maxsize=8)
def _encoder(task: Task, preset: str, shape: tuple[int, int]) -> Any:
    from tune_gym.features.primitives import SequenceEncoder

    return SequenceEncoder(KnobSpace.for_task(task, preset), *shape)


@register("tlp-sa", "TLP: pretrained schedule-primitive ranking model + SA, fine-tuned online on the task")
class TLPSAAgent(PretrainedAgent, ModelGuidedAgent):
    """Simulated annealing over a pretrained TLP model (see the module docstring; ``checkpoint="auto"``:
    :func:`pick_checkpoint`). Options: ``tune-gym agents tlp-sa``; the search's defaults are
    ``xgb-sa``'s (AutoTVM's)."""

    needs_schedules = True

    def __init__(self, checkpoint: Annotated[str, CHECKPOINT] = "auto",
                 fine_tune: Annotated[str, Choice(FINE_TUNE, help="what is fine-tuned on the task's measurements "
                                                  "after each plan: the decoder head, all, or none")] = "decoder",
                 fine_tune_epochs: Annotated[int, Int(1, help="passes over the task's measurements per "
                                                              "refit")] = 20,
                 platform: Annotated[str | None, Str(none=True, help="the MTL head to use (None: the model's only "
                                                                     "head)")] = None,
                 plan_size: Annotated[int, PLAN_SIZE] = 64, eps: Annotated[float, EPS] = 0.05,
                 sa_points: Annotated[int, SA_POINTS] = 128, sa_steps: Annotated[int, SA_STEPS] = 500,
                 sa_early_stop: Annotated[int, SA_EARLY_STOP] = 50) -> None:
        super().__init__(plan_size, eps, 0, "zero", make_sa(sa_points, sa_steps, sa_early_stop))
        self.checkpoint = checkpoint
        self.fine_tune = fine_tune
        self.fine_tune_epochs = fine_tune_epochs
        self.platform = platform

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self._pretrained = self.load_checkpoint(task.uri, pick_checkpoint, "TLP", "TLPModel")
        self.model = self._pretrained
        self._encode = _encoder(task, space.preset, self._pretrained.shape)
        self.fitted = True  # the pretrained model ranks from the first plan

    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        if self.fine_tune == "none" or y.max() <= 0:
            return True
        model = copy.deepcopy(self._pretrained)
        model.reseed(int(self.rng.integers(2**31)))
        model.fine_tune(self._encode(configs), (y / y.max()).astype(np.float32), epochs=self.fine_tune_epochs,
                        head=self.platform, part=self.fine_tune)
        self.model = model
        return True

    def score(self, configs: np.ndarray) -> np.ndarray:
        return self.model.predict(self._encode(configs), platform=self.platform)
