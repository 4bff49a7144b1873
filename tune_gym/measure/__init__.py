"""Measurement backends (live TVM builds and timing, replay of recorded data, a surrogate model
fitted on recorded data, the simulated VTA) and their results."""

from __future__ import annotations

from typing import Any

from tune_gym.measure.base import Backend
from tune_gym.measure.result import ERROR_KINDS, MeasureResult

__all__ = ["BACKENDS", "ERROR_KINDS", "Backend", "MeasureResult", "make_backend", "resolve_backend"]

#: Backend ids :func:`make_backend` knows.
BACKENDS = ("live", "replay", "surrogate", "vta-sim", "rpc")


def make_backend(name: str, **options: Any) -> Backend:
    """A backend by short id.

    * ``live``: real builds and timing; options: :class:`LiveConfig` fields.
    * ``replay``: recorded results (:class:`ReplayBackend`); options ``dataset``: dataset or
      record file(s), default the dataset catalog; ``fallback``: a backend answering configs
      the data does not hold, either an object or a backend id (``"surrogate"``: a
      :class:`SurrogateBackend` fitted on the same ``dataset``; ``"live"``: measure them);
      ``fallback_options``: options of a fallback given by id (e.g. ``{"seed": 1}``).
    * ``surrogate``: an XGBoost model fitted on the data answers any config
      (:class:`SurrogateBackend`); options ``dataset`` (as for replay), ``seed`` (noise
      seed, default 0) and ``noise`` (default ``True``).
    * ``vta-sim``: the simulated VTA's latency model answers configs of ``vta`` tasks
      (:class:`tune_gym.vta.backend.VTASimBackend`); options: the fields of
      :class:`tune_gym.vta.model.VTATiming` (``clock_mhz``, ``dram_bytes_per_cycle``, ...).
    * ``rpc``: builds here, times on devices registered with a TVM RPC tracker
      (:class:`tune_gym.measure.rpc.RPCBackend`); options: :class:`RPCConfig` fields
      (``tracker="host:port"``, ``key``, ``devices``, the live timing options, ...).

    Example:
        >>> make_backend("replay", dataset="partial.parquet", fallback="surrogate", fallback_options={"seed": 1})
    """
    if name == "live":
        from tune_gym.measure.live import LiveBackend

        return LiveBackend(**options)
    if name == "replay":
        from tune_gym.measure.replay import ReplayBackend

        unknown = set(options) - {"dataset", "fallback", "fallback_options"}
        if unknown:
            raise ValueError(f"replay backend_options are 'dataset', 'fallback' and 'fallback_options', "
                             f"not {sorted(unknown)}")
        dataset, fallback = options.get("dataset"), options.get("fallback")
        fallback_options = dict(options.get("fallback_options") or {})
        if isinstance(fallback, str):
            if fallback == "surrogate":
                fallback = make_backend("surrogate", dataset=dataset, **fallback_options)
            elif fallback == "live":
                fallback = make_backend("live", **fallback_options)
            else:
                raise ValueError(f"replay fallback {fallback!r}: give 'surrogate', 'live' or a backend object")
        elif fallback_options:
            raise ValueError("replay fallback_options apply only when fallback is given by id")
        return ReplayBackend(dataset, fallback=fallback)
    if name == "surrogate":
        from tune_gym.measure.surrogate import SurrogateBackend

        unknown = set(options) - {"dataset", "seed", "noise"}
        if unknown:
            raise ValueError(f"surrogate backend_options are 'dataset', 'seed' and 'noise', not {sorted(unknown)}")
        return SurrogateBackend(options.get("dataset"), seed=options.get("seed", 0), noise=options.get("noise", True))
    if name == "vta-sim":
        from tune_gym.vta.backend import VTASimBackend

        return VTASimBackend(**options)
    if name == "rpc":
        from tune_gym.measure.rpc import RPCBackend

        return RPCBackend(**options)
    raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}")


def resolve_backend(backend: str | Backend, options: dict[str, Any] | None = None) -> tuple[Backend, bool]:
    """``(backend, made here)``: a backend given by id is built with ``options`` (the caller
    owns it and closes it); a backend object is used as it is."""
    if isinstance(backend, str):
        return make_backend(backend, **(options or {})), True
    if options:
        raise ValueError("backend_options apply only when backend is given by name")
    return backend, False
