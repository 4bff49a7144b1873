"""Tasks that wrap any TIR PrimFunc: the fused kernels of an imported network.

An op-builder task (:class:`~tune_gym.tasks.task.Task`, ``op://...``) is rebuilt from its shape
parameters; a network's kernels are whatever Relax's fusion made of the model (a conv2d with its
bias, batch norm, residual add and ReLU in one PrimFunc), so they are addressed by content::

    tir://<name>/<digest>?[weights=given&]target=<kind>[&<opt>=<val>...]

e.g. ``tir://fused_conv2d_add_relu/5733956644529af3?target=llvm``. ``digest`` is the first 16
hex digits of the SHA-256 of the function's TVMScript (as an IRModule with one PrimFunc named
``main``, printed by this TVM), so one kernel has one URI in every process and session; ``name``
is Relax's name for it, for people (two networks may give one kernel different names: the digest
alone identifies it, and a URI with another name for a known digest is accepted). The target part
is that of op URIs (:mod:`tune_gym.tasks.targets`); ``weights`` is ``given`` only (see below).

Where the function comes from: :func:`register` (what network import calls) keeps it in this
process and writes ``<digest>.json`` to the user store (:func:`store_dirs`), so worker processes
and later sessions resolve the URI; lookups search ``TUNE_GYM_TIR`` (``os.pathsep``-separated
directories), then the repository's committed kernels (``benchmarks/networks/tir/``), then the
user store (``$XDG_CACHE_HOME/tune_gym/tir``, by default ``~/.cache/tune_gym/tir``); the first
file of the digest that :func:`read_kernel` accepts is used (a refused one is skipped, and is
the error when no store has an accepted one). An unknown digest is a
:class:`~tune_gym.errors.TaskError` that names the directories searched.

A store file is ``{"name", "digest", "format", "module"}`` (:data:`FORMAT`): ``module`` is the
IRModule as TVM's JSON object graph (``tvm.ir.save_json``, source locations dropped),
zlib-compressed and base64-encoded (about a seventh of the graph's size, 1.2 times the module's
TVMScript). Reading one runs no code: TVMScript is never parsed (parsing it runs Python), the
graph is checked before TVM decodes it (:mod:`tune_gym.tasks._tir_json`: types, fields,
references, depth, no operator that calls code by name), and the decoded module must be one
PrimFunc named ``main`` whose printed TVMScript hashes to the file's name and ``digest`` field
(:func:`read_kernel`). So a store cannot pass another kernel off as a digest's: it may hold other
valid kernels only under their own digests, which only URIs naming those digests use. Files in
the older TVMScript form are refused with the command that converts a trusted directory
(``scripts/convert_tir_store.py``); :func:`register` replaces a refused file in the user store.

What such a task offers: its IRModule (:meth:`PrimFuncTask.ir_module`, so a KnobSpace is built
from it like from any task), its arguments' shapes and dtypes (the last argument is the output,
as Relax's ``call_tir`` passes it), FLOPs as TVM's ``estimate_tir_flops`` counts them (at least
1, so element-wise kernels have a rate), and the correctness reference: the same function built
by TVM without a schedule. It has no op builder (``opdef``, ``tensors()`` raise) and no PyTorch
reference per kernel: a network is checked against PyTorch as a whole.

Weights: a kernel's layout is part of its function. Imported with ``weights="given"`` (the
default), it reads its inputs in the layout the network passes them (``weights`` is ``given``).
Imported with ``weights="packed"`` (:func:`tune_gym.networks.import_network`), Relax's
``AttachAttrLayoutFreeBuffers`` marks the constant weight inputs ``layout_free_buffers``, so
MetaSchedule's ``RewriteLayout`` picks their layout per schedule and the kernel is timed on
pre-packed weights, as op tasks with ``weights=packed`` are (``weights`` is ``packed``); the
network is then compiled with the packing folded into its constants.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gym.errors import TaskError
from tune_gym.locations import benchmarks_path
from tune_gym.tasks._tir_json import GraphError, check_graph, strip_spans
from tune_gym.tasks.checks import fields, show
from tune_gym.tasks.targets import TargetSpec
from tune_gym.tasks.task import Task, register_uri_scheme

__all__ = ["FORMAT", "PrimFuncTask", "digest_of", "lookup", "read_kernel", "register", "repo_store",
           "save", "store_dirs", "write_kernel"]

_URI = re.compile(r"tir://(?P<name>[A-Za-z0-9_.]{1,200})/(?P<digest>[0-9a-f]{16})(?:\?(?P<query>.*))?",
                  re.ASCII | re.DOTALL)
#: :attr:`PrimFuncTask.op` of every PrimFunc task.
OP = "prim_func"

#: The ``format`` of a store file: TVM's JSON object graph, zlib-compressed, base64-encoded.
FORMAT = "tvm-json-graph+zlib+base64"
_NAME = re.compile(r"[A-Za-z0-9_.]{1,200}", re.ASCII)
_MAX_FILE = 16 << 20  # bytes of a store file
_MAX_GRAPH = 64 << 20  # bytes of its decompressed graph
_CONVERT = "scripts/convert_tir_store.py"

_registered: dict[str, tuple[str, Any]] = {}  # digest -> (name, IRModule)


def repo_store() -> Path:
    """The repository's kernels: ``benchmarks/networks/tir`` (:func:`tune_gym.locations.benchmarks_dir`)."""
    return benchmarks_path("networks", "tir")


