"""The ``vta`` target kind as the core sees it (:class:`tune_gym.kinds.TaskKind`): the hardware
options and their defaults, the knob space, the ``vta_conv2d`` op, the ``vta-sim`` backend, the
``deepbench`` and ``resnet18_vta`` suites, and ``knobs`` as the default observation.

This module imports only :mod:`tune_gym.kinds`; everything it names is imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable

from tune_gym.kinds import BackendEntry, TargetOption, TaskKind

__all__ = ["KIND", "VTA_DEFAULTS", "VTA_RANGES"]

#: VTA's published default configuration (apache/tvm ``vta/config/vta_config.json``: a 1x16x16 int8
#: GEMM core, 32 KiB input, 256 KiB weight, 128 KiB accumulator and 32 KiB micro-op buffers) and
#: the accumulator hazard window of its GEMM pipeline (see :mod:`tune_gym.vta.model`).
VTA_DEFAULTS: dict[str, int] = {
    "log_batch": 0,
    "log_block": 4,
    "log_uop_buff_size": 15,
    "log_inp_buff_size": 15,
    "log_wgt_buff_size": 18,
    "log_acc_buff_size": 17,
    "acc_hazard": 2,
}

#: Accepted range of each option (inclusive).
VTA_RANGES: dict[str, tuple[int, int]] = {
    "log_batch": (0, 4),
    "log_block": (1, 6),
    "log_uop_buff_size": (8, 24),
    "log_inp_buff_size": (8, 24),
    "log_wgt_buff_size": (8, 24),
    "log_acc_buff_size": (8, 24),
    "acc_hazard": (0, 16),
}


def _int_in(lo: int, hi: int) -> Callable[[str, str], str]:
    """The checker of an integer option in ``[lo, hi]`` (the core's integer option message)."""

    def check(value: str, where: str) -> str:
        from tune_gym.tasks.targets import check_int_option

        return check_int_option(value, where, lo, hi)

    return check


KIND = TaskKind(
    name="vta",
    summary="the simulated Versatile Tensor Accelerator (tune_gym.vta); runs vta_conv2d",
    space="tune_gym.vta.space:VTASpace.for_task",
    options=tuple(TargetOption(name, _int_in(*VTA_RANGES[name]), default) for name, default in VTA_DEFAULTS.items()),
    ops={"vta_conv2d": "tune_gym.vta.ops:VTA_CONV2D"},
    backends={"vta-sim": BackendEntry(
        "tune_gym.vta.backend:VTASimBackend",
        "the simulated VTA's latency model answers configs of vta tasks; options: the fields of "
        "tune_gym.vta.model.VTATiming (clock_mhz, dram_bytes_per_cycle, ...)",
        options="tune_gym.vta.model:VTATiming")},
    suites={"deepbench": "tune_gym.vta.workloads:deepbench_suite",
            "resnet18_vta": "tune_gym.vta.workloads:resnet18_vta_suite"},
    default_observation="knobs",
    has_schedules=False,
    no_tvm_target="is simulated by tune_gym.vta; it has no TVM target (TVM no longer ships VTA). "
                  "Use the vta-sim backend and tune_gym.vta.VTASpace.",
    data_subdir="vta",
)
