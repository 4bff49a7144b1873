"""Checking a TVM JSON object graph before TVM decodes it (the form of the ``tir://`` kernel store).

``tvm.ir.save_json`` writes an object graph::

    {"root_index": R, "nodes": [{"type": "<type key>", "data": ...}, ...], "metadata": {...}}

where a node's ``data`` refers to other nodes by index. Decoding it runs no Python, but TVM's
decoder trusts the graph: a reference cycle recurses until the process crashes, a node of another
type than a field expects reaches C++ code that assumes the field's type, and a few types decode
through their own hooks (``ffi.Module`` loads a compiled module, ``ffi.Tensor`` allocates data).
:func:`check_graph` accepts only graphs that decode into plain TIR data:

- every node's type is a TIR, IR or container type, or a Relax type that types a PrimFunc
  (:func:`allowed_type`): no modules, tensors, functions, enums, pass configurations or types
  that decode through a hook other than ``ir.Op``/``ir.SourceName``;
- an object's ``data`` has exactly its type's fields (TVM's reflection), inline values of the
  right JSON type (enum fields such as a loop's kind in their range: TVM aborts the process on
  an unknown one) and references to *earlier* nodes only (what ``save_json`` writes: children
  first), so the graph has no cycle and its depth is bounded (:data:`MAX_DEPTH`);
- a referenced node fits the field's declared type (``Array[ir.Var]``, ``Optional[ir.Expr]``,
  ``Map[str, Any]``...), and a null stands only where the type is optional or the field is a
  ``span``/``ir.Call.attrs`` (which TVM leaves null itself);
- no operator calls a function or symbol by name (``call_extern``, ``call_packed``, LLVM/SPIR-V
  intrinsics by name...) and no ``pragma_import_*`` attribute pulls in outside code: a kernel
  is compiled and run when measured, and such a call would run whatever it names.

:func:`strip_spans` drops source locations (spans) from a graph: they do not print, do not take
part in structural equality, and make a parsed module's graph a third larger.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_NODES", "GraphError", "allowed_type", "check_graph", "strip_spans"]

#: Most nodes a kernel's graph may have (the committed kernels have at most ~1,000 each).
MAX_NODES = 200_000
#: Longest chain of references (the committed kernels' deepest is 26). TVM decodes and prints
#: recursively: decoding a chain of about 2,000 nodes overflows the main thread's stack (a crash).
MAX_DEPTH = 256
_INT64 = (-(2**63), 2**63 - 1)
# Types that decode from plain JSON data.
_SCALARS = {"None", "bool", "int", "float", "DataType", "ffi.String"}
_CONTAINERS = {"ffi.Array", "ffi.Map", "ffi.Shape"}
# Object types whose data is a string decoded by their own hook (a registry look-up by name).
_NAMED = {"ir.Op", "ir.SourceName"}
_PREFIXES = ("ir.", "prim.", "tirx.", "s_tir.SBlock", "s_tir.MatchBufferRegion")
# Relax types that type a PrimFunc (its ``ty``), and TIR types no fused kernel holds (pass
# configurations; TIRx execution scopes, layouts and TMA descriptors, with enum fields).
_RELAX = {"relax.ShapeType", "relax.TensorType", "relax.FuncType", "relax.AnyType", "relax.PackedFuncType",
          "relax.expr.ShapeExpr"}
_EXCLUDED = {"tirx.ExecScope", "tirx.ScopeIdDef", "tirx.TensorMapEncodeTiledAttr", "tirx.ComposeLayout",
             "tirx.TileLayout", "tirx.Iter", "tirx.DispatchContext"}
# Inline integer fields with a narrower range than int64 (enums TVM aborts on when out of range).
_RANGES = {("tirx.For", "kind"): (0, 4), ("tirx.IterVar", "iter_type"): (0, 8),
           ("tirx.BufferType", "data_alignment"): (1, 1 << 16), ("tirx.BufferType", "offset_factor"): (0, 1 << 16),
           ("relax.ShapeType", "ndim"): (-1, 64), ("relax.TensorType", "ndim"): (-1, 64)}
# Operators that call a function or symbol named in the kernel, and attributes that import code.
_CALLS_OUT = re.compile(r"tirx\.(.*(extern|packed|llvm_intrin|spirv|ffi_kernel|func_call).*)", re.ASCII)
_IMPORTS = "pragma_import"
# A data type as TVM writes one (``float32``, ``int8x4``, ``float32xvscalex4``, ``handle``); no
# ``custom[...]`` types, whose decoding calls a registered function.
_DTYPE = re.compile(r"([A-Za-z][A-Za-z0-9_]*(x(vscalex)?[0-9]{1,5})?)?", re.ASCII)
# Fields that TVM itself leaves null although their declared type is not optional.
_NULLABLE = {("ir.Call", "attrs")}
# Field static type indices stored inline in ``data`` (None, int, bool, float, DataType).
_INLINE = {0: "null", 1: "int", 2: "bool", 3: "float", 5: "dtype"}
# Schema origins that name a scalar or container node type.
_SCHEMA_NODE = {"int": "int", "bool": "bool", "float": "float", "str": "ffi.String", "dtype": "DataType",
                "Array": "ffi.Array", "Map": "ffi.Map"}


class GraphError(ValueError):
    """The graph is not one :func:`check_graph` accepts (the message names the node and field)."""


Schema = tuple[str, tuple[Any, ...]]  # (origin, args), hashable


def _schema(obj: dict[str, Any]) -> Schema:
    return str(obj["type"]), tuple(_schema(a) for a in obj.get("args", ()))


def _show_schema(s: Schema) -> str:
    return s[0] + (f"[{', '.join(map(_show_schema, s[1]))}]" if s[1] else "")


@functools.cache
def _type_info(key: str) -> Any:
    """TVM's reflection record of an object type (None when no such type is registered)."""
    from tvm_ffi import core  # tvm-ffi offers its type table only through these private helpers

    try:
        return core._lookup_or_register_type_info_from_type_key(key)
    except (ValueError, TypeError, KeyError, RuntimeError):
        return None


