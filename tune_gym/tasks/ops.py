"""Operator definitions: parameters, TE compute (from ``tvm.topi``), FLOP count, PyTorch twin.

Each :class:`OpDef` names its shape parameters in a fixed order; that order is part of the
task URI, so it never changes within an op version (bump ``version`` instead).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tune_gym.errors import TaskError

__all__ = ["OPS", "OpDef", "get_op"]

Params = dict[str, int]


@dataclass(frozen=True)
class OpDef:
    """A tunable operator family.

    Attributes:
        name: URI name of the op (``conv2d_nchw``).
        version: bumped whenever the compute or the parameter meaning changes.
        params: parameter names in URI order.
        defaults: values a URI may omit.
        build: ``(params, dtype) -> [input tensors..., output tensor]`` (TE tensors).
        flops: number of floating point operations of one call (multiply-add = 2).
        input_shapes: shapes of the inputs, in the order of ``build``'s inputs.
        torch_fn: ``(torch module, params, inputs) -> output``, the vendor-library twin.
        doc: one line for ``tune-gym tasks``.
    """

    name: str
    version: int
    params: tuple[str, ...]
    build: Callable[[Params, str], list[Any]]
    flops: Callable[[Params], int]
    input_shapes: Callable[[Params], list[tuple[int, ...]]]
    torch_fn: Callable[[Any, Params, list[Any]], Any]
    doc: str
    defaults: dict[str, int] = field(default_factory=dict)

    def check(self, params: Params) -> Params:
        """Fill defaults and validate, returning params in canonical order."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise TaskError(
                f"{self.name}: unknown parameter(s) {sorted(unknown)}; expected {list(self.params)}"
            )
        out = {}
        for p in self.params:
            if p in params:
                v = params[p]
            elif p in self.defaults:
                v = self.defaults[p]
            else:
                raise TaskError(f"{self.name}: missing parameter {p!r}; expected {list(self.params)}")
            if isinstance(v, bool) or not isinstance(v, int):
                raise TaskError(f"{self.name}: parameter {p!r} must be an int, got {v!r}")
            lo = 0 if p in ("p", "op") else 1
            if v < lo:
                raise TaskError(f"{self.name}: parameter {p!r}={v} must be >= {lo}")
            out[p] = v
        return out


def _out(size: int, r: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (r - 1) - 1) // s + 1


# ---------------------------------------------------------------------------- conv2d_nchw
def _conv2d_inputs(q: Params) -> list[tuple[int, ...]]:
    return [(q["n"], q["c"], q["h"], q["w"]), (q["k"], q["c"], q["r"], q["r"])]


def _conv2d_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, topi

    data = te.placeholder(_conv2d_inputs(q)[0], dtype=dtype, name="data")
    weight = te.placeholder(_conv2d_inputs(q)[1], dtype=dtype, name="weight")
    out = topi.nn.conv2d_nchw(data, weight, q["s"], q["p"], q["d"], out_dtype=dtype)
    return [data, weight, out]


def _conv2d_flops(q: Params) -> int:
    oh, ow = _out(q["h"], q["r"], q["s"], q["p"], q["d"]), _out(q["w"], q["r"], q["s"], q["p"], q["d"])
    return 2 * q["n"] * q["k"] * oh * ow * q["c"] * q["r"] * q["r"]


def _conv2d_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.conv2d(x[0], x[1], stride=q["s"], padding=q["p"], dilation=q["d"])


# ---------------------------------------------------------------------------- depthwise
def _dw_inputs(q: Params) -> list[tuple[int, ...]]:
    return [(q["n"], q["c"], q["h"], q["w"]), (q["c"], q["m"], q["r"], q["r"])]


def _dw_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, topi

    shapes = _dw_inputs(q)
    data = te.placeholder(shapes[0], dtype=dtype, name="data")
    weight = te.placeholder(shapes[1], dtype=dtype, name="weight")
    out = topi.nn.depthwise_conv2d_nchw(data, weight, q["s"], q["p"], 1, out_dtype=dtype)
    return [data, weight, out]


def _dw_flops(q: Params) -> int:
    oh, ow = _out(q["h"], q["r"], q["s"], q["p"]), _out(q["w"], q["r"], q["s"], q["p"])
    return 2 * q["n"] * q["c"] * q["m"] * oh * ow * q["r"] * q["r"]


def _dw_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    w = x[1].reshape(q["c"] * q["m"], 1, q["r"], q["r"])
    return torch.nn.functional.conv2d(x[0], w, stride=q["s"], padding=q["p"], groups=q["c"])


