"""Task kinds: target kinds that are not TVM targets, each described in one place.

The core knows two target kinds itself, ``llvm`` and ``cuda`` (:data:`CORE_KINDS`): TVM builds
their tasks. Any other kind is a :class:`TaskKind` registered here: it names its target options,
its knob space, its measurement backends, its ``op://`` ops, its URI schemes, its suites, its
default observation and its dataset subdirectory, so the core asks this registry instead of
naming the kind.

A descriptor holds references (:data:`Ref`): either a callable or a ``"package.module:attr"``
string imported on first use (:func:`load`), so answering "which kind owns backend X" imports
nothing but the descriptor module.

Kinds are found once per process, on the first lookup: the in-repository kinds of
:data:`_BUILTIN`, then the ``tune_gym.kinds`` entry-point group (``name = "pkg.mod:KIND"``) of
installed packages. A builtin that fails to load is an error; an entry point that fails is
skipped with a warning naming it. :func:`register_kind` adds one at run time (in this process
only: :func:`is_discoverable` tells whether a fresh interpreter finds it too).

This module imports only the standard library and :mod:`tune_gym.errors`, so every core module
may import it.
"""

from __future__ import annotations

import importlib
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from tune_gym.errors import TaskError

__all__ = [
    "CORE_KINDS",
    "BackendEntry",
    "Ref",
    "TargetOption",
    "TaskKind",
    "backend_ids",
    "default_observation",
    "get_kind",
    "is_discoverable",
    "kind_names",
    "load",
    "op_names",
    "owner_of_backend",
    "owner_of_op",
    "owner_of_suite",
    "register_kind",
    "require_kind",
    "reserve",
    "suite_names",
    "unregister_kind",
    "uri_parser",
    "uri_schemes",
]

#: A reference to a callable or object: the object itself, or ``"package.module:attr.attr"``.
Ref = str | Callable[..., Any]
#: Target kinds the core builds with TVM; no :class:`TaskKind` may take these names.
CORE_KINDS = ("llvm", "cuda")
#: Observations a kind may default to (those of :class:`tune_gym.envs.TuneEnv`).
OBSERVATIONS = ("sequence", "graph", "knobs")
#: Kinds that ship in this repository, loaded before the entry points.
_BUILTIN: tuple[str, ...] = ("tune_gym.vta.kind:KIND", "tune_gym.external.kind:KIND")
#: Entry-point group other packages declare their kinds in.
ENTRY_POINT_GROUP = "tune_gym.kinds"

_NAME = re.compile(r"[a-z][a-z0-9_]{0,15}", re.ASCII)
_OPTION = re.compile(r"[a-z][a-z0-9_]{0,31}", re.ASCII)
_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", re.ASCII)
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,15}://", re.ASCII)


@dataclass(frozen=True)
class TargetOption:
    """One target option of a kind.

    Attributes:
        name: the option's name in a URI query (``log_block``).
        check: ``(value: str, where: str) -> str``: the canonical value, or a
            :class:`TaskError` whose message starts with ``where``.
        default: the value :meth:`TargetSpec.resolved` gives when the option is left out; an
            ``int`` default makes ``resolved()`` give the option as an int.
    """

    name: str
    check: Ref
    default: str | int | None = None


@dataclass(frozen=True)
class BackendEntry:
    """A measurement backend of a kind: ``factory(**options) -> Backend``, one line of help, and
    ``options``: where its options are declared (a dataclass or function whose ``Annotated``
    hints hold :class:`tune_gym.options.Option` declarations; ``None``: the factory itself), for
    :func:`tune_gym.measure.backend_options`."""

    factory: Ref
    help: str
    options: Ref | None = None


