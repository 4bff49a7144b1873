"""Measurement backends (live TVM builds and timing, replay of recorded data) and their results."""

from __future__ import annotations

from typing import Any

from tune_gym.measure.base import Backend
from tune_gym.measure.result import ERROR_KINDS, MeasureResult

__all__ = ["BACKENDS", "ERROR_KINDS", "Backend", "MeasureResult", "make_backend", "resolve_backend"]

#: Backend ids :func:`make_backend` knows.
BACKENDS = ("live", "replay")


def make_backend(name: str, **options: Any) -> Backend:
    """A backend by short id: ``live`` (options: :class:`LiveConfig` fields) or ``replay``
    (options ``dataset``: dataset or record file(s), default the dataset catalog;
    ``fallback``: a backend answering configs the data does not hold)."""
    if name == "live":
        from tune_gym.measure.live import LiveBackend

        return LiveBackend(**options)
    if name == "replay":
        from tune_gym.measure.replay import ReplayBackend

        unknown = set(options) - {"dataset", "fallback"}
        if unknown:
            raise ValueError(f"replay backend_options are 'dataset' and 'fallback', not {sorted(unknown)}")
        return ReplayBackend(options.get("dataset"), fallback=options.get("fallback"))
    raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}")


def resolve_backend(backend: str | Backend, options: dict[str, Any] | None = None) -> tuple[Backend, bool]:
    """``(backend, made here)``: a backend given by id is built with ``options`` (the caller
    owns it and closes it); a backend object is used as it is."""
    if isinstance(backend, str):
        return make_backend(backend, **(options or {})), True
    if options:
        raise ValueError("backend_options apply only when backend is given by name")
    return backend, False
