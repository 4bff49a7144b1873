"""Exceptions raised by tune_gym (all are ValueError subclasses: bad input, named)."""

from __future__ import annotations

__all__ = ["RecordError", "SpaceError", "TaskError", "TuneGymError"]


class TuneGymError(ValueError):
    """Base class of tune_gym's input errors."""


class TaskError(TuneGymError):
    """A task URI, op, parameter or target is malformed or unknown."""


class SpaceError(TuneGymError):
    """A config does not fit a knob space (names the knob and its range)."""


class RecordError(TuneGymError):
    """A tuning record file is malformed or belongs to another schema."""