@functools.cache
def _type_index(key: str) -> int | None:
    info = _type_info(key)
    return None if info is None else int(info.type_index)


@functools.cache
def _fields(key: str) -> dict[str, tuple[int, Schema | None]]:
    """``{field: (static type index, declared type)}`` of an object type, base classes first."""
    chain = []
    info = _type_info(key)
    while info is not None:
        chain.append(info)
        info = info.parent_type_info
    out: dict[str, tuple[int, Schema | None]] = {}
    for info in reversed(chain):
        for f in info.fields:
            out[str(f.name)] = (int(f.field_static_type_index), _schema(f.ty.to_json()) if f.ty else None)
    return out


@functools.cache
def allowed_type(key: str) -> bool:
    """Whether a node of this type key may appear in a kernel's graph."""
    if key in _SCALARS or key in _CONTAINERS or key in _NAMED:
        return True
    if not (key.startswith(_PREFIXES) or key in _RELAX) or key in _EXCLUDED \
            or key.startswith("tirx.transform.") or _type_info(key) is None:
        return False
    from tvm_ffi import core

    info = _type_info(key)
    ancestors = set(info.type_ancestors)
    hooked = core._lookup_type_attr(int(info.type_index), "__data_from_json__") is not None
    enum = _type_index("ffi.Enum") in ancestors
    return not hooked and not enum


def _is_subtype(key: str, base: str) -> bool:
    if key == base:
        return True
    base_index = _type_index(base)
    info = _type_info(key)
    return base_index is not None and info is not None and base_index in info.type_ancestors


class _Checker:
    def __init__(self, nodes: list[Any]) -> None:
        self.nodes = nodes
        self.types: list[str] = []
        self.depth: list[int] = []
        self.memo: dict[tuple[int, Schema], bool] = {}

    def fits(self, ref: int, schema: Schema) -> bool:
        """Whether node ``ref`` (an earlier, checked node) is a value of the declared type."""
        key = (ref, schema)
        if key not in self.memo:
            self.memo[key] = self._fits(ref, schema)
        return self.memo[key]

    def _fits(self, ref: int, schema: Schema) -> bool:
        origin, args = schema
        kind = self.types[ref]
        if origin == "Any":
            return True
        if origin == "Optional":
            return kind == "None" or all(self.fits(ref, a) for a in args)
        if origin in _SCHEMA_NODE:
            if kind != _SCHEMA_NODE[origin]:
                return False
            data = self.nodes[ref].get("data", [])
            if origin == "Array" and args:
                return all(self.fits(r, args[0]) for r in data)
            if origin == "Map" and len(args) == 2:
                return all(self.fits(r, args[i % 2]) for i, r in enumerate(data))
            return True
        if origin == "Object":
            return kind not in _SCALARS and kind not in _CONTAINERS
        return "." in origin and _is_subtype(kind, origin)

    def ref(self, i: int, value: Any, where: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < i:
            raise GraphError(f"node {i} {where}: {value!r} is not the index of an earlier node")
        return value

    def node(self, i: int, node: Any) -> None:
        if not isinstance(node, dict) or not isinstance(node.get("type"), str) or set(node) - {"type", "data"}:
            raise GraphError(f"node {i} is not {{\"type\": <type key>, \"data\": ...}}")
        kind = node["type"]
        if not allowed_type(kind):
            raise GraphError(f"node {i} has type {kind[:80]!r}, which a kernel's graph may not hold")
        self.types.append(kind)
        children = self.children(i, kind, node.get("data"))
        self.depth.append(1 + max((self.depth[c] for c in children), default=0))
        if self.depth[i] > MAX_DEPTH:
            raise GraphError(f"node {i}: references nest deeper than {MAX_DEPTH}")

    def children(self, i: int, kind: str, data: Any) -> list[int]:
        if kind == "None":
            if data is not None:
                raise GraphError(f"node {i} (None) has data")
            return []
        if kind in _SCALARS or kind in _NAMED or kind == "ffi.Shape":
            _scalar(i, kind, data)
            return []
        if kind in _CONTAINERS:
            if not isinstance(data, list) or (kind == "ffi.Map" and len(data) % 2):
                raise GraphError(f"node {i} ({kind}) data is not a list of node indices"
                                 + (" (key, value) pairs" if kind == "ffi.Map" else ""))
            return [self.ref(i, r, f"({kind}) item {n}") for n, r in enumerate(data)]
        return self.fields(i, kind, data)

    def fields(self, i: int, kind: str, data: Any) -> list[int]:
        spec = _fields(kind)
        if not isinstance(data, dict) or set(data) != set(spec):
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise GraphError(f"node {i} ({kind}) data {str(got)[:200]}: want the fields {sorted(spec)}")
        out = []
        for name, (static, schema) in spec.items():
            value = data[name]
            if static in _INLINE:
                _inline(i, f"({kind}) field {name}", _INLINE[static], value, _RANGES.get((kind, name), _INT64))
                continue
            r = self.ref(i, value, f"({kind}) field {name}")
            null_ok = name == "span" or (kind, name) in _NULLABLE
            if not (null_ok and self.types[r] == "None") and (schema is None or not self.fits(r, schema)):
                raise GraphError(f"node {i} ({kind}) field {name}: node {r} ({self.types[r]}) is not a "
                                 f"{_show_schema(schema) if schema else 'value'}")
            out.append(r)
        return out


def _inline(i: int, where: str, want: str, value: Any, bounds: tuple[int, int] = _INT64) -> None:
    ok = {"null": value is None,
          "int": isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1],
          "bool": isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "dtype": isinstance(value, str) and len(value) <= 64 and _DTYPE.fullmatch(value) is not None}[want]
    if not ok:
        span = f" in {bounds[0]}..{bounds[1]}" if want == "int" and bounds != _INT64 else ""
        raise GraphError(f"node {i} {where}: {str(value)[:80]!r} is not a {want}{span}")


