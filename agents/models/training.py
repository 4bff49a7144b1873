"""The epoch loop the trained cost models share (:mod:`agents.models.tlp`,
:mod:`agents.models.oneshot`, the pre-training stage of :mod:`agents.models.metatune`).

Each model decides what an epoch's batches are and what a batch's loss is; :func:`run_epochs`
does the rest the same way for all of them: per epoch, it puts the network in training mode,
takes one optimiser step per batch (clearing the gradients first, clipping their norm when asked),
sums the batch losses into the epoch's training loss, times the epoch, scores the validation
rows when there are any, and shows the losses on a progress bar; at the end the network is back
in evaluation mode. Seeded batches give the same steps, so the same numbers, run after run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
from torch import nn

__all__ = ["BatchLoss", "run_epochs", "validation_mse"]


class Labelled(Protocol):
    """Rows with a ``label`` per row (:class:`~agents.models.oneshot.OneShotData`,
    :class:`~agents.models.metatune.GraphData`)."""

    @property
    def label(self) -> np.ndarray: ...

    def __len__(self) -> int: ...


class BatchLoss(NamedTuple):
    """One batch's loss and how it counts in the epoch's training loss.

    The epoch's ``train_loss`` is ``sum(loss * weight) / sum(units)`` over its batches: a mean
    loss over rows is ``weight = units = rows``; a loss summed over ranking lists is
    ``weight = 1, units = lists``.
    """

    loss: torch.Tensor
    weight: float
    units: float


def run_epochs(net: nn.Module, opt: torch.optim.Optimizer, epochs: int,
               batches: Callable[[], Iterable[BatchLoss]], validate: Callable[[], float] | None = None,
               clip: float | None = None, desc: str = "epochs", progress: bool = True) -> dict[str, list[float]]:
    """Train ``net`` for ``epochs`` epochs.

    Args:
        net: the network (put in training mode for each epoch, evaluation mode at the end).
        opt: the optimiser over the parameters being trained.
        epochs: how many epochs.
        batches: called once per epoch; yields each batch's :class:`BatchLoss`, computed lazily
            (the optimiser steps on a batch before the next one is drawn).
        validate: the validation loss, called after every epoch (``None``: no validation rows).
        clip: clip the gradients' total norm to this before each step (``None``: no clipping).
        desc, progress: the progress bar's label, and whether to show it (tqdm).

    Returns:
        History per epoch: ``train_loss``, ``val_loss`` (empty without ``validate``) and
        ``epoch_secs`` (seconds of training, validation left out).
    """
    from tqdm.auto import tqdm

    history: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "epoch_secs": []}
    bar = tqdm(range(epochs), desc=desc, unit="epoch", disable=not progress)
    for _ in bar:
        tic = time.perf_counter()
        net.train()
        total = units = 0.0
        for batch in batches():
            opt.zero_grad(set_to_none=True)
            batch.loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            total += batch.loss.item() * batch.weight
            units += batch.units
        history["epoch_secs"].append(time.perf_counter() - tic)
        history["train_loss"].append(total / max(units, 1.0))
        if validate is not None:
            history["val_loss"].append(validate())
        bar.set_postfix(train=f"{history['train_loss'][-1]:.4f}",
                        val=f"{history['val_loss'][-1]:.4f}" if history["val_loss"] else "-")
    net.eval()
    return history


def validation_mse(predict: Callable[[Any], np.ndarray], val: Labelled | None) -> Callable[[], float] | None:
    """The ``validate`` of :func:`run_epochs` for a model regressing labels: the mean squared
    error of ``predict(val)`` against ``val.label``; ``None`` without validation rows."""
    if val is None or not len(val):
        return None
    rows = val
    return lambda: float(np.mean((predict(rows) - rows.label) ** 2))
