"""Validity and simulated latency of a VTA conv2d schedule (our model; no VTA hardware involved).

**The program.** VTA's AutoTVM conv2d template (apache/tvm ``vta/python/vta/top/vta_conv2d.py``)
tiles the packed output ``(N/BATCH, K/BLOCK_OUT, OH, OW)`` and the input channels
``C/BLOCK_IN``. With tiles ``b, co, h, w`` (output) and ``ci`` (input channels), a
:class:`VTAPlan`, one *output tile* is computed as::

    reset the accumulator tile (b x co x h x w elements)            # GEMM reset, compute module
    for each batch row (b) and each input-channel step (C/BLOCK_IN/ci):
        load the input window  ci x hwin x wwin                     # 1 DMA, load module
        load the weights       co x ci x kh x kw                    # 1 DMA, load module
        GEMM   co x h x w x ci x kh x kw ops                        # compute module
    ALU: requantize the accumulator tile (shift, clip)              # compute module
    store the output tile  (b x co x h x w, int8)                   # 1 DMA per batch row, store module

where ``hwin = (h-1)*sh + kh`` and ``wwin = (w-1)*sw + kw``. ``h_threads`` / ``oc_threads``
(the template's ``h_nthread`` / ``oc_nthread``) split the outer row / output-channel tile loop
into that many *virtual threads* (``cthread``): interleaved copies of the program, each with its
own input, weight and accumulator buffers, so one thread's loads overlap another's GEMMs.
``loop_order`` (:data:`LOOP_ORDERS`) is the order of the GEMM loops inside one step, which
decides the micro-op kernel (VTA's ``FoldUopLoop`` turns the outermost two loops into the GEMM
instruction's hardware loops and unrolls the rest into micro-ops).

**Validity** (:func:`violations`, every rule exact integer arithmetic; ``vt = h_threads *
oc_threads``):

1. ``h_threads`` divides the number of row tiles ``OH/h``, ``oc_threads`` the number of
   output-channel tiles (VTA's original planner also required it; an uneven split leaves one
   virtual thread a guarded tail).
2. Buffers (VTA registers each scope with ``max_num_bits`` = its size; ``cthread`` virtual
   threads do not share allocations, so each buffer is needed ``vt`` times)::

       input  vt * ci * hwin * wwin * BATCH*BLOCK_IN*1 B       <= input buffer
       weight vt * co * ci * kh * kw * BLOCK_OUT*BLOCK_IN*1 B  <= weight buffer
       acc    vt * b * co * h * w * BATCH*BLOCK_OUT*4 B        <= accumulator buffer
       uops   (GEMM micro-op kernel) * 4 B                     <= micro-op buffer

3. DMA: each tile load / store is one 2-D DMA (VTA's ``InjectDMAIntrin``: dimensions fold when
   the inner ones are whole; a padded load cannot fold and must be exactly rows x columns;
   sizes and strides fit 16 bits).
4. Padding: no tile of a padded input lies entirely in the padding.
5. Accumulator hazard: the GEMM pipeline does not forward accumulator updates (the HLS core
   declares ``DEPENDENCE acc_mem inter false`` to reach II=1), so an entry accumulated again
   within ``acc_hazard`` ops reads a stale value: the ops nested inside the innermost reduction
   loop must number more than ``acc_hazard`` (VTA's original planner: "don't write to the same
   acc location within 2 consecutive cycles").

**Latency** (:func:`estimate`, parameters :class:`VTATiming`): instruction costs in cycles,

.. code-block:: text

    LOAD  = dma_setup + ceil(bytes / dram_bytes_per_cycle)         (input, weight; pads cost as data)
    GEMM  = gemm_setup + ops  [+ dma_setup + ceil(uops*4 / bw) when the micro-op kernels of all
                               virtual threads do not stay in the micro-op buffer]
    RESET = gemm_setup + b*co*h*w
    ALU   = alu_ops * (alu_setup + b*co*h*w * alu_cycles_per_vector)
    STORE = b * dma_setup + ceil(b*co*h*w*BATCH*BLOCK_OUT*1 B / bw)

run on three in-order modules (load, compute, store) linked by VTA's dependence queues: a GEMM
waits for its load, a load waits for the GEMM that last read the same buffer copy, a store
waits for its ALU, and a reset waits for the store that last read the same accumulator copy.
With one virtual thread, load and GEMM therefore alternate; with ``vt`` threads (``vt`` buffer
copies) a load overlaps the GEMMs of the other threads. The schedule is simulated event by
event (a max-plus recurrence) for the first output tiles and extrapolated over the rest at the
steady-state period (:func:`estimate`); ``seconds = cycles / clock``. Every figure is simulated.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from tune_gym.options import Float, Int
from tune_gym.vta.hardware import DMA_FIELD_MAX, UOP_BYTES, VTAHardware

__all__ = ["LOOP_ORDERS", "RULES", "VTAConv", "VTAEstimate", "VTAPlan", "VTATiming", "Violation", "dma_dims",
           "estimate", "violations"]

#: GEMM loop orders inside one step (outer -> inner; ``ci`` is the input-channel tile, ``kh``,
#: ``kw`` the kernel window, ``co``, ``h``, ``w`` the output tile). 0 is the template's
#: ``reorder(..., x_j, d_j, d_i, x_co, x_i)``; 1-3 move the kernel-window pair to the other
#: positions among the spatial loops (the paper's extra permutations; their exact form is not
#: published, this is our choice).
LOOP_ORDERS: tuple[tuple[str, ...], ...] = (
    ("ci", "w", "kw", "kh", "co", "h"),
    ("ci", "kw", "kh", "w", "co", "h"),
    ("ci", "w", "co", "kw", "kh", "h"),
    ("ci", "w", "co", "h", "kw", "kh"),
)
_REDUCTION = ("ci", "kh", "kw")
#: Validity rules in the order they are checked (:attr:`Violation.rule`).
RULES = ("threads", "inp_buffer", "wgt_buffer", "acc_buffer", "uop_buffer", "inp_dma", "out_dma", "padding",
         "acc_hazard")


@dataclass(frozen=True)
class VTAConv:
    """A ``vta_conv2d`` in VTA's packed units.

    Attributes:
        n, c, h, w, k, kh, kw, sh, sw, ph, pw: the op's parameters (batch, channels, input
            size, output channels, kernel, strides, paddings).
        hw: the hardware.
    """

    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    hw: VTAHardware = field(default_factory=VTAHardware)

    @classmethod
    def from_params(cls, params: Mapping[str, int], hw: VTAHardware) -> VTAConv:
        names = [f.name for f in fields(cls) if f.name != "hw"]
        return cls(**{k: int(params[k]) for k in names}, hw=hw)

    @classmethod
    def from_task(cls, task: Any) -> VTAConv:
        """The conv of a ``vta_conv2d`` task on a ``vta`` target."""
        return cls.from_params(task.param_dict, VTAHardware.from_target(task.target))

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.ph - self.kh) // self.sh + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pw - self.kw) // self.sw + 1

    @property
    def nb(self) -> int:
        """Packed batch rows ``N / BATCH``."""
        return self.n // self.hw.batch

    @property
    def nci(self) -> int:
        """Input-channel blocks ``C / BLOCK_IN``."""
        return self.c // self.hw.block_in

    @property
    def nco(self) -> int:
        """Output-channel blocks ``K / BLOCK_OUT``."""
        return self.k // self.hw.block_out

    @property
    def padded(self) -> bool:
        return self.ph > 0 or self.pw > 0

    @property
    def ops(self) -> int:
        """Multiply-adds x 2 of the whole conv (what MeasureResult calls FLOPs; int8 here)."""
        return 2 * self.n * self.k * self.oh * self.ow * self.c * self.kh * self.kw


@dataclass(frozen=True)
class VTAPlan:
    """The decisions of one config: inner tile sizes (packed units), virtual threads, loop order.

    Attributes:
        b: batch rows per output tile (of ``N/BATCH``).
        h, w: output rows / columns per tile.
        ci: input-channel blocks per step (of ``C/BLOCK_IN``).
        co: output-channel blocks per tile (of ``K/BLOCK_OUT``).
        h_threads, oc_threads: virtual threads over the row / output-channel tile loops.
        loop_order: index into :data:`LOOP_ORDERS`.
    """

    b: int
    h: int
    w: int
    ci: int
    co: int
    h_threads: int = 1
    oc_threads: int = 1
    loop_order: int = 0

    @property
    def threads(self) -> int:
        return self.h_threads * self.oc_threads


@dataclass(frozen=True)
class Violation:
    """Why a plan is invalid.

    Attributes:
        rule: one of :data:`RULES` (the buffer rules name the buffer: ``inp_buffer``...).
        needed: bytes (buffers), dimensions (DMA), ops apart (hazard) or tiles needed.
        available: what the hardware or the schedule offers in the same unit.
        message: the full explanation (names the knobs, the buffer, the numbers).
    """

    rule: str
    needed: int
    available: int
    message: str

    def __str__(self) -> str:
        return self.message


# ---------------------------------------------------------------------------- tiles
def _tiles(conv: VTAConv, plan: VTAPlan) -> dict[str, int]:
    """Tile counts, windows and per-thread tile bytes of a plan."""
    hw = conv.hw
    hwin, wwin = (plan.h - 1) * conv.sh + conv.kh, (plan.w - 1) * conv.sw + conv.kw
    out_elems = plan.b * plan.co * plan.h * plan.w
    return {
        "hwin": hwin, "wwin": wwin,
        "n_b": conv.nb // plan.b, "n_h": conv.oh // plan.h, "n_w": conv.ow // plan.w,
        "n_ci": conv.nci // plan.ci, "n_co": conv.nco // plan.co,
        "inp": plan.ci * hwin * wwin * hw.inp_elem_bytes,
        "wgt": plan.co * plan.ci * conv.kh * conv.kw * hw.wgt_elem_bytes,
        "acc": out_elems * hw.acc_elem_bytes,
        "out": out_elems * hw.out_elem_bytes,
        "out_elems": out_elems,
        "gemm_ops": plan.co * plan.h * plan.w * plan.ci * conv.kh * conv.kw,
    }


def _loops(conv: VTAConv, plan: VTAPlan) -> list[tuple[str, int]]:
    """The non-unit GEMM loops of one step, outer -> inner (unit loops do not exist in the code)."""
    extent = {"ci": plan.ci, "w": plan.w, "h": plan.h, "co": plan.co, "kh": conv.kh, "kw": conv.kw}
    return [(name, extent[name]) for name in LOOP_ORDERS[plan.loop_order] if extent[name] > 1]


def micro_ops(conv: VTAConv, plan: VTAPlan) -> tuple[int, int]:
    """``(GEMM kernel, reset kernel)`` micro-op counts: the outermost two loops of each become
    the instruction's hardware loops (VTA's ``FoldUopLoop``), the others are unrolled."""
    gemm = math.prod(e for _, e in _loops(conv, plan)[2:])
    spatial = [(n, e) for n, e in _loops(conv, plan) if n not in _REDUCTION]
    return gemm, math.prod(e for _, e in spatial[2:])


def hazard_distance(conv: VTAConv, plan: VTAPlan) -> int | None:
    """GEMM ops between two accumulations into one accumulator entry: the product of the loops
    nested inside the innermost reduction loop (``None``: no loop reduces, no entry repeats)."""
    loops = _loops(conv, plan)
    reductions = [i for i, (n, _) in enumerate(loops) if n in _REDUCTION]
    if not reductions:
        return None
    return math.prod(e for _, e in loops[reductions[-1] + 1:])


def dma_dims(region: tuple[int, ...], full: tuple[int, ...], fold: bool = True) -> tuple[int, list[int], list[int]]:
    """How VTA's DMA lowering sees a tile: ``(outer dims, sizes, strides)``.

    ``region`` and ``full`` are a tile's and its tensor's extents in tensor elements, outer ->
    inner, the innermost being contiguous. Unit extents vanish (their loops do not exist);
    with ``fold`` an outer dimension merges into the group inside it when that group is whole
    (VTA's ``_fold_buffer_dim``); when the innermost remaining dimension is not the contiguous
    one, a unit column dimension is added. A 2-D DMA needs at most 2 outer dims (rows,
    columns). Without ``fold`` (a padded load) nothing merges.
    """
    strides, s = [], 1
    for f in reversed(full):
        strides.append(s)
        s *= f
    strides.reverse()
    dims = [(r, st) for r, st in zip(region, strides) if r > 1]
    groups: list[tuple[int, int]] = []  # (size, stride), inner first
    for r, st in reversed(dims):
        if fold and groups and groups[-1][0] * groups[-1][1] == st:
            groups[-1] = (groups[-1][0] * r, groups[-1][1])
        else:
            groups.append((r, st))
    if not groups or groups[0][1] != 1:
        groups.insert(0, (1, 1))
    sizes = [g[0] for g in reversed(groups)]
    strides_out = [g[1] for g in reversed(groups)]
    return len(groups), sizes, strides_out


# ---------------------------------------------------------------------------- validity
def violations(conv: VTAConv, plan: VTAPlan, first: bool = False) -> list[Violation]:
    """Every rule the plan breaks (see the module docstring), in :data:`RULES` order.

    Args:
        conv: the conv (its hardware included).
        plan: the decisions; its tiles must divide the conv's extents (a config of the space).
        first: stop at the first violation.
    """
    found = _violations(conv, plan)
    return list(itertools.islice(found, 1)) if first else list(found)


def _violations(conv: VTAConv, plan: VTAPlan) -> Iterator[Violation]:
    """The rules the plan breaks, lazily, in :data:`RULES` order."""
    hw, t, vt = conv.hw, _tiles(conv, plan), plan.threads
    for knob, threads, n_tiles, what in (("h_threading", plan.h_threads, t["n_h"], "row"),
                                         ("oc_threading", plan.oc_threads, t["n_co"], "output-channel")):
        if n_tiles % threads:
            yield Violation("threads", threads, n_tiles,
                            f"{knob}={threads} splits the {n_tiles} {what} tiles into {threads} virtual threads, "
                            f"which needs a multiple of {threads} tiles (simulated VTA)")
    ws = "virtual threads" if vt > 1 else "virtual thread"
    for rule, name, need, cap, detail in (
        ("inp_buffer", "input", vt * t["inp"], hw.inp_buff_bytes,
         f"{plan.ci} channel blocks x {t['hwin']} x {t['wwin']} window x {hw.inp_elem_bytes} B"),
        ("wgt_buffer", "weight", vt * t["wgt"], hw.wgt_buff_bytes,
         f"{plan.co} x {plan.ci} channel blocks x {conv.kh}x{conv.kw} kernel x {hw.wgt_elem_bytes} B"),
        ("acc_buffer", "accumulator", vt * t["acc"], hw.acc_buff_bytes,
         f"{plan.b} batch x {plan.co} channel blocks x {plan.h} x {plan.w} tile x {hw.acc_elem_bytes} B"),
    ):
        if need > cap:
            yield Violation(rule, need, cap,
                            f"{name} buffer overflow: the tile ({detail}) x {vt} {ws} needs {need} B, the "
                            f"{name} buffer holds {cap} B (simulated VTA)")
    uops, _ = micro_ops(conv, plan)
    if uops * UOP_BYTES > hw.uop_buff_bytes:
        yield Violation("uop_buffer", uops * UOP_BYTES, hw.uop_buff_bytes,
                        f"micro-op buffer overflow: loop_order={plan.loop_order} leaves a GEMM kernel of {uops} "
                        f"micro-ops, which needs {uops * UOP_BYTES} B, the micro-op buffer holds "
                        f"{hw.uop_buff_bytes} B (simulated VTA)")
    if conv.padded:  # a padded load does not fold: its outer dims must be exactly (rows, columns)
        region, full = (plan.ci, t["hwin"], t["wwin"]), (conv.nci, conv.h + 2 * conv.ph, conv.w + 2 * conv.pw)
        n_dims, sizes, strides = dma_dims(region, full, fold=False)
        ok = plan.ci == 1 and t["hwin"] > 1 and t["wwin"] > 1
    else:
        region, full = (plan.ci, t["hwin"], t["wwin"]), (conv.nci, conv.h, conv.w)
        n_dims, sizes, strides = dma_dims(region, full)
        ok = n_dims <= 2
    if not ok or max(*sizes, *strides) > DMA_FIELD_MAX:
        why = ("a padded load must be exactly rows x columns (tile_ci 1, a window of more than one row "
               "and column)" if conv.padded else "VTA loads 2-D tiles (rows x columns) with 16-bit sizes and strides")
        yield Violation("inp_dma", n_dims, 2,
                        f"input load is not one 2-D DMA: the window {plan.ci} channel blocks x {t['hwin']} x "
                        f"{t['wwin']} of a {conv.nci} x {full[1]} x {full[2]} input has {n_dims} strided "
                        f"dimensions (sizes {sizes}, strides {strides}); {why} (simulated VTA)")
    n_dims, sizes, strides = dma_dims((plan.co, plan.h, plan.w), (conv.nco, conv.oh, conv.ow))
    if n_dims > 2 or max(*sizes, *strides) > DMA_FIELD_MAX:
        yield Violation("out_dma", n_dims, 2,
                        f"output store is not one 2-D DMA: the tile {plan.co} channel blocks x {plan.h} x "
                        f"{plan.w} of a {conv.nco} x {conv.oh} x {conv.ow} output has {n_dims} strided "
                        f"dimensions (sizes {sizes}, strides {strides}); VTA stores 2-D tiles (simulated VTA)")
    for axis, knob, pad, win, size, stride, n_tiles, tile in (
        ("row", "tile_h", conv.ph, t["hwin"], conv.h, conv.sh, t["n_h"], plan.h),
        ("column", "tile_w", conv.pw, t["wwin"], conv.w, conv.sw, t["n_w"], plan.w),
    ):
        last_start = (n_tiles - 1) * tile * stride
        if pad and (win <= pad or last_start >= pad + size):
            yield Violation("padding", pad + 1, win,
                            f"{knob}={tile}: an input window of {win} {axis}s lies entirely in the padding of "
                            f"{pad} {axis}s (its DMA would load nothing) (simulated VTA)")
    distance = hazard_distance(conv, plan)
    if hw.acc_hazard and distance is not None and distance <= hw.acc_hazard:
        yield Violation("acc_hazard", hw.acc_hazard + 1, distance,
                        f"accumulator hazard: with loop_order={plan.loop_order} the GEMM accumulates into the same "
                        f"accumulator entry every {distance} ops; the pipeline needs more than {hw.acc_hazard} "
                        f"(simulated VTA)")


# ---------------------------------------------------------------------------- latency
@dataclass(frozen=True)
class VTATiming:
    """Parameters of the latency model (see the module docstring for the formulas).

    Defaults: a PYNQ-class VTA (100 MHz, one 64-bit AXI beat per cycle); the per-instruction
    overheads are those of VTA's own static cost table (``vta/config/vta_cost.py``: 150 cycles
    per DMA, 80 per GEMM, 46 per ALU instruction); the ALU requantizes with 3 immediate ops
    (shift, max, min) at one vector per cycle. None of them is measured here. Each field is
    declared once (the ``vta-sim`` backend's options table).
    """

    clock_mhz: Annotated[float, Float(0, low_open=True, help="core clock, MHz")] = 100.0
    dram_bytes_per_cycle: Annotated[float, Float(0, low_open=True, help="DRAM bandwidth of the DMA engines, "
                                                                        "bytes per cycle")] = 8.0
    dma_setup: Annotated[int, Int(0, help="cycles per load / store instruction beyond its data beats")] = 150
    gemm_setup: Annotated[int, Int(0, help="cycles per GEMM (and reset) instruction beyond its ops")] = 80
    alu_setup: Annotated[int, Int(0, help="cycles per ALU instruction beyond its vectors")] = 46
    alu_ops: Annotated[int, Int(0, help="ALU instructions per output tile")] = 3
    alu_cycles_per_vector: Annotated[float, Float(0, help="cycles per BATCH x BLOCK_OUT vector of an ALU "
                                                          "instruction")] = 1.0
    sim_steps: Annotated[int, Int(1, help="step budget of the event simulation before it extrapolates (8 "
                                          "output-tile groups are always simulated)")] = 4096

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"VTATiming.{f.name} must be a finite number >= 0, got {v!r}")
        if self.clock_mhz <= 0 or self.dram_bytes_per_cycle <= 0 or self.sim_steps < 1:
            raise ValueError("VTATiming: clock_mhz and dram_bytes_per_cycle must be > 0 and sim_steps >= 1")


@dataclass(frozen=True)
class VTAEstimate:
    """The simulated run of one valid plan.

    Attributes:
        cycles: simulated cycles of the whole conv.
        seconds: ``cycles / clock``.
        gemm_ops: GEMM ops (one per cycle of a busy GEMM core).
        busy: cycles each module works (``load``, ``compute``, ``store``), summed over its
            instructions, and ``gemm``: the compute module's GEMM instructions alone.
        dram_bytes: bytes moved per kind (``inp``, ``wgt``, ``out``, ``uop``).
        bottleneck: the busiest module.
        uops_resident: whether the micro-op kernels stay in the micro-op buffer.
        simulated_groups: output-tile groups simulated event by event (the rest extrapolated).
    """

    cycles: float
    seconds: float
    gemm_ops: int
    busy: dict[str, float]
    dram_bytes: dict[str, int]
    bottleneck: str
    uops_resident: bool
    simulated_groups: int

    @property
    def gemm_utilization(self) -> float:
        """Share of the cycles in which the GEMM core issues an op."""
        return self.gemm_ops / self.cycles if self.cycles else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"simulated": True, "cycles": self.cycles, "seconds": self.seconds, "gemm_ops": self.gemm_ops,
                "busy": dict(self.busy), "dram_bytes": dict(self.dram_bytes), "bottleneck": self.bottleneck,
                "gemm_utilization": self.gemm_utilization, "uops_resident": self.uops_resident}


def _instruction_cycles(conv: VTAConv, plan: VTAPlan, timing: VTATiming) -> dict[str, float]:
    hw, t = conv.hw, _tiles(conv, plan)
    bw = timing.dram_bytes_per_cycle
    gemm_uops, reset_uops = micro_ops(conv, plan)
    resident = plan.threads * (gemm_uops + reset_uops) * UOP_BYTES <= hw.uop_buff_bytes
    uop_load = 0.0 if resident else timing.dma_setup + math.ceil(gemm_uops * UOP_BYTES / bw)
    return {
        "load": 2 * timing.dma_setup + math.ceil(t["inp"] / bw) + math.ceil(t["wgt"] / bw),
        "gemm": timing.gemm_setup + t["gemm_ops"] + uop_load,
        "reset": timing.gemm_setup + t["out_elems"],
        "alu": timing.alu_ops * (timing.alu_setup + t["out_elems"] * timing.alu_cycles_per_vector),
        "store": plan.b * timing.dma_setup + math.ceil(t["out"] / bw),
        "resident": float(resident),
        "uop_bytes": 0.0 if resident else gemm_uops * UOP_BYTES,
    }


def _simulate(groups: int, vt: int, steps: int, c: Mapping[str, float]) -> list[float]:
    """Completion time of the last store after each output-tile group (max-plus recurrence)."""
    load = comp = store = 0.0
    gemm_done = [0.0] * vt  # end of each thread's last GEMM: its buffer copy is free again
    store_done = [0.0] * vt  # end of each thread's last store: its accumulator copy is free
    ends = []
    for _ in range(groups):
        for j in range(vt):
            comp = max(comp, store_done[j]) + c["reset"]
        for _ in range(steps):
            for j in range(vt):
                load = max(load, gemm_done[j]) + c["load"]
                comp = max(comp, load) + c["gemm"]
                gemm_done[j] = comp
        alu_done = []
        for _ in range(vt):
            comp += c["alu"]
            alu_done.append(comp)
        for j in range(vt):
            store = max(store, alu_done[j]) + c["store"]
            store_done[j] = store
        ends.append(store)
    return ends


def estimate(conv: VTAConv, plan: VTAPlan, timing: VTATiming | None = None) -> VTAEstimate:
    """Simulated cycles and seconds of a valid plan (see the module docstring).

    Output tiles are processed in groups of ``vt`` (one per virtual thread), each group running
    ``steps = b * C/BLOCK_IN/ci`` load+GEMM steps per thread. The first groups are simulated
    event by event (at least 8, up to ``timing.sim_steps`` steps); the remaining ones add the
    steady-state period, the mean increment over the last 4 simulated groups.

    Raises:
        ValueError: the plan is invalid (:func:`violations`).
    """
    timing = timing or VTATiming()
    bad = violations(conv, plan, first=True)
    if bad:
        raise ValueError(f"cannot estimate an invalid plan: {bad[0]}")
    t = _tiles(conv, plan)
    c = _instruction_cycles(conv, plan, timing)
    vt = plan.threads
    n_tiles = t["n_b"] * t["n_h"] * t["n_w"] * t["n_co"]
    n_groups = n_tiles // vt
    steps = plan.b * t["n_ci"]
    sim = min(n_groups, max(8, timing.sim_steps // max(1, steps * vt)))
    ends = _simulate(sim, vt, steps, c)
    cycles = ends[-1]
    if sim < n_groups:
        period = (ends[-1] - ends[-5]) / 4
        cycles += (n_groups - sim) * period
    n_steps = n_tiles * steps
    busy = {"load": n_steps * c["load"], "compute": n_steps * c["gemm"] + n_tiles * (c["reset"] + c["alu"]),
            "store": n_tiles * c["store"], "gemm": n_steps * c["gemm"]}
    dram = {"inp": n_steps * t["inp"], "wgt": n_steps * t["wgt"], "out": n_tiles * t["out"],
            "uop": int(n_steps * c["uop_bytes"])}
    return VTAEstimate(cycles=cycles, seconds=cycles / (timing.clock_mhz * 1e6), gemm_ops=n_steps * t["gemm_ops"],
                       busy=busy, dram_bytes=dram, bottleneck=max(("load", "compute", "store"), key=busy.__getitem__),
                       uops_resident=bool(c["resident"]), simulated_groups=sim)
