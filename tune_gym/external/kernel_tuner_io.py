"""Kernel Tuner's files read into a checked parameter space and a measured space.

Three formats, as Kernel Tuner 1.5 writes and reads them:

* the **T1 problem specification** (:func:`read_problem`): ``ConfigurationSpace.TuningParameters``
  (each ``Values`` a Python list literal or ``range(...)`` as a string) and
  ``ConfigurationSpace.Conditions`` (each ``Expression`` a restriction), plus the kernel's
  name, file, language and problem size; checked against the T1 schema shipped in the
  ``kernel_tuner`` package.
* **Kernel Tuner's cache** (:func:`read_cache`, ``.json`` or ``.json.gz``): ``tune_params``,
  ``tune_params_keys``, ``device_name``, ``kernel_name``, ``problem_size``, ``objective`` and
  ``cache``, one entry per configuration keyed by its values joined with commas. Times are in
  milliseconds; a failed configuration holds an error name in ``time`` (``CompilationFailedConfig``,
  ``RuntimeFailedConfig``, ``InvalidConfig``; like Kernel Tuner, an error name in any other
  non-parameter field also marks it failed), and its repeat ``times``, which some files keep,
  are not used. A cache an interrupted run left unclosed is read the way Kernel Tuner reads it
  (closed after its last complete entry; :attr:`MeasuredSpace.notes` says so).
* **T4 results** (:func:`read_t4`): ``results``, one per configuration, checked against the T4
  results schema shipped in the ``kernel_tuner`` package (with ``jsonschema``).

**Restrictions** are Python expressions over the parameter names, as Kernel Tuner states
them. They are never handed to ``eval``: :func:`compile_restriction` parses them with
:mod:`ast` and accepts only constants (numbers, strings, booleans), parameter names,
arithmetic (``+ - * / // % **``, unary ``- + ~``, ``& | ^ << >>``), comparisons and their
chains, ``and``/``or``/``not``, ``x if c else y``, ``in``/``not in`` (tuple, list and set
literals are allowed only on their right), and calls of ``abs``, ``min``, ``max``, ``int``,
``float`` (:data:`RESTRICTION_FUNCTIONS`; the Benchmark Hub's restrictions call none). Anything
else (attributes, subscripts, lambdas, comprehensions, ``is``, ``None``, other names or calls)
is refused with an error naming the file, the restriction and the offending part. Integers are
bounded to :data:`MAX_INT_BITS` bits and strings to :data:`MAX_STR_LEN` characters, checked
*before* a power, product, repetition or shift is computed, so no expression can hang or
exhaust memory; subexpressions without parameters are evaluated once when the restriction is
compiled (``9**9**9`` is refused there). A restriction that raises ``ZeroDivisionError`` or
``OverflowError`` for a configuration excludes that configuration; any other failure
(``TypeError``, ``ValueError``, a value beyond those bounds) is an error naming the
configuration.

:class:`ParamSpace` enumerates the valid configurations once: the Cartesian product, in
``itertools.product`` order, filtered by each restriction in turn. Each restriction is
evaluated on NumPy arrays over the (chunked) grid when its types allow an exact vectorized
evaluation (integers below 2**53, floats, comparisons of strings; division by zero and float
overflow tracked as masks of the configurations they exclude); otherwise, or when a value could
leave that exact range, it is evaluated per configuration with Python's own semantics (the
two agree: ``tests/test_kernel_tuner_io.py`` checks both against Python on generated
restrictions). Kernel Tuner's implicit limit on the product of the block sizes (the device's
``max_threads``) is not added: a space holds exactly the restrictions it was given.

**Simulated cost.** Each :class:`ConfigRecord` carries Kernel Tuner's timings;
:attr:`ConfigRecord.charge_secs`, what a replay must charge to the tuning clock for evaluating
a configuration the first time, is ``compile + verification + benchmark + framework`` time.
Kernel Tuner's simulation runner charges compile + verification + benchmark (and measures its
own framework time live); the autotuning methodology (``objective_time_keys: all``) charges
compilation + runtimes + framework + search_algorithm + validation. The framework overhead
recorded with the measurement is part of evaluating a configuration, so it is charged; the
strategy (search algorithm) time is not, since a replaying tuner spends its own. For T4 files
without a ``benchmark`` time the sum of the runtimes stands for it, as the methodology does.
A failed configuration is charged its timings as well (its compile time was spent).

Error kinds (:data:`tune_gym.measure.result.ERROR_KINDS`): ``CompilationFailedConfig`` / T4
``compile`` -> ``build_error``; ``RuntimeFailedConfig`` / ``runtime`` -> ``run_error``;
``InvalidConfig`` / ``constraints`` -> ``invalid``; T4 ``correctness`` -> ``wrong_result``;
``timeout`` -> ``timeout``; Kernel Tuner's generic ``ErrorConfig`` -> ``run_error``.

Every reader raises :class:`KernelTunerFileError` (a ``ValueError``) with one line naming the
file and the field on bad input, and returns nothing until the whole file has been checked:
every time must be a measured time (in [``MIN_COST_SECS``, ``MAX_COST_SECS``] seconds; the
message names the configuration), every timing a duration of at most ``MAX_COST_SECS``.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.util
import io
import json
import keyword
import math
import numbers
import operator
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.errors import SpaceError, TuneGymError
from tune_gym.measure.result import MAX_COST_SECS, MIN_COST_SECS, MeasureResult

__all__ = [
    "KT_ERROR_KINDS", "MAX_CARTESIAN", "MAX_INT_BITS", "MAX_STR_LEN", "RESTRICTION_FUNCTIONS", "T4_ERROR_KINDS",
    "ConfigRecord", "KernelTunerFileError", "MeasuredSpace", "ParamSpace", "Problem", "Restriction",
    "RestrictionError", "compile_restriction", "read_cache", "read_problem", "read_t4",
]

#: A parameter value: as the file holds it.
Value = int | float | str | bool

#: Kernel Tuner's error names (``time`` of a failed cache entry) -> tune_gym's error kinds.
KT_ERROR_KINDS = {
    "CompilationFailedConfig": "build_error",
    "RuntimeFailedConfig": "run_error",
    "InvalidConfig": "invalid",
    "ErrorConfig": "run_error",
}
#: T4 ``invalidity`` -> tune_gym's error kind (``None``: the configuration ran correctly).
T4_ERROR_KINDS: dict[str, str | None] = {
    "correct": None,
    "compile": "build_error",
    "runtime": "run_error",
    "constraints": "invalid",
    "correctness": "wrong_result",
    "timeout": "timeout",
}
#: The functions a restriction may call.
RESTRICTION_FUNCTIONS: dict[str, Callable[..., Any]] = {"abs": abs, "min": min, "max": max, "int": int,
                                                         "float": float}
_FUNCTION_ARITY = {"abs": (1, 1), "min": (2, 64), "max": (2, 64), "int": (1, 1), "float": (1, 1)}

#: The most bits an integer a restriction computes may have.
MAX_INT_BITS = 4096
#: The longest string a restriction may compute.
MAX_STR_LEN = 10_000
#: The largest Cartesian product of parameter values a space may have.
MAX_CARTESIAN = 10_000_000
_MAX_RESTRICTION_CHARS = 10_000
_MAX_DEPTH = 64
_MAX_LITERAL_ITEMS = 1_000
_MAX_FILE_BYTES = 1 << 30
_MAX_VALUES = 100_000
_CHUNK = 1 << 18
_EXACT = 2.0 ** 53  # integers below it are exact in float64

#: Time units -> how many make one second (file values are divided by it).
_TIME_UNITS = {"s": 1.0, "seconds": 1.0, "ms": 1e3, "milliseconds": 1e3, "miliseconds": 1e3,
               "us": 1e6, "microseconds": 1e6, "ns": 1e9, "nanoseconds": 1e9}


class KernelTunerFileError(TuneGymError):
    """A Kernel Tuner file (T1 problem, cache, T4 results) or its content is malformed; the message
    names the file and the field."""


class RestrictionError(KernelTunerFileError):
    """A restriction does not parse, uses something not allowed, or cannot be evaluated."""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail(where: str, fld: str, problem: str) -> KernelTunerFileError:
    return KernelTunerFileError(_one_line(f"{where}: {fld}: {problem}", 600))


# ---------------------------------------------------------------------------------------------
# Values


def _normalize(value: Any) -> Value:
    """A parameter value as a plain Python bool, int, float or str; ``TypeError`` otherwise."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f):
            raise TypeError(f"{value!r} is not a finite number")
        return f
    if isinstance(value, str):
        return str(value)
    raise TypeError(f"{value!r} ({type(value).__name__}) is not an int, float, string or bool")


def _vkey(value: Value) -> tuple[str, Value]:
    """A type-strict lookup key: ``1``, ``1.0`` and ``True`` are three different values."""
    return type(value).__name__, value


def _check_parameters(parameters: Mapping[str, Sequence[Any]] | Sequence[tuple[str, Sequence[Any]]],
                      where: str, label: str) -> tuple[tuple[str, ...], tuple[tuple[Value, ...], ...]]:
    items = list(parameters.items()) if isinstance(parameters, Mapping) else list(parameters)
    if not items:
        raise _fail(where, label, "no parameters (want at least one)")
    names: list[str] = []
    values: list[tuple[Value, ...]] = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise _fail(where, label, f"{_one_line(repr(item), 80)} is not a (name, values) pair")
        name, vals = item
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise _fail(where, label, f"parameter name {name!r} is not a Python identifier")
        if name in names:
            raise _fail(where, label, f"parameter {name!r} appears twice")
        names.append(name)
        values.append(_check_values(vals, where, f"{label}[{name!r}]"))
    return tuple(names), tuple(values)


