"""``meta-bo``: MetaTune -- a meta-learned graph cost model driving a GP batch BO.

MetaTune (Ryu & Sung; METHODS.md section 3) tunes with a batch Bayesian optimization whose
model knowledge comes from a cost model meta-learned on other tasks
(:mod:`agents.models.metatune`: a GCN over the loop graph on the op family's super-graph, its
regressor trained with MAML) and fine-tuned online on the task's own measurements. The search
is ``batch-bo``'s (:class:`~agents.batch_bo.BatchBOAgent`: a ``SingleTaskGP`` on
``log2(1 + GFLOPS)``, greedy ``qLogEI`` batches over a candidate pool, every acquisition
evaluation one batched call); what this agent adds:

* **The cost model is the GP's prior mean.** The paper's BO takes each knob as an input, so
  the GP keeps the knob indices as its inputs (``batch-bo``'s ``"index"`` encoding) and the
  model enters through the ``prior_mean`` hook: the GP's mean is ``a + b * prior(x)`` with
  ``prior(x) = log2(1 + max(pred(x), 0) * best GFLOPS so far)`` -- the predicted normalised
  throughput mapped onto the GP's target scale -- and ``a``, ``b`` fitted with the kernel by
  marginal likelihood (:class:`~agents.batch_bo.PriorMean`). The GP models what the model gets
  wrong; where it has no data the acquisition follows the model. (The other hook, the learned
  graph embedding as the GP's input features, would replace the knobs as inputs.)
* **Jump start.** The first plan, and any plan while the GP cannot be fitted (fewer than two
  distinct throughputs), is the model's own: the ``plan_size`` unmeasured candidates of the
  pool with the highest predictions (no random configs at all: ``n_init = 0``, ``eps = 0``).
* **Online fine-tuning** (``fine_tune=True``): before each plan the regressor is fine-tuned on
  every measurement so far (label = throughput / best so far, failures 0), starting from the
  meta-learned weights each time (:meth:`MetaTuneModel.fine_tune_embeddings`); the GCN stays
  as trained, so each config's graph embedding is computed once per run and cached.
* **A model shared across a network's kernels** (``tune_network(..., shared_model=True)``):
  each kernel's agent also fine-tunes on the rows the other kernels' agents measured (graph
  embeddings of the same checkpoint, each kernel's throughput over its own best;
  :class:`~agents.shared.SharedRows`, published as soon as they are measured), as MetaSchedule
  trains one cost model on all the tasks of a network; a kernel's first plan, in the network's
  warm-up round, then follows a model fine-tuned on the kernels measured before it. The GP
  stays per kernel.
* **Small candidate pools.** A config's graph costs a walk of its lowered kernel (3-16 ms per
  new config on an idle core, :mod:`tune_gym.features.graph`; two to three times that while
  the 2-core machine also measures and trains), so the pool is much smaller than ``batch-bo``'s: 96 candidates (the 24
  best of a short simulated annealing -- 8 points, at most 8 steps -- over the current score,
  the neighbours of the 4 best measured configs, random configs for the rest), and the joint
  greedy steps consider the 48 best single-point candidates. Measured with one torch thread,
  the machine loaded (load average 3.6 on 2 cores): a plan of 16 took 1.4-3.9 s on resnet18:7
  (compact; 59-126 new configs encoded per plan), 4.9-7.1 s on resnet18:1 (full preset; 92-143)
  and 1.9-3.2 s on bert_base:0 (dense, full; 112-142), the first plan (model only) included;
  configs seen before reuse their cached embedding. ``device`` places the GP and the
  acquisitions (the paper ran them on a GPU); the cost model runs on the CPU.

Checkpoints: ``checkpoint="auto"`` (default) picks, among the MetaTune checkpoints in
``agents/checkpoints/`` trained with both augmentation and MAML, the one trained on the most
rows that never saw the task (:func:`pick_checkpoint`); ``checkpoint=PATH`` loads that file
(``checkpoint=NAME``: a file in ``agents/checkpoints/``)
(e.g. an ablation: ``--no-augment`` or ``--no-meta`` in ``scripts/train_metatune.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from agents import pretrained
from agents.base import register
from agents.batch_bo import (
    ACQUISITION,
    CHUNK,
    DEVICE,
    MAX_TRAIN,
    MC_SAMPLES,
    N_ANCHORS,
    POOL_SIZE,
    SHORTLIST,
    BatchBOAgent,
)
from agents.model_based import (
    CHECKPOINT,
    INVALID_OPTION,
    PLAN_SIZE,
    SA_EARLY_STOP,
    SA_POINTS,
    SA_STEPS,
    PretrainedAgent,
)
from agents.pretrained import CHECKPOINT_DIR
from agents.shared import SharedRows
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Bool, Float, Int
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["CHECKPOINT_DIR", "MetaBOAgent", "pick_checkpoint"]


def pick_checkpoint(task_uri: str | Iterable[str], directory: Path = CHECKPOINT_DIR, ablations: bool = False) -> Path:
    """The MetaTune checkpoint in ``directory`` trained on the most rows without ``task_uri`` (one
    task URI, or several: trained on none of them); see :func:`agents.pretrained.pick_checkpoint`.

    Args:
        task_uri: the task(s) the checkpoint must not have been trained on.
        directory: where to look.
        ablations: also consider checkpoints trained without augmentation or without MAML.

    Raises:
        FileNotFoundError: no such checkpoint.
    """
    def full_method(doc: dict[str, Any]) -> bool:
        config = doc.get("config", {})
        return ablations or bool(config.get("augment") and config.get("meta"))

    return pretrained.pick_checkpoint("MetaTuneModel", task_uri, directory, accept=full_method,
                                      train_hint="scripts/train_metatune.py --holdout NETWORK")


@register("meta-bo", "MetaTune: meta-learned GCN cost model (fine-tuned online) as the prior mean of a GP batch BO")
class MetaBOAgent(PretrainedAgent, BatchBOAgent):
    """GP batch BO with a meta-learned MetaTune model as prior mean (see the module docstring;
    ``checkpoint="auto"``: :func:`pick_checkpoint`). Options: ``tune-gym agents meta-bo``."""

    needs_schedules = True
    #: Rows shared with the agents of a network's other kernels (set by
    #: :func:`agents.network.tune_network` with ``shared_model=True``; ``None``: this task's own).
    shared_rows: SharedRows | None = None

    def __init__(self, checkpoint: Annotated[str, CHECKPOINT] = "auto",
                 fine_tune: Annotated[bool, Bool(help="fine-tune the model's regressor on the task's measurements "
                                                      "before each plan")] = True,
                 fine_tune_steps: Annotated[int | None, Int(1, none=True, help="Adam steps of each fine-tuning "
                                                                              "(None: the model's, 50)")] = None,
                 fine_tune_lr: Annotated[float | None, Float(0, low_open=True, none=True,
                                                             help="Adam step size of fine-tuning (None: the "
                                                                  "model's, 1e-3)")] = None,
                 plan_size: Annotated[int, PLAN_SIZE] = 16, pool_size: Annotated[int, POOL_SIZE] = 96,
                 n_anchors: Annotated[int, N_ANCHORS] = 4, shortlist: Annotated[int, SHORTLIST] = 48,
                 sa_points: Annotated[int, SA_POINTS] = 8, sa_steps: Annotated[int, SA_STEPS] = 8,
                 sa_early_stop: Annotated[int, SA_EARLY_STOP] = 4, acquisition: Annotated[str, ACQUISITION] = "qlogei",
                 mc_samples: Annotated[int, MC_SAMPLES] = 128, max_train: Annotated[int, MAX_TRAIN] = 500,
                 chunk: Annotated[int, CHUNK] = 512, invalid: Annotated[str, INVALID_OPTION] = "zero",
                 device: Annotated[str, DEVICE] = "cpu") -> None:
        super().__init__(plan_size=plan_size, n_init=0, eps=0.0, invalid=invalid, prior_mean=self._prior,
                         acquisition=acquisition, pool_size=pool_size, n_anchors=n_anchors, max_train=max_train,
                         mc_samples=mc_samples, shortlist=shortlist, sa_points=sa_points, sa_steps=sa_steps,
                         sa_early_stop=sa_early_stop, chunk=chunk, device=device)
        self.checkpoint = checkpoint
        self.fine_tune = fine_tune
        self.fine_tune_steps = fine_tune_steps
        self.fine_tune_lr = fine_tune_lr

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        # fine-tuning changes this copy only
        self.cost_model = copy.deepcopy(self.load_checkpoint(task.uri, pick_checkpoint, "MetaTune", "MetaTuneModel"))
        self.template = self.cost_model.template_for(task)
        self._embeddings: dict[Config, np.ndarray] = {}
        self._y_best = 0.0
        self.fitted = True  # the meta-learned model guides the first plan

    # ------------------------------------------------------------------ the cost model
    def embed(self, configs: np.ndarray | list[Config]) -> np.ndarray:
        """``n x d`` graph embeddings of ``configs`` (each encoded once per run, then cached)."""
        keys = [tuple(int(v) for v in c) for c in np.asarray(configs, dtype=np.int64).reshape(-1, self.space.n_knobs)]
        missing = list(dict.fromkeys(k for k in keys if k not in self._embeddings))
        if missing:
            from agents.models.metatune import GraphRows

            h = self.cost_model.embed(GraphRows.encode(self.template, self.space, missing))
            self._embeddings.update(zip(missing, h))
        if not keys:
            return np.zeros((0, self.cost_model.net.embed_dim), dtype=np.float32)
        return np.stack([self._embeddings[k] for k in keys])

    def predict(self, configs: np.ndarray | list[Config]) -> np.ndarray:
        """The (fine-tuned) model's predicted normalised throughput of ``configs``."""
        return self.cost_model.predict_embeddings(self.embed(configs))

    def _prior(self, configs: np.ndarray) -> np.ndarray:
        """The GP's prior input: the prediction on the GP's ``log2(1 + GFLOPS)`` scale."""
        return np.log2(1.0 + np.maximum(self.predict(configs), 0.0) * self._y_best)

    # ------------------------------------------------------------------ the loop
    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        """Fine-tune the model (from its meta-learned weights), then fit the GP on top of it.

        Always True: without a GP (too little data) the plan follows the model alone.
        """
        if self.fine_tune and len(y) and y.max() > 0:
            self._fine_tune(self.embed(configs), y / y.max())
        self._y_best = float(y.max()) if len(y) else 0.0
        if not (self._y_best > 0 and super().fit(configs, y)):
            self.model = None
        return True

    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Record the results; when the network's kernels share a model (:attr:`shared_rows`),
        publish this task's rows at once, so that a peer planning next (e.g. its first plan, in
        the network's warm-up round) learns from them."""
        super().observe(configs, results)
        if self.fine_tune and self.shared_rows is not None:
            measured, y = self.training_data()
            if len(y) and y.max() > 0:
                self.shared_rows.put(self._shared_key(), self.task.uri, self.embed(measured), y / y.max())

    def _shared_key(self) -> str:
        """Rows are shared between agents whose embeddings come from the same checkpoint."""
        return str(self.checkpoint_path.resolve())

    def _fine_tune(self, h: np.ndarray, label: np.ndarray) -> None:
        """Fine-tune the regressor on this task's rows and, when the network's kernels share a
        model (:attr:`shared_rows`), on the rows the other kernels' agents published with the same
        checkpoint (this task's own are published as they are measured: :meth:`observe`). With no
        rows at all, nothing changes."""
        if self.shared_rows is not None:
            h_peer, y_peer = self.shared_rows.rows(self._shared_key(), exclude=self.task.uri)
            if len(y_peer):
                h, label = np.concatenate([h, h_peer]), np.concatenate([label, y_peer])
        if len(label):
            self.cost_model.fine_tune_embeddings(h, label, self.fine_tune_steps, self.fine_tune_lr)

    def score(self, configs: np.ndarray) -> np.ndarray:
        """Log expected improvement under the GP, or the model's prediction while there is no GP."""
        if self.model is None:
            return self.predict(configs)
        return super().score(configs)

    def search(self, n: int) -> list[Config]:
        """``batch-bo``'s q-batch search, or, without a GP, the pool's ``n`` best predictions."""
        if self.model is not None:
            return super().search(n)
        if self.fine_tune and self.shared_rows is not None and self._y_best == 0:  # nothing of its own ran yet
            self._fine_tune(np.zeros((0, self.cost_model.net.embed_dim), dtype=np.float32), np.zeros(0))
        with self._seeded():
            pool = self.candidates(self.predict)
        if not pool:
            return []
        order = np.argsort(-self.predict(np.asarray(pool)), kind="stable")[:n]
        return [pool[i] for i in order]
