"""The outcome of measuring one config."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["ERROR_KINDS", "MAX_COST_SECS", "MAX_GFLOPS", "MIN_COST_SECS", "MeasureResult", "check_gflops", "max_gflops"]

#: Why a config produced no time. ``invalid``: rejected by the space's postprocs (e.g. GPU
#: thread limits) before building; ``build_error``: TVM failed to compile it; ``run_error``:
#: the kernel failed at run time; ``wrong_result``: its output disagrees with the reference;
#: ``timeout``: the build or run exceeded its limit; ``worker_crash``: the worker process
#: died (segfault, OOM); ``rpc_error``: the remote device measuring it was lost (server
#: killed, connection reset, session expired) or none could be had (the message names the
#: device, its key and the tracker).
ERROR_KINDS = ("invalid", "build_error", "run_error", "wrong_result", "timeout", "worker_crash", "rpc_error")

#: The least seconds one call of a compiled kernel can take: 5 ns, about 25 cycles at 5 GHz
#: (a call through TVM's packed-function ABI alone takes longer; the fastest call in the
#: committed datasets, a 256-FLOP conv2d, took 15 ns). A recorded cost below it was not measured.
MIN_COST_SECS = 5e-9
#: The most seconds one recorded call can take: one hour (a build or run is killed long before;
#: the slowest call in the committed datasets took 3.3 s).
MAX_COST_SECS = 3600.0
#: Throughput no single device of a target kind reaches, in GFLOP/s: 100 TFLOP/s for a CPU
#: (``llvm``; the fastest float32 rate of any CPU socket is well below), 10 PFLOP/s for the
#: rest (``cuda`` and every registered kind). A value above it is not a measurement.
MAX_GFLOPS = {"llvm": 1e5, "default": 1e7}


def max_gflops(target_kind: str) -> float:
    """The :data:`MAX_GFLOPS` bound of a target kind (``llvm``, ``cuda`` or a registered kind)."""
    return MAX_GFLOPS.get(target_kind, MAX_GFLOPS["default"])


def check_gflops(gflops: float, target_kind: str, what: str = "throughput") -> None:
    """Raise ``ValueError`` unless ``gflops`` is a possible measured throughput on ``target_kind``:
    a finite number above 0 and at most :func:`max_gflops`."""
    if not _is_number(gflops) or not 0 < gflops <= max_gflops(target_kind):
        raise ValueError(f"{what} {gflops!r} GFLOPS is not a possible measurement on a {target_kind} target "
                         f"(want a finite number in (0, {max_gflops(target_kind):g}])")


def _is_number(x: Any) -> bool:
    """A finite real number that is not a bool (JSON ``true`` is not a time)."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


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
        if self.error is not None and self.costs:
            raise ValueError(f"a failed MeasureResult ({self.error}) has no costs, got {len(self.costs)}")
        for cost in self.costs:
            if not _is_number(cost) or not MIN_COST_SECS <= cost <= MAX_COST_SECS:
                raise ValueError(f"cost {cost!r} s is not a measured time (want a finite number of seconds "
                                 f"in [{MIN_COST_SECS:g}, {MAX_COST_SECS:g}])")
        if isinstance(self.flops, bool) or not isinstance(self.flops, numbers.Integral) or self.flops < 0:
            raise ValueError(f"flops {self.flops!r} is not a FLOP count (want an int >= 0)")
        for name in ("build_secs", "run_secs"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise ValueError(f"{name} {value!r} is not a duration (want a finite number of seconds >= 0)")

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
        """Parse :meth:`to_json`'s form, refusing values of the wrong type (``ValueError``)."""
        if not isinstance(d, dict):
            raise ValueError(f"a result is a JSON object, not {type(d).__name__}")
        costs = d.get("costs", [])
        if not isinstance(costs, list) or not all(_is_number(c) for c in costs):
            raise ValueError(f"result costs {_short(costs)} are not a list of finite numbers")
        for name in ("error_msg",):
            if not isinstance(d.get(name, ""), str):
                raise ValueError(f"result {name} {_short(d.get(name))} is not a string")
        extra = d.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError(f"result extra {_short(extra)} is not a JSON object")
        return cls(
            costs=tuple(float(c) for c in costs),
            flops=d.get("flops", 0),
            error=d.get("error"),
            error_msg=d.get("error_msg", ""),
            build_secs=d.get("build_secs", 0.0),
            run_secs=d.get("run_secs", 0.0),
            extra=extra,
        )

    def check_plausible(self, target_kind: str) -> None:
        """Raise ``ValueError`` when a successful result's throughput is beyond what a device of
        ``target_kind`` can do (:func:`check_gflops`); a failed result passes."""
        if self.ok and self.flops:
            check_gflops(self.gflops, target_kind, "measured throughput")

    @classmethod
    def failure(cls, error: str, msg: str, flops: int = 0, **kw: Any) -> MeasureResult:
        return cls(costs=(), flops=flops, error=error, error_msg=msg[:2000], **kw)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