def _check_values(vals: Any, where: str, fld: str) -> tuple[Value, ...]:
    if isinstance(vals, str | bytes) or not isinstance(vals, Sequence | np.ndarray):
        raise _fail(where, fld, f"values {_one_line(repr(vals), 80)} are not a list")
    if not 0 < len(vals) <= _MAX_VALUES:
        raise _fail(where, fld, f"{len(vals)} values (want 1 to {_MAX_VALUES})")
    out: list[Value] = []
    keys: set[tuple[str, Value]] = set()
    texts: set[str] = set()
    for i, raw in enumerate(vals):
        try:
            v = _normalize(raw)
        except TypeError as e:
            raise _fail(where, f"{fld}[{i}]", str(e)) from None
        if isinstance(v, str) and len(v) > MAX_STR_LEN:
            raise _fail(where, f"{fld}[{i}]", f"string of {len(v)} characters (at most {MAX_STR_LEN})")
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_INT_BITS:
            raise _fail(where, f"{fld}[{i}]", f"integer of {v.bit_length()} bits (at most {MAX_INT_BITS})")
        if _vkey(v) in keys or str(v) in texts:
            raise _fail(where, f"{fld}[{i}]", f"value {v!r} appears twice")
        keys.add(_vkey(v))
        texts.add(str(v))
        out.append(v)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Restrictions: checking the AST


_NODE_WORDS: dict[type, str] = {
    ast.Attribute: "attribute access", ast.Subscript: "subscript", ast.Slice: "slice", ast.Lambda: "lambda",
    ast.ListComp: "comprehension", ast.SetComp: "comprehension", ast.DictComp: "comprehension",
    ast.GeneratorExp: "generator expression", ast.NamedExpr: "assignment expression", ast.Await: "await",
    ast.Yield: "yield", ast.YieldFrom: "yield", ast.Starred: "unpacking", ast.JoinedStr: "f-string",
    ast.FormattedValue: "f-string", ast.Dict: "dict literal",
}
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr, ast.BitXor,
           ast.LShift, ast.RShift)
_UNARYOPS = (ast.Not, ast.USub, ast.UAdd, ast.Invert)
_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_LITERALS = (ast.Tuple, ast.List, ast.Set)


class _Refused(Exception):
    def __init__(self, node: ast.AST, what: str) -> None:
        super().__init__(what)
        self.node = node
        self.what = what


class _Checker:
    """Walks a parsed restriction and refuses every node outside the allowed grammar."""

    def __init__(self, params: Sequence[str]) -> None:
        self.params = set(params)
        self.used: list[str] = []

    def check(self, node: ast.AST, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            raise _Refused(node, f"nesting deeper than {_MAX_DEPTH}")
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise _Refused(node, _NODE_WORDS.get(type(node), f"{type(node).__name__} expression"))
        method(node, depth + 1)

    def _Constant(self, node: ast.Constant, depth: int) -> None:
        v = node.value
        if isinstance(v, bool) or (isinstance(v, int) and v.bit_length() <= MAX_INT_BITS):
            return
        if isinstance(v, float) or (isinstance(v, str) and len(v) <= MAX_STR_LEN):
            return
        raise _Refused(node, f"constant {_one_line(repr(v), 40)} ({type(v).__name__})")

    def _Name(self, node: ast.Name, depth: int) -> None:
        if node.id not in self.params:
            known = ", ".join(sorted(self.params))
            raise _Refused(node, f"unknown name {node.id!r} (not a parameter: {known})")
        if node.id not in self.used:
            self.used.append(node.id)

    def _BinOp(self, node: ast.BinOp, depth: int) -> None:
        if not isinstance(node.op, _BINOPS):
            raise _Refused(node, f"operator {type(node.op).__name__}")
        self.check(node.left, depth)
        self.check(node.right, depth)

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> None:
        if not isinstance(node.op, _UNARYOPS):
            raise _Refused(node, f"operator {type(node.op).__name__}")
        self.check(node.operand, depth)

    def _BoolOp(self, node: ast.BoolOp, depth: int) -> None:
        for value in node.values:
            self.check(value, depth)

    def _IfExp(self, node: ast.IfExp, depth: int) -> None:
        for part in (node.test, node.body, node.orelse):
            self.check(part, depth)

    def _Compare(self, node: ast.Compare, depth: int) -> None:
        self.check(node.left, depth)
        for i, (op, comp) in enumerate(zip(node.ops, node.comparators)):
            if not isinstance(op, _CMPOPS):
                word = {ast.Is: "'is'", ast.IsNot: "'is not'"}.get(type(op), type(op).__name__)
                raise _Refused(node, f"comparison {word}")
            last = i == len(node.ops) - 1
            if isinstance(comp, _LITERALS) and isinstance(op, ast.In | ast.NotIn) and last:
                self._literal(comp, depth)
            else:
                self.check(comp, depth)

    def _literal(self, node: ast.Tuple | ast.List | ast.Set, depth: int) -> None:
        if len(node.elts) > _MAX_LITERAL_ITEMS:
            raise _Refused(node, f"literal of {len(node.elts)} items (at most {_MAX_LITERAL_ITEMS})")
        for elt in node.elts:
            self.check(elt, depth + 1)

    def _Tuple(self, node: ast.AST, depth: int) -> None:
        raise _Refused(node, "tuple/list/set literal outside 'x in (...)'")

    _List = _Set = _Tuple

    def _Attribute(self, node: ast.Attribute, depth: int) -> None:
        self.check(node.value, depth)  # what the attribute is taken of may be worse (``__import__(...)``)
        raise _Refused(node, "attribute access")

    def _Call(self, node: ast.Call, depth: int) -> None:
        func = node.func
        if not isinstance(func, ast.Name):
            self.check(func, depth)
            raise _Refused(node, "call of a computed function")
        if func.id in self.params or func.id not in RESTRICTION_FUNCTIONS:
            allowed = ", ".join(RESTRICTION_FUNCTIONS)
            raise _Refused(node, f"call of {func.id!r} (allowed functions: {allowed})")
        if node.keywords:
            raise _Refused(node, f"keyword argument in {func.id}()")
        low, high = _FUNCTION_ARITY[func.id]
        if not low <= len(node.args) <= high:
            raise _Refused(node, f"{func.id}() with {len(node.args)} arguments (want {low} to {high})")
        for arg in node.args:
            self.check(arg, depth)


# ---------------------------------------------------------------------------------------------
# Restrictions: bounded scalar evaluation (Python semantics)


class _TooLarge(Exception):
    """A value a restriction computes exceeds :data:`MAX_INT_BITS` or :data:`MAX_STR_LEN`."""


def _is_intlike(x: Any) -> bool:
    return isinstance(x, int)  # bool included


def _bits(x: int) -> int:
    return abs(int(x)).bit_length()


def _sized(x: Any) -> Any:
    if _is_intlike(x) and _bits(x) > MAX_INT_BITS:
        raise _TooLarge(f"an integer of {_bits(x)} bits (at most {MAX_INT_BITS})")
    if isinstance(x, str) and len(x) > MAX_STR_LEN:
        raise _TooLarge(f"a string of {len(x)} characters (at most {MAX_STR_LEN})")
    return x


def _s_pow(a: Any, b: Any) -> Any:
    # |a| >= 2 gives a ** b at least b * (bits(a) - 1) bits: refuse before computing it
    if _is_intlike(a) and _is_intlike(b) and b > 0 and abs(a) > 1 and b * (_bits(a) - 1) >= MAX_INT_BITS:
        raise _TooLarge(f"{_one_line(repr(a), 30)} ** {_one_line(repr(b), 30)} exceeds {MAX_INT_BITS} bits")
    return _sized(a ** b)


def _s_mul(a: Any, b: Any) -> Any:
    if _is_intlike(a) and _is_intlike(b) and _bits(a) + _bits(b) > MAX_INT_BITS + 1:
        raise _TooLarge(f"a product of {_bits(a)}- and {_bits(b)}-bit integers exceeds {MAX_INT_BITS} bits")
    for s, n in ((a, b), (b, a)):
        if isinstance(s, str) and _is_intlike(n) and n > 0 and len(s) * n > MAX_STR_LEN:
            raise _TooLarge(f"a string repeated {n} times exceeds {MAX_STR_LEN} characters")
    return _sized(a * b)


def _s_lshift(a: Any, b: Any) -> Any:
    if _is_intlike(a) and _is_intlike(b) and b > 0 and a != 0 and _bits(a) + b > MAX_INT_BITS:
        raise _TooLarge(f"<< {_one_line(repr(b), 30)} exceeds {MAX_INT_BITS} bits")
    return _sized(a << b)


def _s_mod(a: Any, b: Any) -> Any:
    if isinstance(a, str):
        raise TypeError("string formatting with '%' is not allowed")
    return _sized(a % b)


def _sized_op(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: _sized(op(a, b))


_SCALAR_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: _sized_op(operator.add), ast.Sub: _sized_op(operator.sub), ast.Mult: _s_mul,
    ast.Div: operator.truediv, ast.FloorDiv: _sized_op(operator.floordiv), ast.Mod: _s_mod, ast.Pow: _s_pow,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: _s_lshift,
    ast.RShift: operator.rshift,
}
_SCALAR_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
}
_SCALAR_CMP: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}