# ---------------------------------------------------------------------------- conv2d_transpose
def _tconv_inputs(q: Params) -> list[tuple[int, ...]]:
    # topi's conv2d_transpose_nchw takes the kernel as (in_channels, out_channels, r, r).
    return [(q["n"], q["c"], q["h"], q["w"]), (q["c"], q["k"], q["r"], q["r"])]


def _tconv_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, topi

    shapes = _tconv_inputs(q)
    data = te.placeholder(shapes[0], dtype=dtype, name="data")
    weight = te.placeholder(shapes[1], dtype=dtype, name="weight")
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
def _c1_inputs(q: Params) -> list[tuple[int, ...]]:
    return [(q["n"], q["c"], q["w"]), (q["k"], q["c"], q["r"])]


def _c1_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, topi

    shapes = _c1_inputs(q)
    data = te.placeholder(shapes[0], dtype=dtype, name="data")
    weight = te.placeholder(shapes[1], dtype=dtype, name="weight")
    out = topi.nn.conv1d_ncw(data, weight, q["s"], q["p"], 1, out_dtype=dtype)
    return [data, weight, out]


def _c1_flops(q: Params) -> int:
    return 2 * q["n"] * q["k"] * _out(q["w"], q["r"], q["s"], q["p"]) * q["c"] * q["r"]


def _c1_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.conv1d(x[0], x[1], stride=q["s"], padding=q["p"])


# ---------------------------------------------------------------------------- dense
def _dense_inputs(q: Params) -> list[tuple[int, ...]]:
    return [(q["m"], q["k"]), (q["n"], q["k"])]


def _dense_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, topi

    shapes = _dense_inputs(q)
    data = te.placeholder(shapes[0], dtype=dtype, name="data")
    weight = te.placeholder(shapes[1], dtype=dtype, name="weight")
    return [data, weight, topi.nn.dense(data, weight, out_dtype=dtype)]


def _dense_torch(torch: Any, q: Params, x: list[Any]) -> Any:
    return torch.nn.functional.linear(x[0], x[1])


# ---------------------------------------------------------------------------- batch_matmul
def _bmm_inputs(q: Params) -> list[tuple[int, ...]]:
    return [(q["b"], q["m"], q["k"]), (q["b"], q["n"], q["k"])]


def _bmm_build(q: Params, dtype: str) -> list[Any]:
    from tvm import te, topi

    shapes = _bmm_inputs(q)
    a = te.placeholder(shapes[0], dtype=dtype, name="A")
    b = te.placeholder(shapes[1], dtype=dtype, name="B")
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
        ),
        OpDef(
            "depthwise_conv2d_nchw", 1, ("n", "c", "h", "w", "m", "r", "s", "p"),
            _dw_build, _dw_flops, _dw_inputs, _dw_torch,
            "depthwise 2-D convolution, NCHW, channel multiplier m",
            defaults={"n": 1, "m": 1, "s": 1, "p": 0},
        ),
        OpDef(
            "conv2d_transpose_nchw", 1, ("n", "c", "h", "w", "k", "r", "s", "p", "op"),
            _tconv_build, _tconv_flops, _tconv_inputs, _tconv_torch,
            "transposed 2-D convolution, NCHW, output padding op",
            defaults={"n": 1, "s": 1, "p": 0, "op": 0},
        ),
        OpDef(
            "conv1d_ncw", 1, ("n", "c", "w", "k", "r", "s", "p"),
            _c1_build, _c1_flops, _c1_inputs, _c1_torch,
            "1-D convolution, NCW",
            defaults={"n": 1, "s": 1, "p": 0},
        ),
        OpDef(
            "dense", 1, ("m", "n", "k"),
            _dense_build, lambda q: 2 * q["m"] * q["n"] * q["k"], _dense_inputs, _dense_torch,
            "matmul Y[m,n] = X[m,k] . W[n,k]^T (a fully connected layer)",
        ),
        OpDef(
            "batch_matmul", 1, ("b", "m", "n", "k"),
            _bmm_build, lambda q: 2 * q["b"] * q["m"] * q["n"] * q["k"], _bmm_inputs, _bmm_torch,
            "batched matmul Y[b,m,n] = A[b,m,k] . B[b,n,k]^T",
        ),
    ]
}


def get_op(name: str) -> OpDef:
    """Look up an op by URI name, with the known names in the error."""
    try:
        return OPS[name]
    except KeyError:
        raise TaskError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None
