"""Measurement backends (live TVM builds and timing, replay of recorded data, a surrogate model
fitted on recorded data, RPC devices, and the backends of registered target kinds,
:mod:`tune_gym.kinds`) and their results."""

from __future__ import annotations

from typing import Any

from tune_gym import kinds
from tune_gym.measure.base import BACKEND_METHODS, Backend
from tune_gym.measure.result import ERROR_KINDS, MeasureResult
from tune_gym.options import OptionDoc, OptionError, option_table, show

__all__ = ["BACKENDS", "ERROR_KINDS", "Backend", "MeasureResult", "backend_ids", "backend_options", "is_backend",
           "make_backend", "missing_methods", "resolve_backend"]

#: The core's backend ids; registered target kinds add theirs (:func:`backend_ids`).
CORE_BACKENDS = ("live", "replay", "surrogate", "rpc")
kinds.reserve("backend", CORE_BACKENDS, "tune_gym.measure")


def backend_ids() -> tuple[str, ...]:
    """Every backend id :func:`make_backend` knows: the core's, then those of registered kinds."""
    return (*CORE_BACKENDS, *kinds.backend_ids())


#: Backend ids :func:`make_backend` knows (when this module was imported; :func:`backend_ids`
#: also lists kinds registered since).
BACKENDS = backend_ids()


def make_backend(name: str, **options: Any) -> Backend:
    """A backend by short id. Options are checked here (type and range): a bad one is an
    :class:`~tune_gym.options.OptionError` naming it, before anything is measured.

    * ``live``: real builds and timing; options: :class:`LiveConfig` fields.
    * ``replay``: recorded results (:class:`ReplayBackend`); options ``dataset``: dataset or
      record file(s), default the dataset catalog; ``fallback``: a backend answering configs
      the data does not hold, either an object or a backend id (``"surrogate"``: a
      :class:`SurrogateBackend` fitted on the same ``dataset``; ``"live"``: measure them);
      ``fallback_options``: options of a fallback given by id (e.g. ``{"seed": 1}``);
      ``spaces``: ``"task"`` (default) or ``"recorded"``, the space the data is checked
      against (``"recorded"``: the one it was recorded under, without TVM).
    * ``surrogate``: an XGBoost model fitted on the data answers any config
      (:class:`SurrogateBackend`); options ``dataset`` (as for replay), ``seed`` (noise
      seed, default 0), ``noise`` (default ``True``) and ``drift`` (default 0: the host's speed
      drifting from one measurement to the next, :mod:`tune_gym.measure.surrogate`).
    * ``rpc``: builds here, times on devices registered with a TVM RPC tracker
      (:class:`tune_gym.measure.rpc.RPCBackend`); options: :class:`RPCConfig` fields
      (``tracker="host:port"``, ``key``, ``devices``, the live timing options, ...).
    * a backend of a registered target kind (:func:`tune_gym.kinds.backend_ids`): made by the
      kind's factory, which checks its options; :attr:`tune_gym.kinds.BackendEntry.help` says which.

    Example:
        >>> make_backend("replay", dataset="partial.parquet", fallback="surrogate", fallback_options={"seed": 1})
    """
    if name == "live":
        from tune_gym.measure.live import LiveBackend

        return LiveBackend(**options)
    if name == "replay":
        from tune_gym.measure.replay import ReplayBackend

        unknown = set(options) - {"dataset", "fallback", "fallback_options", "spaces"}
        if unknown:
            raise OptionError(f"replay backend_options are 'dataset', 'fallback', 'fallback_options' and 'spaces', "
                              f"not {sorted(unknown)}")
        dataset, fallback = options.get("dataset"), options.get("fallback")
        fallback_options = options.get("fallback_options") or {}
        if not isinstance(fallback_options, dict):
            raise OptionError(f"replay fallback_options must be a dict of options, got {show(fallback_options)}")
        if isinstance(fallback, str):
            if fallback == "surrogate":
                fallback = make_backend("surrogate", dataset=dataset, **fallback_options)
            elif fallback == "live":
                fallback = make_backend("live", **fallback_options)
            else:
                raise OptionError(f"replay fallback {fallback!r}: give 'surrogate', 'live' or a backend object")
        elif fallback_options:
            raise OptionError("replay fallback_options apply only when fallback is given by id")
        elif fallback is not None and not is_backend(fallback):
            raise OptionError(f"replay fallback must be 'surrogate', 'live', a backend object or None, "
                              f"got {show(fallback)}")
        return ReplayBackend(dataset, fallback=fallback, spaces=options.get("spaces", "task"))
    if name == "surrogate":
        from tune_gym.measure.surrogate import SurrogateBackend

        unknown = set(options) - {"dataset", "seed", "noise", "drift"}
        if unknown:
            raise OptionError(f"surrogate backend_options are 'dataset', 'seed', 'noise' and 'drift', "
                              f"not {sorted(unknown)}")
        return SurrogateBackend(options.get("dataset"), seed=options.get("seed", 0), noise=options.get("noise", True),
                                drift=options.get("drift", 0.0))
    if name == "rpc":
        from tune_gym.measure.rpc import RPCBackend

        return RPCBackend(**options)
    kind = kinds.owner_of_backend(name) if isinstance(name, str) else None
    if kind is not None:
        made = kinds.load(kind.backends[name].factory)(**options)
        if not is_backend(made):
            raise OptionError(f"the {kind.name} kind's backend {name!r} ({kind.backends[name].factory}) made "
                              f"{show(made)}, which lacks {', '.join(m + '()' for m in missing_methods(made))}; "
                              "a backend subclasses tune_gym.measure.Backend")
        return made  # type: ignore[no-any-return]
    raise OptionError(f"unknown backend {show(name)}; known backends: {', '.join(backend_ids())}")