def _scalar(i: int, kind: str, data: Any) -> None:
    want = {"bool": "bool", "int": "int", "float": "float"}.get(kind)
    if want is not None:
        _inline(i, f"({kind}) data", want, data)
    elif kind == "ffi.Shape":
        if not isinstance(data, list):
            raise GraphError(f"node {i} (ffi.Shape) data is not a list of ints")
        for n, v in enumerate(data):
            _inline(i, f"(ffi.Shape) item {n}", "int", v)
    elif kind == "DataType":
        _inline(i, "(DataType) data", "dtype", data)
    elif not isinstance(data, str):
        raise GraphError(f"node {i} ({kind}) data is not a string")
    elif kind == "ir.Op" and _CALLS_OUT.fullmatch(data):
        raise GraphError(f"node {i} is the operator {data}, which calls code named in the kernel")
    elif kind == "ffi.String" and data.startswith(_IMPORTS):
        raise GraphError(f"node {i} is the attribute {data[:80]!r}, which imports code into the kernel")


def check_graph(graph: Any, root: str = "ir.IRModule") -> dict[str, Any]:
    """``graph`` (parsed JSON) without its ``metadata`` if it is an object graph TVM may decode
    (see the module docstring) whose root node has type ``root``; requires TVM to be imported
    (its type table).

    Raises:
        GraphError: the first problem found, naming the node and field.
    """
    if not isinstance(graph, dict) or not {"root_index", "nodes"} <= set(graph) \
            or set(graph) - {"root_index", "nodes", "metadata"}:
        raise GraphError("not an object graph: want {\"root_index\", \"nodes\"[, \"metadata\"]}")
    nodes, root_index = graph["nodes"], graph["root_index"]
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= MAX_NODES:
        raise GraphError(f"\"nodes\" is not a list of 1 to {MAX_NODES} nodes")
    if not isinstance(root_index, int) or isinstance(root_index, bool) or not 0 <= root_index < len(nodes):
        raise GraphError(f"root_index {str(root_index)[:40]} is not a node index (0..{len(nodes) - 1})")
    checker = _Checker(nodes)
    for i, node in enumerate(nodes):
        checker.node(i, node)
    if checker.types[root_index] != root:
        raise GraphError(f"root node {root_index} is a {checker.types[root_index]}, not an {root}")
    return {"root_index": root_index, "nodes": nodes}


def strip_spans(graph: dict[str, Any]) -> dict[str, Any]:
    """A copy of a graph (as ``save_json`` writes it) with every ``span`` field null; the span
    nodes stay in ``nodes``, unreferenced (decode and save again to drop them)."""
    out = json.loads(json.dumps(graph))
    nodes = out["nodes"]
    null = next((i for i, n in enumerate(nodes) if n.get("type") == "None"), None)
    if null is None:
        null = len(nodes)
        nodes.append({"type": "None"})
    for node in nodes:
        data = node.get("data")
        if isinstance(data, dict) and "span" in data:
            data["span"] = null
    return out
