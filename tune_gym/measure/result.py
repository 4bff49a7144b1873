"""The outcome of measuring one config."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["ERROR_KINDS", "MeasureResult"]

#: Why a config produced no time. ``invalid``: rejected by the space's postprocs (e.g. GPU
#: thread limits) before building; ``build_error``: TVM failed to compile it; ``run_error``:
#: the kernel failed at run time; ``wrong_result``: its output disagrees with the reference;
#: ``timeout``: the build or run exceeded its limit; ``worker_crash``: the worker process
#: died (segfault, OOM); ``rpc_error``: the remote device measuring it was lost (server
#: killed, connection reset, session expired) or none could be had (the message names the
#: device, its key and the tracker).
ERROR_KINDS = ("invalid", "build_error", "run_error", "wrong_result", "timeout", "worker_crash", "rpc_error")


@dataclass(frozen=True)
class MeasureResult:
    """One measured (or failed) config.

    Attributes:
        costs: seconds per call, one entry per repeat (empty on error).
        flops: FLOPs of one call of the task (so GFLOPS can be derived).
        error: one of :data:`ERROR_KINDS`, or ``None`` when the config ran.
        error_msg: the error's message (truncated), ``""`` on success.
        build_secs: wall seconds spent building this config (its share of a parallel batch).
        run_secs: wall seconds spent timing it (including warm-up and repeats).
        extra: backend-specific details (e.g. adaptive evaluator savings).
    """

    costs: tuple[float, ...] = ()
    flops: int = 0
    error: str | None = None
    error_msg: str = ""
    build_secs: float = 0.0
    run_secs: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.error is not None and self.error not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.error!r}; known: {ERROR_KINDS}")
        if self.error is None and not self.costs:
            raise ValueError("a successful MeasureResult needs at least one cost")

    @property
    def ok(self) -> bool:
        return self.error is None

    # ``mean`` and ``gflops`` are cached on the (frozen) instance: replay serves the same
    # result objects over and over, and an env reads their GFLOPS on every step.
    @cached_property
    def mean(self) -> float:
        """Mean seconds per call (``inf`` on error)."""
        return sum(self.costs) / len(self.costs) if self.ok else math.inf

    @property
    def std(self) -> float:
        if not self.ok or len(self.costs) < 2:
            return 0.0
        m = self.mean
        return math.sqrt(sum((c - m) ** 2 for c in self.costs) / (len(self.costs) - 1))

    @cached_property
    def gflops(self) -> float:
        """Throughput in GFLOP/s (0 for a failed config)."""
        mean = self.mean
        return self.flops / mean / 1e9 if self.error is None and mean > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["costs"] = list(self.costs)
        if not d["extra"]:
            del d["extra"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MeasureResult:
        return cls(
            costs=tuple(float(c) for c in d.get("costs", ())),
            flops=int(d.get("flops", 0)),
            error=d.get("error"),
            error_msg=str(d.get("error_msg", "")),
            build_secs=float(d.get("build_secs", 0.0)),
            run_secs=float(d.get("run_secs", 0.0)),
            extra=dict(d.get("extra", {})),
        )

    @classmethod
    def failure(cls, error: str, msg: str, flops: int = 0, **kw: Any) -> MeasureResult:
        return cls(costs=(), flops=flops, error=error, error_msg=msg[:2000], **kw)
