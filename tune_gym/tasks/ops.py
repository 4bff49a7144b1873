"""Operator definitions: parameters, TE compute (from ``tvm.topi``), FLOP count, PyTorch twin.

Each :class:`OpDef` names its shape parameters in a fixed order; that order is part of the
task URI, so it never changes within an op version (bump ``version`` instead).

Accepted parameters (:meth:`OpDef.check` refuses anything else with a :class:`TaskError` that
names the parameter, the value and the accepted range):

* every parameter is an integer (not a bool) in ``[1, MAX_DIM]``, except the paddings ``p``
  and ``op``, which are in ``[0, MAX_DIM]``; ``MAX_DIM = 2**16``;
* windowed ops (``conv2d_nchw``, ``depthwise_conv2d_nchw``, ``conv1d_ncw``): with the kernel
  extent ``e = d*(r-1)+1`` (``d = 1`` where the op has no dilation), ``p <= e-1`` (more padding
  only adds output rows that see padding alone) and every spatial size ``x`` has ``x+2p >= e``
  (the kernel fits in the padded input, so the output is at least 1);
* ``conv2d_transpose_nchw``: ``p <= r-1`` (topi pads by ``r-1-p``), ``op <= s-1`` (output
  padding must be smaller than the stride, as in PyTorch) and the output size
  ``(x-1)*s + r - 2p + op`` is at least 1;
* every dimension of the output is in ``[1, MAX_DIM]``;
* the tensors of one call, inputs, output and the padded / dilated copies topi makes, hold at
  most ``MAX_ELEMENTS = 2**28`` elements together (1 GiB in float32, so every kernel fits in
  memory and every flat index fits in int32);
* one call costs at most ``MAX_FLOPS = 2**40`` (about 1.1e12) floating point operations.

Ops bound to a registered target kind (:attr:`tune_gym.kinds.TaskKind.ops`) are defined by
that kind, not in :data:`OPS` (the ops of the CPU and GPU targets); :func:`get_op` finds both,
and an op's own bounds (:attr:`OpDef.bounds`) may differ from the rules above.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tune_gym import kinds
from tune_gym.errors import TaskError
from tune_gym.tasks.checks import show

__all__ = ["MAX_DIM", "MAX_ELEMENTS", "MAX_FLOPS", "OPS", "Bound", "OpDef", "get_op"]

#: Largest accepted value of any shape parameter and of any output dimension.
MAX_DIM = 2**16
#: Largest total element count of one call's tensors (inputs, output, padded copies).
MAX_ELEMENTS = 2**28
#: Largest FLOP count of one call.
MAX_FLOPS = 2**40

Params = dict[str, int]
Shape = tuple[int, ...]
#: Parameters that may be 0 (paddings); every other parameter is at least 1.
_ZERO_OK = ("p", "op", "ph", "pw")


@dataclass(frozen=True)
class Bound:
    """A constraint on one parameter given the others: ``lo <= params[param] <= hi``.

    Attributes:
        param: the parameter the message names.
        lo: smallest accepted value.
        hi: largest accepted value (may be below ``lo``: then no value fits, and the message
            says which other parameters to change).
        why: the rule, in words, for the error message.
        divides: when not 0, the value must also divide it (a channel block divides the channels).
    """

    param: str
    lo: int
    hi: int
    why: str
    divides: int = 0


@dataclass(frozen=True)
class OpDef:
    """A tunable operator family.

    Attributes:
        name: URI name of the op (``conv2d_nchw``).
        version: bumped whenever the compute or the parameter meaning changes.
        params: parameter names in URI order.
        build: ``(params, dtype) -> [input tensors..., output tensor]`` (TE tensors).
        flops: number of floating point operations of one call (multiply-add = 2).
        input_shapes: shapes of the inputs, in the order of ``build``'s inputs.
        torch_fn: ``(torch module, params, inputs) -> output``, the vendor-library twin.
        doc: one line for ``tune-gym tasks``.
        defaults: values a URI may omit.
        output_shape: shape of the output (no TVM needed).
        scratch_shapes: shapes of the intermediate tensors ``build`` makes (padded or
            dilated copies of the input), counted against :data:`MAX_ELEMENTS`.
        bounds: the op's cross-parameter rules as :class:`Bound` s, computed from parameters
            that passed the per-parameter ranges and checked in order (the first one that
            fails is reported, so a later bound may assume the earlier ones hold).
        weights: indices of the inputs that are model weights (constants of a deployed
            model, whose layout can be rewritten once ahead of time: a task's
            ``weights=packed`` marks them ``layout_free_buffers``). Empty where every input is
            an activation (``batch_matmul`` is attention's ``Q.K^T`` / ``P.V``).
        no_packing: why ``weights=packed`` is not offered although the op has weights (``""``:
            it is offered).
        dtypes: the dtypes the op accepts (empty: every dtype of :data:`tune_gym.tasks.task.DTYPES`).
        targets: the target kinds the op runs on.
        check_target: ``(params, target) -> None``, raising :class:`TaskError` when the op's
            parameters do not fit the target (``None``: they always do).
    """

    name: str
    version: int
    params: tuple[str, ...]
    build: Callable[[Params, str], list[Any]]
    flops: Callable[[Params], int]
    input_shapes: Callable[[Params], list[Shape]]
    torch_fn: Callable[[Any, Params, list[Any]], Any]
    doc: str
    defaults: dict[str, int] = field(default_factory=dict)
    output_shape: Callable[[Params], Shape] = field(kw_only=True)
    scratch_shapes: Callable[[Params], list[Shape]] = field(default=lambda q: [], kw_only=True)
    bounds: Callable[[Params], list[Bound]] = field(default=lambda q: [], kw_only=True)
    weights: tuple[int, ...] = field(default=(), kw_only=True)
    no_packing: str = field(default="", kw_only=True)
    dtypes: tuple[str, ...] = field(default=(), kw_only=True)
    targets: tuple[str, ...] = field(default=("llvm", "cuda"), kw_only=True)
    check_target: Callable[[Params, Any], None] | None = field(default=None, kw_only=True)

    def check(self, params: Mapping[str, Any]) -> Params:
        """Fill defaults and validate, returning params in canonical order.

        Raises:
            TaskError: a parameter is unknown, missing, not an int, or out of its range (see
                the module docstring); the message names it and the accepted range.
        """
        unknown = [name for name in params if name not in self.params]
        if unknown:
            raise TaskError(
                f"{self.name}: unknown parameter(s) {', '.join(show(u) for u in unknown)}; "
                f"expected {list(self.params)}"
            )
        out: Params = {}
        for p in self.params:
            if p in params:
                v = params[p]
            elif p in self.defaults:
                v = self.defaults[p]
            else:
                raise TaskError(f"{self.name}: missing parameter {p!r}; expected {list(self.params)}")
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TaskError(f"{self.name}: parameter {p!r} must be an int, got {type(v).__name__} {show(v)}")
            lo = 0 if p in _ZERO_OK else 1
            kind = "padding" if lo == 0 else "shape parameter"
            self._require(Bound(p, lo, MAX_DIM, f"the range of every {kind}; MAX_DIM = 2**16"), int(v))
            out[p] = int(v)
        for bound in self.bounds(out):
            self._require(bound, out[bound.param])
        shape = self.output_shape(out)
        if not all(1 <= x <= MAX_DIM for x in shape):  # the bounds rule this out; a last guard
            raise TaskError(f"{self.name} {_fmt(out)}: output shape {shape} leaves [1, {MAX_DIM}]")
        elements = sum(math.prod(s) for s in [*self.input_shapes(out), shape, *self.scratch_shapes(out)])
        if elements > MAX_ELEMENTS:
            raise TaskError(
                f"{self.name} {_fmt(out)}: its tensors (inputs, output, padded copies) hold {elements} "
                f"elements; accepted: at most MAX_ELEMENTS = 2**28 = {MAX_ELEMENTS} (make it smaller)"
            )
        flops = self.flops(out)
        if flops > MAX_FLOPS:
            raise TaskError(
                f"{self.name} {_fmt(out)}: one call costs {flops:.3g} FLOPs; accepted: at most "
                f"MAX_FLOPS = 2**40 = {MAX_FLOPS:.3g} (make it smaller)"
            )
        return out

    def _require(self, bound: Bound, value: int) -> None:
        if bound.lo <= value <= bound.hi and (not bound.divides or bound.divides % value == 0):
            return
        accepted = f"[{bound.lo}, {bound.hi}]" if bound.lo <= bound.hi else "none (change the other parameters)"
        if bound.divides and bound.lo <= bound.hi:
            divisors = [x for x in range(bound.lo, bound.hi + 1) if bound.divides % x == 0]
            accepted = f"a divisor of {bound.divides} in {accepted}: {', '.join(map(str, divisors))}"
        raise TaskError(
            f"{self.name}: parameter {bound.param!r}={show(value)} out of range; accepted: {accepted} "
            f"({bound.why})"
        )


def _fmt(q: Params) -> str:
    return "_".join(f"{k}{v}" for k, v in q.items())


def _out(size: int, r: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (r - 1) - 1) // s + 1


def _window_bounds(q: Params, sizes: tuple[str, ...], dilated: bool = False) -> list[Bound]:
    """Padding below the kernel extent; kernel inside the padded input; output <= MAX_DIM."""
    d = q["d"] if dilated else 1
    e = d * (q["r"] - 1) + 1
    extent = f"d*(r-1)+1 = {e}" if dilated else f"r = {e}"
    p, s = q["p"], q["s"]
    out = [Bound("p", 0, e - 1, f"padding must be below the kernel extent {extent}; more only adds "
                                "output rows that see padding alone")]
    for x in sizes:
        hi = min(MAX_DIM, MAX_DIM * s - 1 - 2 * p + e)  # keeps (x+2p-e)//s+1 <= MAX_DIM
        out.append(Bound(x, max(1, e - 2 * p), hi,
                         f"the kernel extent {extent} must fit in the padded input {x}+2p, and the "
                         f"output ({x}+2p-{e})//s+1 must be at most {MAX_DIM}"))
    return out


# ---------------------------------------------------------------------------- conv2d_nchw
def _conv2d_inputs(q: Params) -> list[Shape]:
    return [(q["n"], q["c"], q["h"], q["w"]), (q["k"], q["c"], q["r"], q["r"])]


def _conv2d_output(q: Params) -> Shape:
    return (q["n"], q["k"], _out(q["h"], q["r"], q["s"], q["p"], q["d"]), _out(q["w"], q["r"], q["s"], q["p"], q["d"]))


def _padded(q: Params, sizes: tuple[str, ...]) -> list[Shape]:
    """topi's zero-padded copy of the input (made only when ``p > 0``)."""
    return [(q["n"], q["c"], *(q[x] + 2 * q["p"] for x in sizes))] if q["p"] else []


def _placeholders(shapes: list[Shape], dtype: str, names: tuple[str, ...] = ("data", "weight")) -> list[Any]:
    """A TE placeholder of ``dtype`` per input shape of an op, named by ``names`` in order."""
    from tvm import te

    return [te.placeholder(shape, dtype=dtype, name=name) for shape, name in zip(shapes, names, strict=True)]


def _conv2d_build(q: Params, dtype: str) -> list[Any]:
    from tvm import topi

    data, weight = _placeholders(_conv2d_inputs(q), dtype)
    return [data, weight, topi.nn.conv2d_nchw(data, weight, q["s"], q["p"], q["d"], out_dtype=dtype)]


def _conv2d_flops(q: Params) -> int:
    _, _, oh, ow = _conv2d_output(q)
    return 2 * q["n"] * q["k"] * oh * ow * q["c"] * q["r"] * q["r"]


def _conv2d_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.conv2d(x[0], x[1], stride=q["s"], padding=q["p"], dilation=q["d"])


# ---------------------------------------------------------------------------- conv2d_nchwc
# conv2d_nchw's inputs, output and PyTorch twin, computed the way vendor libraries do: the input is
# copied (with its padding) into NCHW[ib]c, channel blocks of ib innermost; the convolution writes
# NCHW[ob]c, so the ob output channels of a pixel are contiguous and one vector FMA updates them from
# a broadcast input value; the result is copied back to NCHW. With weights=packed (the default) the
# kernel is free to keep the weights in the matching blocked layout.
_NCHWC_PARAMS = ("n", "c", "h", "w", "k", "r", "s", "p", "d", "ib", "ob")


def _nchwc_scratch(q: Params) -> list[Shape]:
    _, _, oh, ow = _conv2d_output(q)
    hp, wp = q["h"] + 2 * q["p"], q["w"] + 2 * q["p"]
    return [(q["n"], q["c"] // q["ib"], hp, wp, q["ib"]), (q["n"], q["k"] // q["ob"], oh, ow, q["ob"])]


def _nchwc_bounds(q: Params) -> list[Bound]:
    blocks = [Bound("ib", 1, q["c"], "the input-channel block divides the input channels c", divides=q["c"]),
              Bound("ob", 1, q["k"], "the output-channel block divides the output channels k", divides=q["k"])]
    return [*blocks, *_window_bounds(q, ("h", "w"), dilated=True)]


def _nchwc_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, tirx

    data, weight = _placeholders(_conv2d_inputs(q), dtype)
    n, c, h, w, k, r, s, p, d, ib, ob = (q[x] for x in _NCHWC_PARAMS)
    _, _, oh, ow = _conv2d_output(q)

    def blocked(b: Any, cc: Any, y: Any, x: Any, ci: Any) -> Any:
        inside = tirx.all(y >= p, y < h + p, x >= p, x < w + p)
        return tirx.if_then_else(inside, data[b, cc * ib + ci, y - p, x - p], tirx.const(0, dtype))

    data_vec = te.compute((n, c // ib, h + 2 * p, w + 2 * p, ib), blocked, name="data_vec")
    icc, icb = te.reduce_axis((0, c // ib), "ic_chunk"), te.reduce_axis((0, ib), "ic_block")
    kh, kw = te.reduce_axis((0, r), "kh"), te.reduce_axis((0, r), "kw")
    conv = te.compute(
        (n, k // ob, oh, ow, ob),
        lambda b, kc, y, x, kb: te.sum(
            data_vec[b, icc, y * s + kh * d, x * s + kw * d, icb] * weight[kc * ob + kb, icc * ib + icb, kh, kw],
            axis=[icc, kh, kw, icb]),
        name="conv2d_NCHWc")
    out = te.compute((n, k, oh, ow), lambda b, f, y, x: conv[b, f // ob, y, x, f % ob], name="conv2d_nchw")
    return [data, weight, out]


# ---------------------------------------------------------------------------- depthwise
def _dw_inputs(q: Params) -> list[Shape]:
    return [(q["n"], q["c"], q["h"], q["w"]), (q["c"], q["m"], q["r"], q["r"])]


def _dw_output(q: Params) -> Shape:
    return (q["n"], q["c"] * q["m"], _out(q["h"], q["r"], q["s"], q["p"]), _out(q["w"], q["r"], q["s"], q["p"]))


def _dw_bounds(q: Params) -> list[Bound]:
    channels = Bound("m", 1, MAX_DIM // q["c"], f"the output channels c*m must be at most {MAX_DIM}")
    return [channels, *_window_bounds(q, ("h", "w"))]


def _dw_build(q: Params, dtype: str) -> list[Any]:
    from tvm import topi

    data, weight = _placeholders(_dw_inputs(q), dtype)
    return [data, weight, topi.nn.depthwise_conv2d_nchw(data, weight, q["s"], q["p"], 1, out_dtype=dtype)]


def _dw_flops(q: Params) -> int:
    _, _, oh, ow = _dw_output(q)
    return 2 * q["n"] * q["c"] * q["m"] * oh * ow * q["r"] * q["r"]


def _dw_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    w = x[1].reshape(q["c"] * q["m"], 1, q["r"], q["r"])
    return torch.nn.functional.conv2d(x[0], w, stride=q["s"], padding=q["p"], groups=q["c"])


# ---------------------------------------------------------------------------- conv2d_transpose
def _tconv_inputs(q: Params) -> list[Shape]:
    # topi's conv2d_transpose_nchw takes the kernel as (in_channels, out_channels, r, r).
    return [(q["n"], q["c"], q["h"], q["w"]), (q["c"], q["k"], q["r"], q["r"])]


def _tconv_size(x: int, q: Params) -> int:
    return (x - 1) * q["s"] + q["r"] - 2 * q["p"] + q["op"]


def _tconv_output(q: Params) -> Shape:
    return (q["n"], q["k"], _tconv_size(q["h"], q), _tconv_size(q["w"], q))


def _tconv_scratch(q: Params) -> list[Shape]:
    # topi dilates the input by s, pads it by r-1-p (+op at the end), and flips the kernel.
    n, c, k, r, s = q["n"], q["c"], q["k"], q["r"], q["s"]
    _, _, oh, ow = _tconv_output(q)
    return [(n, c, (q["h"] - 1) * s + 1, (q["w"] - 1) * s + 1), (n, c, oh + r - 1, ow + r - 1), (k, c, r, r)]


def _tconv_bounds(q: Params) -> list[Bound]:
    r, s, p, op = q["r"], q["s"], q["p"], q["op"]
    out = [
        Bound("p", 0, r - 1, "topi pads the input by r-1-p, so p must be below the kernel size r"),
        Bound("op", 0, s - 1, "the output padding must be smaller than the stride s"),
        Bound("p", 0, ((min(q["h"], q["w"]) - 1) * s + r + op - 1) // 2,
              "the output size (x-1)*s + r - 2p + op must be at least 1 for x = h, w"),
    ]
    for x in ("h", "w"):
        out.append(Bound(x, 1, (MAX_DIM - r + 2 * p - op) // s + 1,
                         f"the output size ({x}-1)*s + r - 2p + op must be at most {MAX_DIM}"))
    return out


_TCONV_NO_PACKING = (
    "apache-tvm 0.27's RewriteLayout miscompiles the flipped kernel read of topi's conv2d_transpose "
    "(it simplifies (3-h)//2 to h//-2+1), giving wrong results for about 1 in 3 random full-space configs"
)


def _tconv_build(q: Params, dtype: str) -> list[Any]:
    from tvm import topi

    data, weight = _placeholders(_tconv_inputs(q), dtype)
    out = topi.nn.conv2d_transpose_nchw(
        data, weight, (q["s"], q["s"]), (q["p"], q["p"]), dtype, (q["op"], q["op"])
    )
    return [data, weight, out]


def _tconv_flops(q: Params) -> int:
    # Every input pixel scatters into r*r outputs for each of k output channels.
    return 2 * q["n"] * q["c"] * q["h"] * q["w"] * q["k"] * q["r"] * q["r"]


def _tconv_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.conv_transpose2d(
        x[0], x[1], stride=q["s"], padding=q["p"], output_padding=q["op"]
    )


# ---------------------------------------------------------------------------- conv1d_ncw
def _c1_inputs(q: Params) -> list[Shape]:
    return [(q["n"], q["c"], q["w"]), (q["k"], q["c"], q["r"])]


def _c1_output(q: Params) -> Shape:
    return (q["n"], q["k"], _out(q["w"], q["r"], q["s"], q["p"]))


def _c1_build(q: Params, dtype: str) -> list[Any]:
    from tvm import topi

    data, weight = _placeholders(_c1_inputs(q), dtype)
    return [data, weight, topi.nn.conv1d_ncw(data, weight, q["s"], q["p"], 1, out_dtype=dtype)]


def _c1_flops(q: Params) -> int:
    return 2 * q["n"] * q["k"] * _c1_output(q)[2] * q["c"] * q["r"]


def _c1_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.conv1d(x[0], x[1], stride=q["s"], padding=q["p"])


# ---------------------------------------------------------------------------- dense
def _dense_inputs(q: Params) -> list[Shape]:
    return [(q["m"], q["k"]), (q["n"], q["k"])]


def _dense_build(q: Params, dtype: str) -> list[Any]:
    from tvm import topi

    data, weight = _placeholders(_dense_inputs(q), dtype)
    return [data, weight, topi.nn.dense(data, weight, out_dtype=dtype)]


def _dense_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.linear(x[0], x[1])


# ---------------------------------------------------------------------------- batch_matmul
def _bmm_inputs(q: Params) -> list[Shape]:
    return [(q["b"], q["m"], q["k"]), (q["b"], q["n"], q["k"])]


def _bmm_build(q: Params, dtype: str) -> list[Any]:
    from tvm import topi

    a, b = _placeholders(_bmm_inputs(q), dtype, ("A", "B"))
    return [a, b, topi.nn.batch_matmul(a, b, out_dtype=dtype, transpose_b=True)]


def _bmm_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.bmm(x[0], x[1].transpose(1, 2))


OPS: dict[str, OpDef] = {
    op.name: op
    for op in [
        OpDef(
            "conv2d_nchw", 1, ("n", "c", "h", "w", "k", "r", "s", "p", "d"),
            _conv2d_build, _conv2d_flops, _conv2d_inputs, _conv2d_torch,
            "2-D convolution, NCHW, square kernel r, stride s, padding p, dilation d",
            defaults={"n": 1, "s": 1, "p": 0, "d": 1},
            output_shape=_conv2d_output, scratch_shapes=lambda q: _padded(q, ("h", "w")),
            bounds=lambda q: _window_bounds(q, ("h", "w"), dilated=True), weights=(1,),
        ),
        OpDef(
            "conv2d_nchwc", 1, _NCHWC_PARAMS,
            _nchwc_build, _conv2d_flops, _conv2d_inputs, _conv2d_torch,
            "conv2d_nchw (same inputs and output) computed in channel-blocked layouts NCHW[ib]c -> NCHW[ob]c",
            defaults={"n": 1, "s": 1, "p": 0, "d": 1},
            output_shape=_conv2d_output, scratch_shapes=_nchwc_scratch, bounds=_nchwc_bounds, weights=(1,),
        ),
        OpDef(
            "depthwise_conv2d_nchw", 1, ("n", "c", "h", "w", "m", "r", "s", "p"),
            _dw_build, _dw_flops, _dw_inputs, _dw_torch,
            "depthwise 2-D convolution, NCHW, channel multiplier m",
            defaults={"n": 1, "m": 1, "s": 1, "p": 0},
            output_shape=_dw_output, scratch_shapes=lambda q: _padded(q, ("h", "w")), bounds=_dw_bounds,
            weights=(1,),
        ),
        OpDef(
            "conv2d_transpose_nchw", 1, ("n", "c", "h", "w", "k", "r", "s", "p", "op"),
            _tconv_build, _tconv_flops, _tconv_inputs, _tconv_torch,
            "transposed 2-D convolution, NCHW, output padding op",
            defaults={"n": 1, "s": 1, "p": 0, "op": 0},
            output_shape=_tconv_output, scratch_shapes=_tconv_scratch, bounds=_tconv_bounds, weights=(1,),
            no_packing=_TCONV_NO_PACKING,
        ),
        OpDef(
            "conv1d_ncw", 1, ("n", "c", "w", "k", "r", "s", "p"),
            _c1_build, _c1_flops, _c1_inputs, _c1_torch,
            "1-D convolution, NCW",
            defaults={"n": 1, "s": 1, "p": 0},
            output_shape=_c1_output, scratch_shapes=lambda q: _padded(q, ("w",)),
            bounds=lambda q: _window_bounds(q, ("w",)), weights=(1,),
        ),
        OpDef(
            "dense", 1, ("m", "n", "k"),
            _dense_build, lambda q: 2 * q["m"] * q["n"] * q["k"], _dense_inputs, _dense_torch,
            "matmul Y[m,n] = X[m,k] . W[n,k]^T (a fully connected layer)",
            output_shape=lambda q: (q["m"], q["n"]), weights=(1,),
        ),
        OpDef(
            "batch_matmul", 1, ("b", "m", "n", "k"),
            _bmm_build, lambda q: 2 * q["b"] * q["m"] * q["n"] * q["k"], _bmm_inputs, _bmm_torch,
            "batched matmul Y[b,m,n] = A[b,m,k] . B[b,n,k]^T",
            output_shape=lambda q: (q["b"], q["m"], q["n"]),
        ),
    ]
}


kinds.reserve("op", OPS, "tune_gym.tasks.ops")


def get_op(name: str) -> OpDef:
    """Look up an op by URI name (:data:`OPS`, or a registered kind's ops), with the known names in the error."""
    op = OPS.get(name) if isinstance(name, str) else None
    if op is None and isinstance(name, str) and (kind := kinds.owner_of_op(name)) is not None:
        op = kinds.load(kind.ops[name])
    if op is None:
        raise TaskError(f"unknown op {show(name)}; known ops: {', '.join(sorted([*OPS, *kinds.op_names()]))}")
    return op
