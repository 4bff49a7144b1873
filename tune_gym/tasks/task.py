"""A tuning task: one operator instance, one dtype, one target, addressed by a versioned URI.

URI grammar (stable; the op version bumps when an op's meaning changes)::

    op://<op>-v<version>/<p1><v1>_<p2><v2>...?[dtype=<dtype>&]target=<kind>[&<opt>=<val>...]

e.g. ``op://conv2d_nchw-v1/n1_c64_h56_w56_k64_r3_s1_p1_d1?target=llvm``. Parameters appear in
the op's fixed order; ``dtype`` is omitted when it is ``float32``. Parsing accepts omitted
parameters that have defaults and any parameter order, and ``str(Task.from_uri(u))`` is the
canonical form.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from tune_gym.errors import TaskError
from tune_gym.tasks.ops import OpDef, get_op
from tune_gym.tasks.targets import TargetSpec

__all__ = ["DTYPES", "Task"]

DTYPES = ("float32", "float16", "float64")
_URI = re.compile(r"^op://(?P<op>[a-z0-9_]+)-v(?P<ver>\d+)/(?P<params>[a-z0-9_]*)(\?(?P<query>.*))?$")
_PARAM = re.compile(r"^([a-z]+)(\d+)$")


@dataclass(frozen=True)
class Task:
    """One operator instance on one target.

    Attributes:
        op: op name (see :data:`tune_gym.tasks.ops.OPS`).
        params: shape parameters as ``(name, value)`` pairs in the op's order.
        dtype: element type of inputs and output.
        target: where it runs.
    """

    op: str
    params: tuple[tuple[str, int], ...]
    dtype: str = "float32"
    target: TargetSpec = TargetSpec()

    def __post_init__(self) -> None:
        opdef = get_op(self.op)
        checked = opdef.check(dict(self.params))
        object.__setattr__(self, "params", tuple(checked.items()))
        if self.dtype not in DTYPES:
            raise TaskError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")

    # ------------------------------------------------------------------ construction
    @classmethod
    def make(cls, op: str, target: str | TargetSpec = "llvm", dtype: str = "float32", **params: int) -> Task:
        """``Task.make("dense", m=128, n=768, k=768)``."""
        spec = target if isinstance(target, TargetSpec) else TargetSpec(target)
        return cls(op, tuple(params.items()), dtype, spec)

    @classmethod
    def from_uri(cls, uri: str) -> Task:
        """Parse a task URI (see the module docstring for the grammar)."""
        m = _URI.match(uri.strip())
        if not m:
            raise TaskError(
                f"malformed task URI {uri!r}; expected op://<op>-v<N>/<p><int>_...?target=<kind>, "
                "e.g. op://dense-v1/m128_n768_k768?target=llvm"
            )
        opdef = get_op(m["op"])
        if int(m["ver"]) != opdef.version:
            raise TaskError(f"{uri!r}: op {opdef.name} is at version v{opdef.version}, not v{m['ver']}")
        params: dict[str, int] = {}
        for part in filter(None, m["params"].split("_")):
            pm = _PARAM.match(part)
            if not pm:
                raise TaskError(f"{uri!r}: malformed parameter {part!r} (want <name><int>, e.g. c64)")
            params[pm[1]] = int(pm[2])
        query = dict(parse_qsl(m["query"] or "", keep_blank_values=True, strict_parsing=False))
        dtype = query.pop("dtype", "float32")
        kind = query.pop("target", "llvm")
        return cls(m["op"], tuple(params.items()), dtype, TargetSpec.parse(kind, query))

    @classmethod
    def parse(cls, text: str) -> Task:
        """Accept a URI or a suite task id (``resnet18:3``)."""
        if text.startswith("op://"):
            return cls.from_uri(text)
        from tune_gym.tasks.suites import task_by_id

        return task_by_id(text)

    # ------------------------------------------------------------------ identity
    @property
    def uri(self) -> str:
        body = "_".join(f"{k}{v}" for k, v in self.params)
        query = ([f"dtype={self.dtype}"] if self.dtype != "float32" else []) + [f"target={self.target}"]
        return f"op://{self.op}-v{self.opdef.version}/{body}?{'&'.join(query)}"

    def __str__(self) -> str:
        return self.uri

    def with_target(self, target: str | TargetSpec) -> Task:
        spec = target if isinstance(target, TargetSpec) else TargetSpec(target)
        return Task(self.op, self.params, self.dtype, spec)

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)

    # ------------------------------------------------------------------ derived
    @property
    def flops(self) -> int:
        """Floating point operations of one call (a multiply-add counts 2)."""
        return self.opdef.flops(self.param_dict)

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return self.opdef.input_shapes(self.param_dict)

    def tensors(self) -> list[Any]:
        """TE tensors ``[inputs..., output]``."""
        from tune_gym._tvm import tvm

        tvm()
        return self.opdef.build(self.param_dict, self.dtype)

    def output_shape(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.tensors()[-1].shape)

    def ir_module(self) -> Any:
        """The TVM IRModule (one PrimFunc named ``main``) built from TE/topi."""
        return _ir_module(self)

    def features(self) -> list[float]:
        """Task-independent descriptor used by observations and cross-task models."""
        from tune_gym.features.task import task_features

        return list(task_features(self))


@functools.lru_cache(maxsize=256)
def _ir_module(task: Task) -> Any:
    from tune_gym._tvm import tvm

    tv = tvm()
    func = tv.te.create_prim_func(task.tensors())
    return tv.IRModule({"main": func})