def backend_options(name: str) -> list[OptionDoc]:
    """The options table of a backend id (name, default, allowed values, help), read from where
    its options are declared: :class:`~tune_gym.measure.live.LiveConfig` (``live``),
    :class:`~tune_gym.measure.rpc.RPCConfig` (``rpc``), the constructors of
    :class:`~tune_gym.measure.replay.ReplayBackend` and
    :class:`~tune_gym.measure.surrogate.SurrogateBackend`, or a kind's
    :attr:`~tune_gym.kinds.BackendEntry.options`.

    Raises:
        OptionError: unknown backend id.
    """
    if name in ("live", "rpc"):
        from tune_gym.measure.live import LiveConfig
        from tune_gym.measure.rpc import RPCConfig

        return option_table(LiveConfig if name == "live" else RPCConfig)
    if name in ("replay", "surrogate"):
        from tune_gym.measure.replay import ReplayBackend
        from tune_gym.measure.surrogate import SurrogateBackend

        return option_table(ReplayBackend if name == "replay" else SurrogateBackend)
    kind = kinds.owner_of_backend(name) if isinstance(name, str) else None
    if kind is None:
        raise OptionError(f"unknown backend {show(name)}; known backends: {', '.join(backend_ids())}")
    entry = kind.backends[name]
    return option_table(kinds.load(entry.options or entry.factory))


def is_backend(obj: Any) -> bool:
    """Whether ``obj`` is a backend object: a :class:`Backend`, or an object with every method of
    :data:`~tune_gym.measure.base.BACKEND_METHODS`."""
    return isinstance(obj, Backend) or not missing_methods(obj)


def missing_methods(obj: Any) -> list[str]:
    """The methods of :data:`~tune_gym.measure.base.BACKEND_METHODS` that ``obj`` lacks (none for
    a :class:`Backend`, which has defaults for all but ``measure``)."""
    return [name for name in BACKEND_METHODS if not callable(getattr(obj, name, None))]


def resolve_backend(backend: str | Backend, options: dict[str, Any] | None = None) -> tuple[Backend, bool]:
    """``(backend, made here)``: a backend given by id is built with ``options`` (the caller
    owns it and closes it); a backend object is used as it is.

    Raises:
        OptionError: ``backend`` is neither a known id nor a backend object, or ``options`` is
            not a dict, or options come with an object.
    """
    if options is not None and not isinstance(options, dict):
        raise OptionError(f"backend_options must be a dict of options or None, got {show(options)}")
    if isinstance(backend, str):
        return make_backend(backend, **(options or {})), True
    if not is_backend(backend):
        raise OptionError(f"backend must be a backend id ({', '.join(backend_ids())}) or a backend object (a "
                          f"tune_gym.measure.Backend subclass), got {show(backend)}, which lacks "
                          f"{', '.join(m + '()' for m in missing_methods(backend))}")
    if options:
        raise OptionError("backend_options apply only when backend is given by name")
    return backend, False