def store_dirs() -> list[Path]:
    """Directories searched for ``<digest>.json`` kernels, in order; the last is the user store."""
    extra = [Path(p) for p in os.environ.get("TUNE_GYM_TIR", "").split(os.pathsep) if p]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tune_gym" / "tir"
    return [*extra, repo_store(), cache]


def _canonical(func_or_mod: Any) -> Any:
    """``IRModule({"main": func})`` with ``global_symbol`` ``main`` (the form that is tuned and
    that MetaSchedule's database is queried with)."""
    from tune_gym.tvm_support import tvm

    tv = tvm()
    if isinstance(func_or_mod, tv.IRModule):
        funcs = [f for f in func_or_mod.functions.values() if isinstance(f, tv.tirx.PrimFunc)]
        if len(funcs) != 1:
            raise TaskError(f"a PrimFunc task wraps one PrimFunc; this module has {len(funcs)}")
        func = funcs[0]
    elif isinstance(func_or_mod, tv.tirx.PrimFunc):
        func = func_or_mod
    else:
        raise TaskError(f"a PrimFunc task wraps a tvm PrimFunc or IRModule, not {type(func_or_mod).__name__}")
    return tv.IRModule({"main": func.with_attr("global_symbol", "main")})


def digest_of(func_or_mod: Any) -> str:
    """The 16-hex-digit content digest of a PrimFunc (or a one-PrimFunc IRModule)."""
    return _script_digest(_canonical(func_or_mod))


def _script_digest(mod: Any) -> str:
    return hashlib.sha256(mod.script().encode()).hexdigest()[:16]


