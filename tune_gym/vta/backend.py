"""``vta-sim``: a measurement backend that answers VTA configs with the simulated latency model.

Every number it returns is simulated (:mod:`tune_gym.vta.model`); nothing is built or run.

* A valid config gets ``costs = (seconds,)``, ``run_secs = seconds`` (the device time the
  measurement would take), ``build_secs = 0`` and ``extra = {"simulated": True, "cycles": ...,
  "busy": ..., "dram_bytes": ..., "bottleneck": ..., "gemm_utilization": ...}``.
* An invalid config is a failure of kind ``invalid`` (rejected before building, as a compile-
  time check would) whose message names the rule, the buffer and the bytes needed vs
  available, e.g. ``input buffer overflow: ... needs 40960 B, the input buffer holds 32768 B
  (simulated VTA)``; ``extra`` has ``rule``, ``needed`` and ``available``.

:meth:`VTASimBackend.reference` is the simulated peak throughput, ``2 * BATCH * BLOCK_IN *
BLOCK_OUT`` ops per cycle at the clock (51.2 GOP/s by default), so ``Tune-v0``'s reward is the
fraction of peak.

Example:
    >>> backend = make_backend("vta-sim", dram_bytes_per_cycle=16)
    >>> env = gym.make("tune_gym/Tune-v0", task="deepbench:3", backend=backend, observation="knobs")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.options import OptionError, declared_options
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task
from tune_gym.vta.hardware import VTAHardware
from tune_gym.vta.model import VTATiming, estimate

__all__ = ["OPTIONS", "VTASimBackend"]

#: Options of ``make_backend("vta-sim", ...)``: the fields of :class:`VTATiming`.
OPTIONS = tuple(f.name for f in fields(VTATiming))


class VTASimBackend(Backend):
    """Simulated VTA measurements (see the module docstring).

    Args:
        timing: the latency model's parameters; or give them as keyword options
            (:data:`OPTIONS`), not both.
    """

    name = "vta-sim"
    #: Nothing is measured on this machine: the dataset collector records ``vta-sim`` as the
    #: rows' host and marks the data simulated (:mod:`tune_gym.datasets.collect`).
    simulated = True

    def __init__(self, timing: VTATiming | None = None, **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise OptionError(f"vta-sim backend options are {', '.join(OPTIONS)}, not {unknown}")
        if timing is not None and options:
            raise OptionError("give the vta-sim timing either as a VTATiming or as options, not both")
        if timing is not None and not isinstance(timing, VTATiming):
            raise OptionError(f"vta-sim timing must be a VTATiming, got {type(timing).__name__}")
        declared = declared_options(VTATiming)
        self.timing = timing or VTATiming(**{name: declared[name].check(f"vta-sim: {name}", value)
                                             for name, value in options.items()})

    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        """Simulate ``configs`` of a ``vta`` task (its space must be a VTASpace)."""
        from tune_gym.vta.space import VTASpace

        if task.target.kind != "vta" or not isinstance(space, VTASpace):
            raise ValueError(f"the vta-sim backend measures tasks on target vta with their VTASpace, "
                             f"not {task.uri} with {type(space).__name__}")
        out = []
        for cfg in configs:
            plan = space.plan(cfg)
            bad = space.violation(cfg)
            if bad is not None:
                out.append(MeasureResult.failure(
                    "invalid", bad.message, task.flops,
                    extra={"simulated": True, "rule": bad.rule, "needed": bad.needed, "available": bad.available}))
                continue
            est = estimate(space.conv, plan, self.timing)
            out.append(MeasureResult(costs=(est.seconds,), flops=task.flops, run_secs=est.seconds,
                                     extra=est.to_json()))
        return out

    def reference(self, task: Task, preset: str | None = None) -> Reference:
        """The simulated peak of the task's hardware: every cycle one GEMM op (the same for every preset)."""
        hw = VTAHardware.from_target(task.target)
        peak = 2 * hw.macs_per_cycle * self.timing.clock_mhz * 1e6 / 1e9
        method = (f"simulated VTA peak: 2 x {hw.macs_per_cycle} ops per cycle ({'x'.join(map(str, hw.gemm_shape))} "
                  f"GEMM) at {self.timing.clock_mhz:g} MHz; not measured")
        return Reference(peak, method, (peak,), "simulated")

    def close(self) -> None:
        """Nothing to release."""