@dataclass(frozen=True)
class TaskKind:
    """Everything the core needs to know about one non-TVM target kind.

    Attributes:
        name: the target kind in URIs (``target=<name>``), ``[a-z][a-z0-9_]{0,15}``.
        summary: one line for listings and error hints.
        space: ``(task, preset) -> KnobSpace``; the kind caches spaces per process if it wants.
        options: the target options (:class:`TargetOption`) accepted with ``target=<name>``.
        check_target: ``(TargetSpec) -> None``: checks the options together (TaskError).
        ops: ``op://`` ops bound to this kind: op name -> its ``OpDef`` (the object, or a
            ``"package.module:attr"`` str naming it).
        uri_schemes: URI prefix (``"kt://"``) -> ``(text) -> Task``.
        backends: backend id -> :class:`BackendEntry`.
        suites: suite name -> ``(TargetSpec) -> Suite``.
        default_observation: the observation an env or agent gets for a task of this kind.
        has_schedules: whether configs have TVM schedules (traces): sequence and graph
            observations and agents that read programs need them.
        no_tvm_target: why :meth:`TargetSpec.tvm_target` refuses (follows ``"target <name> "``).
        is_gpu: whether the task features mark the target as a GPU.
        data_subdir: ``<data dir>/<subdir>/``, where dataset lookup finds this kind's data
            (the catalog does not list it).
        dataset_slug: ``(task) -> str``: the file stem ``tune-gym collect`` writes for a task.
        dataset: ``(task, preset) -> Dataset``: the kind's own data of a task (e.g. read from
            files measured elsewhere); the data-driven backends (replay, surrogate) made without
            data use it instead of searching the dataset catalog.
    """

    name: str
    summary: str
    space: Ref
    options: tuple[TargetOption, ...] = ()
    check_target: Ref | None = None
    ops: Mapping[str, Any] = field(default_factory=dict)
    uri_schemes: Mapping[str, Ref] = field(default_factory=dict)
    backends: Mapping[str, BackendEntry] = field(default_factory=dict)
    suites: Mapping[str, Ref] = field(default_factory=dict)
    default_observation: str = "knobs"
    has_schedules: bool = False
    no_tvm_target: str = "has no TVM target"
    is_gpu: bool = False
    data_subdir: str | None = None
    dataset_slug: Ref | None = None
    dataset: Ref | None = None


_lock = threading.RLock()
_kinds: dict[str, TaskKind] = {}
_origin: dict[str, str] = {}  # name -> "builtin", "entry point" or "runtime"
_reserved: dict[str, dict[str, str]] = {"op": {}, "suite": {}, "backend": {}, "uri_scheme": {}, "data_subdir": {}}
_discovered = False
_loaded: dict[str, Any] = {}


# ---------------------------------------------------------------------------------- references
def load(ref: Ref) -> Any:
    """The object ``ref`` names (a callable is returned as it is); imported once, then cached."""
    if not isinstance(ref, str):
        return ref
    if ref in _loaded:
        return _loaded[ref]
    if not _REF.fullmatch(ref):
        raise TaskError(f"reference {ref!r} is not 'package.module:attribute'")
    module, _, path = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in path.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise TaskError(f"reference {ref!r} cannot be loaded: {type(err).__name__}: {err}") from err
    _loaded[ref] = obj
    return obj


# ---------------------------------------------------------------------------------- checks
def _names_of(kind: TaskKind) -> dict[str, Iterable[str]]:
    subdir = (kind.data_subdir,) if kind.data_subdir is not None else ()
    return {"op": kind.ops, "suite": kind.suites, "backend": kind.backends, "uri_scheme": kind.uri_schemes,
            "data_subdir": subdir}


def _check_ref(kind: str, what: str, ref: object) -> None:
    if isinstance(ref, str):
        if not _REF.fullmatch(ref):
            raise TaskError(f"kind {kind}: {what} {ref!r} is not 'package.module:attribute'")
    elif not callable(ref):
        raise TaskError(f"kind {kind}: {what} must be a callable or a 'package.module:attribute' str, "
                        f"got {type(ref).__name__}")


