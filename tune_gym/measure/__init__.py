"""Measurement backends (live TVM builds and timing) and their results."""

from tune_gym.measure.base import Backend
from tune_gym.measure.result import ERROR_KINDS, MeasureResult

__all__ = ["ERROR_KINDS", "Backend", "MeasureResult", "make_backend"]


def make_backend(name: str, **options: object) -> Backend:
    """A backend by short id: ``live`` (options: :class:`LiveConfig` fields) or ``replay``
    (option ``dataset``: record file(s))."""
    if name == "live":
        from tune_gym.measure.live import LiveBackend

        return LiveBackend(**options)  # type: ignore[arg-type]
    if name == "replay":
        from tune_gym.measure.replay import ReplayBackend

        if "dataset" not in options:
            raise ValueError("the replay backend needs backend_options={'dataset': PATH}")
        return ReplayBackend(options["dataset"])  # type: ignore[arg-type]
    raise ValueError(f"unknown backend {name!r}; known backends: live, replay")
