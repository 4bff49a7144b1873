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
process and writes ``<digest>.json`` (name, digest, TVMScript) to the user store
(:func:`store_dirs`), so worker processes and later sessions resolve the URI; lookups search
``TUNE_GYM_TIR`` (``os.pathsep``-separated directories), then the repository's committed kernels
(``benchmarks/networks/tir/``), then the user store (``$XDG_CACHE_HOME/tune_gym/tir``, by default
``~/.cache/tune_gym/tir``). An unknown digest is a :class:`~tune_gym.errors.TaskError` that names
the directories searched.

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

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gym.errors import TaskError
from tune_gym.tasks._checks import fields, show
from tune_gym.tasks.targets import TargetSpec
from tune_gym.tasks.task import Task, register_uri_scheme

__all__ = ["REPO_STORE", "PrimFuncTask", "digest_of", "lookup", "register", "save", "store_dirs"]

_URI = re.compile(r"tir://(?P<name>[A-Za-z0-9_.]{1,200})/(?P<digest>[0-9a-f]{16})(?:\?(?P<query>.*))?",
                  re.ASCII | re.DOTALL)
REPO_STORE = Path(__file__).resolve().parents[2] / "benchmarks" / "networks" / "tir"
#: :attr:`PrimFuncTask.op` of every PrimFunc task.
OP = "prim_func"

_registered: dict[str, tuple[str, str]] = {}  # digest -> (name, TVMScript)


def store_dirs() -> list[Path]:
    """Directories searched for ``<digest>.json`` kernels, in order; the last is the user store."""
    extra = [Path(p) for p in os.environ.get("TUNE_GYM_TIR", "").split(os.pathsep) if p]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tune_gym" / "tir"
    return [*extra, REPO_STORE, cache]


def _canonical(func_or_mod: Any) -> Any:
    """``IRModule({"main": func})`` with ``global_symbol`` ``main`` (the form that is tuned and
    that MetaSchedule's database is queried with)."""
    from tune_gym._tvm import tvm

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
    return hashlib.sha256(_canonical(func_or_mod).script().encode()).hexdigest()[:16]


def register(func_or_mod: Any, name: str, target: str | TargetSpec = "llvm", write: bool = True) -> PrimFuncTask:
    """The task of a PrimFunc on ``target``; the function is kept in this process and, with
    ``write``, saved to the user store (:func:`store_dirs`) unless a store already has it."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.]{1,200}", name, re.ASCII):
        raise TaskError(f"PrimFunc task name {show(name)}: want 1-200 characters of A-Z a-z 0-9 _ .")
    mod = _canonical(func_or_mod)
    script = mod.script()
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    _registered.setdefault(digest, (name, script))
    if write and _find_file(digest) is None:
        store = store_dirs()[-1]
        store.mkdir(parents=True, exist_ok=True)
        tmp = store / f".{digest}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"name": name, "digest": digest, "script": script}) + "\n")
        tmp.replace(store / f"{digest}.json")
    return PrimFuncTask(name=name, digest=digest, target=TargetSpec.coerce(target))


def save(task: PrimFuncTask, directory: str | os.PathLike[str]) -> Path:
    """Write the task's kernel as ``<digest>.json`` in ``directory`` (e.g. the repository's
    store, so that records of it resolve on a fresh clone); returns the path."""
    name, script = lookup(task.digest)
    path = Path(directory) / f"{task.digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "digest": task.digest, "script": script}) + "\n")
    return path


def _find_file(digest: str) -> Path | None:
    for d in store_dirs():
        path = d / f"{digest}.json"
        if path.is_file():
            return path
    return None


def lookup(digest: str) -> tuple[str, str]:
    """``(name, TVMScript)`` of a known kernel.

    Raises:
        TaskError: no process registration and no store file has it.
    """
    if digest in _registered:
        return _registered[digest]
    path = _find_file(digest)
    if path is None:
        raise TaskError(f"unknown PrimFunc {digest}: not registered in this process and no {digest}.json in "
                        f"{', '.join(map(str, store_dirs()))} (import its network again, or add the directory "
                        "that holds it to TUNE_GYM_TIR)")
    try:
        doc = json.loads(path.read_text())
        entry = (str(doc["name"]), str(doc["script"]))
    except (OSError, ValueError, KeyError) as err:
        raise TaskError(f"{path}: not a PrimFunc task file ({err})") from None
    _registered[digest] = entry
    return entry


@functools.lru_cache(maxsize=512)
def _module(digest: str) -> Any:
    from tune_gym._tvm import tvm

    tvm()
    from tvm.script import from_source

    _, script = lookup(digest)
    return from_source(script)


@functools.lru_cache(maxsize=512)
def _signature(digest: str) -> tuple[tuple[tuple[int, ...], str], ...]:
    from tune_gym._tvm import ms

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
    from tune_gym._tvm import tvm

    return max(1, int(tvm().s_tir.analysis.estimate_tir_flops(_module(digest))))


register_uri_scheme("tir://", PrimFuncTask.from_uri)