def register(func_or_mod: Any, name: str, target: str | TargetSpec = "llvm", write: bool = True) -> PrimFuncTask:
    """The task of a PrimFunc on ``target``; the function is kept in this process and, with
    ``write``, saved to the user store (:func:`store_dirs`) unless a store already has a file of
    it that :func:`read_kernel` accepts (a refused one there, e.g. in the old form, is replaced)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TaskError(f"PrimFunc task name {show(name)}: want 1-200 characters of A-Z a-z 0-9 _ .")
    mod = _canonical(func_or_mod)
    digest = _script_digest(mod)
    _registered.setdefault(digest, (name, mod))
    if write and _search(digest)[0] is None:  # none, or only refused files (e.g. the old form): write it
        write_kernel(store_dirs()[-1], name, mod)
    return PrimFuncTask(name=name, digest=digest, target=TargetSpec.coerce(target))


def save(task: PrimFuncTask, directory: str | os.PathLike[str]) -> Path:
    """Write the task's kernel as ``<digest>.json`` in ``directory`` (e.g. the repository's
    store, so that records of it resolve on a fresh clone); returns the path."""
    name, mod = lookup(task.digest)
    return write_kernel(directory, name, mod)


def write_kernel(directory: str | os.PathLike[str], name: str, func_or_mod: Any) -> Path:
    """Write a kernel as ``<digest>.json`` in ``directory`` (atomically, in :data:`FORMAT`, read
    back through :func:`read_kernel`'s checks first); returns the path."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TaskError(f"PrimFunc task name {show(name)}: want 1-200 characters of A-Z a-z 0-9 _ .")
    mod = _canonical(func_or_mod)
    digest = _script_digest(mod)
    doc = {"name": name, "digest": digest, "format": FORMAT, "module": _encode(mod)}
    data = (json.dumps(doc) + "\n").encode()
    path = Path(directory) / f"{digest}.json"
    try:
        _parse_kernel(data, digest)
    except (GraphError, TaskError) as err:
        raise TaskError(f"PrimFunc {name} ({digest}) cannot be stored: {err}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{digest}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def _encode(mod: Any) -> str:
    """The module's JSON graph without source locations, zlib-compressed, base64 (ASCII)."""
    from tvm_ffi.serialization import from_json_graph_str

    from tune_gym.tvm_support import tvm

    tv = tvm()
    graph = strip_spans(json.loads(tv.ir.save_json(mod)))
    text = tv.ir.save_json(from_json_graph_str(json.dumps(graph)))  # saving again drops unused nodes
    return base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")


def read_kernel(path: str | os.PathLike[str]) -> tuple[str, Any]:
    """``(name, IRModule)`` of the store file ``path``, whose name must be ``<digest>.json``.

    Raises:
        TaskError: the file is unreadable, not a store file, in the old TVMScript form, or its
            module is not one PrimFunc named ``main`` whose TVMScript hashes to the digest; the
            one-line message names the file.
    """
    path = Path(path)
    if not re.fullmatch(r"[0-9a-f]{16}\.json", path.name):
        raise TaskError(f"{path}: a PrimFunc task file is named <16 lowercase hex digits>.json")
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE + 1)
    except OSError as err:
        raise TaskError(f"{path}: cannot read the PrimFunc task file ({err.strerror or err})") from None
    try:
        return _parse_kernel(data, path.stem)
    except _OldForm:
        raise TaskError(f"{path}: a kernel in the old TVMScript form, which is not loaded (parsing TVMScript runs "
                        f"Python); if this directory is trusted, convert it: python {_CONVERT} {path.parent}") \
            from None
    except GraphError as err:
        raise TaskError(f"{path}: not a PrimFunc task file (its module graph: {err})") from None
    except TaskError as err:
        raise TaskError(f"{path}: {err}") from None


class _OldForm(TaskError):
    """A store file in the old TVMScript form."""


def _parse_kernel(data: bytes, digest: str) -> tuple[str, Any]:
    """``(name, IRModule)`` of a store file's bytes that must hold kernel ``digest``."""
    doc = _document(data)
    mod = _decode(_inflate(doc["module"]))
    try:
        actual = _script_digest(mod)
    except Exception as err:  # TVM's printer raises its own error classes
        raise GraphError(f"TVM cannot print it: {_first_line(err)}") from None
    if actual != digest:
        raise TaskError(f"content does not match the digest: its module hashes to {actual}, not {digest} "
                        "(a file renamed, edited or written for another kernel)")
    if doc["digest"] != digest:
        raise TaskError(f"its \"digest\" field {show(doc['digest'], 40)} is not the file's digest {digest}")
    return doc["name"], mod


def _document(data: bytes) -> dict[str, Any]:
    """The checked top-level fields of a store file."""
    if len(data) > _MAX_FILE:
        raise TaskError(f"not a PrimFunc task file (larger than {_MAX_FILE} bytes)")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise TaskError(f"not a PrimFunc task file (not JSON: {str(err)[:120]})") from None
    if isinstance(doc, dict) and "script" in doc and "module" not in doc:
        raise _OldForm()
    keys = {"name", "digest", "format", "module"}
    if not isinstance(doc, dict) or set(doc) != keys:
        got = sorted(map(str, doc))[:8] if isinstance(doc, dict) else type(doc).__name__
        raise TaskError(f"not a PrimFunc task file (want the fields {sorted(keys)}, got {got})")
    if doc["format"] != FORMAT:
        raise TaskError(f"not a PrimFunc task file (format {show(doc['format'], 60)}, want {FORMAT!r})")
    if not isinstance(doc["name"], str) or not _NAME.fullmatch(doc["name"]):
        raise TaskError(f"\"name\" {show(doc['name'], 60)}: want 1-200 characters of A-Z a-z 0-9 _ .")
    if not isinstance(doc["module"], str):
        raise TaskError(f"\"module\" is a {type(doc['module']).__name__}, not a base64 string")
    return doc


def _inflate(text: str) -> Any:
    """The parsed JSON graph of a ``module`` field (base64 of zlib), size-limited."""
    try:
        packed = base64.b64decode(text.encode("ascii"), validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, _MAX_GRAPH + 1)
    except (ValueError, binascii.Error, zlib.error) as err:
        raise TaskError(f"not a PrimFunc task file (\"module\" is not base64 of zlib data: {err})") from None
    if len(raw) > _MAX_GRAPH:
        raise TaskError(f"not a PrimFunc task file (\"module\" inflates to more than {_MAX_GRAPH} bytes)")
    if not inflater.eof or inflater.unused_data:
        raise TaskError("not a PrimFunc task file (\"module\" is truncated or has data after its end)")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise TaskError(f"not a PrimFunc task file (\"module\" is not a JSON graph: {str(err)[:120]})") from None


def _decode(graph: Any) -> Any:
    """The IRModule of a checked graph (:func:`check_graph`), if it is one PrimFunc named main."""
    from tvm_ffi.serialization import from_json_graph_str

    from tune_gym.tvm_support import tvm

    tv = tvm()
    text = json.dumps(check_graph(graph))  # what TVM parses is exactly what was checked
    try:
        mod = from_json_graph_str(text)
    except Exception as err:  # TVM's decoder raises its own error classes
        raise GraphError(f"TVM cannot decode it: {_first_line(err)}") from None
    funcs = list(mod.functions.items()) if isinstance(mod, tv.IRModule) else []
    if len(funcs) != 1 or funcs[0][0].name_hint != "main" or not isinstance(funcs[0][1], tv.tirx.PrimFunc):
        names = [f"{gv.name_hint} ({type(f).__name__})" for gv, f in funcs][:4]
        raise TaskError(f"its module is not one PrimFunc named main (it has {names})")
    attrs = funcs[0][1].attrs
    if attrs is None or "global_symbol" not in attrs or str(attrs["global_symbol"]) != "main":
        raise TaskError("its PrimFunc's global_symbol is not main")
    return mod


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1][:160] if lines else ''}"


