"""A tuning task: one operator instance, one dtype, one weight layout, one target, addressed by a
versioned URI.

URI grammar (stable; the op version bumps when an op's meaning changes)::

    op://<op>-v<version>/<p1><v1>_<p2><v2>...?[dtype=<dtype>&][weights=<layout>&]target=<kind>[&<opt>=<val>...]

e.g. ``op://conv2d_nchw-v1/n1_c64_h56_w56_k64_r3_s1_p1_d1?target=llvm``. Parameters appear in
the op's fixed order; ``dtype`` is omitted when it is ``float32`` and ``weights`` when it is the
default for the op and target. Parsing accepts omitted parameters that have defaults, any
parameter order and any order of the query fields, and ``str(Task.from_uri(u))`` is the canonical
form (``dtype``, ``weights``, then ``target`` followed by its options).

``weights`` (:data:`WEIGHT_LAYOUTS`) says in which layout the kernel receives the op's weight
inputs (:attr:`OpDef.weights <tune_gym.tasks.ops.OpDef.weights>`: the conv kernels, the dense
matrix):

* ``packed``: in a layout the schedule chooses. The task's function marks the weights
  ``layout_free_buffers``, so MetaSchedule's ``RewriteLayout`` postproc moves the weight
  layout transform into a preprocessing block, which is removed before building (as
  MetaSchedule's builder does, and as a deployed model does the transform once ahead of
  time). Kernels are timed on pre-packed weights. The default on ``llvm`` for ops with weights.
* ``given``: in the op's own layout (the ``layout_free_buffers`` hint is removed), so a kernel
  does all the work of the op on the inputs as PyTorch takes them. The default on ``cuda``
  (MetaSchedule's CUDA postprocs do not rewrite layouts), for ops without weight inputs
  (``batch_matmul``) and for ``conv2d_transpose_nchw`` (TVM 0.27 miscompiles its packed
  kernels, see :mod:`tune_gym.tasks.ops`); the only value accepted there.

Input is checked at the door: :meth:`Task.from_uri`, :meth:`Task.parse`, :meth:`Task.make`
and ``Task(...)`` raise :class:`~tune_gym.errors.TaskError` (a ``ValueError``) naming the
part, the bad value and what is accepted, for

* a non-``str`` URI, one longer than ``MAX_URI_LENGTH = 4096`` characters, or one that does
  not match the grammar (ASCII only, no percent-encoding);
* an unknown op or op version;
* a parameter that is unknown to the op, given twice (``c64_c32``), missing without a
  default, not an integer, or out of range: every parameter is in ``[1, 2**16]`` (paddings
  in ``[0, 2**16]``), the op's shape rules hold (the kernel fits in the padded input, no
  padding beyond the kernel extent, output padding below the stride, output size in
  ``[1, 2**16]``), one call's tensors hold at most ``2**28`` elements and cost at most
  ``2**40`` FLOPs (:mod:`tune_gym.tasks.ops` lists the rules);
* a query field that is malformed or given twice;
* a dtype other than :data:`DTYPES` (an op of a registered target kind, :mod:`tune_gym.kinds`,
  may name its own), or an op on a target kind it does not run on (a registered kind's ops run
  on that kind only, every other op on ``llvm`` and ``cuda``), or parameters the target cannot
  run (the op's ``check_target``);
* a ``weights`` value other than :data:`WEIGHT_LAYOUTS`, or ``packed`` where it is not
  supported (a ``cuda`` target, an op without weight inputs, ``conv2d_transpose_nchw``);
* an unknown target kind or option, or an option value out of range
  (:mod:`tune_gym.tasks.targets` lists them).

So every task that exists builds its TE tensors. :meth:`Task.parse` also takes suite task ids
(``resnet18:1``); it resolves them through the resolver that :mod:`tune_gym.tasks.suites`
registers with :func:`register_id_resolver` when it is imported (importing any
``tune_gym.tasks`` module imports it first), so this module never imports the suites.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tune_gym import kinds
from tune_gym.errors import TaskError
from tune_gym.tasks.checks import fields, pairs, show
from tune_gym.tasks.ops import MAX_DIM, OpDef, get_op
from tune_gym.tasks.targets import TargetSpec

__all__ = ["DTYPES", "MAX_URI_LENGTH", "WEIGHT_LAYOUTS", "Task", "default_weights", "register_id_resolver",
           "register_uri_scheme"]

DTYPES = ("float32", "float16", "float64")
#: Accepted values of a task's ``weights`` (see the module docstring).
WEIGHT_LAYOUTS = ("packed", "given")
#: Longest accepted task URI (after stripping surrounding whitespace).
MAX_URI_LENGTH = 4096
_URI = re.compile(
    r"op://(?P<op>[a-z0-9_]+)-v(?P<ver>[0-9]+)/(?P<params>[a-z0-9_]*)(?:\?(?P<query>.*))?", re.ASCII | re.DOTALL
)
_PARAM = re.compile(r"([a-z]+)([0-9]+)", re.ASCII)

_id_resolver: Callable[[str], Task] | None = None
_uri_schemes: dict[str, Callable[[str], Task]] = {}
kinds.reserve("uri_scheme", ["op://"], "tune_gym.tasks")


def register_id_resolver(resolver: Callable[[str], Task]) -> None:
    """Make :meth:`Task.parse` resolve text that is not a URI with ``resolver``.

    :mod:`tune_gym.tasks.suites` registers its ``task_by_id`` here when imported; the resolver
    raises :class:`TaskError` for ids it does not know.
    """
    global _id_resolver
    _id_resolver = resolver


def register_uri_scheme(prefix: str, parse: Callable[[str], Task]) -> None:
    """Make :meth:`Task.from_uri` and :meth:`Task.parse` hand URIs starting with ``prefix`` to
    ``parse`` (:mod:`tune_gym.tasks.prim_func` registers ``tir://``; a registered target kind
    declares its schemes in :attr:`tune_gym.kinds.TaskKind.uri_schemes` instead)."""
    kinds.reserve("uri_scheme", [prefix], "tune_gym.tasks")
    _uri_schemes[prefix] = parse


def _kind_ops_hint(kind_name: str) -> str:
    """`` (target X runs only a, b)`` for a registered kind with ops, else ``""``."""
    kind = kinds.get_kind(kind_name)
    return f" (target {kind.name} runs only {', '.join(kind.ops)})" if kind is not None and kind.ops else ""


def _packed_unsupported(opdef: OpDef, target: TargetSpec) -> str:
    """Why ``weights=packed`` is refused for this op and target ("" when it is supported)."""
    if target.kind != "llvm":
        return (f"target {target.kind} does not support weights='packed' (MetaSchedule's postprocs "
                f"for {target.kind} have no RewriteLayout); accepted there: given")
    if not opdef.weights:
        return f"op {opdef.name} has no weight inputs, so weights='packed' means nothing; accepted: given"
    if opdef.no_packing:
        return f"op {opdef.name} does not offer weights='packed' ({opdef.no_packing}); accepted: given"
    return ""


def default_weights(op: str, target: TargetSpec) -> str:
    """The weight layout a task gets when none is given: ``packed`` where supported, else ``given``."""
    return "given" if _packed_unsupported(get_op(op), target) else "packed"


@dataclass(frozen=True)
class Task:
    """One operator instance on one target.

    The constructor validates everything (see the module docstring) and stores ``params``
    canonical: defaults filled in, in the op's order, as Python ints.

    Attributes:
        op: op name (see :data:`tune_gym.tasks.ops.OPS`).
        params: shape parameters as ``(name, value)`` pairs in the op's order (a mapping is
            accepted too).
        dtype: element type of inputs and output, one of :data:`DTYPES`.
        target: where it runs.
        weights: the weight layout, one of :data:`WEIGHT_LAYOUTS` (see the module docstring);
            ``""`` (the default) means :func:`default_weights` of the op and target, which the
            constructor stores.
    """

    op: str
    params: tuple[tuple[str, int], ...]
    dtype: str = "float32"
    target: TargetSpec = TargetSpec()
    weights: str = ""

    def __post_init__(self) -> None:
        opdef = get_op(self.op)
        given: dict[str, Any] = {}
        for name, value in pairs(self.params, f"{opdef.name}: params"):
            if not isinstance(name, str):
                raise TaskError(f"{opdef.name}: parameter names are str, got {show(name)}; "
                                f"expected {list(opdef.params)}")
            if name in given:
                raise TaskError(f"{opdef.name}: parameter {name!r} given twice; give each parameter once")
            given[name] = value
        object.__setattr__(self, "params", tuple(opdef.check(given).items()))
        if not isinstance(self.dtype, str) or self.dtype not in (opdef.dtypes or DTYPES):
            if opdef.dtypes:
                raise TaskError(f"op {opdef.name} takes dtype {', '.join(opdef.dtypes)}, not {show(self.dtype)} "
                                f"(give dtype={opdef.dtypes[0]})")
            raise TaskError(f"unknown dtype {show(self.dtype)}; known: {', '.join(DTYPES)}")
        if not isinstance(self.target, TargetSpec):
            raise TaskError(f"task target must be a TargetSpec, got {type(self.target).__name__} "
                            f"{show(self.target)} (Task.make and with_target also take a str such as 'llvm')")
        if self.target.kind not in opdef.targets:
            raise TaskError(f"op {opdef.name} does not run on target {self.target.kind}; it runs on "
                            f"{', '.join(opdef.targets)}{_kind_ops_hint(self.target.kind)}")
        if opdef.check_target is not None:
            opdef.check_target(dict(self.params), self.target)
        if not isinstance(self.weights, str) or self.weights not in ("", *WEIGHT_LAYOUTS):
            raise TaskError(f"unknown weights={show(self.weights)}; accepted: {', '.join(WEIGHT_LAYOUTS)}")
        if self.weights == "packed" and (why := _packed_unsupported(opdef, self.target)):
            raise TaskError(why)
        object.__setattr__(self, "weights", self.weights or default_weights(opdef.name, self.target))

    # ------------------------------------------------------------------ construction
    @classmethod
    def make(cls, op: str, /, target: str | TargetSpec = "llvm", dtype: str = "float32", weights: str = "",
             **params: int) -> Task:
        """``Task.make("dense", m=128, n=768, k=768)``; ``target`` as in a URI (``"llvm&cores=4"``);
        ``weights`` one of :data:`WEIGHT_LAYOUTS` (``""``: the default for the op and target)."""
        return cls(op, tuple(params.items()), dtype, TargetSpec.coerce(target), weights)

    @classmethod
    def from_uri(cls, uri: str) -> Task:
        """Parse a task URI (see the module docstring for the grammar and the checks)."""
        if not isinstance(uri, str):
            raise TaskError(f"a task URI must be a str, got {type(uri).__name__} {show(uri)}")
        text = uri.strip()
        for prefix, parse in _uri_schemes.items():
            if text.startswith(prefix):
                return parse(text)
        if not text.startswith("op://") and (kind_parse := kinds.uri_parser(text)) is not None:
            return kind_parse(text)
        if len(text) > MAX_URI_LENGTH:
            raise TaskError(f"task URI of {len(text)} characters; accepted: at most {MAX_URI_LENGTH}")
        m = _URI.fullmatch(text)
        if not m:
            raise TaskError(
                f"malformed task URI {show(text, 120)}; expected op://<op>-v<N>/<p><int>_...?target=<kind>, "
                "e.g. op://dense-v1/m128_n768_k768?target=llvm"
            )
        where = show(text, 120)
        opdef = get_op(m["op"])
        if len(m["ver"]) > 9 or int(m["ver"]) != opdef.version:
            raise TaskError(f"{where}: op {opdef.name} is at version v{opdef.version}, not v{m['ver'][:12]}")
        params: dict[str, int] = {}
        for part in filter(None, m["params"].split("_")):
            pm = _PARAM.fullmatch(part)
            if not pm:
                raise TaskError(f"{where}: malformed parameter {show(part)} (want <name><int>, e.g. c64)")
            name, digits = pm[1], pm[2]
            if name in params:
                raise TaskError(f"{where}: parameter {name!r} given twice; give each parameter once")
            if len(digits) > 9:
                raise TaskError(f"{where}: parameter {name!r}={digits[:12]}... out of range; accepted: "
                                f"at most {MAX_DIM} (see tune_gym.tasks.ops)")
            params[name] = int(digits)
        query = fields(m["query"] or "", where)
        dtype = query.pop("dtype", "float32")
        weights = query.pop("weights", "")
        kind = query.pop("target", "llvm")
        return cls(opdef.name, tuple(params.items()), dtype, TargetSpec(kind, tuple(query.items())), weights)

    @classmethod
    def parse(cls, text: str) -> Task:
        """Accept a URI or a suite task id (``resnet18:3``, ``resnet18:3@cuda``)."""
        if not isinstance(text, str):
            raise TaskError(f"a task is a str (a URI op://... or a suite id such as resnet18:1), got "
                            f"{type(text).__name__} {show(text)}")
        text = text.strip()
        if (text.startswith("op://") or any(text.startswith(prefix) for prefix in _uri_schemes)
                or ("://" in text and kinds.uri_parser(text) is not None)):
            return cls.from_uri(text)
        if _id_resolver is None:  # pragma: no cover - tune_gym.tasks registers the suites
            raise TaskError(f"{show(text)} is not a task URI (op://...) and no task id resolver is registered")
        return _id_resolver(text)

    # ------------------------------------------------------------------ identity
    @property
    def uri(self) -> str:
        body = "_".join(f"{k}{v}" for k, v in self.params)
        query = [f"dtype={self.dtype}"] if self.dtype != "float32" else []
        if self.weights != default_weights(self.op, self.target):
            query.append(f"weights={self.weights}")
        query.append(f"target={self.target}")
        return f"op://{self.op}-v{self.opdef.version}/{body}?{'&'.join(query)}"

    def __str__(self) -> str:
        return self.uri

    def with_target(self, target: str | TargetSpec) -> Task:
        """This task on another target (a spec, or a str as in a URI: ``"cuda&arch=sm_80"``).

        A default weight layout stays the default (that of the new target); any other is kept,
        and refused if the new target does not support it. As in the URI, a layout equal to
        the old target's default counts as the default (``given`` on ``cuda`` moved back to
        ``llvm`` is ``packed``).
        """
        spec = TargetSpec.coerce(target)
        explicit = self.weights != default_weights(self.op, self.target)
        return Task(self.op, self.params, self.dtype, spec, self.weights if explicit else "")

    def with_weights(self, weights: str) -> Task:
        """This task with another weight layout (one of :data:`WEIGHT_LAYOUTS`, ``""``: the default)."""
        return Task(self.op, self.params, self.dtype, self.target, weights)

    @property
    def has_torch_reference(self) -> bool:
        """True when PyTorch runs the same op (:func:`tune_gym.measure.reference.measure_reference`)."""
        return True

    @property
    def packed(self) -> bool:
        """True when the kernel takes its weights pre-packed (``weights=packed``)."""
        return self.weights == "packed"

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
    def flops_nominal(self) -> bool:
        """True when :attr:`flops` is a fixed nominal count, not the work of one call: a task
        whose kernel has no FLOP count to trust (a space measured by another tool) keeps time as
        its objective, and its "GFLOPS" are only a decreasing function of the time per call.
        Nothing may show them as a throughput (listings show times instead)."""
        return False

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return self.opdef.input_shapes(self.param_dict)

    @property
    def input_dtypes(self) -> list[str]:
        """The dtype of each input (the task's ``dtype`` for every op-builder task)."""
        return [self.dtype] * len(self.input_shapes)

    def tensors(self) -> list[Any]:
        """TE tensors ``[inputs..., output]``."""
        from tune_gym.tvm_support import tvm

        tvm()
        return self.opdef.build(self.param_dict, self.dtype)

    def output_shape(self) -> tuple[int, ...]:
        """Shape of the output (computed without TVM; equal to ``tensors()[-1].shape``)."""
        return self.opdef.output_shape(self.param_dict)

    def ir_module(self) -> Any:
        """The TVM IRModule (one PrimFunc named ``main``) built from TE/topi: the workload that
        is tuned (``KnobSpace.mod``) and that MetaSchedule's ``tune_tir`` would take.

        With ``weights=packed`` its ``layout_free_buffers`` attribute lists exactly the op's
        weight inputs (topi marks some ops' weights and not others: ``dense`` but not
        ``conv2d_nchw``; and it marks ``batch_matmul``'s second operand, an activation);
        with ``weights=given`` the function has no such attribute.
        """
        return _ir_module(self)


@functools.lru_cache(maxsize=256)
def _ir_module(task: Task) -> Any:
    from tune_gym.tvm_support import tvm

    tv = tvm()
    func = tv.te.create_prim_func(task.tensors())
    marked = func.attrs is not None and "layout_free_buffers" in func.attrs
    have = [int(i) for i in func.attrs["layout_free_buffers"]] if marked else []
    want = list(task.opdef.weights) if task.packed else []
    if have != want:
        if marked:
            func = func.without_attr("layout_free_buffers")
        if want:
            func = func.with_attr("layout_free_buffers", want)
    return tv.IRModule({"main": func})
