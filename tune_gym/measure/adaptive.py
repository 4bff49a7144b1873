"""AdaTune's adaptive evaluator: stop timing a kernel once its throughput is steady.

Paper: Li et al., "AdaTune: Adaptive Tensor Program Compilation Made Efficient" (NeurIPS
2020), section 4.1; METHODS.md section 2. A fixed evaluator runs every kernel ``max_runs``
times (the authors compare against 500). The adaptive one runs it in micro-batches of
``micro_batch`` calls (50) and, after each micro-batch, computes the coefficient of
variation (CV = std / mean) of the per-micro-batch throughputs; once at least
``min_batches`` (3, "more than 2") micro-batches are in, it stops as soon as the CV is below
``cv_threshold`` (0.1), else when ``max_runs`` calls are spent. With more than 4
micro-batches the smallest and largest throughput are left out of the CV.

Choices (written down because the paper leaves them open):
    * One micro-batch = one ``time_evaluator(number=B, repeat=1)`` call: its cost is the
      mean of B back-to-back calls, exactly the per-micro-batch value the rule needs, timed
      in one loop so that timer overhead and resolution (kernels of a few microseconds)
      barely matter. ``number=1, repeat=B`` would time each call alone (noisier for tiny
      kernels, and B values to reduce anyway). This is also what the authors' code does.
      ``min_repeat_ms`` is not used, so ``runs`` counts the timed calls exactly; TVM adds
      one discarded warm-up call per micro-batch, which is not counted.
    * Per-micro-batch throughput, as in the authors' code and METHODS.md. (The paper's text
      writes the CV over the *cumulative* throughput ``i * GFLOP / Time(i)``; cumulative
      values are running means, strongly correlated, and their CV shrinks with i even for
      noisy kernels.) The throughput is ``1 / cost`` (calls per second): the CV does not
      depend on the FLOP count, which the runner does not know.
    * The std is the population one (``ddof=0``), as ``numpy.std`` in the authors' code.

Only worth it when the repeat budget is large: with 500 runs of a microsecond kernel the
saving is milliseconds, with 500 runs of a 10 ms kernel it is seconds per config.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["adaptive_costs", "should_stop", "trimmed_cv"]


def trimmed_cv(values: Sequence[float] | np.ndarray) -> float:
    """Coefficient of variation (population std / mean) of ``values``.

    With more than 4 values the minimum and maximum are dropped first. Returns ``inf`` for
    an empty list or a non-positive or non-finite mean.
    """
    arr = np.sort(np.asarray(values, dtype=np.float64))
    if arr.size > 4:
        arr = arr[1:-1]
    mean = float(arr.mean()) if arr.size else 0.0
    if not np.isfinite(mean) or mean <= 0:
        return float("inf")
    return float(arr.std() / mean)


def should_stop(values: Sequence[float] | np.ndarray, threshold: float = 0.1, min_batches: int = 3) -> bool:
    """AdaTune's stopping rule on per-micro-batch throughputs ``values``.

    True when at least ``min_batches`` values are in and their :func:`trimmed_cv` is below
    ``threshold``. (The ``max_runs`` cap is applied by :func:`adaptive_costs`.)
    """
    return len(values) >= min_batches and trimmed_cv(values) < threshold


def adaptive_costs(lib: Any, dev: Any, args: Sequence[Any], micro_batch: int = 50, max_runs: int = 500,
                   cv_threshold: float = 0.1, min_batches: int = 3) -> tuple[list[float], dict[str, Any]]:
    """Time ``lib["main"](*args)`` on ``dev`` with the adaptive evaluator.

    Args:
        lib: a loaded TVM runtime module with a ``main`` function.
        dev: the TVM device to time on.
        args: the function's arguments (device tensors).
        micro_batch: calls per micro-batch, B (50). The last micro-batch is shorter when
            ``max_runs`` is not a multiple of B.
        max_runs: the repeat budget a fixed evaluator would spend (500).
        cv_threshold: stop when the CV of the per-micro-batch throughputs is below this (0.1).
        min_batches: micro-batches needed before the rule may stop (3).

    Returns:
        ``(costs, extra)``: ``costs`` has one entry per micro-batch, the mean seconds per
        call in it; ``extra`` has ``runs`` (timed calls made), ``max_runs``,
        ``saved_fraction`` (``1 - runs / max_runs``), ``seconds`` (wall seconds spent
        timing), ``seconds_saved_estimate`` (``seconds / runs * (max_runs - runs)``: the
        measured wall time per call, warm-ups and timer overhead included, extrapolated to
        the calls not made), ``micro_batches`` and ``cv`` (the last CV).
    """
    if micro_batch < 1 or max_runs < 1 or min_batches < 1:
        raise ValueError(f"micro_batch, max_runs and min_batches must be >= 1, got "
                         f"{micro_batch}, {max_runs}, {min_batches}")
    if cv_threshold <= 0:
        raise ValueError(f"cv_threshold must be > 0, got {cv_threshold}")
    costs: list[float] = []
    runs = 0
    start = time.perf_counter()
    while runs < max_runs:
        size = min(micro_batch, max_runs - runs)
        timer = lib.time_evaluator("main", dev, number=size, repeat=1)
        costs.append(float(timer(*args).mean))
        runs += size
        if should_stop(_throughputs(costs), cv_threshold, min_batches):
            break
    seconds = time.perf_counter() - start
    extra = {
        "runs": runs, "max_runs": max_runs, "saved_fraction": 1.0 - runs / max_runs,
        "seconds": seconds, "seconds_saved_estimate": seconds / runs * (max_runs - runs),
        "micro_batches": len(costs), "cv": trimmed_cv(_throughputs(costs)),
    }
    return costs, extra


def _throughputs(costs: Sequence[float]) -> np.ndarray:
    """Calls per second of each micro-batch (``inf`` for a zero cost, which never stops)."""
    with np.errstate(divide="ignore"):
        return 1.0 / np.asarray(costs, dtype=np.float64)
