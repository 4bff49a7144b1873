"""Task features: a fixed-length, task-independent descriptor of an operator instance.

Call :func:`task_features` with a task (``tune_gym.tasks.Task`` has no method for it, so the
task modules never import this package: the dependency goes one way, features -> tasks).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tune_gym.tasks.task import Task

__all__ = ["TASK_FEATURE_DIM", "TASK_FEATURE_HIGH", "TASK_FEATURE_NAMES", "task_features"]

_OPS = ("conv2d_nchw", "depthwise_conv2d_nchw", "conv2d_transpose_nchw", "conv1d_ncw", "dense", "batch_matmul")
#: Shape slots shared by all ops (missing ones are 0): batch, in channels / k, spatial h, w,
#: out channels / n, kernel, stride, padding, m.
_SLOTS = ("b", "c", "h", "w", "k", "r", "s", "p", "m")
TASK_FEATURE_NAMES = tuple(f"op={o}" for o in _OPS) + tuple(f"log2_{s}" for s in _SLOTS) + (
    "log2_flops", "is_gpu")
TASK_FEATURE_DIM = len(TASK_FEATURE_NAMES)
#: Upper bound of every task feature (they are one-hots, 0/1, or log2 of counts below 2**64).
TASK_FEATURE_HIGH = 64.0


def task_features(task: Task) -> np.ndarray:
    """One-hot op kind, log2(1 + each shape slot), log2 FLOPs, target kind (float32 vector).

    A task whose FLOP count is nominal (:attr:`Task.flops_nominal`) has ``log2_flops`` 0: its
    count says nothing about the work."""
    q = dict(task.params)
    if task.op in ("dense", "batch_matmul"):  # matmul dims onto conv-like slots
        slots = {"b": q.get("b", 1), "c": q["k"], "k": q["n"], "m": q["m"]}
    else:
        slots = {"b": q.get("n", 1), **{s: q.get(s, 0) for s in ("c", "h", "w", "k", "r", "s", "p")},
                 "m": q.get("m", 0)}
        if task.op == "conv1d_ncw":
            slots["h"] = 1
    onehot = [1.0 if task.op == o else 0.0 for o in _OPS]
    shape = [math.log2(1 + slots.get(s, 0)) for s in _SLOTS]
    log_flops = 0.0 if task.flops_nominal else math.log2(task.flops)
    return np.asarray(onehot + shape + [log_flops, float(task.target.is_gpu)], dtype=np.float32)