def _search(digest: str) -> tuple[tuple[str, Any] | None, list[TaskError]]:
    """The first store file of ``digest`` that :func:`read_kernel` accepts (in :func:`store_dirs`
    order), and the refusals of the files before it."""
    refused: list[TaskError] = []
    for directory in store_dirs():
        path = directory / f"{digest}.json"
        if path.is_file():
            try:
                return read_kernel(path), refused
            except TaskError as err:
                refused.append(err)
    return None, refused


def lookup(digest: str) -> tuple[str, Any]:
    """``(name, IRModule)`` of a known kernel: registered in this process, else read from the
    first store file of it that :func:`read_kernel` accepts.

    Raises:
        TaskError: no process registration and no store file has it, or every file of it is
            refused (the message is the first refusal).
    """
    if digest in _registered:
        return _registered[digest]
    entry, refused = _search(digest)
    if entry is None and refused:
        more = f" ({len(refused) - 1} more file(s) of it refused too)" if len(refused) > 1 else ""
        raise TaskError(f"{refused[0]}{more}")
    if entry is None:
        raise TaskError(f"unknown PrimFunc {digest}: not registered in this process and no {digest}.json in "
                        f"{', '.join(map(str, store_dirs()))} (import its network again, or add the directory "
                        "that holds it to TUNE_GYM_TIR)")
    _registered[digest] = entry
    return entry


def _module(digest: str) -> Any:
    return lookup(digest)[1]


@functools.lru_cache(maxsize=512)
def _signature(digest: str) -> tuple[tuple[tuple[int, ...], str], ...]:
    from tune_gym.tvm_support import ms

    func = _module(digest)["main"]
    try:
        return tuple((tuple(int(x) for x in a.shape), str(a.dtype)) for a in ms().arg_info.ArgInfo.from_prim_func(func))
    except (TypeError, ValueError) as err:
        raise TaskError(f"PrimFunc {digest}: arguments without static shapes are not supported ({err})") from None


