"""The simulated VTA target: hardware parameters, conv2d knob space, validity, latency, workloads.

TVM no longer ships VTA (the Versatile Tensor Accelerator); this package models it from the
facts of its sources (apache/tvm ``vta/``, apache/tvm-vta), with our own code:

* :mod:`~tune_gym.vta.hardware`: :class:`VTAHardware`, the ``vta`` target's parameters (GEMM
  shape, buffer sizes), defaults as published;
* :mod:`~tune_gym.vta.space`: :class:`VTASpace`, the conv2d template's knobs as a
  :class:`~tune_gym.space.KnobSpace` (``KnobSpace.for_task`` returns one for a ``vta`` task);
* :mod:`~tune_gym.vta.model`: exact validity (buffers, DMA, threads, padding, accumulator
  hazard) and the simulated latency of VTA's load / compute / store pipeline;
* :mod:`~tune_gym.vta.workloads`: the ``deepbench`` (Rieber et al.'s study) and ``resnet18_vta``
  suites;
* :mod:`~tune_gym.vta.backend`: the ``vta-sim`` measurement backend;
* :mod:`~tune_gym.vta.kind`: the ``vta`` entry of the task-kind registry (:mod:`tune_gym.kinds`).

Every latency or throughput it reports is simulated, not measured.

The package's names are imported on first use, so importing :mod:`tune_gym.vta.kind` (which
the registry does) imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tune_gym.vta.hardware import VTAHardware
    from tune_gym.vta.model import LOOP_ORDERS, RULES, Violation, VTAConv, VTAEstimate, VTAPlan, VTATiming
    from tune_gym.vta.space import VTASpace

__all__ = ["LOOP_ORDERS", "RULES", "VTAConv", "VTAEstimate", "VTAHardware", "VTAPlan", "VTASpace", "VTATiming",
           "Violation"]

_HOMES = {"VTAHardware": "hardware", "VTASpace": "space", **{name: "model" for name in (
    "LOOP_ORDERS", "RULES", "VTAConv", "VTAEstimate", "VTAPlan", "VTATiming", "Violation")}}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'tune_gym.vta' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tune_gym.vta.{_HOMES[name]}"), name)