_Env = Mapping[str, Any]
_ScalarFn = Callable[[_Env], Any]


def _s_int(x: Any) -> Any:
    if isinstance(x, str) and len(x.strip()) > 1000:
        raise _TooLarge("int() of a string longer than 1000 characters")
    return _sized(int(x))


def _scalar(node: ast.AST) -> _ScalarFn:
    """Compiles a checked restriction node into a function of the parameter values."""
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        name = node.id
        return lambda env: env[name]
    if isinstance(node, ast.BinOp):
        bop, left, right = _SCALAR_BINOPS[type(node.op)], _scalar(node.left), _scalar(node.right)
        return lambda env: bop(left(env), right(env))
    if isinstance(node, ast.UnaryOp):
        uop, operand = _SCALAR_UNARY[type(node.op)], _scalar(node.operand)
        return lambda env: uop(operand(env))
    if isinstance(node, ast.BoolOp):
        return _scalar_boolop(isinstance(node.op, ast.And), [_scalar(v) for v in node.values])
    if isinstance(node, ast.IfExp):
        test, body, orelse = _scalar(node.test), _scalar(node.body), _scalar(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)
    if isinstance(node, ast.Compare):
        return _scalar_compare(node)
    if isinstance(node, ast.Tuple | ast.List):
        elts = [_scalar(e) for e in node.elts]
        return lambda env: tuple(e(env) for e in elts)
    if isinstance(node, ast.Set):
        elts = [_scalar(e) for e in node.elts]
        return lambda env: {e(env) for e in elts}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        func = _s_int if node.func.id == "int" else RESTRICTION_FUNCTIONS[node.func.id]
        args = [_scalar(a) for a in node.args]
        return lambda env: func(*(a(env) for a in args))
    raise AssertionError(f"unchecked node {type(node).__name__}")  # _Checker refuses it first


def _scalar_boolop(is_and: bool, values: list[_ScalarFn]) -> _ScalarFn:
    def run(env: _Env) -> Any:
        result = values[0](env)
        for value in values[1:]:
            if bool(result) != is_and:
                return result
            result = value(env)
        return result
    return run


def _scalar_compare(node: ast.Compare) -> _ScalarFn:
    left = _scalar(node.left)
    pairs = [(_SCALAR_CMP[type(op)], _scalar(c)) for op, c in zip(node.ops, node.comparators)]

    def run(env: _Env) -> Any:
        a = left(env)
        for cmp, comp in pairs:
            b = comp(env)
            if not cmp(a, b):
                return False
            a = b
        return True
    return run


# ---------------------------------------------------------------------------------------------
# Restrictions: exact vectorized evaluation over NumPy arrays


class _NotVectorizable(Exception):
    """This restriction's types or values leave what NumPy evaluates exactly as Python does."""


_Arr = np.ndarray
_VResult = tuple[_Arr, _Arr | None]  # values, and where Python would raise ZeroDivision/Overflow (None: nowhere)
_VectorFn = Callable[[Mapping[str, _Arr]], _VResult]


def _orm(a: _Arr | None, b: _Arr | None) -> _Arr | None:
    if a is None:
        return b
    return a if b is None else a | b


def _andm(cond: _Arr, mask: _Arr | None) -> _Arr | None:
    return None if mask is None else cond & mask


def _num(a: _Arr) -> _Arr:
    if a.dtype == np.bool_:
        return a.astype(np.int64)
    if a.dtype.kind in "if":
        return a
    raise _NotVectorizable


def _truthy(a: _Arr) -> _Arr:
    if a.dtype == np.bool_:
        return a
    if a.dtype.kind in "if":
        return a != 0
    return np.asarray(np.frompyfunc(bool, 1, 1)(a), dtype=object).astype(np.bool_)


def _exact(f: _Arr) -> None:
    """Refuse (fall back to Python) when an integer result would not be exact in int64/float64."""
    if not np.all(np.isfinite(f)) or np.any(np.abs(f) >= _EXACT):
        raise _NotVectorizable


def _v_constant(value: Any) -> _Arr:
    if isinstance(value, bool) or (isinstance(value, int) and abs(value) < _EXACT):
        return np.array(int(value), dtype=np.int64)
    if isinstance(value, float):
        return np.array(value, dtype=np.float64)
    return np.array(value, dtype=object)  # str, or an int too large for exact float64


_V_ARITH = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply}
_V_DIVIDE = {ast.Div: np.true_divide, ast.FloorDiv: np.floor_divide, ast.Mod: np.remainder}
_V_BITS = {ast.BitAnd: np.bitwise_and, ast.BitOr: np.bitwise_or, ast.BitXor: np.bitwise_xor}


def _v_binop(op: ast.operator, a: _Arr, b: _Arr) -> _VResult:
    a, b = _num(a), _num(b)
    ints = a.dtype.kind == "i" and b.dtype.kind == "i"
    kind = type(op)
    if kind in _V_ARITH:
        ufunc = _V_ARITH[kind]
        if ints:
            _exact(ufunc(a.astype(np.float64), b.astype(np.float64)))
        return ufunc(a, b), None
    if kind in _V_DIVIDE:
        zero = b == 0
        safe = np.where(zero, 1, b) if np.any(zero) else b
        return _V_DIVIDE[kind](a, safe), (zero if np.any(zero) else None)
    if kind is ast.Pow:
        return _v_pow(a, b, ints)
    if kind in _V_BITS and ints:
        return _V_BITS[kind](a, b), None
    raise _NotVectorizable  # shifts, and bit operations on floats


def _v_pow(a: _Arr, b: _Arr, ints: bool) -> _VResult:
    af, bf = a.astype(np.float64), b.astype(np.float64)
    if ints:
        if np.any(b < 0):
            raise _NotVectorizable  # Python gives a float (or ZeroDivisionError for 0)
        _exact(np.power(af, bf))
        return np.power(a, b), None
    if np.any((af < 0) & (bf != np.floor(bf))):
        raise _NotVectorizable  # Python gives a complex number
    zero = (af == 0) & (bf < 0)  # ZeroDivisionError in Python
    result = np.power(af, np.where(zero, 1.0, bf))
    overflow = ~np.isfinite(result) & np.isfinite(af) & np.isfinite(bf)  # OverflowError in Python
    undefined = zero | overflow
    return result, (undefined if np.any(undefined) else None)


def _v_compare(op: ast.cmpop, a: _Arr, b: _Arr) -> _Arr:
    cmp = _SCALAR_CMP[type(op)]
    if a.dtype == object or b.dtype == object:
        return np.asarray(np.frompyfunc(cmp, 2, 1)(a, b), dtype=object).astype(np.bool_)
    return np.asarray(cmp(_num(a), _num(b)))


