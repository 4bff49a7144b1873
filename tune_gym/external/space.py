"""The knob space of a ``kt`` task: Kernel Tuner's parameters as knobs, its restrictions as the space.

One knob per parameter of the task's T1 problem, in the problem's order, its choices the
parameter's values in the problem's order: numbers make a ``categorical`` knob (ordered
values: block sizes, tile factors), anything else (strings, booleans, a mix) a ``nominal``
knob (unordered; featurizers one-hot it). A config is one value index per knob, as in every
knob space; the flat index (:meth:`KTSpace.index`, :meth:`KTSpace.config`) is the number of a
valid configuration in the problem's :class:`~tune_gym.external.kernel_tuner_io.ParamSpace`
(Cartesian order, restrictions applied, enumerated once), so:

* :attr:`size` is the number of configurations that satisfy every restriction, and iterating,
  :meth:`sample` and :meth:`sample_unique` give only those (uniformly);
* :meth:`neighbours` are the valid configs one index step away on one knob (Kernel Tuner's
  strategies move within the valid space too);
* any in-range index combination passes :meth:`check` (an action of ``Tune-v0`` may name
  one), but one that breaks a restriction is not in the space: :meth:`excluded` names the
  restriction, :meth:`is_valid` is False, :meth:`index` refuses it, and the replay backend
  answers it as an ``invalid`` failure that costs no time.

There is no TVM program behind a config (``has_schedules`` False): :meth:`trace`,
:meth:`apply` and the other schedule methods raise :class:`~tune_gym.errors.SpaceError`, as
those of the other spaces without schedules do. Every preset (``full``, ``compact``, ``medium``)
is the problem's one space: a measured space has no reduced variant.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from tune_gym.errors import SpaceError
from tune_gym.external.kernel_tuner_io import ParamSpace
from tune_gym.external.task import KTTask, problem
from tune_gym.space import PRESETS, Config, Knob, ScheduleFreeSpace
from tune_gym.tasks.task import Task

__all__ = ["KTSpace", "knob_kind"]


def knob_kind(values: Sequence[Any]) -> str:
    """``categorical`` for a parameter of numbers (not booleans), else ``nominal``."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return "categorical" if numbers else "nominal"


class KTSpace(ScheduleFreeSpace):
    """A Kernel Tuner problem's space as a :class:`KnobSpace` (see the module docstring).

    Args:
        task: a ``kt`` task.
        preset: any of :data:`~tune_gym.space.PRESETS` (the same space).
    """

    no_schedule_hint = ("a space measured with Kernel Tuner has no TVM {what}; its configs are parameter values "
                        "(to_dict) replayed from the file (observation='knobs' in Tune-v0)")

    def __init__(self, task: Task, preset: str = "full") -> None:
        if preset not in PRESETS:
            raise SpaceError(f"unknown space preset {preset!r}; known: {', '.join(PRESETS)}")
        if not isinstance(task, KTTask):
            raise SpaceError(f"a KTSpace is the space of a kt task, not of {getattr(task, 'uri', task)!r}")
        params = problem(task).space
        if len(params) == 0:
            raise SpaceError(f"{task.uri}: no configuration of {params.where} satisfies its restrictions")
        self.params: ParamSpace = params
        self._init_one_sketch(task, preset, [Knob(n, knob_kind(v), v) for n, v in zip(params.names, params.values)])
        self.size = len(params)
        self._sketch_sizes = [self.size]
        self.mod = None  # no TVM module: the space was measured elsewhere
        self.target = None

    @classmethod
    def for_task(cls, task: Task, preset: str = "full") -> KTSpace:
        """The space of ``task`` (built once per process and preset)."""
        return _cached_kt_space(task, preset)

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k.name}:{len(k)}" for k in self.knobs)
        return (f"KTSpace({self.task.uri}, preset={self.preset}, size={self.size} of "
                f"{self.params.cartesian_size}, knobs=[{knobs}])")

    # ------------------------------------------------------------------ the valid configurations
    def index(self, config: Config) -> int:
        """The number of a valid config in [0, size); :class:`SpaceError` naming the restriction
        it breaks otherwise."""
        config = self.check(config)
        pos = self.params.index_of_indices(config)
        if pos is None:
            raise SpaceError(f"{self.task.uri}: config {list(config)} is not in the space: {self.excluded(config)}")
        return pos

    def config(self, index: int) -> Config:
        """Valid config number ``index`` (inverse of :meth:`index`)."""
        if not 0 <= int(index) < self.size:
            raise SpaceError(f"flat index {index} out of range [0, {self.size - 1}]")
        return tuple(int(j) for j in self.params.indices(int(index)))

    def is_valid(self, config: Config) -> bool:
        """True when the config satisfies every restriction (exact; a lookup)."""
        return self.params.index_of_indices(self.check(config)) is not None

    def excluded(self, config: Config) -> str | None:
        """``"fails restriction '<expression>'"`` for a config that breaks one, ``None`` for a valid one."""
        config = self.check(config)
        if self.params.index_of_indices(config) is not None:
            return None
        values = {k.name: k.choices[i] for k, i in zip(self.knobs, config)}
        failing = self.params.failing_restriction(values)
        return f"fails restriction {failing.source!r}" if failing is not None else "is not a valid configuration"

    def neighbours(self, config: Config) -> list[Config]:
        """Valid configs one index step away on one knob."""
        return [c for c in super().neighbours(config) if self.params.index_of_indices(c) is not None]

    def from_dict(self, values: dict[str, Any]) -> Config:
        """The config of ``{parameter: value}`` (every parameter; values compared with their
        type: ``1``, ``1.0`` and ``True`` differ); :class:`SpaceError` naming a bad one."""
        return self.check(self.params.value_indices(values))



@functools.lru_cache(maxsize=64)
def _cached_kt_space(task: Task, preset: str) -> KTSpace:
    return KTSpace(task, preset)
