"""The ``vta_conv2d`` op: the int8 2-D convolution of the simulated VTA target.

A rectangular kernel ``kh x kw``, strides ``sh, sw`` and paddings ``ph, pw`` (as DeepBench's
layers have); its paddings are at most 15 (VTA's DMA pads with 4-bit fields) and may exceed the
kernel (DeepBench has a 1x1 kernel with padding 3). The other shape rules are the core's
(:mod:`tune_gym.tasks.ops`); the parameters must also fit the target's GEMM core
(:meth:`tune_gym.vta.hardware.VTAHardware.check_conv`). The ``vta`` kind
(:mod:`tune_gym.vta.kind`) registers it.
"""

from __future__ import annotations

from typing import Any

from tune_gym.tasks.ops import MAX_DIM, Bound, OpDef, Params, Shape
from tune_gym.vta.hardware import VTAHardware

__all__ = ["VTA_CONV2D"]


def _vta_out(q: Params) -> tuple[int, int]:
    return (q["h"] + 2 * q["ph"] - q["kh"]) // q["sh"] + 1, (q["w"] + 2 * q["pw"] - q["kw"]) // q["sw"] + 1


def _vta_inputs(q: Params) -> list[Shape]:
    return [(q["n"], q["c"], q["h"], q["w"]), (q["k"], q["c"], q["kh"], q["kw"])]


def _vta_output(q: Params) -> Shape:
    return (q["n"], q["k"], *_vta_out(q))


def _vta_bounds(q: Params) -> list[Bound]:
    out = [Bound(p, 0, 15, "VTA's DMA pads at most 15 rows / columns (4-bit pad fields)") for p in ("ph", "pw")]
    for x, r, s, p in (("h", "kh", "sh", "ph"), ("w", "kw", "sw", "pw")):
        hi = min(MAX_DIM, MAX_DIM * q[s] - 1 - 2 * q[p] + q[r])
        out.append(Bound(x, max(1, q[r] - 2 * q[p]), hi,
                         f"the kernel extent {r} = {q[r]} must fit in the padded input {x}+2{p}, and the "
                         f"output ({x}+2{p}-{r})//{s}+1 must be at most {MAX_DIM}"))
    return out


def _vta_scratch(q: Params) -> list[Shape]:
    return [(q["n"], q["c"], q["h"] + 2 * q["ph"], q["w"] + 2 * q["pw"])] if q["ph"] or q["pw"] else []


def _vta_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, topi

    shapes = _vta_inputs(q)
    data = te.placeholder(shapes[0], dtype=dtype, name="data")
    weight = te.placeholder(shapes[1], dtype=dtype, name="weight")
    out = topi.nn.conv2d_nchw(data, weight, (q["sh"], q["sw"]), (q["ph"], q["pw"]), 1, out_dtype="int32")
    return [data, weight, out]


def _vta_flops(q: Params) -> int:
    oh, ow = _vta_out(q)
    return 2 * q["n"] * q["k"] * oh * ow * q["c"] * q["kh"] * q["kw"]


def _vta_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.conv2d(x[0].float(), x[1].float(), stride=(q["sh"], q["sw"]),
                                      padding=(q["ph"], q["pw"]))


def _vta_check_target(q: Params, target: Any) -> None:
    VTAHardware.from_target(target).check_conv(q)


#: The ``vta_conv2d`` op (the ``vta`` kind's only op).
VTA_CONV2D = OpDef(
    "vta_conv2d", 1, ("n", "c", "h", "w", "k", "kh", "kw", "sh", "sw", "ph", "pw"),
    _vta_build, _vta_flops, _vta_inputs, _vta_torch,
    "int8 2-D convolution on the simulated VTA (int32 accumulation, NCHW{n}c{c} packed on the device), "
    "kernel kh x kw, strides sh, sw, paddings ph, pw",
    defaults={"n": 1, "sh": 1, "sw": 1, "ph": 0, "pw": 0},
    output_shape=_vta_output, scratch_shapes=_vta_scratch, bounds=_vta_bounds, weights=(1,),
    dtypes=("int8",), targets=("vta",), check_target=_vta_check_target,
)