def _check_fields(kind: TaskKind) -> None:
    if not isinstance(kind, TaskKind):
        raise TaskError(f"register_kind takes a TaskKind, got {type(kind).__name__}")
    if not isinstance(kind.name, str) or not _NAME.fullmatch(kind.name):
        raise TaskError(f"kind name {kind.name!r} is not [a-z][a-z0-9_]{{0,15}}")
    if kind.name in CORE_KINDS:
        raise TaskError(f"kind {kind.name} is a core target kind (core: {', '.join(CORE_KINDS)}); pick another name")
    if kind.default_observation not in OBSERVATIONS:
        raise TaskError(f"kind {kind.name}: default_observation {kind.default_observation!r} is not one of "
                        f"{', '.join(OBSERVATIONS)}")
    if kind.default_observation != "knobs" and not kind.has_schedules:
        raise TaskError(f"kind {kind.name}: default_observation {kind.default_observation!r} needs schedules; "
                        "a kind without schedules defaults to 'knobs'")
    _check_ref(kind.name, "space", kind.space)
    for ref, what in [(kind.check_target, "check_target"), (kind.dataset_slug, "dataset_slug"),
                      (kind.dataset, "dataset")]:
        if ref is not None:
            _check_ref(kind.name, what, ref)
    _check_members(kind)


def _check_members(kind: TaskKind) -> None:
    seen: set[str] = set()
    for opt in kind.options:
        if not isinstance(opt, TargetOption) or not _OPTION.fullmatch(opt.name) or opt.name in seen:
            raise TaskError(f"kind {kind.name}: option {opt!r} is not a TargetOption with a new name "
                            "[a-z][a-z0-9_]{0,31}")
        seen.add(opt.name)
        _check_ref(kind.name, f"option {opt.name} check", opt.check)
    for name, ref in kind.ops.items():
        if isinstance(ref, str):
            _check_ref(kind.name, f"op {name!r}", ref)
    for what in ("suites", "uri_schemes"):
        for name, ref in getattr(kind, what).items():
            _check_ref(kind.name, f"{what[:-1]} {name!r}", ref)
    for prefix in kind.uri_schemes:
        if not _SCHEME.fullmatch(prefix):
            raise TaskError(f"kind {kind.name}: URI scheme {prefix!r} is not '<scheme>://'")
    for backend_id, entry in kind.backends.items():
        if not isinstance(entry, BackendEntry):
            raise TaskError(f"kind {kind.name}: backend {backend_id!r} must be a BackendEntry")
        _check_ref(kind.name, f"backend {backend_id!r}", entry.factory)


def _collision(kind: TaskKind) -> str:
    """The first name of ``kind`` that the core or another kind already has ("" if none)."""
    for category, names in _names_of(kind).items():
        for name in names:
            if name in _reserved[category]:
                return f"{category} {name!r} of kind {kind.name} is the core's ({_reserved[category][name]})"
            for other in _kinds.values():
                if other.name != kind.name and name in _names_of(other)[category]:
                    return f"{category} {name!r} of kind {kind.name} is also kind {other.name}'s"
    return ""


# ---------------------------------------------------------------------------------- registration
def register_kind(kind: TaskKind, *, replace: bool = False) -> None:
    """Register ``kind`` in this process (:class:`TaskError` naming the problem if it is malformed,
    its name is taken and ``replace`` is false, or one of its ops, suites, backends, URI schemes or
    data subdirectory is already the core's or another kind's)."""
    _register(kind, "runtime", replace)


def _register(kind: TaskKind, origin: str, replace: bool) -> None:
    _check_fields(kind)
    with _lock:
        if kind.name in _kinds and not replace:
            raise TaskError(f"kind {kind.name} is already registered ({_origin[kind.name]}); "
                            "pass replace=True to replace it")
        if why := _collision(kind):
            raise TaskError(why)
        _kinds[kind.name] = kind
        _origin[kind.name] = origin


def unregister_kind(name: str) -> None:
    """Remove a kind registered by :func:`register_kind` (``KeyError`` if there is none)."""
    with _lock:
        del _kinds[name]
        del _origin[name]


def reserve(category: str, names: Iterable[str], owner: str) -> None:
    """Declare core names (``category``: op, suite, backend, uri_scheme or data_subdir) that no
    kind may take; ``owner`` names the core module in errors."""
    with _lock:
        for name in names:
            for kind in _kinds.values():
                if name in _names_of(kind)[category]:
                    raise TaskError(f"{category} {name!r} of {owner} is also kind {kind.name}'s")
            _reserved[category][name] = owner


