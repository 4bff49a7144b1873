"""VTA hardware parameters: the GEMM core's shape, data widths and on-chip buffer sizes.

The parameters are those of VTA's ``vta_config.json`` (apache/tvm ``vta/config/``), written as
log2 values as there, and set through a ``vta`` target's options
(:data:`tune_gym.vta.kind.VTA_DEFAULTS`, e.g. ``?target=vta&log_block=5``). Defaults: the
published configuration, a ``BATCH x BLOCK_IN x BLOCK_OUT = 1 x 16 x 16`` GEMM core on int8
inputs and weights with int32 accumulation, a 32 KiB input buffer, a 256 KiB weight buffer, a
128 KiB accumulator buffer and a 32 KiB micro-op buffer.

Derived quantities follow VTA's ``environment.py``: one *tensor element* of a buffer is one
operand of the GEMM core (input ``BATCH x BLOCK_IN`` int8 = 16 B, weight ``BLOCK_OUT x BLOCK_IN``
int8 = 256 B, accumulator ``BATCH x BLOCK_OUT`` int32 = 64 B, output ``BATCH x BLOCK_OUT`` int8 =
16 B), a micro-op is 32 bits, and a buffer's *depth* is its size in elements (input 2048,
weight 1024, accumulator 2048, micro-op 8192 by default).

Example:
    >>> hw = VTAHardware.from_target(TargetSpec("vta"))
    >>> hw.gemm_shape, hw.inp_buff_bytes, hw.acc_depth
    ((1, 16, 16), 32768, 2048)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tune_gym.errors import TaskError
from tune_gym.tasks.targets import TargetSpec
from tune_gym.vta.kind import VTA_DEFAULTS

__all__ = ["DMA_FIELD_MAX", "DMA_PAD_MAX", "UOP_BYTES", "VTAHardware"]

#: Largest size or stride (in tensor elements) a VTA load/store instruction encodes (16-bit fields).
DMA_FIELD_MAX = 2**16 - 1
#: Largest padding a VTA load encodes per side (4-bit fields).
DMA_PAD_MAX = 2**4 - 1
#: Bytes of one micro-op (VTA_UOP_WIDTH = 32 bits).
UOP_BYTES = 4


@dataclass(frozen=True)
class VTAHardware:
    """One VTA configuration (the fields are the ``vta`` target's options, see the module docstring).

    Attributes:
        log_batch: log2 of the GEMM core's batch rows (``BATCH``).
        log_block: log2 of its input and output channel block (``BLOCK_IN = BLOCK_OUT``).
        log_uop_buff_size, log_inp_buff_size, log_wgt_buff_size, log_acc_buff_size: log2 of the
            micro-op, input, weight and accumulator buffer sizes in bytes.
        acc_hazard: GEMM cycles within which one accumulator entry may not be accumulated again
            (the GEMM pipeline reads an entry before the previous update of it is written; 0:
            no such rule). See :mod:`tune_gym.vta.model`.
    """

    log_batch: int = VTA_DEFAULTS["log_batch"]
    log_block: int = VTA_DEFAULTS["log_block"]
    log_uop_buff_size: int = VTA_DEFAULTS["log_uop_buff_size"]
    log_inp_buff_size: int = VTA_DEFAULTS["log_inp_buff_size"]
    log_wgt_buff_size: int = VTA_DEFAULTS["log_wgt_buff_size"]
    log_acc_buff_size: int = VTA_DEFAULTS["log_acc_buff_size"]
    acc_hazard: int = VTA_DEFAULTS["acc_hazard"]

    #: Data widths in bits: int8 inputs, weights and outputs, int32 accumulators (fixed: the
    #: ``vta_conv2d`` op is int8).
    INP_WIDTH = 8
    WGT_WIDTH = 8
    ACC_WIDTH = 32
    OUT_WIDTH = 8

    @classmethod
    def from_target(cls, target: TargetSpec | str | Mapping[str, Any]) -> VTAHardware:
        """The hardware of a ``vta`` target (a spec, a str such as ``"vta&log_block=5"``, or its
        resolved option dict)."""
        if not isinstance(target, Mapping):
            spec = TargetSpec.coerce(target)
            if spec.kind != "vta":
                raise TaskError(f"VTA hardware comes from a vta target, not {spec.kind}")
            target = spec.resolved()
        return cls(**{k: int(target.get(k, v)) for k, v in VTA_DEFAULTS.items()})

    def to_target(self) -> TargetSpec:
        """The ``vta`` target of this hardware (options only where they differ from the defaults)."""
        return TargetSpec("vta", tuple((k, str(v)) for k, v in asdict(self).items() if v != VTA_DEFAULTS[k]))

    # ------------------------------------------------------------------ derived
    @property
    def batch(self) -> int:
        return 1 << self.log_batch

    @property
    def block_in(self) -> int:
        return 1 << self.log_block

    @property
    def block_out(self) -> int:
        return 1 << self.log_block

    @property
    def gemm_shape(self) -> tuple[int, int, int]:
        """``(BATCH, BLOCK_IN, BLOCK_OUT)``: one GEMM op multiplies a BATCH x BLOCK_IN input by a
        BLOCK_IN x BLOCK_OUT weight block into a BATCH x BLOCK_OUT accumulator block."""
        return self.batch, self.block_in, self.block_out

    @property
    def macs_per_cycle(self) -> int:
        """Multiply-accumulates of one GEMM op (the core issues one op per cycle)."""
        return self.batch * self.block_in * self.block_out

    @property
    def inp_elem_bytes(self) -> int:
        return self.batch * self.block_in * self.INP_WIDTH // 8

    @property
    def wgt_elem_bytes(self) -> int:
        return self.block_out * self.block_in * self.WGT_WIDTH // 8

    @property
    def acc_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.ACC_WIDTH // 8

    @property
    def out_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.OUT_WIDTH // 8

    @property
    def uop_buff_bytes(self) -> int:
        return 1 << self.log_uop_buff_size

    @property
    def inp_buff_bytes(self) -> int:
        return 1 << self.log_inp_buff_size

    @property
    def wgt_buff_bytes(self) -> int:
        return 1 << self.log_wgt_buff_size

    @property
    def acc_buff_bytes(self) -> int:
        return 1 << self.log_acc_buff_size

    @property
    def inp_depth(self) -> int:
        """Input buffer capacity in tensor elements."""
        return self.inp_buff_bytes // self.inp_elem_bytes

    @property
    def wgt_depth(self) -> int:
        return self.wgt_buff_bytes // self.wgt_elem_bytes

    @property
    def acc_depth(self) -> int:
        return self.acc_buff_bytes // self.acc_elem_bytes

    @property
    def uop_depth(self) -> int:
        return self.uop_buff_bytes // UOP_BYTES

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        """Raise :class:`TaskError` unless every buffer holds at least one tensor element."""
        for name, size, elem, option in (
            ("input", self.inp_buff_bytes, self.inp_elem_bytes, "log_inp_buff_size"),
            ("weight", self.wgt_buff_bytes, self.wgt_elem_bytes, "log_wgt_buff_size"),
            ("accumulator", self.acc_buff_bytes, self.acc_elem_bytes, "log_acc_buff_size"),
            ("micro-op", self.uop_buff_bytes, UOP_BYTES, "log_uop_buff_size"),
        ):
            if size < elem:
                raise TaskError(f"target vta: the {name} buffer of {size} B ({option}={getattr(self, option)}) "
                                f"holds no {elem} B tensor element of a {'x'.join(map(str, self.gemm_shape))} "
                                f"GEMM core; accepted: {option} >= {(elem - 1).bit_length()}")

    def check_conv(self, params: Mapping[str, int]) -> None:
        """Raise :class:`TaskError` unless a ``vta_conv2d`` fits this hardware: the batch a multiple
        of ``BATCH``, the input channels of ``BLOCK_IN`` and the output channels of ``BLOCK_OUT``
        (VTA packs them into NCHW{n}c{c} blocks; the paper's DeepBench study leaves out the layers
        that do not fit)."""
        self.check()
        for param, unit, name in (("n", self.batch, "BATCH"), ("c", self.block_in, "BLOCK_IN"),
                                  ("k", self.block_out, "BLOCK_OUT")):
            if params[param] % unit:
                raise TaskError(f"vta_conv2d: parameter {param!r}={params[param]} is not a multiple of the "
                                f"GEMM core's {name} = {unit}; VTA packs it into blocks of {unit}")

    def describe(self) -> str:
        """One line for reports: the GEMM shape and the buffer sizes."""
        kib = lambda b: f"{b / 1024:g} KiB"
        return (f"{'x'.join(map(str, self.gemm_shape))} int8 GEMM (int32 acc), input {kib(self.inp_buff_bytes)}, "
                f"weight {kib(self.wgt_buff_bytes)}, accumulator {kib(self.acc_buff_bytes)}, "
                f"micro-op {kib(self.uop_buff_bytes)}, acc hazard {self.acc_hazard} cycles")
