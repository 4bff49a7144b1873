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
* :mod:`~tune_gym.vta.backend`: the ``vta-sim`` measurement backend.

Every latency or throughput it reports is simulated, not measured.
"""

from tune_gym.vta.hardware import VTAHardware
from tune_gym.vta.model import LOOP_ORDERS, RULES, Violation, VTAConv, VTAEstimate, VTAPlan, VTATiming
from tune_gym.vta.space import VTASpace

__all__ = ["LOOP_ORDERS", "RULES", "VTAConv", "VTAEstimate", "VTAHardware", "VTAPlan", "VTASpace", "VTATiming",
           "Violation"]