def _discover() -> None:
    """Load the builtin kinds and the entry-point kinds, once per process."""
    global _discovered
    with _lock:
        if _discovered:
            return
        _discovered = True
        for ref in _BUILTIN:
            _register_found(load(ref), "builtin")
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            try:
                _register_found(entry.load(), "entry point")
            except Exception as err:  # a broken plugin must not break the core
                warnings.warn(f"tune_gym.kinds entry point {entry.name!r} ({entry.value}) skipped: "
                              f"{type(err).__name__}: {err}", stacklevel=2)


def _register_found(kind: TaskKind, origin: str) -> None:
    if _kinds.get(getattr(kind, "name", None)) is not kind:  # type: ignore[arg-type]
        _register(kind, origin, False)


def _all() -> dict[str, TaskKind]:
    _discover()
    return _kinds


# ---------------------------------------------------------------------------------- lookups
def get_kind(name: str) -> TaskKind | None:
    """The registered kind ``name``; ``None`` for the core kinds and for unknown names."""
    if name in CORE_KINDS or not isinstance(name, str):
        return None
    return _all().get(name)


def require_kind(name: object) -> TaskKind | None:
    """:func:`get_kind` of a target kind that must exist: ``None`` for a core kind, else the
    registered kind; :class:`TaskError` listing the known kinds for any other name."""
    if isinstance(name, str) and name in CORE_KINDS:
        return None
    kind = _all().get(name) if isinstance(name, str) else None
    if kind is None:
        raise TaskError(f"unknown target kind {_show(name)}; known: {', '.join(kind_names())}")
    return kind


def _show(value: object) -> str:
    """``repr(value)`` kept short (as the task errors show values)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"<{value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def kind_names() -> list[str]:
    """Every target kind: the core kinds, then the registered ones in registration order."""
    return [*CORE_KINDS, *_all()]


def _owner(category: str, name: str) -> TaskKind | None:
    return next((k for k in _all().values() if name in _names_of(k)[category]), None)


def owner_of_op(name: str) -> TaskKind | None:
    """The kind whose ``ops`` hold op ``name`` (``None``: no kind's)."""
    return _owner("op", name)


def owner_of_suite(name: str) -> TaskKind | None:
    """The kind whose ``suites`` hold suite ``name`` (``None``: no kind's)."""
    return _owner("suite", name)


def owner_of_backend(name: str) -> TaskKind | None:
    """The kind whose ``backends`` hold backend id ``name`` (``None``: no kind's)."""
    return _owner("backend", name)


def op_names() -> list[str]:
    """The ops of every registered kind."""
    return [op for k in _all().values() for op in k.ops]


def suite_names() -> list[str]:
    """The suites of every registered kind."""
    return [s for k in _all().values() for s in k.suites]


def backend_ids() -> list[str]:
    """The backend ids of every registered kind."""
    return [b for k in _all().values() for b in k.backends]


def uri_schemes() -> dict[str, Ref]:
    """URI prefix -> parser, over every registered kind."""
    return {p: ref for k in _all().values() for p, ref in k.uri_schemes.items()}


def uri_parser(text: str) -> Callable[[str], Any] | None:
    """The parser of the registered URI scheme ``text`` starts with (``None``: none does)."""
    for prefix, ref in uri_schemes().items():
        if text.startswith(prefix):
            return load(ref)  # type: ignore[no-any-return]
    return None


def default_observation(task: Any) -> str:
    """The observation a task gets by default: ``"sequence"`` on the core kinds, else its kind's."""
    kind = get_kind(task.target.kind)
    return "sequence" if kind is None else kind.default_observation


def is_discoverable(name: str) -> bool:
    """Whether a fresh interpreter finds kind ``name`` too (a core, builtin or entry-point kind,
    not one added by :func:`register_kind`)."""
    return name in CORE_KINDS or (name in _all() and _origin[name] != "runtime")