@dataclass(frozen=True)
class PrimFuncTask(Task):
    """A task whose workload is a stored PrimFunc (see the module docstring).

    Build with :func:`register` or ``Task.parse("tir://...")``. ``op`` is ``"prim_func"``,
    ``params`` is empty, ``dtype`` is the output's dtype and ``weights`` is the function's own
    (``packed`` when it marks weights ``layout_free_buffers``, else ``given``).
    """

    op: str = OP
    params: tuple[tuple[str, int], ...] = ()
    name: str = ""
    digest: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.digest, str) or not re.fullmatch(r"[0-9a-f]{16}", self.digest):
            raise TaskError(f"PrimFunc task digest {show(self.digest)}: want 16 lowercase hex digits")
        known_name, _ = lookup(self.digest)
        if not self.name:
            object.__setattr__(self, "name", known_name)
        if not isinstance(self.target, TargetSpec):
            raise TaskError(f"task target must be a TargetSpec, got {type(self.target).__name__} {show(self.target)}")
        if self.target.kind not in ("llvm", "cuda"):
            raise TaskError(f"PrimFunc task {self.name}: target {self.target.kind} is not supported; "
                            "accepted: llvm, cuda")
        own = "packed" if _layout_free(self.digest) else "given"
        if self.weights not in ("", own):
            raise TaskError(f"PrimFunc task {self.name}: weights={show(self.weights)} is not this kernel's layout; "
                            f"accepted: {own} (a kernel's layout is part of its function: its layout_free_buffers "
                            "attribute, set when the network was imported)")
        sig = _signature(self.digest)
        if len(sig) < 2:
            raise TaskError(f"PrimFunc task {self.name}: {len(sig)} argument(s); want inputs and one output")
        object.__setattr__(self, "op", OP)
        object.__setattr__(self, "params", ())
        object.__setattr__(self, "dtype", sig[-1][1])
        object.__setattr__(self, "weights", own)

    @classmethod
    def from_uri(cls, uri: str) -> PrimFuncTask:
        if not isinstance(uri, str):
            raise TaskError(f"a task URI must be a str, got {type(uri).__name__} {show(uri)}")
        text = uri.strip()
        m = _URI.fullmatch(text)
        if not m:
            raise TaskError(f"malformed PrimFunc task URI {show(text, 120)}; expected tir://<name>/<16 hex digits>"
                            "?target=<kind>, e.g. tir://fused_conv2d_add_relu/5733956644529af3?target=llvm")
        query = fields(m["query"] or "", show(text, 120))
        weights = query.pop("weights", "")
        kind = query.pop("target", "llvm")
        return cls(name=m["name"], digest=m["digest"], target=TargetSpec(kind, tuple(query.items())), weights=weights)

    @property
    def uri(self) -> str:
        return f"tir://{self.name}/{self.digest}?target={self.target}"

    def __str__(self) -> str:
        return self.uri

    def with_target(self, target: str | TargetSpec) -> PrimFuncTask:
        return PrimFuncTask(name=self.name, digest=self.digest, target=TargetSpec.coerce(target))

    def with_weights(self, weights: str) -> PrimFuncTask:
        return PrimFuncTask(name=self.name, digest=self.digest, target=self.target, weights=weights)

    @property
    def has_torch_reference(self) -> bool:
        """False: a fused kernel is no PyTorch op (the network is compared with PyTorch as a whole)."""
        return False

    @property
    def opdef(self) -> Any:
        raise TaskError(f"{self.uri} wraps a PrimFunc: it has no op builder")

    @property
    def flops(self) -> int:
        """TVM's ``estimate_tir_flops`` of the function (at least 1)."""
        return _flops(self.digest)

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return [shape for shape, _ in _signature(self.digest)[:-1]]

    @property
    def input_dtypes(self) -> list[str]:
        return [dtype for _, dtype in _signature(self.digest)[:-1]]

    def output_shape(self) -> tuple[int, ...]:
        return _signature(self.digest)[-1][0]

    def tensors(self) -> list[Any]:
        raise TaskError(f"{self.uri} wraps a PrimFunc: it has no TE tensors (use ir_module())")

    def ir_module(self) -> Any:
        """The stored function as ``IRModule({"main": ...})``."""
        return _module(self.digest)


@functools.lru_cache(maxsize=512)
def _layout_free(digest: str) -> tuple[int, ...]:
    """The function's ``layout_free_buffers`` (the weight inputs MetaSchedule may re-layout)."""
    attrs = _module(digest)["main"].attrs
    return tuple(int(i) for i in attrs["layout_free_buffers"]) if attrs is not None and "layout_free_buffers" in attrs \
        else ()


@functools.lru_cache(maxsize=512)
def _flops(digest: str) -> int:
    from tune_gym.tvm_support import tvm

    return max(1, int(tvm().s_tir.analysis.estimate_tir_flops(_module(digest))))


register_uri_scheme("tir://", PrimFuncTask.from_uri)