def _vector(node: ast.AST) -> _VectorFn:
    """Compiles a checked restriction node into a function of parameter-value arrays."""
    if isinstance(node, ast.Constant):
        const = _v_constant(node.value)
        return lambda env: (const, None)
    if isinstance(node, ast.Name):
        name = node.id
        return lambda env: (env[name], None)
    if isinstance(node, ast.BinOp):
        op, left, right = node.op, _vector(node.left), _vector(node.right)

        def binop(env: Mapping[str, _Arr]) -> _VResult:
            (a, ua), (b, ub) = left(env), right(env)
            value, undefined = _v_binop(op, a, b)
            return value, _orm(_orm(ua, ub), undefined)
        return binop
    if isinstance(node, ast.UnaryOp):
        return _vector_unary(node)
    if isinstance(node, ast.BoolOp):
        return _vector_boolop(isinstance(node.op, ast.And), [_vector(v) for v in node.values])
    if isinstance(node, ast.IfExp):
        return _vector_ifexp(node)
    if isinstance(node, ast.Compare):
        return _vector_compare(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _vector_call(node.func.id, [_vector(a) for a in node.args])
    raise _NotVectorizable


def _vector_unary(node: ast.UnaryOp) -> _VectorFn:
    operand, kind = _vector(node.operand), type(node.op)

    def unary(env: Mapping[str, _Arr]) -> _VResult:
        a, ua = operand(env)
        if kind is ast.Not:
            return ~_truthy(a), ua
        a = _num(a)
        if kind is ast.USub:
            return -a, ua
        if kind is ast.UAdd:
            return a, ua
        if a.dtype.kind != "i":
            raise _NotVectorizable
        return ~a, ua
    return unary


def _vector_boolop(is_and: bool, values: list[_VectorFn]) -> _VectorFn:
    def boolop(env: Mapping[str, _Arr]) -> _VResult:
        value, undefined = values[0](env)
        for nxt in values[1:]:
            t = _truthy(value)
            reached = t if is_and else ~t
            other, uo = nxt(env)
            value = np.where(reached, other, value)
            undefined = _orm(undefined, _andm(reached, uo))
        return value, undefined
    return boolop


def _vector_ifexp(node: ast.IfExp) -> _VectorFn:
    test, body, orelse = _vector(node.test), _vector(node.body), _vector(node.orelse)

    def ifexp(env: Mapping[str, _Arr]) -> _VResult:
        c, uc = test(env)
        t = _truthy(c)
        (b, ub), (o, uo) = body(env), orelse(env)
        return np.where(t, b, o), _orm(uc, _orm(_andm(t, ub), _andm(~t, uo)))
    return ifexp


def _vector_compare(node: ast.Compare) -> _VectorFn:
    left = _vector(node.left)
    pairs: list[tuple[ast.cmpop, _VectorFn | list[_VectorFn]]] = []
    for op, comp in zip(node.ops, node.comparators):
        if isinstance(op, ast.In | ast.NotIn):
            if not isinstance(comp, _LITERALS):
                raise _NotVectorizable  # membership in a string: per configuration
            pairs.append((op, [_vector(e) for e in comp.elts]))
        else:
            pairs.append((op, _vector(comp)))

    def compare(env: Mapping[str, _Arr]) -> _VResult:
        a, undefined = left(env)
        result: _Arr | None = None
        for op, comp in pairs:
            if isinstance(comp, list):
                c, uc = _v_membership(op, a, [e(env) for e in comp])
                b = a
            else:
                b, uc = comp(env)
                c = _v_compare(op, a, b)
            undefined = _orm(undefined, uc if result is None else _andm(result, uc))
            result = c if result is None else result & c
            a = b
        assert result is not None
        return result, undefined
    return compare


def _v_membership(op: ast.cmpop, a: _Arr, elts: list[_VResult]) -> _VResult:
    found = np.zeros(np.shape(a), dtype=np.bool_)
    undefined: _Arr | None = None
    for value, ue in elts:
        found = found | _v_compare(ast.Eq(), a, value)
        undefined = _orm(undefined, ue)
    return (found if isinstance(op, ast.In) else ~found), undefined


def _vector_call(name: str, args: list[_VectorFn]) -> _VectorFn:
    def call(env: Mapping[str, _Arr]) -> _VResult:
        results = [a(env) for a in args]
        undefined: _Arr | None = None
        for _, ua in results:
            undefined = _orm(undefined, ua)
        values = [_num(v) for v, _ in results]
        return _v_function(name, values), undefined
    return call


def _v_function(name: str, values: list[_Arr]) -> _Arr:
    x = values[0]
    if name == "abs":
        return np.abs(x)
    if name in ("min", "max"):
        better = np.less if name == "min" else np.greater
        for v in values[1:]:
            x = np.where(better(v, x), v, x)  # Python keeps the first of equals (and of NaN)
        return x
    if name == "float":
        return x.astype(np.float64)
    if x.dtype.kind == "i":  # int()
        return x
    _exact(x)
    return np.trunc(x).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Restrictions: public


@dataclass(frozen=True, eq=False)
class Restriction:
    """One checked restriction.

    Attributes:
        source: the expression as the file states it.
        canonical: the same expression as :func:`ast.unparse` writes it (spacing and redundant
            parentheses normalized).
        names: the parameters it reads, in order of first use.
        where: the file (and field) it comes from, for error messages.
    """

    source: str
    canonical: str
    names: tuple[str, ...]
    where: str
    _scalar_fn: _ScalarFn = field(repr=False)
    _vector_fn: _VectorFn | None = field(repr=False)

    def holds(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` (at least the parameters in :attr:`names`) satisfies this restriction,
        with Python's semantics. ``ZeroDivisionError``/``OverflowError`` mean it does not; any
        other failure raises :class:`RestrictionError` naming the configuration."""
        try:
            return bool(self._scalar_fn(config))
        except ArithmeticError:
            return False
        except (_TooLarge, TypeError, ValueError, KeyError) as e:
            why = f"lacks parameter {e}" if isinstance(e, KeyError) else str(e)
            shown = ", ".join(f"{n}={config.get(n, '?')!r}" for n in self.names)
            raise RestrictionError(_one_line(
                f"{self.where}: restriction {self.source!r} cannot be evaluated at {{{shown}}}: {why}", 600)) from None

    def vector_holds(self, env: Mapping[str, _Arr], n: int) -> _Arr | None:
        """The mask of configurations (columns of ``env``, ``n`` of them) that satisfy it, or
        ``None`` when NumPy cannot evaluate it exactly as Python does (evaluate per configuration)."""
        if self._vector_fn is None:
            return None
        try:
            with np.errstate(all="ignore"):
                value, undefined = self._vector_fn(env)
                mask = _truthy(np.asarray(value))
                if undefined is not None:
                    mask = mask & ~undefined
                return np.broadcast_to(mask, (n,))
        except Exception:  # _NotVectorizable, or a type NumPy refuses: the per-configuration path is exact
            return None


def compile_restriction(text: Any, parameters: Sequence[str], where: str = "<restriction>") -> Restriction:
    """Parses and checks one restriction over ``parameters``; :class:`RestrictionError` (naming
    ``where``, the restriction and the offending part) when it does not parse or uses anything
    outside the allowed grammar (see the module documentation)."""
    if not isinstance(text, str):
        raise RestrictionError(_one_line(f"{where}: restriction {text!r} is not a string", 600))
    if len(text) > _MAX_RESTRICTION_CHARS:
        raise RestrictionError(f"{where}: restriction of {len(text)} characters (at most {_MAX_RESTRICTION_CHARS})")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise RestrictionError(_one_line(
            f"{where}: restriction {text!r} does not parse: {e.msg} (column {e.offset})", 600)) from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise RestrictionError(_one_line(f"{where}: restriction {text!r} does not parse: {e}", 600)) from None
    checker = _Checker(parameters)
    try:
        checker.check(tree.body)
    except _Refused as e:
        part = ast.get_source_segment(text.strip(), e.node) or ""
        shown = f" in {_one_line(part, 80)!r}" if part and part != text.strip() and repr(part) not in e.what else ""
        raise RestrictionError(_one_line(
            f"{where}: restriction {text!r}: {e.what} is not allowed{shown}", 600)) from None
    _check_constants(tree.body, text, where)
    try:
        vector_fn: _VectorFn | None = _vector(tree.body)
    except _NotVectorizable:
        vector_fn = None
    return Restriction(source=text, canonical=ast.unparse(tree.body), names=tuple(checker.used), where=where,
                       _scalar_fn=_scalar(tree.body), _vector_fn=vector_fn)


def _check_constants(node: ast.AST, text: str, where: str) -> None:
    """Evaluates each largest subexpression without parameters once, so that one too large to
    compute (``9**9**9``) is refused however the parameters filter the space."""
    if not isinstance(node, ast.expr) or isinstance(node, ast.Constant | ast.Name):
        return
    if not any(isinstance(n, ast.Name) for n in ast.walk(node)) and not isinstance(node, _LITERALS):
        try:
            _scalar(node)({})
        except _TooLarge as e:
            part = _one_line(ast.get_source_segment(text.strip(), node) or ast.unparse(node), 80)
            raise RestrictionError(_one_line(f"{where}: restriction {text!r}: {part!r} is too large to compute: {e}",
                                             600)) from None
        except (ArithmeticError, TypeError, ValueError):
            pass  # reported (or excluding) per configuration
        return
    for child in ast.iter_child_nodes(node):
        _check_constants(child, text, where)


# ---------------------------------------------------------------------------------------------
# The space


class ParamSpace:
    """Ordered parameters, restrictions over them, and the valid configurations, enumerated once.

    Configurations are numbered ``0 .. len(space) - 1`` in Cartesian (``itertools.product``)
    order; each is a tuple of value indices (:meth:`indices`) or a dict of values
    (:meth:`config`); :meth:`index_of` maps a value dict back. :attr:`fingerprint` is the
    SHA-256 of the canonical parameters and restrictions.
    """

    def __init__(self, parameters: Mapping[str, Sequence[Any]] | Sequence[tuple[str, Sequence[Any]]],
                 restrictions: Sequence[str] = (), *, where: str = "<parameters>",
                 labels: tuple[str, str] = ("parameters", "restrictions")) -> None:
        """``where`` (the file) and ``labels`` (the fields of the parameters and of the
        restrictions in it) name the source in error messages."""
        self.where = where
        self.names, self.values = _check_parameters(parameters, where, labels[0])
        if isinstance(restrictions, str):
            raise _fail(where, labels[1], "want a list of strings, got one string")
        self.restrictions = tuple(compile_restriction(r, self.names, f"{where}: {labels[1]}[{i}]")
                                  for i, r in enumerate(restrictions))
        self.radix = tuple(len(v) for v in self.values)
        self.cartesian_size = math.prod(self.radix)
        if self.cartesian_size > MAX_CARTESIAN:
            raise _fail(where, labels[0], f"{self.cartesian_size} combinations (at most {MAX_CARTESIAN})")
        self._strides = tuple(math.prod(self.radix[k + 1:]) for k in range(len(self.radix)))
        self._lookup = tuple({_vkey(v): i for i, v in enumerate(vals)} for vals in self.values)
        self._arrays = tuple(_value_array(vals) for vals in self.values)
        self._codes = self._enumerate()
        self._codes.setflags(write=False)
        self._index_array: np.ndarray | None = None
        self.fingerprint = hashlib.sha256(json.dumps(
            {"parameters": [[n, list(v)] for n, v in zip(self.names, self.values)],
             "restrictions": [r.canonical for r in self.restrictions]},
            separators=(",", ":"), ensure_ascii=True).encode()).hexdigest()

    # enumeration

    def _columns(self, codes: np.ndarray, names: Sequence[str]) -> dict[str, np.ndarray]:
        cols = {}
        for name in names:
            k = self.names.index(name)
            cols[name] = (codes // self._strides[k]) % self.radix[k]
        return cols

    def _enumerate(self) -> np.ndarray:
        kept = []
        for start in range(0, self.cartesian_size, _CHUNK):
            codes = np.arange(start, min(self.cartesian_size, start + _CHUNK), dtype=np.int64)
            for restriction in self.restrictions:
                if codes.size:
                    codes = codes[self._holds(restriction, codes)]
            kept.append(codes)
        return np.concatenate(kept)

    def _holds(self, restriction: Restriction, codes: np.ndarray) -> np.ndarray:
        cols = self._columns(codes, restriction.names)
        env = {name: self._arrays[self.names.index(name)][col] for name, col in cols.items()}
        mask = restriction.vector_holds(env, codes.size)
        if mask is not None:
            return mask
        values = {name: self.values[self.names.index(name)] for name in cols}
        lists = {name: col.tolist() for name, col in cols.items()}
        out = np.empty(codes.size, dtype=np.bool_)
        for row in range(codes.size):
            out[row] = restriction.holds({name: values[name][lists[name][row]] for name in cols})
        return out

    # access

    def __len__(self) -> int:
        return int(self._codes.size)

    def __repr__(self) -> str:
        return (f"ParamSpace({len(self.names)} parameters, {len(self.restrictions)} restrictions, "
                f"{len(self)} of {self.cartesian_size} configurations valid)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParamSpace) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    @property
    def parameters(self) -> dict[str, tuple[Value, ...]]:
        return dict(zip(self.names, self.values))

    @property
    def index_array(self) -> np.ndarray:
        """The value indices of every valid configuration, shape ``(len(self), len(self.names))``."""
        if self._index_array is None:
            cols = self._columns(self._codes, self.names)
            arr = np.stack([cols[n] for n in self.names], axis=1).astype(np.int32) if len(self) else \
                np.zeros((0, len(self.names)), dtype=np.int32)
            arr.setflags(write=False)
            self._index_array = arr
        return self._index_array

    def indices(self, i: int) -> tuple[int, ...]:
        """The value indices of valid configuration ``i``."""
        code = int(self._codes[self._position(i)])
        return tuple((code // s) % r for s, r in zip(self._strides, self.radix))

    def config(self, i: int) -> dict[str, Value]:
        """Valid configuration ``i`` as ``{name: value}``."""
        return {n: vals[j] for n, vals, j in zip(self.names, self.values, self.indices(i))}

    def configs(self) -> Iterator[dict[str, Value]]:
        for i in range(len(self)):
            yield self.config(i)

    def _position(self, i: int) -> int:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < len(self):
            raise SpaceError(f"configuration number {i!r} is out of range [0, {len(self)})")
        return int(i)

    def value_indices(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        """The value indices of ``config`` (every parameter, each one of its values; restrictions
        are not checked); :class:`SpaceError` naming the parameter otherwise."""
        if not isinstance(config, Mapping):
            raise SpaceError(f"configuration {config!r} is not a mapping of parameter names to values")
        extra = [k for k in config if k not in self.names]
        missing = [n for n in self.names if n not in config]
        if extra or missing:
            raise SpaceError(f"configuration has unknown parameters {extra} and lacks {missing} "
                             f"(parameters: {', '.join(self.names)})")
        out = []
        for name, lookup, vals in zip(self.names, self._lookup, self.values):
            try:
                j = lookup.get(_vkey(_normalize(config[name])))
            except TypeError:
                j = None
            if j is None:
                raise SpaceError(_one_line(f"{name}={config[name]!r} is not one of its values {list(vals)}"))
            out.append(j)
        return tuple(out)

    def index_of_indices(self, idx: Sequence[int]) -> int | None:
        """The number of the valid configuration with value indices ``idx``, ``None`` when the
        restrictions exclude it; :class:`SpaceError` when ``idx`` is not one index per parameter
        in range."""
        if len(idx) != len(self.radix) or not all(
                isinstance(j, numbers.Integral) and not isinstance(j, bool) and 0 <= j < r
                for j, r in zip(idx, self.radix)):
            raise SpaceError(_one_line(f"value indices {tuple(idx)!r} are not one index per parameter within "
                                       f"{self.radix}"))
        code = sum(int(j) * s for j, s in zip(idx, self._strides))
        pos = int(np.searchsorted(self._codes, code))
        return pos if pos < len(self) and int(self._codes[pos]) == code else None

    def find(self, config: Mapping[str, Any]) -> int | None:
        """The number of valid configuration ``config``; ``None`` when the restrictions exclude it
        (:class:`SpaceError` when it is not a configuration of the parameters at all)."""
        return self.index_of_indices(self.value_indices(config))

    def index_of(self, config: Mapping[str, Any]) -> int:
        """The number of valid configuration ``config``; :class:`SpaceError` naming the parameter
        or the restriction that rules it out otherwise."""
        pos = self.find(config)
        if pos is None:
            failing = self.failing_restriction(config)
            why = f"fails restriction {failing.source!r}" if failing else "is not valid"
            raise SpaceError(_one_line(f"configuration {dict(config)} {why}"))
        return pos

    def is_valid(self, config: Mapping[str, Any]) -> bool:
        return self.find(config) is not None

    def failing_restriction(self, config: Mapping[str, Any]) -> Restriction | None:
        """The first restriction ``config`` does not satisfy, ``None`` when it satisfies all."""
        values = {n: self.values[k][j] for k, (n, j) in enumerate(zip(self.names, self.value_indices(config)))}
        return next((r for r in self.restrictions if not r.holds(values)), None)


def _value_array(vals: tuple[Value, ...]) -> np.ndarray:
    """The values as an array NumPy evaluates exactly: int64, float64, else object."""
    if all(isinstance(v, int) and abs(v) < _EXACT for v in vals):  # bools included
        return np.array([int(v) for v in vals], dtype=np.int64)
    if all(isinstance(v, float) or (isinstance(v, int) and abs(v) < _EXACT) for v in vals):
        return np.array([float(v) for v in vals], dtype=np.float64)
    arr = np.empty(len(vals), dtype=object)
    arr[:] = list(vals)
    return arr


# ---------------------------------------------------------------------------------------------
# Files


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _close_open_cache(text: str) -> str | None:
    """Kernel Tuner's reading of a cache an interrupted run left open: ``None`` if it is closed."""
    text = text.strip()
    if not text or text[-3:] in ("}\n}", "}}}"):
        return None
    return (text[:-1] if text.endswith(",") else text) + "}\n}"


@dataclass(frozen=True)
class _Loaded:
    data: Any
    sha256: str
    closed: bool


def _load_json(path: Path, allow_open_cache: bool = False) -> _Loaded:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise _fail(str(path), "file", f"cannot be read ({e.strerror or e})") from None
    sha = hashlib.sha256(raw).hexdigest()
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                raw = fh.read(_MAX_FILE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as e:
            raise _fail(str(path), "file", f"is not a valid gzip stream ({e})") from None
    if len(raw) > _MAX_FILE_BYTES:
        raise _fail(str(path), "file", f"holds more than {_MAX_FILE_BYTES} bytes of JSON")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _fail(str(path), "file", f"is not UTF-8 text (byte {e.start})") from None
    try:
        return _Loaded(_parse_json(text), sha, True)
    except json.JSONDecodeError as e:
        repaired = _close_open_cache(text) if allow_open_cache else None
        if repaired is not None:
            try:
                return _Loaded(_parse_json(repaired), sha, False)
            except (json.JSONDecodeError, _DuplicateKey, ValueError, RecursionError):
                pass
        raise _fail(str(path), "file", f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except _DuplicateKey as e:
        raise _fail(str(path), "file", f"a JSON object holds key {e.args[0]!r} twice") from None
    except (ValueError, RecursionError) as e:
        raise _fail(str(path), "file", f"malformed JSON: {e}") from None


def _parse_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _kernel_tuner_schema(where: str, name: str) -> dict[str, Any]:
    """One of the JSON schemas shipped in the ``kernel_tuner`` package (found without importing it)."""
    spec = importlib.util.find_spec("kernel_tuner")
    if spec is None or not spec.submodule_search_locations:
        raise _fail(where, "schema", "the kernel_tuner package (which ships the T1/T4 schemas) is not "
                    "installed: pip install kernel_tuner")
    schema_path = Path(next(iter(spec.submodule_search_locations))) / "schema" / name
    try:
        return json.loads(schema_path.read_text())
    except (OSError, ValueError) as e:
        raise _fail(where, "schema", f"cannot read kernel_tuner's schema {schema_path}: {e}") from None


def _load_schema_checked(path: Path, schema_name: str) -> tuple[str, _Loaded]:
    """``(file name for messages, its JSON)``: a JSON object that passes ``schema_name``."""
    where = str(path)
    loaded = _load_json(path)
    if not isinstance(loaded.data, dict):
        raise _fail(where, "(top level)", "is not a JSON object")
    _validate_schema(loaded.data, schema_name, where)
    return where, loaded


def _validate_schema(data: Any, schema_name: str, where: str) -> None:
    try:
        import jsonschema
    except ImportError:
        raise _fail(where, "schema", "jsonschema is not installed: pip install jsonschema") from None
    schema = _kernel_tuner_schema(where, schema_name)
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        raise _fail(where, path or "(top level)", f"fails the {schema_name} schema: {_one_line(error.message, 200)}")


def _get(obj: Mapping[str, Any], key: str, types: type | tuple[type, ...], where: str, fld: str,
         default: Any = ...) -> Any:
    if key not in obj:
        if default is not ...:
            return default
        raise _fail(where, fld, "missing")
    value = obj[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        names = " or ".join(t.__name__ for t in _as_tuple(types))
        raise _fail(where, fld, f"{_one_line(repr(value), 80)} is not a {names}")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


# ---------------------------------------------------------------------------------------------
# T1 problems


@dataclass(frozen=True, eq=False)
class Problem:
    """A T1 problem specification.

    Attributes:
        name: ``General.BenchmarkName`` (the file's stem when absent).
        space: the parameters and the restrictions (``ConfigurationSpace.Conditions``).
        defaults: each parameter's ``Default`` where the file gives one.
        objective: what is minimized; T1 states none, and Kernel Tuner's default is ``"time"``.
        kernel_name, kernel_file, language: from ``KernelSpecification``.
        problem_size: ``KernelSpecification.ProblemSize`` (``None`` when absent).
        device: ``KernelSpecification.Device.Name`` (``None`` when absent).
        path, sha256: the file read and the SHA-256 of its bytes.
    """

    name: str
    space: ParamSpace
    defaults: dict[str, Value]
    objective: str
    kernel_name: str
    kernel_file: str
    language: str
    problem_size: tuple[Any, ...] | None
    device: str | None
    path: str
    sha256: str


def read_problem(path: str | Path) -> Problem:
    """Reads a T1 problem specification (``kernels/<kernel>.json``): checked against the T1 schema
    kernel_tuner ships, each ``Values`` parsed safely (a list/tuple literal or ``range(...)``),
    each restriction compiled; :class:`KernelTunerFileError` naming the file and field otherwise."""
    where, loaded = _load_schema_checked(Path(path), "T1/1.0.0/input-schema.json")
    data = loaded.data
    space_spec = data["ConfigurationSpace"]
    params, defaults = _t1_parameters(space_spec["TuningParameters"], where)
    conditions = space_spec.get("Conditions", [])
    restrictions = []
    for i, cond in enumerate(conditions):
        fld = f"ConfigurationSpace.Conditions[{i}]"
        for name in cond["Parameters"]:
            if name not in params:
                raise _fail(where, f"{fld}.Parameters", f"{name!r} is not a parameter")
        restrictions.append(cond["Expression"])
    space = ParamSpace(params, restrictions, where=where,
                       labels=("ConfigurationSpace.TuningParameters", "ConfigurationSpace.Conditions"))
    kernel = data["KernelSpecification"]
    general = data.get("General", {})
    problem_size = kernel.get("ProblemSize")
    if problem_size is not None and not isinstance(problem_size, list):
        raise _fail(where, "KernelSpecification.ProblemSize", f"{problem_size!r} is not a list")
    device = kernel.get("Device", {}).get("Name")
    return Problem(
        name=str(general.get("BenchmarkName") or Path(path).name.split(".")[0]), space=space, defaults=defaults,
        objective="time", kernel_name=kernel["KernelName"], kernel_file=kernel["KernelFile"],
        language=kernel["Language"], problem_size=tuple(problem_size) if problem_size is not None else None,
        device=device, path=where, sha256=loaded.sha256)


def _t1_parameters(specs: list[dict[str, Any]], where: str) -> tuple[dict[str, tuple[Value, ...]], dict[str, Value]]:
    params: dict[str, tuple[Value, ...]] = {}
    defaults: dict[str, Value] = {}
    for i, spec in enumerate(specs):
        fld = f"ConfigurationSpace.TuningParameters[{i}]"
        name = spec["Name"]
        if name in params:
            raise _fail(where, f"{fld}.Name", f"parameter {name!r} appears twice")
        values = _t1_values(spec["Values"], spec["Type"], where, f"{fld}.Values")
        params[name] = values
        if "Default" in spec:
            default = spec["Default"]
            if not any(_vkey(v) == _vkey(default) or (type(v) is not bool and v == default) for v in values):
                raise _fail(where, f"{fld}.Default", f"{default!r} is not one of {name}'s values")
            defaults[name] = default
    return params, defaults


def _t1_values(text: str, kind: str, where: str, fld: str) -> tuple[Value, ...]:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise _fail(where, fld, f"{text!r} does not parse: {e}") from None
    values = _t1_literal(node, text, where, fld)
    if not values:
        raise _fail(where, fld, f"{text!r} holds no values")
    want = {"int": (int,), "uint": (int,), "float": (int, float), "bool": (bool,), "string": (str,)}[kind]
    for v in values:
        ok = isinstance(v, want) and (kind == "bool" or not isinstance(v, bool))
        if ok and kind == "uint":
            ok = isinstance(v, int) and v >= 0
        if not ok:
            raise _fail(where, fld, f"value {v!r} is not of Type {kind!r}")
    return tuple(values)


def _t1_literal(node: ast.AST, text: str, where: str, fld: str) -> list[Any]:
    if isinstance(node, ast.List | ast.Tuple):
        if len(node.elts) > _MAX_VALUES:
            raise _fail(where, fld, f"more than {_MAX_VALUES} values")
        return [_t1_constant(e, text, where, fld) for e in node.elts]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id == "list" and len(node.args) == 1:
            return _t1_literal(node.args[0], text, where, fld)
        if node.func.id == "range" and 1 <= len(node.args) <= 3:
            args = [_t1_constant(a, text, where, fld) for a in node.args]
            ints = all(isinstance(a, int) and not isinstance(a, bool) for a in args)
            if not ints or (len(args) == 3 and not args[2]):
                raise _fail(where, fld, f"{text!r}: range() wants integer arguments and a non-zero step")
            r = range(*args)
            if len(r) > _MAX_VALUES:
                raise _fail(where, fld, f"{text!r} holds {len(r)} values (at most {_MAX_VALUES})")
            return list(r)
    raise _fail(where, fld, f"{text!r} is not a list or tuple of constants, range(...) or list(range(...))")


def _t1_constant(node: ast.AST, text: str, where: str, fld: str) -> Any:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _t1_constant(node.operand, text, where, fld)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    elif isinstance(node, ast.Constant) and isinstance(node.value, int | float | str):
        v = node.value
        if isinstance(v, float) and not math.isfinite(v):
            raise _fail(where, fld, f"{text!r}: value {v!r} is not finite")
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_INT_BITS:
            raise _fail(where, fld, f"{text!r}: an integer of {v.bit_length()} bits")
        return v
    part = ast.get_source_segment(text.strip(), node) or type(node).__name__
    raise _fail(where, fld, f"{text!r}: {_one_line(part, 60)!r} is not a constant")


# ---------------------------------------------------------------------------------------------
# Measurements


@dataclass(frozen=True)
class ConfigRecord:
    """What a file holds for one configuration (seconds throughout).

    Attributes:
        time_secs: the objective time of one kernel call (``None`` when it failed).
        times_secs: the repeated measurements (empty when it failed or the file has none).
        error: one of :data:`tune_gym.measure.result.ERROR_KINDS`, ``None`` when it ran.
        error_name: the file's own name of the failure (``"RuntimeFailedConfig"``, T4 ``"runtime"``).
        compile_secs, verification_secs, benchmark_secs, framework_secs, strategy_secs: Kernel
            Tuner's timings of evaluating it.
    """

    time_secs: float | None
    times_secs: tuple[float, ...]
    error: str | None
    error_name: str
    compile_secs: float
    verification_secs: float
    benchmark_secs: float
    framework_secs: float
    strategy_secs: float

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def charge_secs(self) -> float:
        """Seconds a replay charges the tuning clock for evaluating it (module documentation)."""
        return self.compile_secs + self.verification_secs + self.benchmark_secs + self.framework_secs

    def to_measure_result(self, flops: int = 0) -> MeasureResult:
        """As a :class:`MeasureResult` of a task of ``flops`` FLOPs: the repeats as costs (the
        time when there are none), the compile time as ``build_secs`` and verification +
        benchmark + framework as ``run_secs``."""
        if self.error is not None:
            return MeasureResult(flops=flops, error=self.error, error_msg=self.error_name,
                                 build_secs=self.compile_secs, run_secs=self.charge_secs - self.compile_secs)
        assert self.time_secs is not None
        return MeasureResult(costs=self.times_secs or (self.time_secs,), flops=flops, build_secs=self.compile_secs,
                             run_secs=self.charge_secs - self.compile_secs)


@dataclass(frozen=True, eq=False)
class MeasuredSpace:
    """A :class:`ParamSpace` with what a file measured for its configurations.

    Attributes:
        space: the parameters and restrictions (from the problem when one was given).
        records: one per valid configuration of ``space`` (``None``: the file lacks it).
        device, kernel: the device and kernel names the file states (``""`` when it states none).
        objective: the file's objective (Kernel Tuner's ``objective``; ``"time"`` for T4).
        problem_size: the file's ``problem_size`` (``None`` when absent).
        path, sha256, format: the file read, the SHA-256 of its bytes, ``"kernel_tuner_cache"`` or ``"t4"``.
        notes: what a reader should know (an unclosed cache, entries without timings).
    """

    space: ParamSpace
    records: tuple[ConfigRecord | None, ...]
    device: str
    kernel: str
    objective: str
    problem_size: tuple[Any, ...] | None
    path: str
    sha256: str
    format: str
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.records)

    @property
    def missing(self) -> tuple[int, ...]:
        """The valid configurations the file lacks."""
        return tuple(i for i, r in enumerate(self.records) if r is None)

    def missing_configs(self) -> list[dict[str, Value]]:
        return [self.space.config(i) for i in self.missing]

    def record(self, config: Mapping[str, Any]) -> ConfigRecord | None:
        """The record of ``config`` (``None`` when the file lacks it); :class:`SpaceError` when it
        is not a valid configuration."""
        return self.records[self.space.index_of(config)]

    def counts(self) -> dict[str, int]:
        """How many configurations ran (``ok``), failed (per error kind), or are ``missing``."""
        out: dict[str, int] = {}
        for r in self.records:
            key = "missing" if r is None else (r.error or "ok")
            out[key] = out.get(key, 0) + 1
        return out

    def best(self) -> int | None:
        """The number of the fastest configuration that ran (``None`` when none did)."""
        times = [(r.time_secs, i) for i, r in enumerate(self.records) if r is not None and r.time_secs is not None]
        return min(times)[1] if times else None


def _check_problem_space(problem: Problem | ParamSpace | None, names: Sequence[str],
                         values: Mapping[str, Sequence[Any]] | None, where: str) -> ParamSpace | None:
    """The problem's space after checking the file's parameters agree with it."""
    if problem is None:
        return None
    space = problem.space if isinstance(problem, Problem) else problem
    same = list(names) == list(space.names) if values is not None else set(names) == set(space.names)
    if not same:
        raise _fail(where, "tune_params_keys" if values is not None else "configuration",
                    f"parameters {list(names)} differ from the problem's {list(space.names)}")
    for name, vals in zip(space.names, space.values):
        if values is None:
            continue
        try:
            file_keys = {_vkey(_normalize(v)) for v in values[name]}
        except TypeError as e:
            raise _fail(where, f"tune_params[{name!r}]", str(e)) from None
        if file_keys != {_vkey(v) for v in vals}:
            raise _fail(where, f"tune_params[{name!r}]",
                        f"values {_one_line(repr(values[name]), 120)} differ from the problem's {list(vals)}")
    return space


def _duration(value: Any, per_sec: float, where: str, fld: str) -> float:
    """A Kernel Tuner timing (``per_sec`` file units a second) in seconds, checked."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise _fail(where, fld, f"{_one_line(repr(value), 60)} is not a duration (want a finite number >= 0)")
    secs = float(value) / per_sec
    if secs > MAX_COST_SECS:
        raise _fail(where, fld, f"{value!r} is {secs:g} s (at most {MAX_COST_SECS:g} s)")
    return secs


def _measured(value: Any, per_sec: float, where: str, fld: str, config: Mapping[str, Any]) -> float:
    """A measured kernel time in seconds, within [MIN_COST_SECS, MAX_COST_SECS]."""
    secs = float(value) / per_sec if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(secs) and MIN_COST_SECS <= secs <= MAX_COST_SECS):
        raise _fail(where, fld, f"{_one_line(repr(value), 60)} is not a measured time (want "
                    f"[{MIN_COST_SECS * per_sec:g}, {MAX_COST_SECS * per_sec:g}] in the file's unit) for config "
                    f"{_one_line(repr(dict(config)), 200)}")
    return secs


def _measured_list(values: Any, per_sec: float, where: str, fld: str, config: Mapping[str, Any]) -> tuple[float, ...]:
    """Repeated measurements in seconds (checked in one NumPy pass; the first bad one named)."""
    if not isinstance(values, list):
        raise _fail(where, fld, f"{_one_line(repr(values), 60)} is not a list")
    if all(type(t) is float or type(t) is int for t in values):
        secs = np.asarray(values, dtype=np.float64) / per_sec
        if np.all((secs >= MIN_COST_SECS) & (secs <= MAX_COST_SECS)):  # NaN fails both
            return tuple(secs.tolist())
    return tuple(_measured(t, per_sec, where, f"{fld}[{i}]", config) for i, t in enumerate(values))


# ---------------------------------------------------------------------------------------------
# Kernel Tuner caches


_KT_TIMINGS = ("compile_time", "verification_time", "benchmark_time", "framework_time", "strategy_time")


def read_cache(path: str | Path, problem: Problem | ParamSpace | None = None, *,
               require_complete: bool = False) -> MeasuredSpace:
    """Reads Kernel Tuner's cache (``.json`` or ``.json.gz``) into a :class:`MeasuredSpace`.

    Without ``problem`` the space is the cache's ``tune_params`` without restrictions (a cache
    does not record them); with one (a T1 :class:`Problem` or a :class:`ParamSpace`) the
    parameters must agree and every entry must satisfy its restrictions. Every entry's key must
    name one value of each parameter, equal to the entry's own fields; times must be measured
    times. ``require_complete``: an error when the cache lacks a valid configuration (otherwise
    :attr:`MeasuredSpace.missing` lists them)."""
    p = Path(path)
    where = str(p)
    loaded = _load_json(p, allow_open_cache=True)
    data = loaded.data
    if not isinstance(data, dict):
        raise _fail(where, "(top level)", "is not a JSON object")
    keys = _get(data, "tune_params_keys", list, where, "tune_params_keys")
    tune_params = _get(data, "tune_params", dict, where, "tune_params")
    if list(tune_params) != keys:
        raise _fail(where, "tune_params_keys", f"{keys} differ from tune_params' names {list(tune_params)}")
    for name in keys:
        _get(tune_params, name, list, where, f"tune_params[{name!r}]")
    cache = _get(data, "cache", dict, where, "cache")
    device = _get(data, "device_name", str, where, "device_name")
    kernel = _get(data, "kernel_name", str, where, "kernel_name")
    objective = _get(data, "objective", (str, list), where, "objective", "time")
    objective = objective if isinstance(objective, str) else ",".join(map(str, objective))
    problem_size = _get(data, "problem_size", (list, str, int), where, "problem_size", None)
    space = _check_problem_space(problem, keys, tune_params, where)
    if isinstance(problem, Problem):
        _check_against_problem(problem, kernel, problem_size, where)
    if space is None:
        space = ParamSpace({k: tune_params[k] for k in keys}, (), where=where, labels=("tune_params", "restrictions"))
    records, untimed = _cache_records(cache, space, where)
    notes = []
    if not loaded.closed:
        notes.append("the cache was not closed (an interrupted run); read up to its last entry")
    if untimed:
        notes.append(f"{untimed} entries lack some of {', '.join(_KT_TIMINGS)} (counted as 0)")
    return _finish(space, records, require_complete, where, MeasuredSpace(
        space=space, records=tuple(records), device=device, kernel=kernel, objective=objective,
        problem_size=_size_tuple(problem_size), path=where, sha256=loaded.sha256, format="kernel_tuner_cache",
        notes=tuple(notes)))


def _size_tuple(size: Any) -> tuple[Any, ...] | None:
    if size is None:
        return None
    return tuple(size) if isinstance(size, list) else (size,)


def _check_against_problem(problem: Problem, kernel: str, problem_size: Any, where: str) -> None:
    if kernel and kernel != problem.kernel_name:
        raise _fail(where, "kernel_name", f"{kernel!r} differs from the problem's {problem.kernel_name!r}")
    if problem_size is not None and problem.problem_size is not None \
            and _size_tuple(problem_size) != problem.problem_size:
        raise _fail(where, "problem_size", f"{problem_size!r} differs from the problem's {list(problem.problem_size)}")


def _finish(space: ParamSpace, records: list[ConfigRecord | None], require_complete: bool, where: str,
            result: MeasuredSpace) -> MeasuredSpace:
    if require_complete and result.missing:
        first = _one_line(repr(space.config(result.missing[0])), 200)
        raise _fail(where, "configurations", f"lacks {len(result.missing)} of the {len(space)} valid configurations "
                    f"(first: {first})")
    return result


def _key_parser(space: ParamSpace) -> Callable[[str], list[int] | None]:
    """Splits a cache key (values joined with commas) into value indices; ``None`` if it does not."""
    texts = [{str(v): j for j, v in enumerate(vals)} for vals in space.values]
    simple = not any("," in t for lookup in texts for t in lookup)

    def parse(key: str) -> list[int] | None:
        if simple:
            parts = key.split(",")
            if len(parts) != len(texts):
                return None
            out = [lookup.get(part) for lookup, part in zip(texts, parts)]
            return None if any(j is None for j in out) else out  # type: ignore[return-value]
        return _match_key(key, texts, 0)

    return parse


def _match_key(key: str, texts: list[dict[str, int]], k: int) -> list[int] | None:
    if k == len(texts):
        return [] if key == "" else None
    for text, j in texts[k].items():
        last = k == len(texts) - 1
        if (last and key == text) or (not last and key.startswith(text + ",")):
            rest = _match_key(key[len(text) + (0 if last else 1):], texts, k + 1)
            if rest is not None:
                return [j, *rest]
    return None


def _cache_records(cache: Mapping[str, Any], space: ParamSpace, where: str) -> tuple[list[ConfigRecord | None], int]:
    records: list[ConfigRecord | None] = [None] * len(space)
    parse = _key_parser(space)
    untimed = 0
    for key, entry in cache.items():
        fld = f"cache[{key!r}]"
        idx = parse(key)
        if idx is None:
            raise _fail(where, fld, _key_problem(key, space))
        config = {n: space.values[k][j] for k, (n, j) in enumerate(zip(space.names, idx))}
        if not isinstance(entry, dict):
            raise _fail(where, fld, "is not a JSON object")
        for name, value in config.items():
            if name not in entry:
                raise _fail(where, f"{fld}.{name}", "missing")
            got = entry[name]
            if type(got) is not type(value) or got != value:  # JSON gives plain bool/int/float/str
                raise _fail(where, f"{fld}.{name}", f"{got!r} differs from the key's value {value!r}")
        pos = space.index_of_indices(idx)
        if pos is None:
            failing = space.failing_restriction(config)
            raise _fail(where, fld, f"config is outside the space: fails restriction "
                        f"{failing.source if failing else '?'!r}")
        if records[pos] is not None:
            raise _fail(where, fld, "duplicates another entry's configuration")
        record, complete = _cache_record(entry, where, fld, config)
        untimed += not complete
        records[pos] = record
    return records, untimed


def _key_problem(key: str, space: ParamSpace) -> str:
    parts = key.split(",")
    if len(parts) != len(space.names):
        return (f"key has {len(parts)} values, want {len(space.names)} (one per parameter: "
                f"{', '.join(space.names)})")
    for name, vals, part in zip(space.names, space.values, parts):
        if part not in {str(v) for v in vals}:
            return _one_line(f"{name} value {part!r} is not one of {list(vals)}", 200)
    return "key does not name one value of each parameter"


def _cache_record(entry: Mapping[str, Any], where: str, fld: str,
                  config: Mapping[str, Any]) -> tuple[ConfigRecord, bool]:
    timings = {}
    complete = True
    for name in _KT_TIMINGS:
        if name in entry:
            timings[name] = _duration(entry[name], 1e3, where, f"{fld}.{name}")
        else:
            timings[name] = 0.0
            complete = False
    if "time" not in entry:
        raise _fail(where, f"{fld}.time", "missing")
    time = entry["time"]
    error_name = time if isinstance(time, str) else next(
        (v for k, v in entry.items() if isinstance(v, str) and v in KT_ERROR_KINDS and k not in config), None)
    common = dict(compile_secs=timings["compile_time"], verification_secs=timings["verification_time"],
                  benchmark_secs=timings["benchmark_time"], framework_secs=timings["framework_time"],
                  strategy_secs=timings["strategy_time"])
    if error_name is not None:
        if error_name not in KT_ERROR_KINDS:
            raise _fail(where, f"{fld}.time", f"{error_name!r} is neither a time in ms nor a Kernel Tuner error "
                        f"({', '.join(KT_ERROR_KINDS)})")
        return ConfigRecord(time_secs=None, times_secs=(), error=KT_ERROR_KINDS[error_name], error_name=error_name,
                            **common), complete
    secs = _measured(time, 1e3, where, f"{fld}.time", config)
    reps = _measured_list(entry.get("times", []), 1e3, where, f"{fld}.times", config)
    return ConfigRecord(time_secs=secs, times_secs=reps, error=None, error_name="", **common), complete


# ---------------------------------------------------------------------------------------------
# T4 results


def read_t4(path: str | Path, problem: Problem | ParamSpace | None = None, *,
            require_complete: bool = False) -> MeasuredSpace:
    """Reads T4 results (``.json`` or ``.json.gz``), checked against the T4 results schema
    kernel_tuner ships, into a :class:`MeasuredSpace`.

    Without ``problem`` the space is inferred from the configurations (the parameters in the
    order of the first result, each one's values sorted, no restrictions); with one, every
    configuration must be a valid configuration of its space. Times are converted with
    ``metadata.timeunit`` (seconds when absent, as the autotuning methodology reads it)."""
    where, loaded = _load_schema_checked(Path(path), "T4/1.0.0/results-schema.json")
    data = loaded.data
    results = _get(data, "results", list, where, "results")
    metadata = _get(data, "metadata", dict, where, "metadata", {})
    unit = _get(metadata, "timeunit", str, where, "metadata.timeunit", "seconds")
    per_sec = _unit_per_sec(unit, where, "metadata.timeunit")
    if not results:
        raise _fail(where, "results", "is empty")
    first = results[0]["configuration"]
    names = list(first)
    space = _check_problem_space(problem, names, None, where)
    if space is None:
        space = ParamSpace(_t4_parameters(results, names, where), (), where=where,
                           labels=("results[].configuration", "restrictions"))
    records: list[ConfigRecord | None] = [None] * len(space)
    for i, result in enumerate(results):
        fld = f"results[{i}]"
        config = result["configuration"]
        idx = _t4_indices(config, space, where, f"{fld}.configuration")
        pos = space.index_of_indices(idx)
        if pos is None:
            failing = space.failing_restriction(config)
            raise _fail(where, f"{fld}.configuration", f"config is outside the space: fails restriction "
                        f"{failing.source if failing else '?'!r}")
        if records[pos] is not None:
            raise _fail(where, f"{fld}.configuration", "duplicates an earlier result's configuration")
        records[pos] = _t4_record(result, per_sec, where, fld, config)
    kernel = problem.kernel_name if isinstance(problem, Problem) else ""
    return _finish(space, records, require_complete, where, MeasuredSpace(
        space=space, records=tuple(records), device="", kernel=kernel, objective="time", problem_size=None,
        path=where, sha256=loaded.sha256, format="t4"))


def _unit_per_sec(unit: str, where: str, fld: str) -> float:
    per_sec = _TIME_UNITS.get(unit.strip().lower())
    if per_sec is None:
        raise _fail(where, fld, f"unknown time unit {unit!r} (known: {', '.join(_TIME_UNITS)})")
    return per_sec


def _t4_parameters(results: list[Any], names: list[str], where: str) -> dict[str, list[Any]]:
    seen: dict[str, dict[tuple[str, Value], Value]] = {n: {} for n in names}
    for i, result in enumerate(results):
        config = result["configuration"]
        if set(config) != set(names):
            raise _fail(where, f"results[{i}].configuration", f"parameters {list(config)} differ from results[0]'s "
                        f"{names}")
        for name in names:
            try:
                v = _normalize(config[name])
            except TypeError as e:
                raise _fail(where, f"results[{i}].configuration.{name}", str(e)) from None
            seen[name].setdefault(_vkey(v), v)
    out: dict[str, list[Any]] = {}
    for name, vals in seen.items():
        values = list(vals.values())
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if numeric or all(isinstance(v, str) for v in values):
            values.sort()
        out[name] = values
    return out


def _t4_indices(config: Any, space: ParamSpace, where: str, fld: str) -> tuple[int, ...]:
    if set(config) != set(space.names):
        missing = [n for n in space.names if n not in config]
        extra = [n for n in config if n not in space.names]
        raise _fail(where, fld, f"lacks parameters {missing} and has unknown {extra}")
    try:
        return space.value_indices(config)
    except SpaceError as e:
        raise _fail(where, fld, str(e)) from None


def _t4_record(result: Mapping[str, Any], per_sec: float, where: str, fld: str,
               config: Mapping[str, Any]) -> ConfigRecord:
    times = result["times"]
    error = T4_ERROR_KINDS[result["invalidity"]]
    compile_key = "compilation" if "compilation" in times else "compilation_time"

    def duration(key: str) -> float:
        return _duration(times.get(key, 0), per_sec, where, f"{fld}.times.{key}")

    runtimes = times.get("runtimes", [])
    common = dict(compile_secs=duration(compile_key), verification_secs=duration("validation"),
                  framework_secs=duration("framework"), strategy_secs=duration("search_algorithm"))
    if error is not None:
        if not isinstance(runtimes, list):
            raise _fail(where, f"{fld}.times.runtimes", "is not a list")
        bench = duration("benchmark") if "benchmark" in times else sum(
            _duration(t, per_sec, where, f"{fld}.times.runtimes[{i}]") for i, t in enumerate(runtimes))
        return ConfigRecord(time_secs=None, times_secs=(), error=error, error_name=result["invalidity"],
                            benchmark_secs=bench, **common)
    reps = _measured_list(runtimes, per_sec, where, f"{fld}.times.runtimes", config)
    secs = _t4_time(result, per_sec, reps, where, fld, config)
    bench = duration("benchmark") if "benchmark" in times else sum(reps)
    return ConfigRecord(time_secs=secs, times_secs=reps, error=None, error_name="", benchmark_secs=bench, **common)


def _t4_time(result: Mapping[str, Any], per_sec: float, reps: tuple[float, ...], where: str, fld: str,
             config: Mapping[str, Any]) -> float:
    found = [(i, m) for i, m in enumerate(result.get("measurements", [])) if m.get("name") == "time"]
    if len(found) > 1:
        raise _fail(where, f"{fld}.measurements", "holds two measurements named 'time'")
    if not found:
        if not reps:
            raise _fail(where, f"{fld}.times.runtimes", "is empty and there is no 'time' measurement")
        return sum(reps) / len(reps)
    i, m = found[0]
    unit = m.get("unit", "")
    if not isinstance(unit, str):
        raise _fail(where, f"{fld}.measurements[{i}].unit", f"{unit!r} is not a string")
    m_per_sec = _unit_per_sec(unit, where, f"{fld}.measurements[{i}].unit") if unit.strip() else per_sec
    return _measured(m.get("value"), m_per_sec, where, f"{fld}.measurements[{i}].value", config)
